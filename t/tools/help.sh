#!/bin/sh
# --help in every example and every installed tool: usage on stdout
# starting "usage: ", nothing on stderr, exit 0; the examples also take
# -h, and --help after other options. The examples are every
# examples/*.c program, so a new one is checked too.
b=${top_builddir:-.}
s=${top_srcdir:-.}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
progs=""
for c in "$s"/examples/*.c; do progs="$progs examples/$(basename "$c" .c)"; done
progs="$progs tools/phxrun tools/phx-info"
command -v python3 >/dev/null && progs="$progs tools/phx-plot"
n=0
for p in $progs; do case $p in examples/*) n=$((n + 3)) ;; *) n=$((n + 1)) ;; esac; done
echo "1..$n"
i=0
for p in $progs; do
    exe="$b/$p"
    [ -x "$exe" ] || exe="$s/$p"
    forms="--help"
    case $p in examples/*) forms="--help|-h|--epochs 1 --help" ;; esac
    IFS='|'
    set -- $forms
    unset IFS
    for form in "$@"; do
        i=$((i + 1))
        # shellcheck disable=SC2086
        "$exe" $form >"$d/o" 2>"$d/e" </dev/null
        rc=$?
        if [ $rc = 0 ] && head -1 "$d/o" | grep -q "^usage: " && [ ! -s "$d/e" ]; then
            echo "ok $i - $p $form: usage on stdout, exit 0"
        else
            echo "not ok $i - $p $form: exit $rc"
            sed 's/^/# out: /' "$d/o" | head -3
            sed 's/^/# err: /' "$d/e" | head -3
        fi
    done
done
