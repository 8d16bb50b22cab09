#!/bin/sh
# The first examples run: the seed program prints its 10 epoch lines in
# PyTorch's format with a falling loss; the custom module passes its
# finite-difference check and trains; a bad number for an option is
# refused before any work, and valid ones still run.
b=${top_builddir:-.}
echo "1..43"
out=$("$b/examples/linear_regression" 2>&1)
out1=$out
n=$(printf '%s\n' "$out" | grep -cE '^Epoch \[([1-9]|10)/10\], Loss: [0-9]+\.[0-9]{4}$')
if [ "$n" = 10 ]; then echo "ok 1 - linear_regression prints 10 'Epoch [i/10], Loss: x.xxxx' lines"
else echo "not ok 1 - linear_regression output"; printf '%s\n' "$out" | sed 's/^/# /'; fi
first=$(printf '%s\n' "$out" | grep '^Epoch' | sed -n '1s/.*Loss: //p')
last=$(printf '%s\n' "$out" | grep '^Epoch' | sed -n '10s/.*Loss: //p')
if awk "BEGIN { exit !($last < $first) }" 2>/dev/null; then echo "ok 2 - loss falls ($first -> $last)"
else echo "not ok 2 - loss falls ($first -> $last)"; fi
out=$("$b/examples/custom_module" 2>&1); rc=$?
if [ $rc = 0 ]; then echo "ok 3 - custom_module: FD check and training succeed"
else echo "not ok 3 - custom_module exited $rc"; printf '%s\n' "$out" | sed 's/^/# /'; fi
if printf '%s\n' "$out" | grep -q '1.fc1.weight 1.fc1.bias 1.fc2.weight'; then
    echo "ok 4 - the custom module's parameters have dotted names"
else echo "not ok 4 - dotted names"; fi
# The seed's lines: the device first ("Using CPU" here; "Using CUDA" on a
# GPU), and DataParallel's "Let's use N ..." before training on one batch
# drawn once, so full-batch SGD lowers the loss every epoch.
line1=$(printf '%s\n' "$out1" | sed -n 1p)
if [ "$line1" = "Using CPU" ] || [ "$line1" = "Using CUDA" ]; then echo "ok 5 - linear_regression starts with '$line1'"
else echo "not ok 5 - linear_regression's first line is '$line1'"; fi
out=$(PHX_NUM_THREADS=2 PHX_DEVICE=cpu "$b/examples/data_parallel" 2>&1)
if printf '%s\n' "$out" | sed -n 1p | grep -qx "Let's use 2 CPU replicas!"; then echo "ok 6 - data_parallel: Let's use 2 CPU replicas!"
else echo "not ok 6 - data_parallel's first line"; printf '%s\n' "$out" | sed 's/^/# /'; fi
losses=$(printf '%s\n' "$out" | sed -n 's/^Epoch \[[0-9]*\/10\], Loss: //p' | tr '\n' ' ')
if [ "$(echo $losses | wc -w)" = 10 ] && echo "$losses" | awk '{ for (i = 2; i <= NF; i++) if ($i >= $(i-1)) exit 1 }'; then
    echo "ok 7 - data_parallel's loss falls every epoch on its one batch ($losses)"
else echo "not ok 7 - data_parallel losses: $losses"; fi
# --metrics writes one JSON object per epoch; --log-every prints whole step
# lines with an ETA into a pipe, and rewrites one line in place on a terminal.
m=$(mktemp)
out=$("$b/examples/linear_regression" --metrics "$m" --log-every 2 2>&1)
n=$(grep -c '^{"time":[0-9.]*,"step":[0-9]*,"epoch":[0-9]*,"loss":[0-9.e-]*,"lr":0.01}$' "$m")
[ "$n" = 10 ] && echo "ok 8 - --metrics: 10 JSON Lines records" || { echo "not ok 8 - --metrics wrote $n records"; sed 's/^/# /' "$m"; }
rm -f "$m"
n=$(printf '%s\n' "$out" | grep -cE '^step (2|4|6|8)/10 loss [0-9.]+ elapsed [0-9]+:[0-9]{2} ETA [0-9]+:[0-9]{2}$')
[ "$n" = 4 ] && echo "ok 9 - --log-every 2 in a pipe: 4 whole step lines with ETA" ||
    { echo "not ok 9 - step lines: $n"; printf '%s\n' "$out" | sed 's/^/# /'; }
if command -v script >/dev/null; then
    out=$(script -qec "$b/examples/linear_regression --log-every 1" /dev/null 2>&1 | od -c | tr -s ' ' | tr -d '\n')
    case $out in
    *'\r 033 [ K s t e p'*) echo "ok 10 - on a terminal the step line is rewritten in place" ;;
    *) echo "not ok 10 - no in-place step line on a terminal" ;;
    esac
