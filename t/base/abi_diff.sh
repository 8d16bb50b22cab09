#!/bin/sh
# The library's ABI against the committed baseline (abi/libphalanx.abi,
# doc/maint/abi.md): libabigail's abidiff reports any change to an exported
# function or a type reachable from one. A change fails until the
# baseline is regenerated (make abi-baseline) with the version bump.
src=${top_srcdir:-.}
b=$(cd "${top_builddir:-.}" && pwd)
echo "1..1"
if ! command -v abidiff >/dev/null 2>&1; then
    echo "ok 1 # SKIP abidiff not installed (apt-get install abigail-tools)"; exit 0
fi
if [ -n "${PHX_SAN_FLAGS:-}" ]; then
    echo "ok 1 # SKIP a sanitizer build: the baseline is of the plain build"; exit 0
fi
out=$(abidiff --exported-interfaces-only --headers-dir2 "$src/include/phalanx" --drop-private-types "$src/abi/libphalanx.abi" \
    "$b/.libs/libphalanx.so" 2>&1); rc=$?
if [ $rc = 0 ]; then
    echo "ok 1 - libphalanx.so's ABI equals abi/libphalanx.abi"
else
    echo "not ok 1 - abidiff exit $rc: the ABI changed (doc/maint/abi.md: bump the version, then make abi-baseline)"
    printf '%s\n' "$out" | head -60 | sed 's/^/# /'
fi
