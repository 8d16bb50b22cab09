#!/bin/sh
# The README's complete program compiles as written (warning-free) against
# the build tree, trains in one process and under phxrun with DDP from the
# same lines (no `if (comm)` guard: alone, comm is NULL, a world of one),
# and a nonsense PHX_DEVICE or PHX_PRECISION is an error, never ignored.
src=${top_srcdir:-.}
b=$(cd "${top_builddir:-.}" && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
echo "1..7"
awk '/^## A complete program/ { on = 1 } on && /^```c$/ { take = 1; next } take && /^```$/ { exit } take' \
    "$src/README.md" >"$d/train.c"
n=$(wc -l <"$d/train.c")
[ "$n" -gt 40 ] && echo "ok 1 - the program extracted from README.md ($n lines)" || echo "not ok 1 - extracted $n lines"
# PHX_SAN_FLAGS: a sanitizer build's flags (make check sets them).
if ${CC:-cc} $PHX_SAN_FLAGS -Wall -Wextra -Werror -I"$src/include" "$d/train.c" -L"$b/.libs" -lphalanx -Wl,-rpath,"$b/.libs" \
    -o "$d/train" 2>"$d/cc.log"; then
    echo "ok 2 - it compiles warning-free"
else
    echo "not ok 2 - it does not compile"; sed 's/^/# /' "$d/cc.log"
fi
out=$("$d/train" 2>&1); rc=$?
first=$(printf '%s\n' "$out" | sed -n 's/^step 10 loss //p'); last=$(printf '%s\n' "$out" | sed -n 's/^step 50 loss //p')
if [ $rc = 0 ] && [ -n "$first" ] && awk "BEGIN { exit !($last < $first) }"; then
    echo "ok 3 - one process trains (loss $first -> $last)"
else echo "not ok 3 - one process (rc $rc)"; printf '%s\n' "$out" | sed 's/^/# /'; fi
out=$(PHX_DEVICE=nonsense "$d/train" 2>&1); rc=$?
[ $rc != 0 ] && printf '%s' "$out" | grep -q "PHX_DEVICE='nonsense'" && echo "ok 4 - PHX_DEVICE=nonsense is an error" ||
    { echo "not ok 4 - PHX_DEVICE=nonsense (rc $rc)"; printf '%s\n' "$out" | sed 's/^/# /'; }
out=$(PHX_PRECISION=nonsense "$d/train" 2>&1); rc=$?
[ $rc != 0 ] && printf '%s' "$out" | grep -q "nonsense" && echo "ok 5 - PHX_PRECISION=nonsense is an error" ||
    { echo "not ok 5 - PHX_PRECISION=nonsense (rc $rc)"; printf '%s\n' "$out" | sed 's/^/# /'; }
if [ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ]; then
    out=$(PHX_COMM=gloo "$b/tools/phxrun" --standalone --nproc-per-node 2 "$d/train" 2>&1); rc=$?
    n=$(printf '%s\n' "$out" | grep -c '^step [0-9]* loss')
    [ $rc = 0 ] && [ "$n" = 5 ] && echo "ok 6 - DDP over 2 processes under phxrun (rank 0 prints 5 lines)" ||
        { echo "not ok 6 - phxrun (rc $rc, $n lines)"; printf '%s\n' "$out" | sed 's/^/# /'; }
else
    echo "ok 6 # SKIP no gloo plugin"
fi
# One program for one rank or many: no branch on the communicator.
if grep -nE 'if \(!?comm\)|comm \?|comm != NULL|comm == NULL|net != model' "$d/train.c" >"$d/guards"; then
    echo "not ok 7 - the program branches on the communicator"; sed 's/^/# /' "$d/guards"
elif grep -q 'phx_ddp_new(model, comm, NULL)' "$d/train.c"; then
    echo "ok 7 - the program wraps the model in DDP unconditionally, with no guard on comm"
else
    echo "not ok 7 - the program does not call phx_ddp_new(model, comm, NULL)"
fi
