#!/bin/sh
# examples/fashion_mnist --metrics m --tensorboard d for a short run (1
# epoch, batch 512), then resumed for a second epoch from its checkpoint,
# appending to both; TensorBoard's own EventAccumulator reads the folder
# and its scalars equal the JSON Lines file's numbers (t/train/tb_read.py),
# and the resumed run continues the steps and the time axis. Skips without
# the Fashion-MNIST data or a Python that imports tensorboard
# (pip install tensorboard; TENSORBOARD_PYTHON names the interpreter).
b=${top_builddir:-.}
s=${top_srcdir:-.}
data=${PHX_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
echo "1..10"
if [ ! -r "$data/train-images-idx3-ubyte.gz" ]; then
    echo "ok 1 # SKIP no Fashion-MNIST data in $data (apt-get install dataset-fashion-mnist)"
    i=2; while [ $i -le 10 ]; do echo "ok $i # SKIP no data"; i=$((i + 1)); done; exit 0
fi
py=
for p in "${TENSORBOARD_PYTHON:-}" /usr/bin/python3 /opt/phx-tb/bin/python python3; do
    [ -n "$p" ] && "$p" -c 'import tensorboard.backend.event_processing.event_accumulator' 2>/dev/null && { py=$p; break; }
done
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
export PHX_DEVICE=cpu PHX_PRECISION=fp32
"$b/examples/fashion_mnist" --epochs 1 --batch 512 --resume "$d/ck.st" --metrics "$d/m.jsonl" --tensorboard "$d/tb" \
    >"$d/out1" 2>&1
rc1=$?
n1=$(wc -l <"$d/m.jsonl" 2>/dev/null || echo 0)
"$b/examples/fashion_mnist" --epochs 2 --batch 512 --resume "$d/ck.st" --metrics "$d/m.jsonl" --tensorboard "$d/tb" \
    >"$d/out2" 2>&1
rc2=$?
[ $rc1 = 0 ] && [ $rc2 = 0 ] && echo "ok 1 - two runs (the second resumed) exit 0" ||
    { echo "not ok 1 - exits $rc1 $rc2"; sed 's/^/# /' "$d/out1" "$d/out2" | tail -8; }
ls "$d/tb" | grep -q '^events\.out\.tfevents\.[0-9]*\.' && [ "$(ls "$d/tb" | wc -l)" = 2 ] &&
    echo "ok 2 - one events.out.tfevents.<time>.<host>... file per run" || { echo "not ok 2"; ls "$d/tb" | sed 's/^/# /'; }
# the second run's first step follows the first run's last
last1=$(sed -n "${n1}p" "$d/m.jsonl" | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
first2=$(sed -n "$((n1 + 1)),\$p" "$d/m.jsonl" | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | head -1)
[ -n "$last1" ] && [ "$first2" = $((last1 + 1)) ] && echo "ok 3 - the resumed run's steps continue ($last1 -> $first2)" ||
    echo "not ok 3 - steps $last1 then $first2"
if [ -z "$py" ]; then
    i=4; while [ $i -le 10 ]; do echo "ok $i # SKIP no Python with tensorboard (pip install tensorboard; TENSORBOARD_PYTHON)"; i=$((i + 1)); done
    exit 0
fi
"$py" "$s/t/train/tb_read.py" "$d/m.jsonl" "$d/tb" 2>"$d/py" |
    awk '/^(not )?ok [0-9]/ { n = $0 ~ /^not/ ? 3 : 2; $n = $n + 3 } { print }' >"$d/tap"
n=$(grep -c '^\(not \)\?ok' "$d/tap")
cat "$d/tap"
i=$((n + 4)); while [ $i -le 10 ]; do echo "not ok $i - tensorboard.py stopped early"; i=$((i + 1)); done
[ -s "$d/py" ] && sed 's/^/# /' "$d/py" | tail -15
exit 0
