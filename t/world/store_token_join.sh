#!/bin/sh
# Ranks started by hand with different job tokens: the rank that hosts the
# store names the token when the others never join, and the refused rank
# is told why.
src=${top_srcdir:-.}
b=$(cd "${top_builddir:-.}" && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
echo "1..3"
if [ ! -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ]; then
    echo "ok 1 # SKIP no gloo plugin"; echo "ok 2 # SKIP no gloo plugin"; echo "ok 3 # SKIP no gloo plugin"; exit 0
fi
cat >"$d/join.c" <<'PROG'
#include <stdio.h>
#include <phalanx/phalanx.h>
int main(void)
{
    phx_comm *c = NULL;
    if (phx_comm_init(NULL, &c) != PHX_OK) {
        printf("failed: %s\n", phx_last_error());
        return 1;
    }
    printf("joined\n");
    phx_comm_free(c);
    return 0;
}
PROG
${CC:-cc} $PHX_SAN_FLAGS -I"$src/include" "$d/join.c" -L"$b/.libs" -lphalanx -Wl,-rpath,"$b/.libs" -o "$d/join" ||
    { echo "Bail out! cannot build the join program"; exit 1; }
port=$((20000 + $$ % 20000))
unset LOCAL_RANK LOCAL_WORLD_SIZE
export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port PHX_COMM=gloo PHX_TIMEOUT=3
start=$(date +%s)
RANK=0 PHX_STORE_TOKEN=token-of-job-a "$d/join" >"$d/r0" 2>&1 &
r0=$!
sleep 0.5
RANK=1 PHX_STORE_TOKEN=token-of-job-b "$d/join" >"$d/r1" 2>&1
wait $r0
took=$(($(date +%s) - start))
if grep -q "failed" "$d/r1" && grep -q "PHX_STORE_TOKEN" "$d/r1"; then
    echo "ok 1 - the refused rank is told its token differs"
else
    echo "not ok 1 - rank 1 says:"; sed 's/^/# /' "$d/r1"
fi
if grep -q "never joined" "$d/r0" && grep -q "another PHX_STORE_TOKEN" "$d/r0"; then
    echo "ok 2 - rank 0 names the token among the reasons rank 1 never joined"
else
    echo "not ok 2 - rank 0 says:"; sed 's/^/# /' "$d/r0"
fi
sed 's/^/# rank 0: /' "$d/r0"
[ "$took" -le 10 ] && echo "ok 3 - both end within PHX_TIMEOUT + a few seconds (${took} s)" ||
    echo "not ok 3 - took ${took} s"
