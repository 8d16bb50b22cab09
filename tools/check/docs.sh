#!/bin/sh
# The docs say what the tree has (doc/maint/docs.md, "The doc checker"):
#  1. every phx_ name in README.md and doc/**/*.md is declared in
#     include/phalanx (a function, type, macro or enum) or begins an error
#     message of the code ("phx_linear_forward: ..."); the maintainer's
#     notes (doc/maint) may also name the library's own sources';
#  2. every PHX_ name that is not one of those is an environment variable
#     read in src/, plugins/, kernels/ or tools/ (or is listed in
#     tools/check/docs-exceptions with the file that reads it);
#  3. every relative link resolves (to a file, and a #anchor to a heading
#     of it), every doc/*.md path named in the docs or in the tree's
#     sources exists, and every section cited as doc/x.md, "Title" is a
#     heading of that page;
#  4. every ```c block compiles (cc -fsyntax-only -Iinclude): a block with
#     a line at file scope (#include, static, a function definition) is a
#     file, any other is a function body; an HTML comment
#     <!-- doc-check: DECLARATIONS --> just above a block declares what it
#     uses (at file scope, or at the top of the body). Code not meant to
#     compile is fenced ```text.
# TAP on stdout. Run alone: tools/check/docs.sh (top_srcdir, CC).
src=${top_srcdir:-$(dirname "$0")/../..}
cd "$src" || exit 1
[ -f doc/README.md ] && [ -d include/phalanx ] || { echo "1..0 # SKIP no doc/README.md or include/phalanx here"; exit 0; }
cc=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/phx-docs.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
exceptions=tools/check/docs-exceptions

docs=$(find README.md doc -name '*.md' | sort)
# The tree's sources that may name a doc page (the frozen ABI 1.0 copies
# under t/ keep the paths of their time).
sources=$(find include src plugins kernels tools examples bench t Makefile.am configure.ac bootstrap \
    -type f \( -name '*.[ch]' -o -name '*.cc' -o -name '*.cu' -o -name '*.def' -o -name '*.sh' -o -name '*.mk' \
    -o -name '*.py' -o -name '*.am' -o -name '*.ac' -o -name bootstrap -o -name 'phx-*' -o -name '*.md' \) \
    2>/dev/null | grep -v -e '^t/base/abi-lib-1\.0/' -e '^t/plugin/abi-1\.0/' -e '^tools/check/docs' | sort)
ident_files=$(find include -type f \( -name '*.h' -o -name '*.def' \))
impl_files=$(find src plugins kernels tools -type f \( -name '*.[ch]' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \
    -o -name '*.def' -o -name '*.sh' -o -name '*.py' -o -name 'phx-*' \) 2>/dev/null)
# A line "KIND NAME FILE why" of the exceptions (KIND name or env) lets
# NAME be where the rules do not look, as long as FILE has it.
excepted() { # kind name
    sed -e 's/#.*//' "$exceptions" 2>/dev/null | awk -v k="$1" -v n="$2" '$1 == k && $2 == n { print $3 }' |
        while read -r where; do grep -q -w "$2" "$where" 2>/dev/null && echo yes; done | grep -q yes
}

echo "1..4"

