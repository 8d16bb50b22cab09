#!/bin/sh
# bootstrap installs the Debian packages that hold the examples' default
# data: the folder each example reads when given no option (read from the
# example's source) must belong to a package in bootstrap's PKGS list.
# Where the folder is installed, dpkg -S names its package independently
# of the table below; where it is not, the table's package must be listed.
# With the data installed, examples/gpt runs one step on its default.
s=${top_srcdir:-.}
pkgs=$(sed -n '/^PKGS="/,/"$/p' "$s/bootstrap" | tr -d '"\\' | sed 's/^PKGS=//' | tr -s ' \n' '\n\n')
gpt=$(sed -n 's/^#define DEFAULT_DATA "\(.*\)"$/\1/p' "$s/examples/gpt.c")
fm=$(sed -n 's/.*getenv("PHX_FASHION_MNIST").*: "\([^"]*\)".*/\1/p' "$s/examples/fmnist.h")
[ -n "$fm" ] || fm=/usr/share/datasets/fashion-mnist
echo "1..4"
[ -n "$gpt" ] && [ -n "$pkgs" ] && echo "ok 1 - examples/gpt's default data is $gpt; bootstrap lists $(echo $pkgs | wc -w) packages" ||
    echo "not ok 1 - no DEFAULT_DATA in examples/gpt.c ('$gpt') or no PKGS in bootstrap"
i=2
for pair in "$gpt fortunes" "$fm dataset-fashion-mnist"; do
    path=${pair% *}
    want=${pair#* }
    got=$(dpkg -S "$path" 2>/dev/null | sed -n '1s/:.*//p' | tr ',' '\n' | sed 's/^ *//')
    if [ -n "$got" ] && ! printf '%s\n' "$got" | grep -qx "$want"; then
        echo "not ok $i - $path belongs to '$got', the test expects $want"
    elif printf '%s\n' "$pkgs" | grep -qx "$want"; then
        echo "ok $i - $path: bootstrap installs $want${got:+ (dpkg -S agrees)}"
    else
        echo "not ok $i - $path: bootstrap does not install $want"
    fi
    i=$((i + 1))
done
# with the package installed, examples/gpt trains on its default data
b=${top_builddir:-.}
if [ -d "$gpt" ]; then
    out=$("$b/examples/gpt" --steps 1 --layers 1 --dim 16 --heads 1 --context 16 --batch 2 --sample 0 \
        --eval-batches 1 --eval-every 0 2>&1)
    rc=$?
    [ $rc = 0 ] && printf '%s\n' "$out" | grep -q "from $gpt," && echo "ok 4 - examples/gpt trains on $gpt by default" ||
        { echo "not ok 4 - examples/gpt exit $rc"; printf '%s\n' "$out" | sed 's/^/# /' | tail -4; }
else
    echo "ok 4 # SKIP $gpt is not installed here (run ./bootstrap as root)"
fi
