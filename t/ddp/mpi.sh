#!/bin/sh
# DDP on mpi under mpirun: examples/ddp with 2 ranks prints the same ten
# epoch lines as phxrun with gloo (PHX_COMM=mpi, and unset: the probe
# prefers mpi under mpirun); t/ddp/equiv (world N equals one process on N
# batches within 1e-6 after 20 steps, SGD and AdamW, 1 and 4 buckets,
# ranks bitwise equal after every step) in worlds 2 and 3, and in world 3
# with every bucket through the shared window (PHX_MPI_SHM_BYTES=1).
. "${top_srcdir:-.}/t/mpi-util.sh"
mpi_need
re='^Epoch \[([1-9]|10)/10\], Loss: [0-9]+\.[0-9]{4}$'
epochs() { # status, output: 0 when ten epoch lines and nothing else on stdout
    [ "$1" -eq 0 ] && [ "$(printf '%s\n' "$2" | grep -cE "$re")" -eq 10 ] && [ "$(printf '%s\n' "$2" | wc -l)" -eq 10 ]
}
mpi=$(PHX_COMM=mpi mpi_run 2 "$b/examples/ddp" 2>/dev/null); rc=$?
epochs $rc "$mpi"
tap_ok $? "mpirun -np 2 examples/ddp, PHX_COMM=mpi: ten epoch lines from rank 0 only (status $rc)"
[ $rc -eq 0 ] || printf '%s\n' "$mpi" | sed 's/^/# /'
if [ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] && [ -x "$b/tools/phxrun" ]; then
    gloo=$(unset MASTER_ADDR MASTER_PORT; PHX_COMM=gloo "$b/tools/phxrun" --standalone --nproc-per-node 2 "$b/examples/ddp" 2>&1)
    [ "$mpi" = "$gloo" ]
    tap_ok $? "... the same lines as phxrun --nproc-per-node 2 with gloo"
    [ "$mpi" = "$gloo" ] || printf 'gloo:\n%s\n' "$gloo" | sed 's/^/# /'
else
    tap_n=$((tap_n + 1)); echo "ok $tap_n # SKIP built without gloo or phxrun"
fi
err=$(mktemp)
auto=$(unset PHX_COMM; PHX_LOG=info mpi_run 2 "$b/examples/ddp" 2>"$err"); rc=$?
[ "$auto" = "$mpi" ] && [ "$(grep -c 'communicator c0/: rank [01] of 2, backend mpi' "$err")" -eq 2 ]
tap_ok $? "PHX_COMM unset under mpirun: both ranks pick mpi, the same lines (status $rc)"
[ $rc -eq 0 ] || sed 's/^/# /' "$err"
rm -f "$err"
for run in "2" "3" "3 1"; do
    set -- $run
    out=$(PHX_COMM=mpi PHX_MPI_SHM_BYTES=${2:-} mpi_run "$1" "$b/t/ddp/equiv" 2>&1); rc=$?
    n=$(printf '%s\n' "$out" | grep -c "^# world $1, .*max relative difference")
    [ $rc -eq 0 ] && [ "$n" -eq 4 ]
    tap_ok $? "t/ddp/equiv, world $1${2:+, every bucket through the shared window}: SGD and AdamW, 1 and 4 buckets, equal to one process within 1e-6, ranks bitwise equal (status $rc)"
    printf '%s\n' "$out" | grep '^#'
    [ $rc -eq 0 ] || printf '%s\n' "$out" | grep -v '^#' | sed 's/^/# /'
done
tap_end
