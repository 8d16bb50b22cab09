# Brings up a one-node Slurm under the test's own directory (sourced by
# t/slurm/*.sh): munged, slurmctld and slurmd with their state, spool,
# logs, sockets and ports there, torn down by slurm_down (call it from the
# test's EXIT trap). slurm_skip prints why Slurm cannot run here, if so.
slurm_skip() {
    for p in munged mungekey slurmctld slurmd srun sbatch scancel squeue; do
        command -v $p >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v $p >/dev/null 2>&1 ||
            { echo "$p not found (Debian: apt-get install slurm-wlm munge)"; return; }
    done
    [ "$(id -u)" = 0 ] || echo "not root (slurmd must run as root to start tasks)"
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# slurm_up DIR CPUS: starts the daemons; exports SLURM_CONF. Fails (1) with
# the daemons' logs on stderr when the node does not come up in 20 s.
slurm_up() {
    sd=$1
    cpus=$2
    export PATH=$PATH:/usr/sbin
    mkdir -p "$sd/munge" "$sd/ctld" "$sd/spool" "$sd/log"
    chmod 700 "$sd/munge"
    mungekey -c -k "$sd/munge/key" -b 1024 2>/dev/null || dd if=/dev/urandom of="$sd/munge/key" bs=128 count=1 2>/dev/null
    chmod 400 "$sd/munge/key"
    # in the foreground, children of the test: killed and reaped by slurm_down
    munged -F --force --socket="$sd/munge/sock" --key-file="$sd/munge/key" --pid-file="$sd/munge/pid" \
        --log-file="$sd/log/munged.log" --seed-file="$sd/munge/seed" &
    SLURM_PIDS=$!
    i=0
    while [ ! -S "$sd/munge/sock" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    host=$(hostname -s)
    cat >"$sd/slurm.conf" <<CONF
ClusterName=phx
SlurmctldHost=$host
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sd/munge/sock
StateSaveLocation=$sd/ctld
SlurmdSpoolDir=$sd/spool
SlurmctldPidFile=$sd/ctld.pid
SlurmdPidFile=$sd/slurmd.pid
SlurmctldLogFile=$sd/log/slurmctld.log
SlurmdLogFile=$sd/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
InactiveLimit=0
KillWait=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    export SLURM_CONF="$sd/slurm.conf"
    slurmctld -D -i -f "$sd/slurm.conf" >"$sd/log/slurmctld.out" 2>&1 &
    SLURM_PIDS="$SLURM_PIDS $!"
    slurmd -D -f "$sd/slurm.conf" >"$sd/log/slurmd.out" 2>&1 &
    SLURM_PIDS="$SLURM_PIDS $!"
    i=0
    while [ $i -lt 100 ]; do
        sinfo -h -o %T 2>/dev/null | grep -Eq '^idle' && return 0
        sleep 0.2
        i=$((i + 1))
    done
    tail -20 "$sd/log/slurmctld.log" "$sd/log/slurmd.log" >&2
    return 1
}

# Stops what slurm_up started (its own children), then reaps them.
slurm_down() {
    for p in $SLURM_PIDS; do kill "$p" 2>/dev/null; done
    for p in $SLURM_PIDS; do
        i=0
        while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        kill -9 "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    SLURM_PIDS=
}

# slurm_leftovers PROG TEXT: "pid args" of the processes left of this
# test's jobs: those running PROG (their first word; for a libtool
# wrapper, the program it runs from .libs/), those whose command
# line holds TEXT (a path under the test's directory), and the slurmstepd
# of this test's Slurm (SLURM_CONF in their environment). Other users of
# the machine (a make naming the program, another test's Slurm) are not
# counted. A step daemon may still be exiting when its job has ended
# (its command line already empty): it looks for up to 10 s before it
# reports what is left.
slurm_leftovers_now() {
    ps -eo pid=,args= | awk -v p="$1" -v l="${1%/*}/.libs/${1##*/}" -v lt="${1%/*}/.libs/lt-${1##*/}" -v t="$2" \
        '$2 == p || $2 == l || $2 == lt || index($0, t) { print }' | grep -v awk
    for s in $(pgrep -x slurmstepd); do
        tr '\0' '\n' <"/proc/$s/environ" 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" &&
            echo "$s $(tr '\0' ' ' <"/proc/$s/cmdline" 2>/dev/null)"
    done
}
slurm_leftovers() {
    local i left
    for i in $(seq 20); do
        left=$(slurm_leftovers_now "$1" "$2")
        [ -z "$left" ] && return 0
        sleep 0.5
    done
    echo "$left"
}
