#!/bin/sh
# The precision policies against our own fp32 on the models of bench/step
# (doc/guide/precision.md): for each model, ROUNDS alternating rounds of
# fp32, fp16 and bf16 (`bench/step --only M --precision P`, 1 s x 2 a
# point, at 1 and 2 threads), each policy's best rate at each thread count,
# and its ratio to fp32's at the same count and best against best. The MLP's
# rows are bench/amp's. Appends "bench/precision<TAB>policy/fp32<TAB>row
# <TAB>ratio<TAB>value" lines to $PHX_BENCH_TSV when it is set.
#   bench/precision.sh [ROUNDS] [MODELS]   (defaults: 3, "gpt cnn resnet")
set -e
rounds=${1:-3}
models=${2:-gpt cnn resnet}
step=${PHX_BENCH_STEP:-./bench/step}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for m in $models; do
    case $m in
    gpt) pat='^GPT 16x128 AdamW' ;;
    cnn) pat='^CNN b128' ;;
    resnet) pat='^ResNet b128' ;;
    mlp) pat='^MLP 784' ;;
    *) echo "bench/precision.sh: unknown model $m (gpt, cnn, resnet, mlp)" >&2; exit 2 ;;
    esac
    r=1
    while [ "$r" -le "$rounds" ]; do
        for p in fp32 fp16 bf16; do
            "$step" --only "$m" --precision "$p" --seconds 1 --repeats 2 2>&1 | grep -E "$pat" |
                awk -F'|' -v m="$m" -v p="$p" '{ n = split($1, a, " "); print m, p, a[n], $2 + 0 }' >>"$out"
        done
        r=$((r + 1))
    done
done
awk -v tsv="${PHX_BENCH_TSV:-}" '
{ k = $1 " " $2 " " $3; if ($4 > best[k]) best[k] = $4; seen[$1] = 1; order[++n] = $1 }
END {
    printf "%-7s %3s | %10s | %10s %6s | %10s %6s\n", "model", "thr", "fp32/s", "fp16/s", "ratio", "bf16/s", "ratio"
    for (i = 1; i <= n; i++) {
        m = order[i]; if (done[m]++) continue
        for (t = 1; t <= 2; t++) {
            f = best[m " fp32 " t]; h = best[m " fp16 " t]; b = best[m " bf16 " t]
            printf "%-7s %3d | %10.1f | %10.1f %5.2fx | %10.1f %5.2fx\n", m, t, f, h, (f > 0 ? h / f : 0), b, (f > 0 ? b / f : 0)
            if (tsv != "" && f > 0) {
                printf "bench/precision\tpolicy/fp32\t%s fp16, %d thread(s)\tratio\t%.6g\n", m, t, (h / f) >> tsv
                printf "bench/precision\tpolicy/fp32\t%s bf16, %d thread(s)\tratio\t%.6g\n", m, t, (b / f) >> tsv
            }
        }
        for (q = 0; q < 2; q++) {
            p = q ? "bf16" : "fp16"
            bf = best[m " fp32 1"] > best[m " fp32 2"] ? best[m " fp32 1"] : best[m " fp32 2"]
            bp = best[m " " p " 1"] > best[m " " p " 2"] ? best[m " " p " 1"] : best[m " " p " 2"]
            printf "%s %s best against fp32 best: %.2fx\n", m, p, (bf > 0 ? bp / bf : 0)
        }
    }
    print "target: fp16 and bf16 >= 1.0x our fp32 (issue 35; doc/guide/precision.md)"
}' "$out"
