#!/bin/sh
# examples/amp (the seed's mixed-precision program) under each policy:
# ten "Epoch [i/10], Loss: x.xxxx" lines, a loss that falls below 0.1, and
# PHX_PRECISION=nonsense failing with the list of policies.
b=${top_builddir:-.}
prog="$b/examples/amp"
echo "1..11"
n=0
for p in fp16 bf16 fp32; do
    out=$(PHX_PRECISION=$p "$prog" 2>&1); rc=$?
    n=$((n + 1))
    if [ $rc -eq 0 ] && echo "$out" | head -1 | grep -q "^Precision: $p "; then
        echo "ok $n - $p: runs and names the policy"
    else
        echo "not ok $n - $p: runs and names the policy (rc $rc)"; echo "$out" | sed 's/^/# /'
    fi
    n=$((n + 1))
    lines=$(echo "$out" | grep -cE '^Epoch \[([1-9]|10)/10\], Loss: [0-9]+\.[0-9]{4}$')
    if [ "$lines" -eq 10 ]; then echo "ok $n - $p: ten epoch lines"; else echo "not ok $n - $p: ten epoch lines (got $lines)"; fi
    n=$((n + 1))
    last=$(echo "$out" | sed -n 's/^Epoch \[10\/10\], Loss: //p')
    if [ -n "$last" ] && awk -v l="$last" 'BEGIN { exit !(l < 0.1) }'; then
        echo "ok $n - $p: final loss $last < 0.1"
    else
        echo "not ok $n - $p: final loss '$last' < 0.1"
    fi
done
out=$(PHX_PRECISION=nonsense "$prog" 2>&1); rc=$?
if [ $rc -ne 0 ]; then echo "ok 10 - PHX_PRECISION=nonsense fails"; else echo "not ok 10 - PHX_PRECISION=nonsense fails"; fi
# the list itself, before the loader's explanation in brackets (which also
# names what it found, so a list reading "none" once passed this check)
avail=$(echo "$out" | sed -n 's/.*available policies: \([^(]*\) (.*/\1/p')
if echo "$avail" | grep -q "fp16" && echo "$avail" | grep -q "bf16" && echo "$avail" | grep -q "fp32"; then
    echo "ok 11 - and lists the available policies"
else
    echo "not ok 11 - and lists the available policies (read '$avail')"; echo "$out" | sed 's/^/# /'
fi
