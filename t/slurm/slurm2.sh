#!/bin/sh
# Slurm on two nodes (network namespaces, t/multinode/lib.sh): slurmctld
# and a slurmd on node 0, a slurmd on node 1, each entering only its
# node's network namespace (nsenter --net: the host's /sys and cgroups
# stay visible to slurmd), one munged for both. Then:
#   srun -N 2 -n 2 examples/ddp prints the lines of phxrun --standalone;
#   sbatch -N 2 -n 2 running the program without srun: an error naming
#     srun within 5 s;
#   scancel mid-training: both ranks, one a node, end; nothing left.
# Skipped without slurm-wlm, root or namespaces.
b=${top_builddir:-.}
b=$(cd "$b" && pwd)
. "${top_srcdir:-.}/t/slurm/lib.sh"
. "${top_srcdir:-.}/t/multinode/lib.sh"
why=$(slurm_skip)
[ -z "$why" ] && why=$(mn_skip)
[ -z "$why" ] && ! command -v nsenter >/dev/null 2>&1 && why="nsenter not found (util-linux)"
[ -z "$why" ] || { echo "1..0 # SKIP $why"; exit 0; }
[ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] || { echo "1..0 # SKIP built without Gloo"; exit 0; }
d=$(mktemp -d)
chmod 755 "$d"
trap 'slurm_down; mn_down; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up then too
note() { sed 's/^/# /' "$1" | tail -6; }
on() { # node, command...: in the node's network namespace only
    n=$1
    shift
    nsenter --net="/run/netns/$MN-n$n" "$@"
}
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT PHX_NUM_THREADS
# The nodes' names (mn0, mn1) resolve nowhere: the ranks get node 0's address.
export PHX_TIMEOUT=30 PHX_COMM=gloo MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 PATH=$PATH:/usr/sbin
prog="$b/examples/ddp"
echo "1..5"
t=0
result() { t=$((t + 1)); if [ "$1" = 0 ]; then echo "ok $t - $2"; else echo "not ok $t - $2"; fi; }
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }

sd=$d/slurm
mkdir -p "$sd/munge" "$sd/ctld" "$sd/spoolmn0" "$sd/spoolmn1" "$sd/log"
chmod 700 "$sd/munge"
mungekey -c -k "$sd/munge/key" -b 1024 2>/dev/null || dd if=/dev/urandom of="$sd/munge/key" bs=128 count=1 2>/dev/null
chmod 400 "$sd/munge/key"
munged -F --force --socket="$sd/munge/sock" --key-file="$sd/munge/key" --pid-file="$sd/munge/pid" \
    --log-file="$sd/log/munged.log" --seed-file="$sd/munge/seed" 2>"$sd/log/munged.out" &
