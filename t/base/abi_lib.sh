#!/bin/sh
# Programs built against the 1.0 headers (t/base/abi-lib-1.0) and linked as
# they were then, against a library without symbol versions, run on
# today's library: the test program of t/base/abi-lib/prog-1.0.c (every function
# whose structs changed layout) and the README's 1.0 program, in one
# process and as DDP over two under phxrun. A program built against
# today's headers with a struct_size of 0 or a field past the library's
# end gets a named error.
src=${top_srcdir:-.}
b=$(cd "${top_builddir:-.}" && pwd)
lib="$b/.libs/libphalanx.so"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cc=${CC:-cc}
echo "1..7"

# The 1.0 library as its programs were linked: the same names, unversioned.
nm -D --defined-only "$lib" | awk '$2 == "T" { sub(/@.*/, "", $3); print "void " $3 "(void) {}" }' | sort -u >"$d/stub.c"
$cc -shared -fPIC -Wl,-soname,libphalanx.so.1 -o "$d/libphalanx.so" "$d/stub.c" 2>"$d/cc.log" ||
    { echo "Bail out! cannot build the unversioned stub: $(cat "$d/cc.log")"; exit 1; }
build() { # out source
    $cc $PHX_SAN_FLAGS -Wall -Wextra -Werror -I"$src/t/base/abi-lib-1.0" -I"$src" "$2" -L"$d" -lphalanx -o "$1" \
        2>"$d/cc.log"
}
if build "$d/prog" "$src/t/base/abi-lib/prog-1.0.c" && build "$d/train" "$src/t/base/abi-lib/readme-1.0.c"; then
    echo "ok 1 - the 1.0 programs build against the 1.0 headers"
else
    echo "not ok 1 - the 1.0 programs do not build"; sed 's/^/# /' "$d/cc.log"
fi

# What the dynamic linker sees: unversioned references in the program,
# two versions of a changed function in the library.
refs=$(objdump -T "$d/prog" 2>/dev/null | grep -c 'phx_ddp_new')
vers=$(objdump -T "$lib" | awk '/ phx_ddp_new$/ { print $(NF - 1) }' | sort | tr '\n' ' ')
if [ "$refs" = 1 ] && ! objdump -T "$d/prog" | grep -q PHALANX_ && [ "$vers" = "(PHALANX_1.0) PHALANX_1.1 " ]; then
    echo "ok 2 - the program's references are unversioned; the library has phx_ddp_new at PHALANX_1.0 and 1.1"
else
    echo "not ok 2 - references $refs, library versions '$vers'"
fi

export LD_LIBRARY_PATH="$b/.libs"
out=$("$d/prog" 2>&1); rc=$?
np=$(printf '%s\n' "$out" | grep -c '^ok ')
if [ $rc = 0 ] && [ "$np" = 20 ]; then
    echo "ok 3 - prog-1.0 passes its 20 checks on today's library"
else
    echo "not ok 3 - prog-1.0: rc $rc, $np of 20 passed"
fi
printf '%s\n' "$out" | sed 's/^/# /'

out=$("$d/train" 2>&1); rc=$?
first=$(printf '%s\n' "$out" | sed -n 's/^step 10 loss //p'); last=$(printf '%s\n' "$out" | sed -n 's/^step 50 loss //p')
if [ $rc = 0 ] && [ -n "$first" ] && awk "BEGIN { exit !($last < $first) }"; then
    echo "ok 4 - the 1.0 README program trains in one process (loss $first -> $last)"
else echo "not ok 4 - the 1.0 README program (rc $rc)"; printf '%s\n' "$out" | sed 's/^/# /'; fi
if [ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ]; then
    out=$(PHX_COMM=gloo "$b/tools/phxrun" --standalone --nproc-per-node 2 "$d/train" 2>&1); rc=$?
    n=$(printf '%s\n' "$out" | grep -c '^step [0-9]* loss')
    [ $rc = 0 ] && [ "$n" = 5 ] && echo "ok 5 - the 1.0 README program runs DDP over 2 processes" ||
        { echo "not ok 5 - phxrun (rc $rc, $n lines)"; printf '%s\n' "$out" | sed 's/^/# /'; }
else
    echo "ok 5 # SKIP no gloo plugin"
fi

# Today's headers, the struct rule's two errors.
cat >"$d/new.c" <<'PROG'
#include <stdio.h>
#include <string.h>
#include <phalanx/phalanx.h>
int main(int argc, char **argv)
{
    phx_rng *rng = phx_rng_new(0);
    phx_module *lin = phx_linear_new(2, 2, true, rng);
    struct { phx_sgd_opts o; double extra; } big;
    memset(&big, 0, sizeof big);
    big.o.struct_size = sizeof big;
    big.o.lr = 0.1;
    phx_sgd_opts zero = {0};
    if (argc > 1 && !strcmp(argv[1], "grown")) big.extra = 1.0;
    phx_optimizer *o = phx_sgd_new(lin, argc > 1 && !strcmp(argv[1], "zero") ? &zero : &big.o);
    printf("%s|%s\n", o ? "made" : "refused", o ? "" : phx_last_error());
    phx_optimizer_free(o);
    phx_module_free(lin);
    phx_rng_free(rng);
    return 0;
}
PROG
if $cc $PHX_SAN_FLAGS -I"$src/include" "$d/new.c" -L"$b/.libs" -lphalanx -o "$d/new" 2>"$d/cc.log"; then
    z=$("$d/new" zero); g=$("$d/new" grown); t=$("$d/new" tail0)
    case "$z" in refused*"phx_sgd_new: phx_sgd_opts.struct_size is 0"*"PHX_SGD_OPTS_INIT"*)
        echo "ok 6 - struct_size 0 is refused naming the function, struct and initialiser" ;;
    *) echo "not ok 6 - struct_size 0: $z" ;; esac
    case "$g|$t" in refused*"phx_sgd_opts of "*" bytes sets byte "*"newer Phalanx headers"*"|made|")
        echo "ok 7 - a larger struct is refused when it sets a byte past the library's, taken when that tail is 0" ;;
    *) echo "not ok 7 - grown: $g; zero tail: $t" ;; esac
else
    echo "not ok 6 - new.c does not build"; echo "not ok 7 - new.c does not build"; sed 's/^/# /' "$d/cc.log"
fi
