#!/bin/sh
# make plots: bench/allreduce at tiny sizes writes its bandwidth rows to
# $PHX_BENCH_TSV (one per size and backend, plus the memcpy ceiling);
# tools/phx-plot bench draws them and hand-written ratio rows into
# allreduce-world2.png and ratios.png; a malformed row names its line.
src=${top_srcdir:-.}
build=${top_builddir:-.}
plot="$src/tools/phx-plot"
command -v python3 >/dev/null || { echo "1..0 # SKIP no python3"; exit 0; }
command -v gnuplot >/dev/null || { echo "1..0 # SKIP no gnuplot (apt-get install gnuplot-nox)"; exit 0; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
echo "1..7"
# 4 B .. 1 KiB doubling = 9 sizes, threads and gloo (no torch): 18 rows + memcpy;
# 9 more for mpi where mpirun and the mpi plugin are there.
PHX_BENCH_TSV="$d/r.tsv" PHX_LOG=error "$build/bench/allreduce" --max 1024 --worlds 2 >"$d/bench.out" 2>&1
rc=$?
[ $rc = 0 ] && echo "ok 1 - bench/allreduce ran" || { echo "not ok 1 - bench/allreduce exited $rc"; sed 's/^/# /' "$d/bench.out"; }
rows=$(grep -c "^bench/allreduce	busbw world 2	[0-9]*	\(threads\|gloo\)	" "$d/r.tsv" 2>/dev/null)
mpi=$(grep -c "^bench/allreduce	busbw world 2	[0-9]*	mpi	" "$d/r.tsv" 2>/dev/null)
want_mpi=0
command -v mpirun >/dev/null 2>&1 && [ -e "$build/plugins/comm/mpi/.libs/phx-comm-mpi.so" ] && want_mpi=9
[ "$rows" = 18 ] && [ "$mpi" = $want_mpi ] &&
    echo "ok 2 - 18 bandwidth rows (9 sizes x threads, gloo), $want_mpi for mpi" ||
    echo "not ok 2 - $rows threads/gloo bandwidth rows, $mpi mpi rows (expected 18, $want_mpi)"
sizes=$(awk -F'\t' '$2 == "busbw world 2" && $4 == "gloo" {printf "%s ", $3}' "$d/r.tsv" 2>/dev/null)
[ "$sizes" = "4 8 16 32 64 128 256 512 1024 " ] && echo "ok 3 - the sizes are the table's" || echo "not ok 3 - sizes '$sizes'"
grep -q "^bench/allreduce	memcpy	64 MiB	GB/s	[0-9]" "$d/r.tsv" && echo "ok 4 - memcpy ceiling row" || echo "not ok 4 - no memcpy row"
printf 'bench/step\tphalanx/torch\tseed, 1 thread\tratio\t30\nbench/kernels\tphalanx/torch\tgelu\tratio\t0.8\n' >>"$d/r.tsv"
out=$("$plot" bench "$d/r.tsv" -d "$d" 2>&1); rc=$?
ok=0
for f in allreduce-world2.png ratios.png; do
    sig=$(head -c 8 "$d/$f" 2>/dev/null | od -An -tx1 | tr -d ' \n')
    [ "$sig" = 89504e470d0a1a0a ] && [ "$(wc -c <"$d/$f")" -gt 5000 ] && ok=$((ok + 1))
done
[ $rc = 0 ] && [ $ok = 2 ] && echo "ok 5 - allreduce-world2.png and ratios.png are PNGs with content" ||
    { echo "not ok 5 - rc $rc, $ok PNGs"; echo "$out" | sed 's/^/# /'; }
printf 'bench/x\tt\tr\tc\tnot-a-number\n' >>"$d/r.tsv"
bad=$(wc -l <"$d/r.tsv")
out=$("$plot" bench "$d/r.tsv" -d "$d" 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q "r.tsv:$bad: value 'not-a-number' is not a number" && echo "ok 6 - bad row named" ||
    { echo "not ok 6 - bad row (rc $rc)"; echo "$out" | sed 's/^/# /'; }
out=$("$plot" bench "$d/missing.tsv" 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q "run make bench first" && echo "ok 7 - a missing results file says to run make bench" ||
    { echo "not ok 7 - missing file (rc $rc)"; echo "$out" | sed 's/^/# /'; }