SLURM_PIDS=$!
i=0
while [ ! -S "$sd/munge/sock" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
cpus=$(nproc)
cat >"$sd/slurm.conf" <<CONF
ClusterName=phx2
SlurmctldHost=$(hostname -s)($(mn_addr 0))
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sd/munge/sock
StateSaveLocation=$sd/ctld
SlurmdSpoolDir=$sd/spool%n
SlurmctldPidFile=$sd/ctld.pid
SlurmdPidFile=$sd/slurmd.%n.pid
SlurmctldLogFile=$sd/log/slurmctld.log
SlurmdLogFile=$sd/log/slurmd.%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
InactiveLimit=0
KillWait=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=mn0 NodeAddr=$(mn_addr 0) CPUs=$cpus State=UNKNOWN
NodeName=mn1 NodeAddr=$(mn_addr 1) CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=mn[0-1] Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$sd/slurm.conf"
on 0 slurmctld -D -i -f "$SLURM_CONF" >"$sd/log/slurmctld.out" 2>&1 &
SLURM_PIDS="$SLURM_PIDS $!"
on 0 slurmd -D -N mn0 -f "$SLURM_CONF" >"$sd/log/slurmd0.out" 2>&1 &
SLURM_PIDS="$SLURM_PIDS $!"
on 1 slurmd -D -N mn1 -f "$SLURM_CONF" >"$sd/log/slurmd1.out" 2>&1 &
SLURM_PIDS="$SLURM_PIDS $!"
i=0
while [ $i -lt 100 ] && [ "$(on 0 sinfo -h -N -o %T 2>/dev/null | grep -c '^idle')" != 2 ]; do sleep 0.2; i=$((i + 1)); done
if [ "$(on 0 sinfo -h -N -o %T 2>/dev/null | grep -c '^idle')" != 2 ]; then
    echo "Bail out! the two slurmd did not come up"
    tail -5 "$sd/log/slurmctld.out" "$sd/log/slurmd0.out" "$sd/log/slurmd1.out" | sed 's/^/# /'
    exit 1
fi

"$b/tools/phxrun" --standalone --nproc-per-node 2 "$prog" >"$d/ref" 2>&1
on 0 timeout 60 srun -N 2 -n 2 --kill-on-bad-exit=1 "$prog" >"$d/srun" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(grep -c '^Epoch' "$d/srun")" = 10 ] && cmp -s "$d/ref" "$d/srun"
result $? "srun -N 2 -n 2 examples/ddp, a rank on each node: the lines of phxrun --standalone (exit $rc)"
[ $rc = 0 ] || note "$d/srun"

cat >"$d/without.sh" <<JOB
#!/bin/sh
start=\$(date +%s.%N)
"$prog"
echo "exit \$? after \$(echo "\$start \$(date +%s.%N)" | awk '{ printf "%.1f", \$2 - \$1 }') s"
JOB
on 0 timeout 60 sbatch -W -N 2 -n 2 -o "$d/without.out" "$d/without.sh" >/dev/null 2>&1
took=$(sed -n 's/^exit [0-9]* after \(.*\) s$/\1/p' "$d/without.out")
grep -q "start the ranks with srun" "$d/without.out" && grep -q "^exit 1 after" "$d/without.out" &&
    [ -n "$took" ] && mn_le "$took" 5
result $? "sbatch -N 2 -n 2 running the program without srun: an error naming srun in $took s"

cat >"$d/long.sh" <<JOB
#!/bin/sh
MN_SECONDS=120 MN_READY="$d/ready" srun "$b/t/multinode/loop"
JOB
job=$(on 0 sbatch --parsable -N 2 -n 2 -o "$d/long.out" "$d/long.sh")
i=0
while [ $i -lt 300 ] && ! { [ -s "$d/ready.0" ] && [ -s "$d/ready.1" ]; }; do sleep 0.1; i=$((i + 1)); done
p0=$(cat "$d/ready.0" 2>/dev/null) p1=$(cat "$d/ready.1" 2>/dev/null)
on1=no
[ -n "$p1" ] && mn_pids 1 | grep -qx "$p1" && on1=yes
[ -n "$p0" ] && [ -n "$p1" ] && [ $on1 = yes ]
result $? "sbatch -N 2 + srun: 2 ranks training, rank 1 on node 1 (pids $p0, $p1)"
[ -n "$p0" ] || note "$d/long.out"
start=$(mn_now)
on 0 scancel "$job"
i=0
while [ $i -lt 200 ] && { kill -0 "$p0" 2>/dev/null || kill -0 "$p1" 2>/dev/null; }; do sleep 0.05; i=$((i + 1)); done
took=$(mn_secs "$start" "$(mn_now)")
[ -n "$p0" ] && [ -n "$p1" ] && ! kill -0 "$p0" 2>/dev/null && ! kill -0 "$p1" 2>/dev/null && mn_le "$took" 5
result $? "scancel: both ranks end in $took s"
i=0
while [ $i -lt 100 ] && on 0 squeue -h -j "$job" 2>/dev/null | grep -q .; do sleep 0.1; i=$((i + 1)); done
left=$(slurm_leftovers "$b/t/multinode/loop" "$d/long.sh")
[ -z "$left" ]
result $? "no process of the job left on either node"
[ -z "$left" ] || echo "$left" | sed 's/^/#   /'