# 1. phx_ names. A name ending in _ is a prefix (phx_kit_*).
bad=""
grep -o -n 'phx_[A-Za-z0-9_]*' $docs /dev/null | sort -t: -k3 -u >"$tmp/names"
while IFS=: read -r file line name; do
    case $name in *_) pat="\\b$name" ;; *) pat="\\b$name\\b" ;; esac
    grep -q -E "$pat" $ident_files && continue
    case $file in doc/maint/*) grep -q -E "$pat" $impl_files && continue ;; esac
    # the name an error message starts with ("phx_linear_forward: ...")
    grep -q -E "\"$name\b" $impl_files && continue
    excepted name "$name" && continue
    bad="$bad
#   $file:$line: $name"
done <"$tmp/names"
n=$(wc -l <"$tmp/names")
if [ -z "$bad" ]; then echo "ok 1 - the $n phx_ names in the docs are declared in include/phalanx or name an error's origin"; else
    printf '%s\n' "not ok 1 - phx_ names in the docs that include/phalanx does not have:$bad"; fi

# 2. PHX_ names: a macro, enum or type of include/phalanx, or a variable
# the code reads (a "PHX_X" string, or $PHX_X / ${PHX_X in a script).
bad=""
grep -o -n 'PHX_[A-Z0-9_]*[A-Z0-9]' $docs /dev/null | sort -t: -k3 -u >"$tmp/vars"
nvars=0
while IFS=: read -r file line name; do
    if grep -q -E "\"$name\"|\\\$\\{?$name\b" $impl_files; then nvars=$((nvars + 1)); continue; fi
    grep -q -E "\b$name(_[A-Z0-9_]*)?\b" $ident_files && continue
    excepted env "$name" && continue
    bad="$bad
#   $file:$line: $name"
done <"$tmp/vars"
if [ -z "$bad" ]; then echo "ok 2 - the $nvars PHX_ environment variables in the docs are read by the code"; else
    printf '%s\n' "not ok 2 - PHX_ names in the docs that are neither in include/phalanx nor read by the code:$bad"; fi

# 3. Links, paths and cited sections. slug: GitHub's heading anchors.
slugs() { # file -> one anchor a line
    awk '/^```/ { f = !f; next } !f && /^#+ / { sub(/^#+ +/, ""); print }' "$1" |
        tr 'A-Z' 'a-z' | sed -e 's/[^a-z0-9 _-]//g' -e 's/ /-/g'
}
bad=""
for f in $docs; do
    dir=$(dirname "$f")
    # [text](target): not URLs; outside code blocks and code spans.
    awk '/^```/ { f = !f; next } !f { gsub(/`[^`]*`/, ""); while (match($0, /\]\([^) ]+\)/)) {
            print NR ":" substr($0, RSTART + 2, RLENGTH - 3); $0 = substr($0, RSTART + RLENGTH) } }' "$f" |
        while IFS=: read -r line target; do
            case $target in http:* | https:* | mailto:*) continue ;; esac
            path=${target%%#*} anchor=
            case $target in *'#'*) anchor=${target#*#} ;; esac
            if [ -z "$path" ]; then t=$f; else t=$dir/$path; fi
            if [ ! -e "$t" ]; then echo "#   $f:$line: link to $target: no $t"; continue; fi
            if [ -n "$anchor" ] && [ -f "$t" ] && ! slugs "$t" | grep -qxF "$anchor"; then
                echo "#   $f:$line: link to $target: no heading with anchor #$anchor in $t"
            fi
        done
done >"$tmp/links"
# doc/x.md paths anywhere; doc/x.md, "Section" (also across a line break).
grep -o -n 'doc/[A-Za-z0-9_/.-]*\.md' $docs $sources /dev/null | while IFS=: read -r f line p; do
    [ -f "$p" ] || echo "#   $f:$line: names $p, which does not exist"
done >>"$tmp/links"
for f in $(grep -l 'doc/[A-Za-z0-9_/.-]*\.md' $docs $sources /dev/null); do
    sed -e 's,^[[:space:]]*\(#\|//\|/\*\|\*\)*,,' "$f" | tr '\n' ' ' | tr -s ' \t' '  ' | grep -o 'doc/[A-Za-z0-9_/.-]*\.md[),]* "[^"]*"' |
        sed 's/^\(doc\/[^),]*\.md\)[),]* "\(.*\)"$/\1	\2/' | while IFS='	' read -r p title; do
            [ -f "$p" ] || continue
            awk '/^```/ { f = !f; next } !f && /^#+ / { sub(/^#+ +/, ""); print }' "$p" | tr -d '`' |
                grep -qiF -- "$(echo "$title" | tr -d '`')" || echo "#   $f: cites $p, \"$title\": no such heading there"
        done
done >>"$tmp/links"
if [ ! -s "$tmp/links" ]; then echo "ok 3 - links, doc paths and cited sections resolve"; else
    echo "not ok 3 - links, doc paths or cited sections that do not resolve:"; cat "$tmp/links"; fi

# 4. ```c blocks compile.
nblocks=0
bad=""
if ! command -v "$cc" >/dev/null; then
    echo "ok 4 # SKIP no C compiler ($cc; set CC)"
    exit 0
fi
for f in $docs; do
    awk -v out="$tmp/block" -v file="$f" '
        /^<!-- doc-check:/ { indecl = 1; decl = "" }
        indecl { line = $0; sub(/^<!-- doc-check:/, "", line)
                 if (sub(/-->[[:space:]]*$/, "", line)) indecl = 0
                 decl = decl line "\n"; next }
        !inb && /^```c[[:space:]]*$/ { inb = 1; n++; start = NR + 1; body = ""; tu = 0; next }
        inb && /^```/ {
            name = out "." n ".c"
            print "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <phalanx/phalanx.h>" > name
            if (tu) print decl > name
            else print "void phx_doc_fragment(void);\nvoid phx_doc_fragment(void)\n{\n" decl > name
            printf "#line %d \"%s\"\n%s", start, file, body > name
            if (!tu) print "}" > name
            close(name); print name; inb = 0; decl = ""; next
        }
        inb { body = body $0 "\n"
              if ($0 ~ /^#/ || $0 ~ /^(static|typedef|struct|enum|const|extern) / ||
                  ($0 ~ /^[A-Za-z_][A-Za-z0-9_]*[ *]+[A-Za-z_][A-Za-z0-9_]*\(/ && $0 !~ /^return/)) tu = 1
              next }
        /[^[:space:]]/ { decl = "" }' "$f" >"$tmp/list"
    while read -r b; do
        nblocks=$((nblocks + 1))
        if ! "$cc" -std=gnu11 -fsyntax-only -Iinclude -Werror=implicit-function-declaration \
            -Werror=incompatible-pointer-types -Werror=int-conversion -Werror=implicit-int "$b" \
            >"$tmp/cc.out" 2>&1; then
            bad="$bad
$(grep -E 'error' "$tmp/cc.out" | head -5 | sed 's/^/#   /')"
        fi
        rm -f "$b"
    done <"$tmp/list"
done
if [ -z "$bad" ]; then echo "ok 4 - the $nblocks \`\`\`c blocks of the docs compile ($cc -fsyntax-only)"; else
    printf '%s\n' "not ok 4 - \`\`\`c blocks of the docs that do not compile:$bad"; fi