else
    echo "ok 10 # SKIP no script(1) for a pseudo-terminal"
fi
# Every example takes --help and the progress options (README.md): its
# usage names --log-every, --metrics and --tensorboard, and it exits 0.
missing=""
for e in linear_regression custom_module fashion_mnist data_parallel ddp amp cnn gpt resnet two_input; do
    u=$("$b/examples/$e" --help 2>&1) || { missing="$missing $e(--help failed)"; continue; }
    for o in --log-every --metrics --tensorboard; do
        printf '%s\n' "$u" | grep -q -- "$o" || missing="$missing $e($o)"
    done
done
if [ -z "$missing" ]; then echo "ok 11 - every example's --help names --log-every, --metrics and --tensorboard"
else echo "not ok 11 - options missing from --help:$missing"; fi
# A bad number is refused before any work: exit status 2 and one line
# naming the option, the value and what it takes. The data folder does not
# exist, so a run that got past its options would say something else.
n=11
nodata=$(mktemp -d)
refused() { # example, its expected message, options
    e=$1 msg=$2
    shift 2
    n=$((n + 1))
    out=$(PHX_FASHION_MNIST=$nodata/none "$b/examples/$e" "$@" 2>&1); rc=$?
    if [ $rc = 2 ] && [ "$out" = "$e: $msg" ]; then echo "ok $n - $e $*: status 2, '$msg'"
    else echo "not ok $n - $e $*: status $rc, expected 2 and '$e: $msg'"; printf '%s\n' "$out" | sed 's/^/# /'; fi
}
for e in fashion_mnist cnn; do
    refused $e "--lr: 'abc' is not a number" --epochs 1 --lr abc
    refused $e "--lr: 0, expected a finite number > 0" --lr 0
    refused $e "--lr: inf, expected a finite number > 0" --lr inf
    refused $e "--epochs: 'abc' is not an integer" --epochs abc
    refused $e "--epochs: -3, expected an integer >= 0" --epochs -3
    refused $e "--batch: '64x' is not an integer" --batch 64x
    refused $e "--batch: 0, expected a positive integer" --batch 0
    refused $e "--seed: 'xyz' is not an integer" --seed xyz
    refused $e "--seed: -1, expected an integer in 0..18446744073709551615" --seed -1
    refused $e "--zero: 'x' is not an integer" --zero x
done
refused fashion_mnist "--workers: 'abc' is not an integer" --workers abc
refused fashion_mnist "--workers: -1, expected an integer >= 0" --workers -1
refused cnn "--epochs: 'abc' is not an integer" --epochs abc --lr xyz --dropout oops
refused cnn "--dropout: 'oops' is not a number" --dropout oops
refused cnn "--dropout: 1, expected a number in [0, 1)" --dropout 1
refused cnn "--train-rows: -5, expected an integer >= 0" --train-rows -5
refused cnn "--schedule-epochs: '2.5' is not an integer" --schedule-epochs 2.5
refused two_input "--epochs: 0, expected a positive integer" --epochs 0
refused two_input "--train-rows: '1k' is not an integer" --train-rows 1k
refused gpt "--dropout: 1, expected a number in [0, 1)" --dropout 1
rmdir "$nodata"
# Values at the ends of their ranges still run: the largest seed, --epochs
# 0 (evaluation only), a dropout of 0.
out=$("$b/examples/fashion_mnist" --epochs 0 --seed 18446744073709551615 --lr 1e-3 --batch 256 --workers 1 2>&1); rc=$?
if printf '%s\n' "$out" | grep -q 'install Debian'; then echo "ok 42 # SKIP no Fashion-MNIST"
elif [ $rc = 0 ] && printf '%s\n' "$out" | grep -q '^Test accuracy: 0\.[0-9]*$'; then
    echo "ok 42 - fashion_mnist --epochs 0 --seed 18446744073709551615 evaluates"
else echo "not ok 42 - fashion_mnist --epochs 0 (status $rc)"; printf '%s\n' "$out" | sed 's/^/# /'; fi
out=$("$b/examples/cnn" --epochs 1 --train-rows 512 --batch 64 --lr 1e-3 --dropout 0 --seed 3 2>&1); rc=$?
if printf '%s\n' "$out" | grep -q 'install Debian'; then echo "ok 43 # SKIP no Fashion-MNIST"
elif [ $rc = 0 ] && printf '%s\n' "$out" | grep -q '^Epoch \[1/1\], Loss: [0-9.]*,' &&
    printf '%s\n' "$out" | grep -q '^Test accuracy: 0\.[0-9]*$'; then
    echo "ok 43 - cnn --train-rows 512 --dropout 0 trains one epoch and evaluates"
else echo "not ok 43 - cnn --dropout 0 (status $rc)"; printf '%s\n' "$out" | sed 's/^/# /'; fi
