#!/usr/bin/env python3
"""Checks the house's layers and finds circles between files.

1. The library's layers: each module of src/ uses only the modules listed
   before it in the layer table of src/lib.rs (its `# Layers` section), and
   README.md lists the same modules in the same order.
2. The server's layers: each module of server/src/ uses only the modules
   listed after it in the table of server/src/lib.rs (its `# Shape`
   section), and exactly those its row's `uses` column names.
   In both tables every module the crate root declares is listed, and no
   other.
3. No circle between files, in every crate (src, server/src, cli/src,
   bench/src, resp/src): no file uses, through any chain of files, a file
   that uses it back. So inside every folder the files' dependencies run
   one way.

A use is a path in code: `crate::`, `super::` and `self::` paths, and
paths that start with a child module or with a module a `use` imported, in
`use` declarations (grouped trees included) or anywhere else. A path to a
name that a module re-exports (`pub use`, or a plain `use` the module's
children see) is followed to the file that defines the name; a path to a
module alone (`use super::lease;`) is no use by itself, the paths through
it are. A file's uses of its own ancestors' items (the crate root's, its
folder's mod.rs) are no edge between files: the folder's module file is
the folder itself, which its files may use. Comments (doc comments
included: a doc link is not a use) and string literals are ignored.

Test code is exempt: files named `tests.rs` or `*_tests.rs`, modules
declared under `#[cfg(test)]` (test_support), and every item under a
`#[cfg(...)]` attribute that names `test` (but not `not(test)`): unit tests
may drive a crate through its top.

Usage: python3 scripts/check-layers.py [--list]  (run from anywhere)
--list prints each table's order and, for each module, the modules it
uses. Exit status: 0 when the layers hold and there is no circle, 1
otherwise (one line per problem: file:line where it can, what is wrong),
2 when a table cannot be read.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "src" / "lib.rs"
SERVER_LIB = ROOT / "server" / "src" / "lib.rs"
README = ROOT / "README.md"
CRATES = ["src", "server/src", "cli/src", "bench/src", "resp/src", "watch/src"]


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


def inside(regions, at):
    return any(a <= at < b for a, b in regions)


def split_top(text):
    """`text` split at the commas outside braces."""
    parts, depth, cur = [], 0, ""
    for c in text + ",":
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += c == "{"
        depth -= c == "}"
        cur += c
    return [p for p in (p.strip() for p in parts) if p]


def expand_use(tree):
    """The paths of a use tree (whitespace removed): a list of (segments,
    alias); a glob's last segment is `*`."""
    m = re.match(r"^(.*?)::\{(.*)\}$", tree)
    if m is None and tree.startswith("{") and tree.endswith("}"):
        m = re.match(r"^()\{(.*)\}$", tree)
    if m is None:
        return [(tree.split("::"), None)]
    head, body = m.group(1), m.group(2)
    out = []
    for item in split_top(body):
        out += expand_use(f"{head}::{item}" if head else item)
    return out


def parse_use(text):
    """The paths of a `use` declaration's tree, `text` being what follows
    `use` up to the `;`: a list of (segments, alias)."""
    # Aliases first, while blanks still separate `as`.
    aliases = {}

    def keep(m):
        key = f"__alias{len(aliases)}__"
        aliases[key] = m.group(2)
        return m.group(1) + key

    text = re.sub(r"(\w+)\s+as\s+(\w+)", keep, text)
    tree = re.sub(r"\s+", "", text)
    paths = []
    for segs, _ in expand_use(tree):
        alias = None
        if segs and (m := re.match(r"^(\w+?)(__alias\d+__)$", segs[-1])):
            segs = segs[:-1] + [m.group(1)]
            alias = aliases[m.group(2)]
        if segs and segs[0] == "":
            segs = segs[1:]  # `use ::x` (an extern path)
        paths.append((segs, alias))
    return paths


