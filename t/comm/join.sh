#!/bin/sh
# phx_comm_init names what went wrong when a world does not come together:
# the ranks that never joined, a WORLD_SIZE that differs from rank 0's, a
# rank claimed twice, and two nodes started with different
# --nproc-per-node -- each an error within PHX_TIMEOUT, not a backend key.
b=${top_builddir:-.}
prog="$b/examples/ddp"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
note() { sed 's/^/# /' "$1" | head -10; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
export PHX_TIMEOUT=3 MASTER_ADDR=127.0.0.1 PHX_COMM=gloo
echo "1..6"

P=$(port)
start=$(date +%s)
RANK=0 WORLD_SIZE=3 MASTER_PORT=$P "$prog" >"$d/a" 2>&1
rc=$?
took=$(($(date +%s) - start))
[ $rc != 0 ] && grep -q "rank 0: ranks 1, 2 of 3 never joined within 3 s" "$d/a" &&
    echo "ok 1 - a lone rank 0 names the ranks that never joined" || { echo "not ok 1 - exit $rc"; note "$d/a"; }
[ $took -le 6 ] && echo "ok 2 - within PHX_TIMEOUT + 3 s ($took s)" || echo "not ok 2 - took $took s"

P=$(port)
RANK=0 WORLD_SIZE=2 MASTER_PORT=$P "$prog" >"$d/b0" 2>&1 &
sleep 0.5
RANK=1 WORLD_SIZE=3 MASTER_PORT=$P "$prog" >"$d/b1" 2>&1
wait
grep -q "rank 1: WORLD_SIZE is 3 here but 2 at rank 0" "$d/b1" &&
    echo "ok 3 - a WORLD_SIZE that differs from rank 0's is named" || { echo "not ok 3"; note "$d/b1"; }

P=$(port)
RANK=0 WORLD_SIZE=3 MASTER_PORT=$P "$prog" >"$d/c0" 2>&1 &
RANK=1 WORLD_SIZE=3 MASTER_PORT=$P "$prog" >"$d/c1" 2>&1 &
sleep 0.5
RANK=1 WORLD_SIZE=3 MASTER_PORT=$P "$prog" >"$d/c2" 2>&1
wait
cat "$d/c1" "$d/c2" >"$d/c"
grep -q "rank 1 is already taken by process .*:[0-9]* (this is .*:[0-9]*)" "$d/c" && echo "ok 4 - a rank started twice is caught" ||
    { echo "not ok 4"; note "$d/c"; }

# Two nodes on this host: node 0 with 2 ranks per node, node 1 with 1.
P=$(port)
"$b/tools/phxrun" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port $P \
    "$prog" >"$d/n0" 2>&1 &
sleep 0.5
start=$(date +%s)
"$b/tools/phxrun" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port $P \
    "$prog" >"$d/n1" 2>&1
rc=$?
took=$(($(date +%s) - start))
wait
[ $rc != 0 ] && grep -Eq "WORLD_SIZE is 2 here but 4 at rank 0|rank 1 is already taken by process" "$d/n1" &&
    echo "ok 5 - nodes with different --nproc-per-node: a clear error" || { echo "not ok 5 - exit $rc"; note "$d/n1"; }
[ $took -le 2 ] && echo "ok 6 - at once, not after PHX_TIMEOUT ($took s)" || echo "not ok 6 - took $took s"
