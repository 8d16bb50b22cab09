#!/bin/sh
# Ranks started by mpirun without PHX_STORE_TOKEN (gloo backend): they use
# the secret in ~/.phalanx/job-token as the job token, so a process given
# that secret may use the store and one without it is refused.
src=${top_srcdir:-.}
b=$(cd "${top_builddir:-.}" && pwd)
d=$(mktemp -d)
trap 'touch "$d/done"; rm -rf "$d"' EXIT
echo "1..3"
skip_all() { for i in 1 2 3; do echo "ok $i # SKIP $1"; done; exit 0; }
command -v mpirun >/dev/null 2>&1 || skip_all "no mpirun"
[ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] || skip_all "no gloo plugin"
cat >"$d/prog.c" <<'PROG'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <phalanx/phalanx.h>
int main(int argc, char **argv)
{
    if (argc == 3) {
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
    printf("joined\n");
    fflush(stdout);
    snprintf(path, sizeof path, "%s/up", argv[1]);
    if (phx_comm_rank(c) == 0) fclose(fopen(path, "w"));
    snprintf(path, sizeof path, "%s/done", argv[1]);
    for (int i = 0; i < 300 && access(path, F_OK) != 0; i++) usleep(100000);
    phx_comm_free(c);
    return 0;
}
PROG
${CC:-cc} $PHX_SAN_FLAGS -I"$src/include" "$d/prog.c" -L"$b/.libs" -lphalanx -Wl,-rpath,"$b/.libs" -o "$d/prog" ||
    { echo "Bail out! cannot build the test program"; exit 1; }
unset PHX_STORE_TOKEN PHX_STORE_INSECURE RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
mkdir -p "$d/home/.phalanx"
chmod 700 "$d/home/.phalanx"
secret=5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e7abcd
echo $secret >"$d/home/.phalanx/job-token"
chmod 600 "$d/home/.phalanx/job-token"
port=$((20000 + ($$ + 7) % 20000))
HOME="$d/home" MASTER_ADDR=127.0.0.1 MASTER_PORT=$port PHX_COMM=gloo PHX_TIMEOUT=10 \
    mpirun --allow-run-as-root --oversubscribe -np 2 "$d/prog" "$d" >"$d/job" 2>&1 &
job=$!
i=0; while [ ! -e "$d/up" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
env -u HOME PHX_STORE_TOKEN=$secret "$d/prog" x $port >"$d/in" 2>&1
if grep -q "^read 1" "$d/in"; then echo "ok 1 - the secret in ~/.phalanx/job-token is the job's token under mpirun"; else
    echo "not ok 1 - a process given the file's secret was not served"; sed 's/^/# /' "$d/in"; fi
env -u HOME "$d/prog" x $port >"$d/out" 2>&1
if grep -q "^refused" "$d/out" && ! grep -q "^read" "$d/out"; then echo "ok 2 - a process without it reads nothing"; else
    echo "not ok 2 - a process without the token was served"; sed 's/^/# /' "$d/out"; fi
touch "$d/done"
wait $job
rc=$?
if [ $rc = 0 ] && [ "$(grep -c joined "$d/job")" = 2 ]; then echo "ok 3 - both ranks joined and exit 0"; else
    echo "not ok 3 - mpirun exit $rc"; fi
sed 's/^/# /' "$d/job"