class Crate:
    """The files of one crate (`dir` is its src/), its modules and the edges
    between its files."""

    def __init__(self, rel):
        self.rel = rel
        self.dir = ROOT / rel
        self.modules = {}  # module key (tuple of names) -> file
        for path in sorted(self.dir.rglob("*.rs")):
            parts = path.relative_to(self.dir).parts
            if len(parts) == 1 and parts[0] in ("lib.rs", "main.rs"):
                key = ()
            elif parts[-1] == "mod.rs":
                key = parts[:-1]
            else:
                key = parts[:-1] + (parts[-1].removesuffix(".rs"),)
            self.modules.setdefault(tuple(key), path)
        self.key_of = {p: k for k, p in self.modules.items()}
        self.code = {p: blank(p.read_text()) for p in self.modules.values()}
        self.tests = {p: test_regions(c) for p, c in self.code.items()}
        self.test_keys = set()
        for path, code in self.code.items():
            key = self.key_of[path]
            for m in re.finditer(r"\bmod\s+(\w+)\s*;", code):
                if inside(self.tests[path], m.start()):
                    self.test_keys.add(key + (m.group(1),))
        self.uses = {p: self._use_decls(p) for p in self.modules.values()}
        self._exports = {}

    def is_test(self, path):
        key = self.key_of[path]
        return (
            path.name == "tests.rs"
            or path.name.endswith("_tests.rs")
            or any(key[: len(t)] == t for t in self.test_keys)
        )

    def _use_decls(self, path):
        """The `use` declarations of `path` outside test code: a list of
        (offset, span end, nesting, [(segments, alias)])."""
        code = self.code[path]
        nests = self._inline_mods(path)
        decls = []
        for m in re.finditer(r"\buse\s+", code):
            if inside(self.tests[path], m.start()) or (m.start() > 0 and code[m.start() - 1] in ":."):
                continue
            end = item_end(code, m.end())
            text = code[m.end() : end].rstrip(";")
            nesting = sum(1 for a, b in nests if a <= m.start() < b)
            decls.append((m.start(), end, nesting, parse_use(text)))
        return decls

    def _inline_mods(self, path):
        code = self.code[path]
        return [(m.start(), item_end(code, m.start())) for m in re.finditer(r"\bmod\s+\w+\s*\{", code)]

    def base(self, path, segs, nesting, imports):
        """Where a path written in `path` starts: (module key, remaining
        segments), or None for an extern path, or one that stays inside the
        file (an inline module's own paths)."""
        key = self.key_of[path]
        if not segs:
            return None
        head = segs[0]
        if head == "crate":
            return (), segs[1:]
        if head == "self":
            return (None if nesting else (key, segs[1:]))
        if head == "super":
            climbs = 0
            while climbs < len(segs) and segs[climbs] == "super":
                climbs += 1
            up = climbs - nesting
            if up <= 0:
                return None
            return key[: len(key) - up], segs[climbs:]
        if nesting:
            return None
        if key + (head,) in self.modules:
            return key, segs
        if head in imports:
            return imports[head], segs[1:]
        return None

    def exports(self, key):
        """The names module `key`'s file brings in with `use` (re-exports,
        and private imports its children see): name -> (base, segments)."""
        if key in self._exports:
            return self._exports[key]
        self._exports[key] = {}
        path = self.modules[key]
        found = {}
        for _, _, nesting, paths in self.uses[path]:
            if nesting:
                continue
            for segs, alias in paths:
                if not segs or segs[-1] == "*":
                    continue
                if segs[-1] == "self":
                    segs = segs[:-1]
                name = alias or segs[-1]
                start = self.base(path, segs, 0, {})
                if start is not None:
                    found[name] = start
        self._exports[key] = found
        return found

    def resolve(self, key, segs, seen=()):
        """(module key, item name or None) that the path `segs` from module
        `key` names, following re-exports to the module that defines it."""
        i = 0
        while i < len(segs) and key + (segs[i],) in self.modules:
            key = key + (segs[i],)
            i += 1
        if i == len(segs) or segs[i] in ("self", "*"):
            return key, None
        name = segs[i]
        start = self.exports(key).get(name)
        if start is not None and (key, name) not in seen:
            return self.resolve(start[0], start[1] + segs[i + 1 :], seen + ((key, name),))
        return key, name

    def edges(self):
        """{file: {used file: first line}} between the crate's files, test
        code apart."""
        graph = {}
        for path in self.modules.values():
            if self.is_test(path):
                continue
            code = self.code[path]
            key = self.key_of[path]
            regions = self.tests[path]
            nests = self._inline_mods(path)
            found = []  # (offset, base, segments)
            imports = {}
            spans = []
            for at, end, nesting, paths in self.uses[path]:
                spans.append((at, end))
                for segs, alias in paths:
                    if segs and segs[-1] == "self":
                        segs = segs[:-1]
                    start = self.base(path, segs, nesting, {})
                    if start is None:
                        continue
                    found.append((at, start))
                    target, name = self.resolve(*start)
                    if name is None and not nesting:
                        imports[alias or segs[-1]] = target
            for m in re.finditer(r"(?<![\w:.])(\w+)((?:\s*::\s*\w+)+)", code):
                at = m.start()
                if inside(regions, at) or inside(spans, at):
                    continue
                segs = [m.group(1)] + re.findall(r"\w+", m.group(2))
                nesting = sum(1 for a, b in nests if a <= at < b)
                start = self.base(path, segs, nesting, imports)
                if start is not None:
                    found.append((at, start))
            for at, start in found:
                target, name = self.resolve(*start)
                if name is None and start[1][-1:] != ["*"]:
                    continue  # a module alone: the paths through it are the uses
                if any(t == target[: len(t)] for t in self.test_keys):
                    continue
                used = self.modules[target]
                if used == path or (key[: len(target)] == target):
                    continue  # itself, or an ancestor's own item
                line = code.count("\n", 0, at) + 1
                graph.setdefault(path, {}).setdefault(used, line)
        return graph

    def where(self, path, line=None):
        rel = path.relative_to(ROOT)
        return f"{rel}:{line}" if line else str(rel)


