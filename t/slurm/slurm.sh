#!/bin/sh
# Phalanx under a real Slurm (t/slurm/lib.sh: munged, slurmctld and slurmd
# of the test's own, one node; skipped without slurm-wlm or root):
#   srun -n 2 examples/ddp prints the lines of phxrun --standalone, and
#     so does srun --mpi=pmix -n 2 (PHX_COMM unset: the mpi backend);
#   srun --mpi=pmi2 -n 2 (Open MPI without PMI-2): PHX_COMM unset takes
#     gloo with the same lines; PHX_COMM=mpi is refused at once naming
#     srun --mpi=pmix and PHX_COMM=gloo (MPI_Init would abort the job);
#   sbatch -n 2 with srun in the script: the same lines;
#   sbatch -n 2 running the program without srun: an error naming srun
#     within 5 s (Slurm sets SLURM_PROCID=0 in the batch script);
#   srun -n 1 -c 1: the rank takes 1 thread (SLURM_CPUS_PER_TASK), not all cores;
#   scancel mid-training: every rank ends, no process left.
b=${top_builddir:-.}
b=$(cd "$b" && pwd)
. "${top_srcdir:-.}/t/slurm/lib.sh"
. "${top_srcdir:-.}/t/multinode/lib.sh"
why=$(slurm_skip)
[ -z "$why" ] || { echo "1..0 # SKIP $why"; exit 0; }
[ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] || { echo "1..0 # SKIP built without Gloo"; exit 0; }
d=$(mktemp -d)
chmod 755 "$d"
trap 'slurm_down; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up then too
note() { sed 's/^/# /' "$1" | tail -6; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT PHX_NUM_THREADS
unset OMP_NUM_THREADS
# a free port: other jobs on this host may hold Slurm's default 29500
export PHX_TIMEOUT=30 PHX_COMM=gloo MASTER_PORT=$(free_port)
prog="$b/examples/ddp"
echo "1..10"
t=0
result() { t=$((t + 1)); if [ "$1" = 0 ]; then echo "ok $t - $2"; else echo "not ok $t - $2"; fi; }
if ! slurm_up "$d/slurm" "$(nproc)" 2>"$d/up"; then
    echo "Bail out! Slurm did not come up"
    note "$d/up"
    exit 1
fi
"$b/tools/phxrun" --standalone --nproc-per-node 2 "$prog" >"$d/ref" 2>&1

timeout 60 srun -n 2 --kill-on-bad-exit=1 "$prog" >"$d/srun" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(grep -c '^Epoch' "$d/srun")" = 10 ] && cmp -s "$d/ref" "$d/srun"
result $? "srun -n 2 examples/ddp: the ten epoch lines of phxrun --standalone (exit $rc)"
[ $rc = 0 ] || note "$d/srun"

if [ -e "$b/plugins/comm/mpi/.libs/phx-comm-mpi.so" ] && srun --mpi=list 2>&1 | grep -q pmix; then
    # Under --enable-sanitizers Open MPI keeps what MPI_Init allocates past
    # MPI_Finalize (t/mpi-util.sh): leak detection off for these ranks.
    san=; [ -n "${PHX_SAN_FLAGS:-}" ] && san="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    (unset PHX_COMM; [ -n "$san" ] && export ASAN_OPTIONS="$san"; PHX_LOG=info timeout 60 srun --mpi=pmix -n 2 --kill-on-bad-exit=1 "$prog" >"$d/pmix" 2>"$d/pmix.err")
    rc=$?
    [ $rc = 0 ] && cmp -s "$d/ref" "$d/pmix" && grep -q "rank 0 of 2, backend mpi" "$d/pmix.err"
    result $? "srun --mpi=pmix -n 2, PHX_COMM unset: the mpi backend, the same lines (exit $rc)"
    [ $rc = 0 ] || note "$d/pmix.err"
else
    t=$((t + 1))
    echo "ok $t # SKIP no mpi plugin or no pmix in this Slurm"
fi

# srun --mpi=pmi2 (MpiDefault=pmi2 on many clusters) with an Open MPI that
# has no PMI-2 support: PHX_COMM unset takes another backend (an info
# line says why), PHX_COMM=mpi is refused at once naming --mpi=pmix.
if srun --mpi=list 2>&1 | grep -q pmi2 && ! grep -q "define PX_MPI_PMI2 1" "$b/config.h"; then
    (unset PHX_COMM; PHX_LOG=info timeout 60 srun --mpi=pmi2 -n 2 --kill-on-bad-exit=1 "$prog" >"$d/pmi2" 2>"$d/pmi2.err")
    rc=$?
    [ $rc = 0 ] && cmp -s "$d/ref" "$d/pmi2" && grep -q "rank 0 of 2, backend gloo" "$d/pmi2.err" &&
        grep -q "backend mpi not tried: .*PMI-2" "$d/pmi2.err"
    result $? "srun --mpi=pmi2 -n 2, PHX_COMM unset: gloo, the same lines, a log line saying why (exit $rc)"
    [ $rc = 0 ] || note "$d/pmi2.err"
    start=$(mn_now)
    PHX_COMM=mpi timeout 60 srun --mpi=pmi2 -n 2 --kill-on-bad-exit=1 "$prog" >"$d/pmi2mpi" 2>&1
    rc=$?
    took=$(mn_secs "$start" "$(mn_now)")
    [ $rc != 0 ] && grep -q "srun --mpi=pmix" "$d/pmi2mpi" && grep -q "PHX_COMM=gloo" "$d/pmi2mpi" &&
        ! grep -q "direct launched\|error occurred in MPI_Init" "$d/pmi2mpi" && mn_le "$took" 10
    result $? "srun --mpi=pmi2, PHX_COMM=mpi: refused in $took s naming --mpi=pmix and PHX_COMM=gloo (exit $rc)"
    grep -o "phx_comm_init: .*" "$d/pmi2mpi" | head -1 | cut -c1-200 | sed 's/^/#   /'
else
    t=$((t + 2))
    echo "ok $((t - 1)) # SKIP no pmi2 in this Slurm, or an Open MPI with PMI-2"
    echo "ok $t # SKIP no pmi2 in this Slurm, or an Open MPI with PMI-2"
fi

cat >"$d/with.sh" <<JOB
#!/bin/sh
srun --kill-on-bad-exit=1 "$prog"
JOB
timeout 60 sbatch -W -n 2 -o "$d/with.out" "$d/with.sh" >/dev/null 2>&1
rc=$?
cmp -s "$d/ref" "$d/with.out"
result $? "sbatch -n 2 with srun in the script: the same lines (sbatch exit $rc)"
[ -s "$d/with.out" ] && ! cmp -s "$d/ref" "$d/with.out" && note "$d/with.out"

cat >"$d/without.sh" <<JOB
#!/bin/sh
start=\$(date +%s.%N)
"$prog"
echo "exit \$? after \$(echo "\$start \$(date +%s.%N)" | awk '{ printf "%.1f", \$2 - \$1 }') s"
JOB
timeout 60 sbatch -W -n 2 -o "$d/without.out" "$d/without.sh" >/dev/null 2>&1
took=$(sed -n 's/^exit [0-9]* after \(.*\) s$/\1/p' "$d/without.out")
grep -q "start the ranks with srun" "$d/without.out" && grep -q "^exit 1 after" "$d/without.out" &&
    [ -n "$took" ] && mn_le "$took" 5
result $? "sbatch -n 2 running the program without srun: an error naming srun in $took s"
grep -o "phx_world_from_env: .*" "$d/without.out" | head -1 | cut -c1-200 | sed 's/^/#   /'

# one task of 1 CPU on a node of $(nproc): 1 thread, not cores / 1
timeout 60 env MN_SHOW_THREADS=1 MN_SECONDS=0 srun -n 1 -c 1 "$b/t/multinode/loop" >"$d/threads" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "^rank 0: 1 threads$" "$d/threads"
result $? "srun -n 1 -c 1 on $(nproc) cores: the rank takes 1 thread ($(grep -o '[0-9]* threads' "$d/threads"))"
grep -q "^rank 0: 1 threads$" "$d/threads" || note "$d/threads"

cat >"$d/long.sh" <<JOB
#!/bin/sh
MN_SECONDS=120 MN_READY="$d/ready" srun "$b/t/multinode/loop"
JOB
job=$(sbatch --parsable -n 2 -o "$d/long.out" "$d/long.sh")
i=0
while [ $i -lt 300 ] && ! { [ -s "$d/ready.0" ] && [ -s "$d/ready.1" ]; }; do sleep 0.1; i=$((i + 1)); done
p0=$(cat "$d/ready.0" 2>/dev/null) p1=$(cat "$d/ready.1" 2>/dev/null)
[ -n "$p0" ] && [ -n "$p1" ]
result $? "sbatch + srun, 2 ranks training (pids $p0, $p1)"
start=$(mn_now)
scancel "$job"
i=0
while [ $i -lt 200 ] && { kill -0 "$p0" 2>/dev/null || kill -0 "$p1" 2>/dev/null; }; do sleep 0.05; i=$((i + 1)); done
took=$(mn_secs "$start" "$(mn_now)")
[ -n "$p0" ] && [ -n "$p1" ] && ! kill -0 "$p0" 2>/dev/null && ! kill -0 "$p1" 2>/dev/null && mn_le "$took" 5
result $? "scancel: both ranks end in $took s"
i=0
while [ $i -lt 100 ] && squeue -h -j "$job" 2>/dev/null | grep -q .; do sleep 0.1; i=$((i + 1)); done
left=$(slurm_leftovers "$b/t/multinode/loop" "$d/long.sh")
[ -z "$left" ]
result $? "no process of the job left"
[ -z "$left" ] || echo "$left" | sed 's/^/#   /'
