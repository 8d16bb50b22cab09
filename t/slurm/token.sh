#!/bin/sh
# A job whose ranks srun starts without PHX_STORE_TOKEN (t/slurm/lib.sh: a
# Slurm of the test's own; skipped without slurm-wlm or root) runs no open
# store (doc/reference/store.md, "Job token"):
#   with a home folder the ranks share the secret in ~/.phalanx/job-token
#     (made by the first rank, 0600): a client without the token, one of
#     another uid (nobody), and a raw stranger that skips the client's
#     checks (t/slurm/intruder.py: HELLO, then GET and SET with no AUTH)
#     read and write nothing; a client given the secret is served and
#     finds rank 0's count unchanged; the job exits 0;
#   with no home folder (no secret at all) the store serves only this
#     uid's processes on this host: nobody, and a raw stranger as nobody,
#     are refused (the stranger as this uid is served: a control); the
#     job exits 0.
b=${top_builddir:-.}
b=$(cd "$b" && pwd)
src=$(cd "${top_srcdir:-.}" && pwd)
. "$src/t/slurm/lib.sh"
why=$(slurm_skip)
[ -z "$why" ] || { echo "1..0 # SKIP $why"; exit 0; }
[ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] || { echo "1..0 # SKIP built without Gloo"; exit 0; }
setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null ||
    { echo "1..0 # SKIP cannot run a process as nobody (setpriv)"; exit 0; }
d=$(mktemp -d)
chmod 755 "$d"
trap 'touch "$d/done"; slurm_down; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up then too
note() { sed 's/^/# /' "$1" | tail -6; }
n=0
result() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi; return "$1"; }
await() { i=0; while [ ! -e "$1" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done; [ -e "$1" ]; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_PORT PHX_RESTART_COUNT PHX_STORE_TOKEN PHX_STORE_INSECURE
export PHX_TIMEOUT=30 PHX_COMM=gloo MASTER_ADDR=127.0.0.1
echo "1..13"
cat >"$d/prog.c" <<'PROG'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <phalanx/phalanx.h>
/* prog DIR: a rank (rank 0 touches DIR/up once both have joined, all wait
 * for DIR/done); prog client PORT: reads and rewrites rank 0's count. */
int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "client")) {
        phx_store *s = NULL;
        void *v = NULL;
        size_t n = 0;
        if (phx_store_new("127.0.0.1", atoi(argv[2]), false, 3.0, &s)) {
            printf("refused: %s\n", phx_last_error());
            return 1;
        }
        if (phx_store_get(s, "phx/comm/rank0/count", &v, &n, 1.0) == PHX_OK) printf("read %.*s\n", (int)n, (char *)v);
        free(v);
        phx_store_free(s);
        return 0;
    }
    phx_comm *c = NULL;
    char path[4096];
    if (phx_comm_init(NULL, &c) != PHX_OK) {
        printf("failed: %s\n", phx_last_error());
        return 1;
    }
    if (phx_comm_barrier(c, NULL) != PHX_OK) {
        printf("barrier: %s\n", phx_last_error());
        return 1;
    }
    printf("joined\n");
    fflush(stdout);
    snprintf(path, sizeof path, "%s/up", argv[1]);
    if (phx_comm_rank(c) == 0) fclose(fopen(path, "w"));
    snprintf(path, sizeof path, "%s/done", argv[1]);
    for (int i = 0; i < 600 && access(path, F_OK) != 0; i++) usleep(100000);
    phx_status st = phx_comm_barrier(c, NULL);
    if (st) printf("last barrier: %s\n", phx_last_error());
    phx_comm_free(c);
    return st ? 1 : 0;
}
PROG
${CC:-cc} $PHX_SAN_FLAGS -I"$src/include" "$d/prog.c" -L"$b/.libs" -lphalanx -Wl,-rpath,"$b/.libs" -o "$d/prog" ||
    { echo "Bail out! cannot build the test program"; exit 1; }
chmod 755 "$d/prog"
# nobody runs the library and the raw client from $d: the build and source
# trees may be private to this uid (a clone under a 0700 mktemp folder)
mkdir "$d/lib" && cp -P "$b"/.libs/libphalanx.so* "$d/lib/" && cp "$src/t/slurm/intruder.py" "$d/" &&
    chmod -R a+rX "$d/lib" "$d/intruder.py"
if ! slurm_up "$d/slurm" "$(nproc)" 2>"$d/up.log"; then
    echo "Bail out! Slurm did not come up"
    note "$d/up.log"
    exit 1
