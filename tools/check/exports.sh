#!/bin/sh
# The exported-symbol rule (doc/maint/internals.md, "Conventions"; doc/guide/plugins.md):
# libphalanx.so exports only phx_ symbols (and the linker's own _init,
# _fini, _edata, _end, __bss_start), each plugin .so only its descriptor
# phx_plugin_v1. Read from the built objects with nm -D --defined-only.
# Run alone after make: tools/check/exports.sh (in the build folder, or
# with top_builddir set).
build=${top_builddir:-.}
lib=$build/.libs/libphalanx.so
command -v nm >/dev/null || { echo "1..0 # SKIP no nm (apt-get install binutils)"; exit 0; }
[ -f "$lib" ] || { echo "1..0 # SKIP $lib not built (run make first)"; exit 0; }
# Known departures from the rule, one line each: a plugin's file name and
# why. A listed plugin's line is a TODO: it does not fail the suite, and
# fails it (XPASS) once the plugin keeps the rule, so the line goes.
# None today: phx-comm-gloo.so, whose C++ symbols libtool left exported
# (it links C++ with -retain-symbols-file), now links with a version script.
known=""
plugins=$(find "$build/plugins" -path '*/.libs/phx-*.so' 2>/dev/null | sort)
toolchain='^(_init|_fini|_edata|_end|__bss_start|PHALANX_[0-9.]+)$'
echo "1..$((1 + $(echo "$plugins" | grep -c .)))"
extra=$(nm -D --defined-only "$lib" | awk '{print $NF}' | grep -Ev "$toolchain" | grep -v '^phx_')
n=$(nm -D --defined-only "$lib" | grep -c ' phx_')
if [ -z "$extra" ]; then
    echo "ok 1 - libphalanx.so exports $n phx_ symbols and nothing else"
else
    echo "not ok 1 - libphalanx.so exports $(echo "$extra" | wc -l) symbols without phx_:"
    echo "$extra" | head -20 | sed 's/^/#   /'
fi
i=1
for p in $plugins; do
    i=$((i + 1))
    name=$(basename "$p")
    extra=$(nm -D --defined-only "$p" | awk '{print $NF}' | grep -Ev "$toolchain" | grep -vx phx_plugin_v1)
    why=$(echo "$known" | sed -n "s/^$name: //p")
    todo=${why:+ # TODO $why}
    has=$(nm -D --defined-only "$p" | awk '{print $NF}' | grep -cx phx_plugin_v1)
    if [ -z "$extra" ] && [ "$has" = 1 ]; then
        echo "ok $i - $name exports phx_plugin_v1 only$todo"
    else
        echo "not ok $i - $name exports $(echo "$extra" | grep -c .) symbols besides phx_plugin_v1 (has it: $has)$todo"
        echo "$extra" | head -5 | sed 's/^/#   /'
    fi
done
