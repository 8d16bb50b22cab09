#!/bin/sh
# Ranks started by hand without PHX_STORE_TOKEN: they share the secret in
# ~/.phalanx/job-token (made on first use, 0600), so a process without it
# or of another uid reads and writes nothing; a store with no secret at
# all serves only this user's processes on this host; a job-token file
# others may read, a FIFO, a symlink to nothing or a secret over 1024 bytes
# is refused; a multi-node job without a secret refuses
# to start unless PHX_STORE_INSECURE=1 (doc/reference/store.md).
src=${top_srcdir:-.}
b=$(cd "${top_builddir:-.}" && pwd)
d=$(mktemp -d)
trap 'touch "$d/done"; rm -rf "$d"' EXIT
chmod 755 "$d"
n=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi; }
check() { if eval "$1"; then ok 0 "$2"; else ok 1 "$2"; fi; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }
await() { i=0; while [ ! -e "$1" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done; [ -e "$1" ]; }
echo "1..23"
if [ ! -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ]; then
    i=0; while [ $i -lt 23 ]; do skip "no gloo plugin"; i=$((i + 1)); done; exit 0
fi
cat >"$d/prog.c" <<'PROG'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <phalanx/phalanx.h>
/* prog DIR: a rank (rank 0 touches DIR/up, all wait for DIR/done);
 * prog intruder PORT: reads and rewrites rank 0's communicator count. */
int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "intruder")) {
        phx_store *s = NULL;
        void *v = NULL;
        size_t n = 0;
        if (phx_store_new("127.0.0.1", atoi(argv[2]), false, 3.0, &s)) {
            printf("refused: %s\n", phx_last_error());
            return 1;
        }
        if (phx_store_get(s, "phx/comm/rank0/count", &v, &n, 1.0) == PHX_OK) printf("read %.*s\n", (int)n, (char *)v);
        if (phx_store_set(s, "phx/comm/rank0/count", "666", 3) == PHX_OK) printf("wrote\n");
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
    const char *r = getenv("RANK") ? getenv("RANK") : getenv("OMPI_COMM_WORLD_RANK");
    snprintf(path, sizeof path, "%s/up", argv[1]);
    if (r && !strcmp(r, "0")) fclose(fopen(path, "w"));
    snprintf(path, sizeof path, "%s/done", argv[1]);
    for (int i = 0; i < 300 && access(path, F_OK) != 0; i++) usleep(100000);
    phx_comm_free(c);
    return 0;
}
PROG
${CC:-cc} $PHX_SAN_FLAGS -I"$src/include" "$d/prog.c" -L"$b/.libs" -lphalanx -Wl,-rpath,"$b/.libs" -o "$d/prog" ||
    { echo "Bail out! cannot build the test program"; exit 1; }
chmod 755 "$d/prog"
# nobody loads the library from $d: the build tree may be private to this
# uid (a clone under a 0700 mktemp folder)
mkdir "$d/lib" && cp -P "$b"/.libs/libphalanx.so* "$d/lib/" && chmod -R a+rX "$d/lib"
unset PHX_STORE_TOKEN PHX_STORE_INSECURE LOCAL_RANK LOCAL_WORLD_SIZE
export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 PHX_COMM=gloo PHX_TIMEOUT=10
port=$((20000 + $$ % 20000))
# runs a command as nobody; 77 where this test cannot switch uid
as_nobody() {
    if [ "$(id -u)" = 0 ] && setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
        setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME=/nonexistent LD_LIBRARY_PATH="$d/lib" "$@"
    else
        return 77
    fi
}
# start_job NAME: both ranks, by hand, in the background; waits for rank 0
start_job() {
    rm -f "$d/up" "$d/done"
    RANK=0 MASTER_PORT=$port "$d/prog" "$d" >"$d/$1.r0" 2>&1 &
    r0=$!
    RANK=1 MASTER_PORT=$port "$d/prog" "$d" >"$d/$1.r1" 2>&1 &
    r1=$!
    await "$d/up"
}
end_job() {
    touch "$d/done"
    wait $r0; s0=$?
    wait $r1; s1=$?
    [ $s0 = 0 ] && [ $s1 = 0 ] && grep -q joined "$d/$1.r0" && grep -q joined "$d/$1.r1"
}

