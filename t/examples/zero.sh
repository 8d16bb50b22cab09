#!/bin/sh
# examples/gpt, fashion_mnist, cnn and resnet with --zero (gloo processes
# through phxrun; Fashion-MNIST is a small synthetic set in IDX files, so
# the test needs no dataset package):
#   at world 2, --zero 1, 2 and 3 print the per-step losses of
#     --zero 0 (rank 0's, from --metrics: the f32 loss to 9 digits)
#     within 1e-5 relative:
#     the same data order, so they differ only by rounding (ZeRO-2 sums
#     the gradients in another order, and clips with a norm summed over
#     the shards), which AdamW carries into the next steps' losses at
#     about 1e-7 relative over these few steps;
#   a run saved with --nproc-per-node 4 (--zero 2) resumes with 2 ranks
#     (--zero 1) and with 1 process, and prints the losses of the run that
#     was not interrupted at the same world size and global batch, within
#     1e-5: step s's global batch is the same rows at any world size with
#     the same world x batch, and the sharded checkpoint brings back the
#     parameters, AdamW's state and step count; the distance is the
#     rounding of summing the gradients over 4 ranks rather than 2 or 1;
#   the save writes one shard per rank (and --save DIR2 the same);
#   gpt saved at world 4 under --zero 3 (FSDP, a unit per block) resumes
#     at world 2 under --zero 3 with the uninterrupted run's losses;
#   examples/cnn and examples/resnet (BatchNorm, whose num_batches_tracked
#     buffers are i64) at world 2: --zero 1, 2 and 3 print --zero 0's
#     losses; resnet --zero 3 saved after epoch 1 of 2 and resumed prints
#     the uninterrupted run's losses, and saved at 4 ranks (--sync-bn)
#     resumes at 2 with the uninterrupted 2-rank run's first loss (later
#     ones part by rounding that the network amplifies);
#   --zero 4 and --zero x are refused naming the value, and --zero with
#     --dp (one process) naming both.
b=${top_builddir:-.}
s=${top_srcdir:-.}
run="$b/tools/phxrun"
[ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] && [ -x "$run" ] || { echo "1..0 # SKIP built without Gloo or phxrun"; exit 0; }
py=$(command -v python3) || { echo "1..0 # SKIP no python3 to write the synthetic IDX files"; exit 0; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
export PHX_COMM=gloo PHX_TIMEOUT=${PHX_TIMEOUT:-60}
n=0
result() { n=$((n + 1)); if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi; }
note() { sed 's/^/# /' "$1" | tail -n 12; }
# steps FILE: "step loss" per line of a --metrics file
steps() { sed -n 's/.*"step":\([0-9]*\).*"loss":\([^,}]*\).*/\1 \2/p' "$1"; }
# close A B FROM TO: A's and B's losses of steps FROM..TO, all present, equal
# within 1e-5 relative; prints the largest relative distance
close() {
    steps "$1" >"$tmp/a"
    steps "$2" >"$tmp/b"
    awk -v from="$3" -v to="$4" 'NR == FNR { a[$1] = $2; next }
        { b[$1] = $2 }
        END {
            e = 0; bad = 0
            for (s = from; s <= to; s++) {
                if (!(s in a) || !(s in b)) { bad = 1; continue }
                d = a[s] - b[s]; if (d < 0) d = -d
                m = b[s] < 0 ? -b[s] : b[s]
                if (m < 1e-30) m = 1e-30
                if (d / m > e) e = d / m
            }
            printf "%.2g\n", bad ? -1 : e
            exit !(bad == 0 && e <= 1e-5)
        }' "$tmp/a" "$tmp/b"
}
# moves LOSSFILE: the losses are not all one value (a comparison of numbers that moved)
moves() { steps "$1" | awk 'NR == 1 { f = $2 } $2 != f { m = 1 } END { exit !m }'; }
echo "1..18"

# ---- examples/gpt
cat "$s"/doc/*.md "$s"/README.md >"$tmp/text"
gpt="$b/examples/gpt"
small="--context 16 --layers 2 --heads 2 --dim 32 --eval-every 0 --eval-batches 1 --sample 0 --print-every 4 --data $tmp/text"
for z in 0 1 2 3; do
    "$run" --standalone --nproc-per-node 2 "$gpt" $small --batch 4 --steps 8 --zero $z --metrics "$tmp/g$z.jsonl" >"$tmp/g$z.out" 2>&1
    echo $? >"$tmp/g$z.rc"
done
for z in 1 2 3; do
    e=$(close "$tmp/g$z.jsonl" "$tmp/g0.jsonl" 1 8)
    rc=$?
    [ "$(cat "$tmp/g$z.rc")" = 0 ] && [ "$(cat "$tmp/g0.rc")" = 0 ] && moves "$tmp/g0.jsonl" || rc=1
    result $rc "gpt, 2 ranks, --zero $z: the 8 losses of --zero 0 within 1e-5 (largest relative distance $e)"
    [ $rc -eq 0 ] || { note "$tmp/g$z.out"; note "$tmp/g0.out"; }
done
# saved at world 4 after 4 of 8 steps (the lr schedule of 8), resumed at 2 and 1
"$run" --standalone --nproc-per-node 4 "$gpt" $small --batch 2 --steps 4 --schedule-steps 8 --zero 2 \
    --resume "$tmp/gck" >"$tmp/gs.out" 2>&1
rc=$?
cp -r "$tmp/gck" "$tmp/gck1"
[ $rc -eq 0 ] && grep -q "saved $tmp/gck (sharded over 4 rank(s))" "$tmp/gs.out" && [ -e "$tmp/gck/index.json" ]
result $? "gpt --nproc-per-node 4 --zero 2 --resume DIR: 4 steps, a sharded checkpoint of 4 shards"
[ $rc -eq 0 ] || note "$tmp/gs.out"
"$run" --standalone --nproc-per-node 2 "$gpt" $small --batch 4 --steps 8 --zero 1 --resume "$tmp/gck" \
    --metrics "$tmp/gr2.jsonl" >"$tmp/gr2.out" 2>&1
rc=$?
"$run" --standalone --nproc-per-node 2 "$gpt" $small --batch 4 --steps 8 --zero 1 --resume "$tmp/gref2" \
    --metrics "$tmp/gref2.jsonl" >"$tmp/gref2.out" 2>&1 || rc=1
e=$(close "$tmp/gr2.jsonl" "$tmp/gref2.jsonl" 5 8) || rc=1
grep -q "resumed $tmp/gck at step 4" "$tmp/gr2.out" && [ "$(steps "$tmp/gr2.jsonl" | wc -l)" -eq 4 ] || rc=1
result $rc "gpt: resumed with 2 ranks (--zero 1): steps 5-8 print the uninterrupted 2-rank run's losses within 1e-5 ($e)"
[ $rc -eq 0 ] || { note "$tmp/gr2.out"; note "$tmp/gref2.out"; }
"$gpt" $small --batch 8 --steps 8 --zero 1 --resume "$tmp/gck1" --metrics "$tmp/gr1.jsonl" >"$tmp/gr1.out" 2>&1
rc=$?
"$gpt" $small --batch 8 --steps 8 --zero 1 --resume "$tmp/gref1" --metrics "$tmp/gref1.jsonl" >"$tmp/gref1.out" 2>&1 || rc=1
e=$(close "$tmp/gr1.jsonl" "$tmp/gref1.jsonl" 5 8) || rc=1
grep -q "resumed $tmp/gck1 at step 4" "$tmp/gr1.out" || rc=1
result $rc "gpt: resumed in 1 process: steps 5-8 print the uninterrupted 1-process run's losses within 1e-5 ($e)"
[ $rc -eq 0 ] || { note "$tmp/gr1.out"; note "$tmp/gref1.out"; }
# ZeRO-3: saved at world 4 after 4 steps, resumed at world 2, both under --zero 3
"$run" --standalone --nproc-per-node 4 "$gpt" $small --batch 2 --steps 4 --schedule-steps 8 --zero 3 \
    --resume "$tmp/gck3" >"$tmp/gs3.out" 2>&1 &&
    "$run" --standalone --nproc-per-node 2 "$gpt" $small --batch 4 --steps 8 --zero 3 --resume "$tmp/gck3" \
        --metrics "$tmp/gr3.jsonl" >"$tmp/gr3.out" 2>&1
rc=$?
e=$(close "$tmp/gr3.jsonl" "$tmp/gref2.jsonl" 5 8) || rc=1
grep -q "resumed $tmp/gck3 at step 4" "$tmp/gr3.out" || rc=1
result $rc "gpt --zero 3: saved at 4 ranks, resumed at 2: steps 5-8 print the uninterrupted run's losses within 1e-5 ($e)"
[ $rc -eq 0 ] || { note "$tmp/gs3.out"; note "$tmp/gr3.out"; }

# ---- examples/fashion_mnist on 256 + 64 synthetic images
"$py" - "$tmp/fm" <<'PY' || { echo "Bail out! writing the synthetic IDX files"; exit 1; }
import gzip, os, struct, sys
d = sys.argv[1]
os.makedirs(d)
def write(name, magic, dims, data):
    with gzip.open(os.path.join(d, name), "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", x) for x in dims) + bytes(data))
state = 12345
def rnd():
    global state
    state = (state * 1103515245 + 12345) % 2**31
    return state >> 16
for prefix, n in (("train", 256), ("t10k", 64)):
    img, lab = [], []
    for i in range(n):
        c = rnd() % 10
        px = [(rnd() % 64) + (160 if (p // 78) == c else 0) for p in range(784)]
        img += [min(v, 255) for v in px]
        lab.append(c)
    write(prefix + "-images-idx3-ubyte.gz", 0x803, (n, 28, 28), img)
    write(prefix + "-labels-idx1-ubyte.gz", 0x801, (n,), lab)
PY
export PHX_FASHION_MNIST="$tmp/fm"
fm="$b/examples/fashion_mnist"
for z in 0 1 2 3; do
    "$run" --standalone --nproc-per-node 2 "$fm" --epochs 2 --batch 16 --zero $z --metrics "$tmp/f$z.jsonl" >"$tmp/f$z.out" 2>&1
    echo $? >"$tmp/f$z.rc"
done
for z in 1 2 3; do
    e=$(close "$tmp/f$z.jsonl" "$tmp/f0.jsonl" 1 16)
    rc=$?
    [ "$(cat "$tmp/f$z.rc")" = 0 ] && [ "$(cat "$tmp/f0.rc")" = 0 ] && moves "$tmp/f0.jsonl" || rc=1
    result $rc "fashion_mnist, 2 ranks, --zero $z: the 16 losses of --zero 0 within 1e-5 ($e)"
    [ $rc -eq 0 ] || { note "$tmp/f$z.out"; note "$tmp/f0.out"; }
done
"$run" --standalone --nproc-per-node 4 "$fm" --epochs 1 --batch 8 --zero 2 --resume "$tmp/fck" --save "$tmp/fsave" \
    >"$tmp/fs.out" 2>&1
rc=$?
cp -r "$tmp/fck" "$tmp/fck1"
[ $rc -eq 0 ] && [ -e "$tmp/fck/index.json" ] && [ "$(cat "$tmp/fck/epoch")" = 1 ] && [ -e "$tmp/fsave/index.json" ] &&
    [ "$(cat "$tmp/fsave/epoch")" = 1 ] && [ "$(ls "$tmp/fck" | grep -c '^shard-[0-3]-of-4\.')" -eq 4 ]
result $? "fashion_mnist --nproc-per-node 4 --zero 2 --resume DIR --save DIR2: epoch 1 saved sharded (4 shards) in both"
[ $rc -eq 0 ] || note "$tmp/fs.out"
"$run" --standalone --nproc-per-node 2 "$fm" --epochs 2 --batch 16 --zero 1 --resume "$tmp/fck" \
    --metrics "$tmp/fr2.jsonl" >"$tmp/fr2.out" 2>&1
rc=$?
e=$(close "$tmp/fr2.jsonl" "$tmp/f1.jsonl" 9 16) || rc=1
grep -q "loaded $tmp/fck (epoch 1, 8 optimizer steps)" "$tmp/fr2.out" && grep -q "^Epoch \[2/2\]" "$tmp/fr2.out" || rc=1
result $rc "fashion_mnist: resumed with 2 ranks (--zero 1): epoch 2 prints the uninterrupted 2-rank run's losses within 1e-5 ($e)"
[ $rc -eq 0 ] || note "$tmp/fr2.out"
"$fm" --epochs 2 --batch 32 --zero 1 --resume "$tmp/fck1" --metrics "$tmp/fr1.jsonl" >"$tmp/fr1.out" 2>&1
rc=$?
"$fm" --epochs 2 --batch 32 --zero 1 --metrics "$tmp/fref1.jsonl" >"$tmp/fref1.out" 2>&1 || rc=1
e=$(close "$tmp/fr1.jsonl" "$tmp/fref1.jsonl" 9 16) || rc=1
grep -q "loaded $tmp/fck1 (epoch 1, 8 optimizer steps)" "$tmp/fr1.out" || rc=1
result $rc "fashion_mnist: resumed in 1 process: epoch 2 prints the uninterrupted run's losses within 1e-5 ($e)"
[ $rc -eq 0 ] || { note "$tmp/fr1.out"; note "$tmp/fref1.out"; }

# ---- examples/cnn and examples/resnet (BatchNorm: i64 num_batches_tracked buffers) on the same images
cnn="$b/examples/cnn"
rn="$b/examples/resnet"
for ex in cnn resnet; do
    for z in 0 1 2 3; do
        "$run" --standalone --nproc-per-node 2 "$b/examples/$ex" --epochs 1 --batch 16 --zero $z \
            --metrics "$tmp/$ex$z.jsonl" >"$tmp/$ex$z.out" 2>&1
        echo $? >"$tmp/$ex$z.rc"
    done
    rc=0
    worst=
    for z in 1 2 3; do
        e=$(close "$tmp/$ex$z.jsonl" "$tmp/${ex}0.jsonl" 1 8) || rc=1
        [ "$(cat "$tmp/$ex$z.rc")" = 0 ] || rc=1
        worst="${worst:+$worst }$e"
    done
    [ "$(cat "$tmp/${ex}0.rc")" = 0 ] && moves "$tmp/${ex}0.jsonl" || rc=1
    result $rc "$ex, 2 ranks, --zero 1, 2 and 3: the 8 losses of --zero 0 within 1e-5 ($worst)"
    [ $rc -eq 0 ] || for z in 0 1 2 3; do note "$tmp/$ex$z.out"; done
done
# resnet --zero 3: epoch 1 of a 2-epoch schedule saved, resumed for epoch 2 at the same world: the
# uninterrupted run's losses (the schedule's base is the configured lr, not the restored one)
"$run" --standalone --nproc-per-node 2 "$rn" --epochs 1 --schedule-epochs 2 --batch 16 --zero 3 --resume "$tmp/rck" \
    >"$tmp/rs.out" 2>&1 &&
    "$run" --standalone --nproc-per-node 2 "$rn" --epochs 2 --batch 16 --zero 3 --resume "$tmp/rck" \
        --metrics "$tmp/rr.jsonl" >"$tmp/rr.out" 2>&1 &&
    "$run" --standalone --nproc-per-node 2 "$rn" --epochs 2 --batch 16 --zero 3 --metrics "$tmp/rref.jsonl" \
        >"$tmp/rref.out" 2>&1
rc=$?
e=$(close "$tmp/rr.jsonl" "$tmp/rref.jsonl" 9 16) || rc=1
grep -q "loaded $tmp/rck (epoch 1, 8 optimizer steps)" "$tmp/rr.out" && [ "$(cat "$tmp/rck/epoch")" = 2 ] || rc=1
result $rc "resnet --zero 3: epoch 1 saved, resumed for epoch 2: the uninterrupted run's 8 losses within 1e-5 ($e)"
[ $rc -eq 0 ] || { note "$tmp/rs.out"; note "$tmp/rr.out"; }
# saved at 4 ranks (--sync-bn: batch statistics over the global batch at any world), resumed at 2:
# the first loss after the resume (the restored parameters; later steps part by rounding, which this
# BatchNorm network amplifies) is the uninterrupted 2-rank run's within 1e-4
"$run" --standalone --nproc-per-node 4 "$rn" --sync-bn --epochs 1 --schedule-epochs 2 --batch 8 --zero 3 \
    --resume "$tmp/rck4" >"$tmp/rs4.out" 2>&1 &&
    [ "$(ls "$tmp/rck4" | grep -c '^shard-[0-3]-of-4\.')" -eq 4 ] &&
    "$run" --standalone --nproc-per-node 2 "$rn" --sync-bn --epochs 2 --batch 16 --zero 3 --resume "$tmp/rck4" \
        --metrics "$tmp/rr4.jsonl" >"$tmp/rr4.out" 2>&1 &&
    "$run" --standalone --nproc-per-node 2 "$rn" --sync-bn --epochs 2 --batch 16 --zero 3 \
        --metrics "$tmp/rref4.jsonl" >"$tmp/rref4.out" 2>&1
rc=$?
steps "$tmp/rr4.jsonl" >"$tmp/a4"
steps "$tmp/rref4.jsonl" >"$tmp/b4"
e=$(awk 'NR == FNR { a[$1] = $2; next } { b[$1] = $2 }
    END { if (!(9 in a) || !(9 in b)) { print -1; exit 1 } d = a[9] - b[9]; if (d < 0) d = -d
          printf "%.2g\n", d / b[9]; exit !(d / b[9] <= 1e-4) }' "$tmp/a4" "$tmp/b4") || rc=1
grep -q "loaded $tmp/rck4 (epoch 1, 8 optimizer steps)" "$tmp/rr4.out" || rc=1
result $rc "resnet --zero 3 --sync-bn: saved at 4 ranks (4 shards), resumed at 2: the first loss after it within 1e-4 ($e)"
[ $rc -eq 0 ] || { note "$tmp/rs4.out"; note "$tmp/rr4.out"; }

# ---- bad levels
out=$("$gpt" --zero 4 --steps 1 2>&1); rc=$?
out2=$("$fm" --zero x 2>&1); rc2=$?
out3=$("$rn" --zero 1 --dp 2>&1); rc3=$?
[ $rc -eq 2 ] && [ $rc2 -eq 2 ] && [ $rc3 -eq 2 ] && echo "$out" | grep -q -- "--zero: 4, expected 0" &&
    echo "$out2" | grep -q -- "--zero: 'x' is not an integer" && echo "$out3" | grep -q -- "--dp (one process) is not combined"
result $? "--zero 4, --zero x and resnet --zero 1 --dp: exit 2 naming what is wrong"