def circles(graph):
    """The strongly connected components of more than one file."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def one_cycle(graph, comp):
    """A cycle through the component's first file, as a list of files."""
    members = set(comp)
    start = comp[0]
    parent, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    path = [v]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return list(reversed(path)) + [start]
                if w in members and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp + [start]


def circle_problems(crate):
    graph = crate.edges()
    problems = []
    for comp in circles(graph):
        cycle = one_cycle(graph, comp)
        steps = " -> ".join(
            f"{crate.where(a, graph[a][b])} uses {b.relative_to(ROOT)}" for a, b in zip(cycle, cycle[1:])
        )
        problems.append(f"circle of files: {', '.join(str(p.relative_to(ROOT)) for p in comp)}: {steps}")
    return problems, graph


def table_rows(path, heading):
    """The rows of the first markdown table in the `//!` section `heading`
    of `path`: a list of cell lists (header and rule rows skipped)."""
    text = path.read_text()
    try:
        section = text[text.index(f"//! # {heading}") :]
    except ValueError:
        print(f"check-layers: no `//! # {heading}` section in {path.relative_to(ROOT)}", file=sys.stderr)
        sys.exit(2)
    rows, started = [], False
    for line in section.splitlines()[1:]:
        if not line.startswith("//!"):
            break
        cells = line[3:].strip()
        if not cells.startswith("|"):
            if started:
                break
            continue
        started = True
        if set(cells) <= set("|-: ") or "| module |" in cells:
            continue
        rows.append([c.strip() for c in cells.strip("|").split("|")])
    if not rows:
        print(f"check-layers: the table of {path.relative_to(ROOT)} lists no module", file=sys.stderr)
        sys.exit(2)
    return rows


def declared_modules(crate):
    """The modules the crate root declares (test-only ones apart)."""
    root = crate.modules[()]
    code = crate.code[root]
    names = set()
    for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code, re.M):
        if not inside(crate.tests[root], m.start()):
            names.add(m.group(1))
    return names