# (a) a home folder: the job token file is made, 0600 in a 0700 folder
mkdir "$d/home" "$d/other"
export HOME="$d/home"
start_job a
tok="$d/home/.phalanx/job-token"
check '[ -f "$tok" ] && [ "$(stat -c %a "$tok")" = 600 ] && [ "$(stat -c %a "$d/home/.phalanx")" = 700 ]' \
  "ranks started by hand make ~/.phalanx/job-token, mode 0600 in a 0700 folder"
check '[ "$(tr -d "\n" <"$tok" | wc -c)" = 64 ] && [ -z "$(tr -d "0-9a-f\n" <"$tok")" ]' "... holding 64 hex digits"
# (b) a process without the token: none, or another home's
env -u HOME "$d/prog" intruder $port >"$d/b1" 2>&1
check '[ $? != 0 ] && grep -q "^refused: .*requires this job.s token" "$d/b1" && ! grep -q "^read\|^wrote" "$d/b1"' \
  "a process without a token reads and writes nothing"
HOME="$d/other" "$d/prog" intruder $port >"$d/b2" 2>&1
check '[ $? != 0 ] && grep -q "^refused: .*refused this process.s job token from $d/other/.phalanx/job-token" "$d/b2" && ! grep -q "^read\|^wrote" "$d/b2"' \
  "a process with another home's token reads and writes nothing, and the message names its file"
# (c) another uid
as_nobody "$d/prog" intruder $port >"$d/c1" 2>&1; rc=$?
if [ $rc = 77 ]; then skip "cannot run a process as nobody (not root, or no setpriv)"; else
  check '[ $rc != 0 ] && grep -q "^refused" "$d/c1" && ! grep -q "^read\|^wrote" "$d/c1"' "a process of another uid reads and writes nothing"
fi
PHX_STORE_TOKEN=$(cat "$tok") env -u HOME "$d/prog" intruder $port >"$d/a3" 2>&1
check '[ $? = 0 ] && grep -q "^read 1" "$d/a3"' "the token is the file's secret: a process given it may use the store"
check 'end_job a' "the job's ranks met and exit 0"
secret=$(cat "$tok")
port=$((port + 1))
start_job a2
check '[ "$(cat "$tok")" = "$secret" ]' "the next job uses the same file"
check 'end_job a2' "... and runs"

# (c) no secret at all (HOME cannot hold the file): only this user's processes on this host
port=$((port + 1))
export HOME=/nonexistent/phx-home
start_job c
check '[ -e "$d/up" ]' "a one-host job without a secret starts"
as_nobody "$d/prog" intruder $port >"$d/c2" 2>&1; rc=$?
if [ $rc = 77 ]; then skip "cannot run a process as nobody (not root, or no setpriv)"; else
  check '[ $rc != 0 ] && grep -q "^refused: .*refused this process: .*belongs to uid" "$d/c2" && ! grep -q "^read\|^wrote" "$d/c2"' \
    "... a process of another uid is refused, and told why"
fi
"$d/prog" intruder $port >"$d/c3" 2>&1
check '[ $? = 0 ] && grep -q "^read" "$d/c3"' "... a process of the same user is served (documented)"
check 'end_job c' "... and the job exits 0"

# (d) a job-token file others may read, or of another owner
mkdir -p "$d/bad/.phalanx" && chmod 700 "$d/bad/.phalanx"
echo 0123456789abcdef0123456789abcdef >"$d/bad/.phalanx/job-token"
chmod 644 "$d/bad/.phalanx/job-token"
port=$((port + 1))
HOME="$d/bad" RANK=0 MASTER_PORT=$port "$d/prog" "$d" >"$d/d1" 2>&1
check '[ $? != 0 ] && grep -q "refusing $d/bad/.phalanx/job-token: its mode 0644" "$d/d1"' \
  "a job-token file others may read is refused, naming it"
