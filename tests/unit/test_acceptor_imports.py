"""No import cycle among the modules of `acceptor` (issue 14: narrow dependencies).

Components receive small interfaces (`acceptor.ports`), never the whole server, so
nothing but the entry points may import `acceptor.server`. The graph is read with
`ast`, as `../shared/tools/import_cycles.py` reads it: imports under `TYPE_CHECKING` and
imports inside functions count too (a cycle hidden behind them is still a cycle in the
design), `__init__.py` (a lazy re-export hub) is not a component. Cycles are the strongly
connected components of more than one module (Tarjan).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = "acceptor"
FOLDER = Path(__file__).resolve().parents[2] / "acceptor"


def import_graph(folder: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same folder it imports (any import, anywhere)."""
    mods = {f"{package}.{f.stem}": f for f in folder.glob("*.py") if f.stem != "__init__"}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = pkg.split(".")
                    up = up[: len(up) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            graph[mod].update(t for t in targets if t in mods and t != mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_cycle_finder_finds_a_cycle_and_a_clean_graph():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []
    assert sorted(cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}})) == [
        ["a", "b"],
        ["c", "d"],
    ]


def test_type_checking_and_function_level_imports_count(tmp_path: Path):
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.b import B\n"
    )
    (pkg / "b.py").write_text("def f():\n    from . import a\n")
    assert import_graph(pkg, "p") == {"p.a": {"p.b"}, "p.b": {"p.a"}}
    assert cycles(import_graph(pkg, "p")) == [["p.a", "p.b"]]


def test_no_import_cycle_in_harness_acceptor():
    graph = import_graph(FOLDER, PACKAGE)
    assert f"{PACKAGE}.server" in graph  # the folder was read
    assert cycles(graph) == []


def test_no_component_imports_the_server():
    """Only the entry points hold the whole acceptor; components get narrow interfaces."""
    entry_points = {f"{PACKAGE}.cli", f"{PACKAGE}.server"}
    graph = import_graph(FOLDER, PACKAGE)
    importers = sorted(m for m, deps in graph.items() if f"{PACKAGE}.server" in deps)
    assert [m for m in importers if m not in entry_points] == []


def test_ports_is_a_leaf():
    """The interfaces module imports no acceptor component (value modules at most)."""
    values = {f"{PACKAGE}.{m}" for m in ("config", "recorder", "tracker", "inflight", "charge")}
    graph = import_graph(FOLDER, PACKAGE)
    assert graph[f"{PACKAGE}.ports"] <= values
