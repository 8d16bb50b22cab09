#!/bin/sh
# The loader's threads and buffers leave nothing behind: t/data/loader
# (workers stopped mid-epoch, a worker error, early frees) runs under
# valgrind's memcheck with every leak kind an error. Skips without
# valgrind.
cd "${top_builddir:-.}" || exit 1
if ! command -v valgrind >/dev/null 2>&1; then
    echo "1..0 # SKIP valgrind not installed"
    exit 0
fi
# A sanitizer build checks leaks itself (LeakSanitizer in t/data/loader);
# valgrind cannot run ASan's binaries.
if [ -n "${PHX_SAN_FLAGS:-}" ]; then
    echo "1..0 # SKIP sanitizer build: t/data/loader runs under LeakSanitizer instead"
    exit 0
fi
echo "1..2"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
./libtool --mode=execute valgrind --quiet --leak-check=full --show-leak-kinds=all --errors-for-leak-kinds=all \
    --suppressions="${top_srcdir:-.}/t/valgrind.supp" \
    --error-exitcode=99 --log-file="$log" t/data/loader >/dev/null 2>&1
rc=$?
if [ $rc -eq 0 ]; then echo "ok 1 - t/data/loader passes under valgrind"; else echo "not ok 1 - t/data/loader under valgrind exited $rc"; fi
if [ $rc -ne 99 ] && ! grep -q "definitely lost\|indirectly lost\|Invalid \|uninitialised" "$log"; then
    echo "ok 2 - no leak and no memory error reported"
else
    echo "not ok 2 - valgrind reported:"
    sed 's/^/# /' "$log" | head -40
fi
