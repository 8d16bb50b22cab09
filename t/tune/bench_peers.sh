#!/bin/sh
# make bench's fair peers (bench/peers.sh): the three header lines name
# the CPU as bench/cpu reads it and both sides' BLAS cores; where the
# peer's OpenBLAS runs a narrower core than the CPU's flags call for, it
# exports OPENBLAS_CORETYPE=<that core> and says so, in the header and in
# results.tsv; a value the user gave is kept. The peer is a stand-in
# script reporting a Prescott core, so this runs without PyTorch.
src=${top_srcdir:-.}
build=${top_builddir:-.}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
info=$(env -u OPENBLAS_CORETYPE "$build/bench/cpu") || { echo "1..0 # SKIP bench/cpu does not run"; exit 0; }
want=$(echo "$info" | sed -n 's/^blas_core_for_cpu=//p')
[ -n "$want" ] && [ "$want" != - ] || { echo "1..0 # SKIP a CPU without AVX2: no OpenBLAS core to ask for"; exit 0; }
echo "1..7"
cat >"$d/peer" <<'PEER'
#!/bin/sh
echo torch_version=9.9
echo torch_blas_lib=/fake/libopenblas.so
echo "torch_blas_core=${OPENBLAS_CORETYPE:-Prescott}"
echo torch_onednn=1.0
echo torch_cpu_capability=AVX2
echo torch_threads=1
PEER
chmod +x "$d/peer"
run() { # env assignments..., then the script's output in $d/out
    env "$@" TORCH_PY="$d/peer" bench_src="$src/bench" bench_build="$build" PHX_BENCH_TSV="$d/r.tsv" \
        sh -c 'set -e; : >"$PHX_BENCH_TSV"; . "$bench_src/peers.sh"; table demo; echo "exported=${OPENBLAS_CORETYPE:--}"' \
        >"$d/out" 2>&1
}
fam=$(echo "$info" | sed -n 's/^cpu_family=//p')
model=$(echo "$info" | sed -n 's/^cpu_model=//p')

run -u OPENBLAS_CORETYPE
grep -q "^exported=$want\$" "$d/out" && grep -q "set by bench/run.sh: OpenBLAS detected .* (PyTorch)" "$d/out" &&
    echo "ok 1 - a Prescott peer: OPENBLAS_CORETYPE=$want exported and said" ||
    { echo "not ok 1 - expected OPENBLAS_CORETYPE=$want set by run.sh"; sed 's/^/# /' "$d/out"; }
grep -q "family $fam model $model;" "$d/out" && echo "ok 2 - the cpu line names family $fam model $model" ||
    { echo "not ok 2 - no 'family $fam model $model'"; sed 's/^/# /' "$d/out"; }
grep -q "blas: Phalanx .* core $want; PyTorch 9.9 libopenblas.so core $want" "$d/out" &&
    echo "ok 3 - both sides asked again: core $want each" ||
    { echo "not ok 3 - blas line"; sed 's/^/# /' "$d/out"; }
grep -q "^env	OPENBLAS_CORETYPE	$want	set by run.sh	1\$" "$d/r.tsv" &&
    grep -q "^env	blas core	torch	$want	$("$build/bench/cpu" --level "$want")\$" "$d/r.tsv" && grep -q "^env	cpu	.*	model	$model\$" "$d/r.tsv" &&
    echo "ok 4 - results.tsv records the core, who set it and the CPU" ||
    { echo "not ok 4 - results.tsv"; sed 's/^/# /' "$d/r.tsv"; }

run OPENBLAS_CORETYPE=Prescott
grep -q "^exported=Prescott\$" "$d/out" && grep -q "OPENBLAS_CORETYPE=Prescott (given)" "$d/out" &&
    echo "ok 5 - a value given is kept and said to be given" ||
    { echo "not ok 5 - given value"; sed 's/^/# /' "$d/out"; }
grep -q "^env	OPENBLAS_CORETYPE	Prescott	set by run.sh	0\$" "$d/r.tsv" &&
    grep -q "^env	blas core	phalanx	Prescott	0\$" "$d/r.tsv" &&
    echo "ok 6 - results.tsv: not set by run.sh, Phalanx's core Prescott (level 0)" ||
    { echo "not ok 6 - results.tsv"; sed 's/^/# /' "$d/r.tsv"; }
n=$(awk -F'\t' 'NF != 5 || $5 !~ /^[0-9.]+$/' "$d/r.tsv" | wc -l)
[ "$n" = 0 ] && echo "ok 7 - every row has 5 fields and a numeric value (make plots reads them)" ||
    { echo "not ok 7 - $n malformed rows"; sed 's/^/# /' "$d/r.tsv"; }
