#!/usr/bin/env python3
"""Checks the library's layers: each module of src/ uses only the modules
listed before it in the layer table of src/lib.rs (its `# Layers` section),
and README.md lists the same modules in the same order.

A use is a `crate::` path in code (in a `use` declaration or anywhere else,
grouped paths `crate::{a::x, b::y}` included) or a `super::` path that climbs
to the crate root. A name re-exported at the root (`crate::Queue`) counts as
a use of the module it comes from (read from the `pub use` lines of
src/lib.rs). Comments (doc comments included: a doc link is not a use) and
string literals are ignored.

Test code is exempt: files named `tests.rs` or `*_tests.rs`, modules that
src/lib.rs declares under `#[cfg(test)]` (test_support), and every item
under a `#[cfg(...)]` attribute that names `test` (but not `not(test)`):
unit tests may drive the library through its top (a queue in a test of the
file layout), which the library itself may not.

Usage: python3 scripts/check-layers.py [--list]  (run from anywhere)
--list prints the table's order and, for each module, the modules it uses.
Exit status: 0 when the layers hold, 1 otherwise (one line per violation:
file:line, the module, the module it uses), 2 when the table cannot be read.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
LIB = SRC / "lib.rs"
README = ROOT / "README.md"


def blank(text):
    """`text` with comments, string literals and character literals replaced
    by spaces (newlines kept, so that offsets and line numbers stay)."""
    out = []
    i, n = 0, len(text)

    def keep_newlines(s):
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(keep_newlines(text[i:j]))
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(keep_newlines(text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(keep_newlines(text[i:j]))
            i = j
        elif c == "'" and (m := re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^'\\\n])'").match(text, i)):
            out.append(" " * (m.end() - i))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def item_end(code, pos):
    """End offset of the item starting at `pos` in blanked code: its first `;`
    outside brackets, or the `}` that closes its body."""
    depth = 0
    for i in range(pos, len(code)):
        c = code[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0 and c == "}":
                return i + 1
            if depth < 0:
                return i
        elif c == ";" and depth == 0:
            return i + 1
    return len(code)


def is_test_cfg(pred):
    return re.search(r"\btest\b", pred) is not None and re.search(r"\bnot\s*\(\s*test\s*\)", pred) is None


def test_regions(code):
    """Offset ranges of the items under a `#[cfg(...test...)]` attribute."""
    regions = []
    for m in re.finditer(r"#\[\s*cfg\s*\((.*?)\)\s*\]", code, re.S):
        if is_test_cfg(m.group(1)):
            regions.append((m.start(), item_end(code, m.end())))
    return regions


def read_layers():
    """The modules of the layer table of src/lib.rs, in order."""
    text = LIB.read_text()
    try:
        section = text[text.index("//! # Layers") :]
    except ValueError:
        sys.exit("check-layers: no `//! # Layers` section in src/lib.rs")
    order = []
    for line in section.splitlines():
        if not line.startswith("//!"):
            break
        cells = line[3:].strip()
        if not cells.startswith("|") or set(cells) <= set("|-: ") or "| module |" in cells:
            continue
        first = cells.strip("|").split("|")[0]
        order += re.findall(r"`(\w+)`", first)
    if not order:
        print("check-layers: the layer table of src/lib.rs lists no module", file=sys.stderr)
        sys.exit(2)
    return order


def lib_modules_and_exports():
    """The modules src/lib.rs declares (test-only ones apart), and the root
    re-exports: name -> the module it comes from."""
    code = blank(LIB.read_text())
    tests = test_regions(code)
    modules, test_modules = set(), set()
    for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code, re.M):
        in_test = any(a <= m.start() < b for a, b in tests)
        (test_modules if in_test else modules).add(m.group(1))
    exports = {}
    for m in re.finditer(r"^\s*pub\s+use\s+([^;]*);", code, re.M):
        path = re.sub(r"\s+", "", m.group(1))
        module = path.split("::")[0]
        rest = path[len(module) + 2 :]
        names = rest.strip("{}").split(",") if rest.startswith("{") else [rest]
        for name in names:
            name = name.split("::")[-1]
            if " as " in m.group(1):
                name = re.split(r"\bas\b", name)[-1]
            if name and name != "*":
                exports[name] = module
    return modules, test_modules, exports


def group_heads(code, start):
    """The first names of the paths of the group `{...}` opening at `start`."""
    end = item_end(code, start)
    inner = code[start + 1 : end - 1]
    heads, depth, item = [], 0, ""
    for c in inner + ",":
        if c == "," and depth == 0:
            m = re.match(r"\s*(\w+)", item)
            if m:
                heads.append(m.group(1))
            item = ""
            continue
        depth += c in "{([" and 1 or 0
        depth -= c in "})]" and 1 or 0
        item += c
    return heads


def module_of(path):
    """(top-level module, depth of the file's module) of a file under src/."""
    parts = path.relative_to(SRC).parts
    depth = len(parts) - (1 if parts[-1] == "mod.rs" else 0)
    return parts[0].removesuffix(".rs"), depth


def uses(path, code, regions):
    """(offset, first name after the crate root) of every path that names the
    crate root in `code`, outside `regions`."""
    _, depth = module_of(path)
    inline_mods = [(m.start(), item_end(code, m.start())) for m in re.finditer(r"\bmod\s+\w+\s*\{", code)]
    found = []
    for m in re.finditer(r"\bcrate\s*::\s*|\b(?:super\s*::\s*)+", code):
        at = m.start()
        if any(a <= at < b for a, b in regions):
            continue
        if not m.group(0).startswith("crate"):
            climbs = m.group(0).count("super")
            nesting = sum(1 for a, b in inline_mods if a <= at < b)
            if depth + nesting - climbs != 0:
                continue  # stays inside its top-level module
        rest = m.end()
        if code.startswith("{", rest):
            found += [(at, h) for h in group_heads(code, rest)]
        elif (name := re.match(r"\w+", code[rest:])) is not None:
            found.append((at, name.group(0)))
    return found


def readme_order():
    """The modules README.md's layer list names, in order (lines starting
    with `src/` in its text block after "How it works")."""
    text = README.read_text()
    order = []
    for line in text.splitlines():
        if not line.startswith("src/"):
            continue
        first = re.split(r"\s{2,}", line)[0]
        for token in re.split(r"[,\s]+", first):
            name = token.removeprefix("src/").rstrip("/").removesuffix(".rs")
            if name and name != "lib":
                order.append(name.split("/")[0])
    return order


def main():
    order = read_layers()
    rank = {m: i for i, m in enumerate(order)}
    modules, test_modules, exports = lib_modules_and_exports()
    problems = []
    for m in sorted(modules - set(rank)):
        problems.append(f"src/lib.rs: module `{m}` is not in the layer table")
    for m in sorted(set(rank) - modules):
        problems.append(f"src/lib.rs: the layer table lists `{m}`, which lib.rs does not declare")
    readme = readme_order()
    if readme != order:
        problems.append(
            "README.md: its layer list (lines starting with src/) names "
            + ", ".join(readme)
            + "; src/lib.rs's table: "
            + ", ".join(order)
        )
    edges = {}
    for path in sorted(SRC.rglob("*.rs")):
        if path == LIB:
            continue
        user, _ = module_of(path)
        if user in test_modules or path.name == "tests.rs" or path.name.endswith("_tests.rs"):
            continue
        if user not in rank:
            continue  # reported above (an undeclared file is not compiled)
        text = path.read_text()
        code = blank(text)
        for at, name in uses(path, code, test_regions(code)):
            used = name if name in rank else exports.get(name)
            line = code.count("\n", 0, at) + 1
            where = f"{path.relative_to(ROOT)}:{line}"
            if used is None:
                if name not in modules and name not in ("self", "super"):
                    problems.append(f"{where}: `{user}` names crate::{name}, which is neither a module of the table nor a root re-export")
                continue
            if used == user:
                continue
            edges.setdefault(user, set()).add(used)
            if rank[used] > rank[user]:
                problems.append(f"{where}: `{user}` uses `{used}`, which the layer table of src/lib.rs lists after it")
    if "--list" in sys.argv[1:]:
        for m in order:
            print(f"{m:10} uses {', '.join(sorted(edges.get(m, ()), key=rank.get)) or '-'}")
    for p in problems:
        print(p)
    if problems:
        print(f"check-layers: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