def module_edges(crate, graph):
    """{top-level module: {used top-level module: (file, line)}}."""
    edges = {}
    for user, used in graph.items():
        ku = crate.key_of[user]
        if not ku:
            continue
        for target, line in used.items():
            kt = crate.key_of[target]
            if not kt or kt[0] == ku[0]:
                continue
            edges.setdefault(ku[0], {}).setdefault(kt[0], (user, line))
    return edges


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


def table_problems(crate, graph, lib, order, declared, uses_before, listed_uses=None):
    """The layer table's problems: modules missing from it or not declared,
    uses against its order (`uses_before`: a module uses those listed before
    it; else after it), and, given each row's `uses` column, uses it does
    not name or names wrongly."""
    rel = lib.relative_to(ROOT)
    rank = {m: i for i, m in enumerate(order)}
    problems = []
    for m in sorted(declared - set(rank)):
        problems.append(f"{rel}: module `{m}` is not in the layer table")
    for m in sorted(set(rank) - declared):
        problems.append(f"{rel}: the layer table lists `{m}`, which {rel.name} does not declare")
    edges = module_edges(crate, graph)
    for user in order:
        for used, (path, line) in sorted(edges.get(user, {}).items()):
            if used not in rank:
                continue
            wrong = rank[used] > rank[user] if uses_before else rank[used] < rank[user]
            if wrong:
                side = "after" if uses_before else "before"
                problems.append(
                    f"{crate.where(path, line)}: `{user}` uses `{used}`, which the layer table of {rel} lists {side} it"
                )
            if listed_uses is not None and used not in listed_uses.get(user, set()):
                problems.append(
                    f"{crate.where(path, line)}: `{user}` uses `{used}`, which its row of {rel}'s table does not name"
                )
        if listed_uses is not None:
            for used in sorted(listed_uses.get(user, set()) - set(edges.get(user, {}))):
                problems.append(f"{rel}: the row of `{user}` names `{used}`, which `{user}` does not use")
    return problems, edges


def main():
    problems = []
    listing = []
    crates = {rel: Crate(rel) for rel in CRATES if (ROOT / rel).is_dir()}
    graphs = {}
    for rel, crate in crates.items():
        found, graphs[rel] = circle_problems(crate)
        problems += found

    # The library: src/lib.rs's `# Layers` table, lowest first.
    lib = crates["src"]
    order = [n for row in table_rows(LIB, "Layers") for n in re.findall(r"`(\w+)`", row[0])]
    found, edges = table_problems(lib, graphs["src"], LIB, order, declared_modules(lib), uses_before=True)
    problems += found
    readme = readme_order()
    if readme != order:
        problems.append(
            "README.md: its layer list (lines starting with src/) names "
            + ", ".join(readme)
            + "; src/lib.rs's table: "
            + ", ".join(order)
        )
    listing.append(("src/lib.rs", order, edges))

    # The server: server/src/lib.rs's `# Shape` table, highest first, with
    # each row's `uses`.
    server = crates["server/src"]
    rows = table_rows(SERVER_LIB, "Shape")
    s_order, listed = [], {}
    for row in rows:
        names = re.findall(r"`(\w+)`", row[0])
        s_order += names
        for n in names:
            listed[n] = set(re.findall(r"`(\w+)`", row[-1]))
    found, edges = table_problems(
        server, graphs["server/src"], SERVER_LIB, s_order, declared_modules(server), uses_before=False, listed_uses=listed
    )
    problems += found
    listing.append(("server/src/lib.rs", s_order, edges))

    if "--list" in sys.argv[1:]:
        for name, order, edges in listing:
            rank = {m: i for i, m in enumerate(order)}
            print(f"{name}:")
            for m in order:
                used = sorted(edges.get(m, {}), key=lambda u: rank.get(u, -1))
                print(f"  {m:10} uses {', '.join(used) or '-'}")
    for p in problems:
        print(p)
    if problems:
        print(f"check-layers: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
