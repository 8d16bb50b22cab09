#!/bin/sh
# tools/phx-plot -o OUT.html: a page a browser opens, without gnuplot. It
# parses as XML-ish HTML (Python's html.parser); each panel is an SVG
# with one polyline per run and key, as many points as the file has
# records with that key, x increasing with the step and y falling as the
# loss falls (SVG's y grows downward).
src=${top_srcdir:-.}
plot="$src/tools/phx-plot"
command -v python3 >/dev/null || { echo "1..0 # SKIP no python3"; exit 0; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
echo "1..5"
i=0
while [ $i -lt 30 ]; do
    echo "{\"time\":$i.5,\"step\":$((i * 10)),\"loss\":$((100 - i)).25,\"samples_per_s\":$((1000 + i))}"
    [ $((i % 10)) = 9 ] && echo "{\"time\":$i.6,\"step\":$((i * 10)),\"val_loss\":$((90 - i)).5}"
    i=$((i + 1))
done >"$d/a.jsonl"
sed 's/"loss":/"loss":1/' "$d/a.jsonl" >"$d/b.jsonl"
mkdir "$d/bin"
ln -s "$(python3 -c 'import sys; print(sys.executable)')" "$d/bin/python3"
out=$(PATH="$d/bin" "$d/bin/python3" "$plot" "$d/a.jsonl" "$d/b.jsonl" -o "$d/p.html" 2>&1); rc=$?
[ $rc = 0 ] && [ -s "$d/p.html" ] && echo "ok 1 - two runs to HTML with no gnuplot on PATH" ||
    { echo "not ok 1 - exit $rc"; echo "$out" | sed 's/^/# /'; }
python3 - "$d/p.html" <<'PY'
import sys
from html.parser import HTMLParser

class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.svgs, self.lines = 0, []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self.svgs += 1
        if tag == "polyline":
            pts = [tuple(map(float, p.split(","))) for p in a["points"].split()]
            self.lines.append((self.svgs, a["data-run"], a["data-key"], pts))

p = P()
p.feed(open(sys.argv[1]).read())
i = 1
def ok(c, what):
    global i
    i += 1
    print(("ok %d" if c else "not ok %d") % i + " - " + what)
ok(p.svgs == 2, "two panels (loss, throughput): %d svg" % p.svgs)
keys = sorted((s, r, k) for s, r, k, _ in p.lines)
ok(keys == [(1, "a.jsonl", "loss"), (1, "a.jsonl", "val_loss"), (1, "b.jsonl", "loss"), (1, "b.jsonl", "val_loss"),
            (2, "a.jsonl", "samples_per_s"), (2, "b.jsonl", "samples_per_s")], "a polyline per run and key: %s" % keys)
n = {(r, k): len(pts) for _, r, k, pts in p.lines}
ok(n.get(("a.jsonl", "loss")) == 30 and n.get(("a.jsonl", "val_loss")) == 3, "a point per record with the key: %s" % n)
loss = [pts for _, r, k, pts in p.lines if (r, k) == ("a.jsonl", "loss")][0]
ok(all(b[0] > a[0] for a, b in zip(loss, loss[1:])) and all(b[1] > a[1] for a, b in zip(loss, loss[1:])),
   "x grows with the step, and the falling loss moves down the page")
PY
