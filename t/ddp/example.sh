#!/bin/sh
# examples/ddp (the seed's DDP program) started three ways — phx_spawn
# over gloo processes, phx_spawn over threads, and phxrun with 2 processes
# (no second spawn) — prints ten "Epoch [i/10], Loss: x.xxxx" lines, the
# same in all three; bad arguments fail with a usage message.
b=${top_builddir:-.}
prog="$b/examples/ddp"
re='^Epoch \[([1-9]|10)/10\], Loss: [0-9]+\.[0-9]{4}$'
n=0
check() { # name, status, output
    n=$((n + 1))
    lines=$(echo "$3" | grep -cE "$re")
    if [ "$2" -eq 0 ] && [ "$lines" -eq 10 ] && [ "$(echo "$3" | wc -l)" -eq 10 ]; then
        echo "ok $n - $1: ten epoch lines from rank 0 only"
    else
        echo "not ok $n - $1: ten epoch lines from rank 0 only (status $2, $lines lines)"
        echo "$3" | sed 's/^/# /'
    fi
}
echo "1..6"
threads=$(PHX_COMM=threads "$prog" --world 2 2>&1); rc=$?
check "PHX_COMM=threads, 2 threads" $rc "$threads"
if [ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ]; then
    gloo=$(PHX_COMM=gloo "$prog" --world 2 2>&1); rc=$?
    check "PHX_COMM=gloo, 2 processes" $rc "$gloo"
    n=$((n + 1))
    if [ "$gloo" = "$threads" ]; then echo "ok $n - gloo and threads print the same losses"
    else echo "not ok $n - gloo and threads print the same losses"; fi
    if [ -x "$b/tools/phxrun" ]; then
        run=$(unset PHX_COMM; "$b/tools/phxrun" --standalone --nproc-per-node 2 "$prog" 2>&1); rc=$?
        check "phxrun --nproc-per-node 2" $rc "$run"
        n=$((n + 1))
        if [ "$run" = "$gloo" ]; then echo "ok $n - phxrun prints the same losses as phx_spawn"
        else echo "not ok $n - phxrun prints the same losses as phx_spawn"; fi
    else
        n=$((n + 2)); echo "ok $((n - 1)) # SKIP tools/phxrun not built"; echo "ok $n # SKIP tools/phxrun not built"
    fi
else
    for i in 2 3 4 5; do n=$((n + 1)); echo "ok $n # SKIP built without Gloo"; done
fi
n=$((n + 1))
out=$("$prog" --world 0 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "ddp: --world: 0, expected an integer in 1..1024"; then echo "ok $n - --world 0 is refused"
else echo "not ok $n - --world 0 is refused (status $rc)"; echo "$out" | sed 's/^/# /'; fi
