#!/bin/sh
# The first examples run: the seed program prints its 10 epoch lines in
# PyTorch's format with a falling loss; the custom module passes its
# finite-difference check and trains.
b=${top_builddir:-.}
echo "1..4"
out=$("$b/examples/linear_regression" 2>&1)
n=$(printf '%s\n' "$out" | grep -cE '^Epoch \[([1-9]|10)/10\], Loss: [0-9]+\.[0-9]{4}$')
if [ "$n" = 10 ]; then echo "ok 1 - linear_regression prints 10 'Epoch [i/10], Loss: x.xxxx' lines"
else echo "not ok 1 - linear_regression output"; printf '%s\n' "$out" | sed 's/^/# /'; fi
first=$(printf '%s\n' "$out" | sed -n '1s/.*Loss: //p')
last=$(printf '%s\n' "$out" | sed -n '10s/.*Loss: //p')
if awk "BEGIN { exit !($last < $first) }" 2>/dev/null; then echo "ok 2 - loss falls ($first -> $last)"
else echo "not ok 2 - loss falls ($first -> $last)"; fi
out=$("$b/examples/custom_module" 2>&1); rc=$?
if [ $rc = 0 ]; then echo "ok 3 - custom_module: FD check and training succeed"
else echo "not ok 3 - custom_module exited $rc"; printf '%s\n' "$out" | sed 's/^/# /'; fi
if printf '%s\n' "$out" | grep -q '1.fc1.weight 1.fc1.bias 1.fc2.weight'; then
    echo "ok 4 - the custom module's parameters have dotted names"
else echo "not ok 4 - dotted names"; fi
