# Shared by the mpi tests (sourced): runs programs under mpirun and merges
# their TAP streams into one.
#   mpi_need            skips the whole test (1..0 # SKIP) unless mpirun and
#                       the mpi plugin are there
#   mpi_run NP PROG...  mpirun -np NP PROG... with a bound on its run time
#   tap_add OUTPUT      renumbers OUTPUT's ok / not ok lines into this
#                       test's stream (its plan lines are dropped)
#   tap_ok COND NAME    one line of our own
#   tap_end             the plan, last
b=${top_builddir:-.}
# mpirun refuses root unless told; containers and CI run as root.
OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
# No rendezvous store: the mpi plugin must not need MASTER_ADDR/MASTER_PORT
# (an address that cannot be reached makes any attempt fail).
MASTER_ADDR=192.0.2.1
MASTER_PORT=9
export MASTER_ADDR MASTER_PORT
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
# Under --enable-sanitizers (PHX_SAN_FLAGS): Open MPI keeps what MPI_Init
# allocates past MPI_Finalize, mostly in its dlclosed components, whose
# one-frame stacks no LeakSanitizer suppression can name; so the ranks run
# with leak detection off (ASan and UBSan stay on). Leaks of our own code
# are still found by every test that does not go through mpirun.
if [ -n "${PHX_SAN_FLAGS:-}" ]; then
    ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    export ASAN_OPTIONS
fi
tap_n=0

mpi_need() {
    if ! command -v mpirun >/dev/null 2>&1; then
        echo "1..0 # SKIP mpirun not found (apt-get install openmpi-bin)"; exit 0
    fi
    if [ ! -e "$b/plugins/comm/mpi/.libs/phx-comm-mpi.so" ]; then
        echo "1..0 # SKIP built without MPI (libopenmpi-dev)"; exit 0
    fi
}

# --oversubscribe: more ranks than cores is fine for tests.
mpi_run() {
    _np=$1; shift
    timeout -k 5 "${MPI_TEST_LIMIT:-300}" mpirun --oversubscribe -np "$_np" "$@"
}

tap_add() {
    _out=$(printf '%s\n' "$1" | awk -v n="$tap_n" '
        /^(not )?ok [0-9]+/ { n++; sub(/ok [0-9]+/, "ok " n); print; next }
        /^1\.\.[0-9]+/ { next }
        /^#/ { print }
        END { print "N " n }')
    printf '%s\n' "$_out" | grep -v '^N '
    tap_n=$(printf '%s\n' "$_out" | sed -n 's/^N //p')
}

tap_ok() {
    tap_n=$((tap_n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $tap_n - $2"; else echo "not ok $tap_n - $2"; fi
}

tap_end() { echo "1..$tap_n"; }