chmod 600 "$d/bad/.phalanx/job-token"
if [ "$(id -u)" = 0 ] && chown nobody "$d/bad/.phalanx/job-token" 2>/dev/null; then
  HOME="$d/bad" RANK=0 MASTER_PORT=$port "$d/prog" "$d" >"$d/d2" 2>&1
  check '[ $? != 0 ] && grep -q "refusing $d/bad/.phalanx/job-token: it belongs to uid" "$d/d2"' \
    "a job-token file of another owner is refused, naming it"
else skip "cannot give a file to nobody (not root)"; fi

# (d2) a FIFO (not waited on), a symbolic link to nothing, a secret too long to use whole
for k in fifo dangling long; do mkdir -p "$d/$k/.phalanx" && chmod 700 "$d/$k/.phalanx"; done
mkfifo -m 600 "$d/fifo/.phalanx/job-token"
ln -s "$d/nowhere" "$d/dangling/.phalanx/job-token"
head -c 1030 /dev/zero | tr '\0' a >"$d/long/.phalanx/job-token" && chmod 600 "$d/long/.phalanx/job-token"
port=$((port + 1))
HOME="$d/fifo" RANK=0 MASTER_PORT=$port timeout 20 "$d/prog" "$d" >"$d/d3" 2>&1
check '[ $? = 1 ] && grep -q "refusing $d/fifo/.phalanx/job-token: not a regular file" "$d/d3"' \
  "a FIFO as the job-token file is refused at once"
HOME="$d/dangling" RANK=0 MASTER_PORT=$port timeout 20 "$d/prog" "$d" >"$d/d4" 2>&1
check '[ $? = 1 ] && grep -q "refusing $d/dangling/.phalanx/job-token: a symbolic link that leads to no file" "$d/d4"' \
  "a job-token symlink to nothing is refused (it gave a store without a secret)"
HOME="$d/long" RANK=0 MASTER_PORT=$port timeout 20 "$d/prog" "$d" >"$d/d5" 2>&1
check '[ $? = 1 ] && grep -q "refusing $d/long/.phalanx/job-token: it is 1030 bytes long, a job secret at most 1024" "$d/d5"' \
  "a 1030-byte job-token file is refused, not cut to 1024"

# (e) several hosts without a secret: refused unless PHX_STORE_INSECURE=1
port=$((port + 1))
HOME=/nonexistent/phx-home RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_PORT=$port "$d/prog" "$d" >"$d/e1" 2>&1
check '[ $? != 0 ] && grep -q "spans hosts.*PHX_STORE_TOKEN.*~/.phalanx/job-token.*PHX_STORE_INSECURE=1" "$d/e1"' \
  "a multi-node job without a secret refuses to start, naming PHX_STORE_TOKEN and ~/.phalanx/job-token"
HOME=/nonexistent/phx-home RANK=0 MASTER_ADDR=192.0.2.1 MASTER_PORT=$port "$d/prog" "$d" >"$d/e2" 2>&1
check '[ $? != 0 ] && grep -q "MASTER_ADDR is not an address of this host" "$d/e2"' \
  "... also when MASTER_ADDR is another host's"
export LOCAL_WORLD_SIZE=1 LOCAL_RANK=0 PHX_STORE_INSECURE=1
start_job e
check '[ -e "$d/up" ]' "with PHX_STORE_INSECURE=1 it starts"
as_nobody "$d/prog" intruder $port >"$d/e3" 2>&1; rc=$?
if [ $rc = 77 ]; then skip "cannot run a process as nobody (not root, or no setpriv)"; else
  check '[ $rc = 0 ] && grep -q "^read" "$d/e3"' "... and its store is open to other uids, as documented"
fi
check 'end_job e' "... and the job exits 0"
unset PHX_STORE_INSECURE LOCAL_WORLD_SIZE LOCAL_RANK
for f in "$d"/*.r0 "$d"/*.r1 "$d"/[a-e][0-9]; do [ -e "$f" ] && sed "s|^|# $(basename "$f"): |" "$f"; done
exit 0