fi
intruder() { python3 "$src/t/slurm/intruder.py" 127.0.0.1 "$port"; }
nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME=/nonexistent LD_LIBRARY_PATH="$d/lib" "$@"; }
# job NAME: srun -n 2 prog in the background, with this environment; waits
# until both ranks have joined
job() {
    rm -f "$d/up" "$d/done"
    port=$(free_port)
    MASTER_PORT=$port timeout 90 srun -n 2 --kill-on-bad-exit=1 "$d/prog" "$d" >"$d/$1.out" 2>&1 &
    jobpid=$!
    await "$d/up" || note "$d/$1.out"
}
end_job() { # NAME
    touch "$d/done"
    wait $jobpid
    rc=$?
    [ $rc = 0 ] && [ "$(grep -c '^joined' "$d/$1.out")" = 2 ]
}

# ---- a home folder: the secret in ~/.phalanx/job-token
mkdir "$d/home"
export HOME="$d/home"
job home
tok="$d/home/.phalanx/job-token"
[ -f "$tok" ] && [ "$(stat -c %a "$tok")" = 600 ] && [ "$(tr -d '\n' <"$tok" | wc -c)" = 64 ]
result $? "srun -n 2 without PHX_STORE_TOKEN: the ranks made ~/.phalanx/job-token (0600, 64 hex digits)"
env -u HOME "$d/prog" client $port >"$d/notoken" 2>&1
[ $? != 0 ] && grep -q "^refused: .*requires this job.s token" "$d/notoken" && ! grep -q "^read" "$d/notoken"
result $? "a client without the token reads nothing (told the store requires the job's token)"
[ $? = 0 ] || note "$d/notoken"
nobody "$d/prog" client $port >"$d/nobody" 2>&1
[ $? != 0 ] && grep -q "^refused" "$d/nobody" && ! grep -q "^read" "$d/nobody"
result $? "a client of another uid (nobody) reads nothing"
[ $? = 0 ] || note "$d/nobody"
intruder >"$d/raw" 2>&1
grep -q "^flags 1$" "$d/raw" && ! grep -q "^read\|^wrote" "$d/raw"
result $? "a raw stranger skipping AUTH: told a token is required, reads and writes nothing ($(tr '\n' ' ' <"$d/raw"))"
nobody python3 "$d/intruder.py" 127.0.0.1 "$port" >"$d/rawnobody" 2>&1
grep -q "^flags 1$" "$d/rawnobody" && ! grep -q "^read\|^wrote" "$d/rawnobody"
result $? "the same stranger as nobody: nothing ($(tr '\n' ' ' <"$d/rawnobody"))"
PHX_STORE_TOKEN=$(cat "$tok") env -u HOME "$d/prog" client $port >"$d/given" 2>&1
[ $? = 0 ] && grep -q "^read 1$" "$d/given"
result $? "a client given the file's secret is served, and rank 0's count is unchanged ($(cat "$d/given"))"
end_job home
result $? "the job runs on and both ranks exit 0 (exit $rc)"
[ $rc = 0 ] || note "$d/home.out"

# ---- no home folder: no secret at all
export HOME=/nonexistent/phx-home
job nohome
nobody "$d/prog" client $port >"$d/nobody2" 2>&1
[ $? != 0 ] && grep -q "^refused: .*belongs to uid" "$d/nobody2" && ! grep -q "^read" "$d/nobody2"
result $? "no secret: a client of another uid is refused, and told why"
[ $? = 0 ] || note "$d/nobody2"
nobody python3 "$d/intruder.py" 127.0.0.1 "$port" >"$d/raw2" 2>&1
! grep -q "^read\|^wrote" "$d/raw2" && grep -q "refused" "$d/raw2"
result $? "no secret: a raw stranger of another uid reads and writes nothing ($(tr '\n' ' ' <"$d/raw2"))"
python3 "$src/t/slurm/intruder.py" 127.0.0.1 "$port" ro >"$d/raw3" 2>&1
grep -q "^flags 0$" "$d/raw3" && grep -q "^read 1$" "$d/raw3"
result $? "no secret: the same stranger as this uid is served (control: it speaks the protocol; $(tr '\n' ' ' <"$d/raw3"))"
"$d/prog" client $port >"$d/same" 2>&1
[ $? = 0 ] && grep -q "^read 1$" "$d/same"
result $? "no secret: a client of the same uid on this host is served (documented; $(cat "$d/same"))"
end_job nohome
result $? "the job runs on and both ranks exit 0 (exit $rc)"
[ $rc = 0 ] || note "$d/nohome.out"
left=$(slurm_leftovers "$d/prog" "$d/prog")
[ -z "$left" ]
result $? "no process of the jobs left"
[ -z "$left" ] || echo "$left" | sed 's/^/#   /'
