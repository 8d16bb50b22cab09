#!/bin/sh
# phxrun --max-restarts across nodes (t/multinode/lib.sh): 2 nodes x 1
# rank of t/multinode/loop; in attempt 0 the rank on node 1 is killed
# (SIGKILL), and rank 0 then takes 2 s to exit (MN_LINGER), its store up
# all that time. Node 1's phxrun restarts at once: its new rank must not
# join the old attempt's store ("rank 1 is already taken") but wait for the
# new one; both nodes restart once and the job ends right.
b=${top_builddir:-.}
. "${top_srcdir:-.}/t/multinode/lib.sh"
mn_begin
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
export PHX_TIMEOUT=20 PHX_COMM=gloo PHX_STORE_TOKEN=mn-restart-$$
echo "1..4"
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }
cat >"$d/rank.sh" <<RANK
#!/bin/sh
# attempt 0: rank 1 reports its pid to be killed; rank 0 exits slowly
[ "\$PHX_RESTART_COUNT" = 0 ] && export MN_READY="$d/ready" MN_LINGER=2
exec "$b/t/multinode/loop"
RANK
chmod +x "$d/rank.sh"
for i in 0 1; do
    mn_bg $i env MN_SECONDS=3 "$b/tools/phxrun" --nnodes 2 --node-rank $i --nproc-per-node 1 --max-restarts 2 \
        --master-addr "$(mn_addr 0)" --master-port 29500 "$d/rank.sh" >"$d/out$i" 2>&1
    eval "run$i=\$MN_PID"
done
i=0
while [ $i -lt 200 ] && ! [ -s "$d/ready.1" ]; do sleep 0.05; i=$((i + 1)); done
start=$(mn_now)
kill -9 "$(cat "$d/ready.1")"
wait $run0; rc0=$?
wait $run1; rc1=$?
took=$(mn_secs "$start" "$(mn_now)")
[ $rc0 = 0 ] && [ $rc1 = 0 ] && grep -q "rounds, all right" "$d/out0" &&
    echo "ok 1 - rank 1 killed on node 1: the job ends right after a restart ($took s)" ||
    { echo "not ok 1 - exit $rc0, $rc1"; sed 's/^/# /' "$d/out0" "$d/out1" | tail -12; }
n0=$(grep -c "restarting the ranks" "$d/out0") n1=$(grep -c "restarting the ranks" "$d/out1")
[ "$n0" = 1 ] && [ "$n1" = 1 ] && echo "ok 2 - each node restarted once" || echo "not ok 2 - restarts: $n0, $n1"
! grep -q "already taken" "$d/out1" && echo "ok 3 - the new rank 1 did not join the old attempt's store" ||
    { echo "not ok 3"; grep "already taken" "$d/out1" | head -2 | sed 's/^/# /'; }
left=$(mn_leftovers)
[ -z "$left" ] && echo "ok 4 - no process left" || { echo "not ok 4 - processes left"; echo "$left" | sed 's/^/# /'; }
