#!/bin/sh
# PHX_LOG lines name their rank from the first line on (plugin choice,
# gloo's connect line); info says which plugin was chosen from which file
# and why the others were not, and which device; debug adds one line per
# collective issued and one per collective finished; torch's
# GLOO_SOCKET_IFNAME is honoured (first entry of a list, with a warning).
b=${top_builddir:-.}
phxrun="$b/tools/phxrun"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
echo "1..10"
note() { sed 's/^/# /' "$1" | head -${2:-20}; }

PHX_LOG=info "$phxrun" --standalone --nproc-per-node 2 "$b/examples/ddp" >"$d/info" 2>&1
rc=$?
[ $rc = 0 ] && echo "ok 1 - 2-rank DDP example under PHX_LOG=info" || { echo "not ok 1 - exit $rc"; note "$d/info"; }
n=$(grep -c '^\[phx\]' "$d/info")
[ "$n" = 0 ] && grep -Eq '^\[phx rank 1\] INFO: (gloo: rank 1 of 2 connected|communicator c0/: rank 1 of 2)' "$d/info" &&
    echo "ok 2 - every log line carries its rank, gloo's connect line included" ||
    { echo "not ok 2 - $n lines without a rank"; grep '^\[phx\]' "$d/info" | note /dev/stdin; }
ok=1
for r in 0 1; do
    grep -Eq "^\[phx rank $r\] INFO: comm plugin [a-z0-9_]+ .* from /.*phx-comm-[a-z0-9_]+.so \(priority" "$d/info" || ok=0
done
[ $ok = 1 ] && echo "ok 3 - each rank says which comm plugin it chose and from which file" ||
    { echo "not ok 3 - no choice line"; note "$d/info"; }
grep -q "INFO: comm plugin threads (.*) skipped: probe declined: the world spans several processes" "$d/info" &&
    echo "ok 4 - and why the threads plugin was not chosen" || { echo "not ok 4 - no skip reason"; note "$d/info"; }

PHX_LOG=debug PHX_COMM=gloo "$phxrun" --standalone --nproc-per-node 2 "$b/examples/ddp" >"$d/debug" 2>&1
ok=1
for r in 0 1; do
    i=$(grep -c "^\[phx rank $r\] DEBUG: comm c0/ rank $r: #[0-9]* .* issued to gloo" "$d/debug")
    f=$(grep -c "^\[phx rank $r\] DEBUG: comm c0/ rank $r: #[0-9]* [a-z_]* done" "$d/debug")
    [ "$i" -gt 10 ] && [ "$i" = "$f" ] || ok=0
    echo "# rank $r: $i collectives issued, $f done"
done
[ $ok = 1 ] && echo "ok 5 - PHX_LOG=debug: each collective issued and finished, per rank" ||
    { echo "not ok 5 - debug lines"; note "$d/debug"; }
grep -q "DEBUG: comm c0/ rank 0: #0 allgather(count=2, i64) issued to gloo" "$d/debug" &&
    echo "ok 6 - a debug line names the collective, count and dtype" || echo "not ok 6 - no #0 allgather line"

PHX_LOG=info "$b/examples/linear_regression" >"$d/dev" 2>&1
grep -Eq "INFO: device (cpu|cuda:[0-9]+) chosen \(PHX_DEVICE unset" "$d/dev" &&
    echo "ok 7 - PHX_LOG=info names the device chosen and why" || { echo "not ok 7 - no device line"; note "$d/dev"; }
PHX_LOG=info PHX_DEVICE=cpu "$b/examples/linear_regression" >"$d/dev2" 2>&1
grep -q "INFO: device cpu chosen (PHX_DEVICE='cpu')" "$d/dev2" && echo "ok 8 - and the variable that chose it" ||
    { echo "not ok 8 - no PHX_DEVICE line"; note "$d/dev2"; }

GLOO_SOCKET_IFNAME=nosuch0 PHX_COMM=gloo "$phxrun" --standalone --nproc-per-node 2 "$b/examples/ddp" >"$d/if" 2>&1
rc=$?
[ $rc != 0 ] && grep -q "interface nosuch0" "$d/if" && echo "ok 9 - GLOO_SOCKET_IFNAME=nosuch0 fails naming it" ||
    { echo "not ok 9 - exit $rc"; note "$d/if"; }
GLOO_SOCKET_IFNAME=lo,nosuch0 PHX_LOG=info PHX_COMM=gloo "$phxrun" --standalone --nproc-per-node 2 \
    "$b/examples/ddp" >"$d/if2" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "GLOO_SOCKET_IFNAME='lo,nosuch0' lists several interfaces; using the first, 'lo'" "$d/if2" &&
    grep -q "connected on interface lo" "$d/if2" &&
    echo "ok 10 - a list uses its first interface, with a warning" || { echo "not ok 10 - exit $rc"; note "$d/if2"; }
