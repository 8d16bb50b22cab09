#!/bin/sh
# The store server's memory and CPU under the attacks of doc/reference/store.md
# ("Limits"), each in a fresh process: bench/store_attack.sh [PROGRAM]
# (default bench/store_attack of this build; give a copy linked against
# an older libphalanx to compare).
prog=${1:-./bench/store_attack}
for a in a b c d e; do
    timeout 60 "$prog" $a || echo "$a	failed (exit $?)"
done
