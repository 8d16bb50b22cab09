#!/bin/sh
# phxrun gives its ranks a random job token (PHX_STORE_TOKEN): the job's
# ranks meet through the store, while a process outside the job that knows
# the port is refused (with or without a guessed token); a user's token is
# passed on, and a process given it may connect.
top_builddir=${top_builddir:-.}
PHXRUN=$top_builddir/tools/phxrun
CLIENT=$top_builddir/t/world/store_client
T=$(mktemp -d "${TMPDIR:-/tmp}/phx-token.XXXXXX")
trap 'touch "$T/done"; rm -rf "$T"' EXIT
n=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi; }
check() { if eval "$1"; then ok 0 "$2"; else ok 1 "$2"; fi; }
# waits up to 30 s for a file
await() { i=0; while [ ! -s "$1" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done; [ -s "$1" ]; }

echo "1..11"
unset PHX_STORE_TOKEN RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

mkdir "$T/a"
"$PHXRUN" --nproc-per-node 2 --standalone "$CLIENT" job "$T/a" 2> "$T/a/err" &
job=$!
await "$T/a/port"; port=$(cat "$T/a/port"); token=$(cat "$T/a/token")
check '[ ${#token} = 64 ] && [ -z "$(printf %s "$token" | tr -d 0-9a-f)" ]' "phxrun gives the ranks a 64-hex-digit token"
env -u HOME "$CLIENT" outsider "$port" > "$T/out1" 2>&1
check '[ $? != 0 ] && grep -q "^refused: .*requires this job.s token and PHX_STORE_TOKEN is not set" "$T/out1"' \
  "an outsider without the token is refused, and told why"
check '! grep -q "hello from" "$T/out1"' "... it read nothing"
PHX_STORE_TOKEN=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef "$CLIENT" outsider "$port" > "$T/out2" 2>&1
check '[ $? != 0 ] && grep -q "^refused: .*refused this process.s PHX_STORE_TOKEN" "$T/out2"' \
  "an outsider with a guessed token is refused"
PHX_STORE_TOKEN=$token "$CLIENT" outsider "$port" > "$T/out3" 2>&1
check '[ $? = 0 ] && grep -q "read rank/1: hello from 1" "$T/out3"' "a process given the job's token may use the store"
touch "$T/a/done"
wait $job
ok $? "the job's ranks met through the store and exit 0"
check 'grep -q "PHX_STORE_TOKEN differs" "$T/a/err"' "rank 0's server warned about the guessed token"

mkdir "$T/b"
"$PHXRUN" --nproc-per-node 2 --standalone "$CLIENT" job "$T/b" 2> "$T/b/err" &
job=$!
await "$T/b/port"
check '[ "$(cat "$T/b/token")" != "$token" ]' "another job gets another token"
touch "$T/b/done"
wait $job

mkdir "$T/c"
PHX_STORE_TOKEN=user-chosen-secret "$PHXRUN" --nproc-per-node 2 --standalone "$CLIENT" job "$T/c" 2> "$T/c/err" &
job=$!
await "$T/c/port"
check '[ "$(cat "$T/c/token")" = user-chosen-secret ]' "a PHX_STORE_TOKEN set by the user is passed on"
touch "$T/c/done"
wait $job
ok $? "... and the job runs with it"

"$PHXRUN" --nproc-per-node 1 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port 1 true 2> "$T/warn"
check 'grep -q "without PHX_STORE_TOKEN.*export the same PHX_STORE_TOKEN on every node" "$T/warn"' \
  "several nodes without a token: phxrun warns"
