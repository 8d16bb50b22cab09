#!/bin/sh
# tools/phx-plot: two metrics files become one PNG; a missing key and a
# missing gnuplot are clear errors; a malformed line names file and line.
src=${top_srcdir:-.}
plot="$src/tools/phx-plot"
command -v python3 >/dev/null || { echo "1..0 # SKIP no python3"; exit 0; }
command -v gnuplot >/dev/null || { echo "1..0 # SKIP no gnuplot (apt-get install gnuplot-nox)"; exit 0; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
echo "1..7"
i=0
while [ $i -lt 40 ]; do
    echo "{\"time\":$i.5,\"step\":$((i * 10)),\"loss\":$((100 - i)).25,\"samples_per_s\":$((1000 + i))}"
    i=$((i + 1))
done >"$d/a.jsonl"
sed 's/"loss":/"loss":1/' "$d/a.jsonl" >"$d/b.jsonl"
out=$("$plot" "$d/a.jsonl" "$d/b.jsonl" -o "$d/loss.png" 2>&1); rc=$?
[ $rc = 0 ] && echo "ok 1 - two runs plotted" || { echo "not ok 1 - phx-plot exited $rc"; echo "$out" | sed 's/^/# /'; }
sig=$(head -c 8 "$d/loss.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')
[ "$sig" = 89504e470d0a1a0a ] && echo "ok 2 - the output is a PNG" || echo "not ok 2 - PNG signature '$sig'"
size=$(wc -c <"$d/loss.png" 2>/dev/null || echo 0)
[ "$size" -gt 5000 ] && echo "ok 3 - the PNG has content ($size bytes)" || echo "not ok 3 - PNG of $size bytes"
echo "$out" | grep -q 'panels: loss; samples_per_s' && echo "ok 4 - loss and throughput panels" ||
    { echo "not ok 4 - panels"; echo "$out" | sed 's/^/# /'; }
out=$("$plot" "$d/a.jsonl" -o "$d/x.png" --y nothere 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q "no record has the key nothere" && echo "ok 5 - unknown key named" ||
    { echo "not ok 5 - unknown key (rc $rc)"; echo "$out" | sed 's/^/# /'; }
echo '{"step": 1, "loss": ' >>"$d/a.jsonl"
out=$("$plot" "$d/a.jsonl" -o "$d/x.png" 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q "a.jsonl:41: not a JSON object" && echo "ok 6 - bad line named" ||
    { echo "not ok 6 - bad line (rc $rc)"; echo "$out" | sed 's/^/# /'; }
mkdir "$d/bin"
ln -s "$(python3 -c 'import sys; print(sys.executable)')" "$d/bin/python3"
out=$(PATH="$d/bin" "$d/bin/python3" "$plot" "$d/b.jsonl" -o "$d/y.png" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "gnuplot not found" && echo "ok 7 - missing gnuplot explained" ||
    { echo "not ok 7 - missing gnuplot (rc $rc)"; echo "$out" | sed 's/^/# /'; }
