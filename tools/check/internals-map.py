#!/usr/bin/env python3
"""The map's names exist: every `file:function` in doc/maint/internals.md is a
file of the tree that defines or declares that function, every path named
(`src/ddp/`, `src/ddp/ddp.c`, a program such as `t/comm/gloo_links`) and
every bare file name (`ddp-buckets.c`) exists, and in the walks through a
step ("## One ... step") every bare name of a function is defined in a
file named in the same step, or, for a phx_/px_ name, anywhere in the
sources. "Defined" means a line that starts with a declaration of
name(...), a #define of it, or a slot of the plugin ABI (a (*name)(...)
member or a PHX_KERNEL_SLOT(name, ...) line). TAP on stdout.
Run alone: tools/check/internals-map.py [doc/maint/internals.md]"""
import fnmatch
import os
import re
import subprocess
import sys

SRC = os.environ.get("top_srcdir") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SOURCE_EXT = (".c", ".h", ".cc", ".cu", ".cuh", ".def")
IDENT = re.compile(r"^([a-z_][a-z0-9_]*)(\(.*\))?$")


def tree_files():
    """The tree's files: git's when SRC is the top of a checkout (not a
    tarball unpacked inside another checkout), else the folders."""
    try:
        top = subprocess.run(["git", "-C", SRC, "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()
        if os.path.realpath(top) != os.path.realpath(SRC):
            raise OSError("not the top of a checkout")
        out = subprocess.run(["git", "-C", SRC, "ls-files", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout
        return sorted(set(out.split()))
    except (OSError, subprocess.CalledProcessError):
        files = []
        for root, dirs, names in os.walk(SRC):
            dirs[:] = [d for d in dirs if d not in (".git", ".libs", ".deps")]
            files += [os.path.relpath(os.path.join(root, n), SRC) for n in names]
        return sorted(files)


FILES = tree_files()
DIRS = {os.path.dirname(f) for f in FILES}
DIRS |= {d[:i] for d in DIRS for i in range(len(d)) if d[i] == "/"}
_text = {}


def text(path):
    if path not in _text:
        with open(os.path.join(SRC, path), encoding="utf-8", errors="replace") as f:
            _text[path] = f.read()
    return _text[path]


def defines(path, name):
    n = re.escape(name)
    return bool(re.search(rf"^[A-Za-z_][\w \t*&:<>,]*?[\s*&:]{n}\s*\(|^{n}\s*\(|^#\s*define\s+{n}\b|"
                          rf"\(\s*\*\s*{n}\s*\)\s*\(|^PHX_KERNEL_SLOT\({n},", text(path), re.M))


def find_path(p):
    """The tracked file or folder p names, or None. A path may be a
    program (its source is p.c, p.sh or p.cc), a glob (t/tensor/*), a
    folder (trailing /), a brace list ({a,b}), or relative to include/."""
    m = re.search(r"\{([^}]*)\}", p)
    if m:
        found = [find_path(p[:m.start()] + alt + p[m.end():]) for alt in m.group(1).split(",")]
        return None if None in found else found[0]
    for q in (p, "include/" + p):
        q = q.rstrip("/")
        if "*" in q:
            if any(fnmatch.fnmatch(f, q) for f in FILES):
                return q
            continue
        if q in DIRS:
            return q
        for ext in ("", ".c", ".sh", ".cc"):
            if q + ext in FILES:
                return q + ext
    return None


def sections(doc):
    """(heading, paragraph) pairs; a paragraph is a run of lines up to a
    blank line or the next list item."""
    heading, para = "", []
    for line in doc.splitlines() + [""]:
        item = re.match(r"^(\d+\.|-|\|) ", line)
        if line.startswith("#") or not line.strip() or item:
            if para:
                yield heading, " ".join(para)
            para = []
            if line.startswith("#"):
                heading = line.lstrip("# ").strip()
                continue
        if line.strip():
            para.append(line.strip())


def main():
    doc_path = sys.argv[1] if len(sys.argv) > 1 else "doc/maint/internals.md"
    doc = text(doc_path)
    sources = [f for f in FILES if f.endswith(SOURCE_EXT) and not f.startswith("t/plugin/abi-1.0/")]
    points, seen = [], set()

    def point(good, what):
        if what not in seen:
            seen.add(what)
            points.append((good, what))

    for heading, para in sections(doc):
        walk = heading.startswith("One ") and heading.endswith(" step")
        tokens = re.findall(r"`([^`]+)`", para)
        context = []
        for t in tokens:
            m = re.match(r"^([\w./{},*-]+\.\w+):(\w+)$", t)
            if m:
                f = find_path(m.group(1))
                context.append(f)
                if not f:
                    point(False, f"{t}: no file {m.group(1)}")
                else:
                    good = defines(f, m.group(2))
                    point(good, f"{t}: {m.group(2)} {'is' if good else 'is not'} defined in {f}")
            elif "/" in t and not re.search(r"[\s<>()|']", t):
                f = find_path(t)
                context.append(f)
                point(bool(f), f"{t}: exists" if f else f"{t}: no such file or folder")
            elif re.match(r"^[\w.-]+\.(c|h|cc|cu|cuh|def|mk|am|md)$", t):
                here = any(os.path.basename(f) == t for f in FILES)
                point(here, f"{t}: a file of the tree" if here else f"{t}: no file of that name in the tree")
        if not walk:
            continue
        for t in tokens:
            m = IDENT.match(t)
            if not m:
                continue
            name = m.group(1)
            where = [f for f in context if f and os.path.isfile(os.path.join(SRC, f)) and defines(f, name)]
            if not where and name.startswith(("phx_", "px_")):
                where = [f for f in sources if defines(f, name)][:1]
            if not where and not name.startswith(("phx_", "px_")):
                where = [f for f in sources if f.startswith("include/phalanx/plugin/") and defines(f, name)]
            scope = "the sources" if name.startswith(("phx_", "px_")) else \
                "the files this step names: " + ", ".join(dict.fromkeys(f for f in context if f)) if any(context) else "no file"
            point(bool(where), f"{heading}: {name} in {where[0]}" if where else
                  f"{heading}: {name} is defined in none of {scope}")
    print(f"1..{len(points)}")
    for i, (good, what) in enumerate(points, 1):
        print(f"{'ok' if good else 'not ok'} {i} - {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
