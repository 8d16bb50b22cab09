#!/bin/sh
# The formatting rule: clang-format 14 (the version .clang-format names)
# leaves every C, C++ and CUDA source of the tree as it is. The files are
# git's (tracked, and new ones not ignored), less the frozen ABI 1.0
# headers in t/plugin/abi-1.0 and t/base/abi-lib-1.0 and the files listed in tools/check/format-exempt,
# which are not formatted yet: that list only shrinks, so an exempt file
# that passes, or no longer exists, fails until its line is removed.
# Run alone: tools/check/format.sh (PHX_CLANG_FORMAT names the program).
src=${top_srcdir:-$(dirname "$0")/../..}
cd "$src" || exit 1
cf=${PHX_CLANG_FORMAT:-clang-format}
command -v "$cf" >/dev/null || { echo "1..0 # SKIP no $cf (apt-get install clang-format)"; exit 0; }
ver=$("$cf" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
[ "$ver" = 14 ] || { echo "1..0 # SKIP $cf is version $ver; the rule is clang-format 14's (PHX_CLANG_FORMAT)"; exit 0; }
# The source folder must be the top of a git checkout: a tarball unpacked
# inside another checkout (make distcheck's) is not one.
top=$(git rev-parse --show-toplevel 2>/dev/null) && [ "$(cd "$top" && pwd -P)" = "$(pwd -P)" ] ||
    { echo "1..0 # SKIP not a git checkout (the files are git's)"; exit 0; }
exempt=tools/check/format-exempt
files=$(git ls-files --cached --others --exclude-standard -- '*.c' '*.h' '*.cc' '*.cu' '*.cuh' |
    grep -v -e '^t/plugin/abi-1.0/' -e '^t/base/abi-lib-1.0/' | sort -u)
listed=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$exempt")
# One run over every file; clang-format names each differing file in its
# "file:line:col: error: code should be clang-formatted" lines.
bad=$(echo $files | xargs "$cf" --dry-run --Werror 2>&1 |
    sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
echo "1..2"
differ="" checked=0
for f in $files; do
    echo "$listed" | grep -qxF "$f" && continue
    checked=$((checked + 1))
    echo "$bad" | grep -qxF "$f" && differ="$differ $f"
done
if [ -z "$differ" ]; then
    echo "ok 1 - clang-format leaves the $checked sources as they are"
else
    echo "not ok 1 - clang-format changes $(echo $differ | wc -w) of $checked sources:"
    for f in $differ; do echo "#   clang-format -i $f"; done
fi
stale="" n=0
for f in $listed; do
    n=$((n + 1))
    if [ ! -f "$f" ]; then
        stale="$stale $f (gone)"
    elif ! echo "$bad" | grep -qxF "$f"; then
        stale="$stale $f (formatted)"
    fi
done
if [ -z "$stale" ]; then
    echo "ok 2 - the $n files of $exempt are still unformatted"
else
    echo "not ok 2 - remove from $exempt:$stale"
fi
