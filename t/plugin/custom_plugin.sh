#!/bin/sh
# The out-of-tree plugin (examples/custom-plugin): install Phalanx into a
# scratch folder (DESTDIR, so nothing outside it is touched), build
# phx-comm-solo.so and check-solo there with the example's own Makefile
# (pkg-config only), list it with the installed phx-info and select it with
# PHX_COMM=solo through phx_comm_init.
: "${top_builddir:=.}" "${top_srcdir:=.}"
top_builddir=$(cd "$top_builddir" && pwd)
top_srcdir=$(cd "$top_srcdir" && pwd)
n=0
failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi; }
diag() { sed 's/^/# /' "$@"; }

command -v pkg-config >/dev/null 2>&1 || { echo "1..0 # SKIP pkg-config not found"; exit 0; }
echo "1..14"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/phx-custom-XXXXXX") || { echo "Bail out! mktemp"; exit 1; }
trap 'rm -rf "$tmp"' EXIT INT TERM
root=$tmp/root

# 1. make install into a scratch root. MAKEFLAGS from a parallel make check
# would hand this make a jobserver it cannot use: drop them.
MAKEFLAGS= MFLAGS= make -C "$top_builddir" install DESTDIR="$root" >"$tmp/install.log" 2>&1
st=$?
ok $st "make install DESTDIR=<scratch>"
[ $st = 0 ] || diag "$tmp/install.log"

pc=$(find "$root" -name phalanx.pc | head -n 1)
[ -n "$pc" ]; ok $? "phalanx.pc installed ($pc)"
# pkg-config's sysroot prefixes the installed -I and -L with the scratch root.
PKG_CONFIG_PATH=$(dirname "${pc:-/nonexistent/x}")
PKG_CONFIG_SYSROOT_DIR=$root
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
cflags=$(pkg-config --cflags phalanx)
libs=$(pkg-config --libs phalanx)
# the -L and -I words (a sed on the whole line would also match "-I" or
# "-L" inside the mktemp name, as in phx-custom-I3YxFT: the flake this
# check showed twice)
libdir= incdir=
for w in $libs; do case $w in -L*) libdir=${w#-L} ;; esac; done
for w in $cflags; do case $w in -I*) incdir=${w#-I} ;; esac; done
[ -f "$incdir/phalanx/plugin/comm_v1.h" ] && [ -f "$libdir/libphalanx.so" ]
st=$?
ok $st "pkg-config --cflags --libs phalanx point into the installed tree ($cflags $libs)"
# (say what the install did when it fails)
[ $st = 0 ] || { ls -la "$libdir" 2>&1 | diag; grep -n "libphalanx\|rror" "$tmp/install.log" | head -40 | diag; }

# 2. Build the plugin from a copy of the example (srcdir may be read-only).
cp -R "$top_srcdir/examples/custom-plugin" "$tmp/solo" && chmod -R u+w "$tmp/solo"
MAKEFLAGS= MFLAGS= make -C "$tmp/solo" CC="${CC:-cc}" CFLAGS="-O2 -Werror $PHX_SAN_FLAGS" phx-comm-solo.so check-solo \
    >"$tmp/build.log" 2>&1
st=$?
ok $st "the example's Makefile builds phx-comm-solo.so and check-solo"
[ $st = 0 ] || diag "$tmp/build.log"

if command -v nm >/dev/null 2>&1; then
    # (an ASan build adds __odr_asan.* markers, not symbols of the plugin)
    exported=$(nm -D --defined-only "$tmp/solo/phx-comm-solo.so" 2>/dev/null | awk '$2 ~ /[A-Z]/ && $3 !~ /^__odr_asan/ {print $3}' | tr '\n' ' ')
    [ "$exported" = "phx_plugin_v1 " ]; ok $? "the plugin exports only phx_plugin_v1 (got: $exported)"
else
    n=$((n + 1)); echo "ok $n # SKIP nm not found"
fi

# 3. The installed phx-info lists it, ok.
info=$(find "$root" -path '*/bin/phx-info' | head -n 1)
LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
PHX_PLUGIN_PATH=$tmp/solo "$info" >"$tmp/info.txt" 2>&1
ok $? "phx-info exits 0"
diag "$tmp/info.txt"
# the ABI the plugin was built with: this tree's 1.<minor>
minor=$(awk '$1 == "#define" && $2 == "PHX_PLUGIN_ABI_MINOR" {print $3}' "${top_srcdir:-.}/include/phalanx/plugin.h")
grep -q "^comm  *solo  *1\.0  *1\.$minor  *$tmp/solo/phx-comm-solo\.so  *ok (priority 0)\$" "$tmp/info.txt"
ok $? "phx-info: comm solo 1.0, ABI 1.$minor, its path, ok (priority 0)"
sed -n '/search path/{n;p;}' "$tmp/info.txt" | grep -q "^  $tmp/solo\$"
ok $? "phx-info: PHX_PLUGIN_PATH is searched first"
grep -q "^  $libdir/phalanx\$" "$tmp/info.txt"
ok $? "phx-info: the phalanx/ folder beside the installed libphalanx.so is searched"
# A relative LD_LIBRARY_PATH entry: dladdr names the library relatively.
(cd "$libdir/.." && LD_LIBRARY_PATH=$(basename "$libdir") "$info") >"$tmp/rel.txt" 2>&1
grep -q "^  $libdir/phalanx\$" "$tmp/rel.txt"
ok $? "... also when LD_LIBRARY_PATH names it relatively"
PHX_PLUGIN_PATH=$tmp/solo "$info" --parsable | grep -q "^plugin	comm	solo	1\.0	1\.$minor	$tmp/solo/phx-comm-solo\.so	ok	0\$"
ok $? "phx-info --parsable: the same line, tab-separated"

# 4. Select it by name: phx_comm_init + every collective.
(cd "$tmp" && PHX_PLUGIN_PATH=$tmp/solo PHX_COMM=solo "$tmp/solo/check-solo") >"$tmp/run.txt" 2>&1
st=$?
diag "$tmp/run.txt"
ok $st "PHX_COMM=solo: check-solo passes"
grep -q "^backend solo, rank 0 of 1\$" "$tmp/run.txt" && ! grep -q FAILED "$tmp/run.txt"
ok $? "the backend is solo and every collective checks out"

# 5. A name that is not there is an error, never a fallback.
PHX_PLUGIN_PATH=$tmp/solo PHX_COMM=nosuch "$tmp/solo/check-solo" >"$tmp/bad.txt" 2>&1
st=$?
diag "$tmp/bad.txt"
[ $st != 0 ] && grep -q "nosuch: not found" "$tmp/bad.txt" && grep -q "found: .*solo" "$tmp/bad.txt"
ok $? "PHX_COMM=nosuch fails, naming it and listing solo among the plugins found"
exit $failed
