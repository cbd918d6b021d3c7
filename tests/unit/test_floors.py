"""Imports only go down: the top-level packages stand on floors, and no module imports one on
its own floor (other than its own package) or above; no import cycle anywhere in the tree.

The floors (docs/architecture.md): ``base`` (contracts: the history, the wire, the quota
engine, security material, localnet, procfs, Java properties, the admin wire client) at the
bottom; the parts (``acceptor``, ``broker``, ``loadprofiles``, ``analysis``) on it, none of
them importing another; the roof (``harness``: runner, selftest, CLI); then ``compose`` and
``bench``, which drive the roof. The graph is read with `ast` as test_acceptor_imports reads
one package: imports under ``TYPE_CHECKING`` and inside functions count, and
``from pkg import sub`` counts the submodule ``pkg.sub``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.test_acceptor_imports import cycles

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
FLOORS = {
    "base": 0,
    "acceptor": 1,
    "broker": 1,
    "loadprofiles": 1,
    "analysis": 1,
    "harness": 2,
    "compose": 3,
    "bench": 3,
}
SKIP = {"tests", ".venv", ".cache", "runs", "docs", "images", "build"}


def modules(root: Path, packages: list[str]) -> dict[str, Path]:
    """Dotted name -> file, for every module of `packages` (a package by its __init__)."""
    found: dict[str, Path] = {}
    for pkg in packages:
        for f in (root / pkg).rglob("*.py"):
            if "__pycache__" in f.parts:
                continue
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = f
    return found


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path, packages: list[str]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (any import, anywhere in the file)."""
    mods = modules(root, packages)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = mod.split(".")
                    up = up[: len(up) - node.level + (1 if is_pkg else 0)]
                    base = ".".join(up + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs or [base]
            for t in targets:
                hit = _resolve(t, mods)
                if hit is not None and hit != mod:
                    graph[mod].add(hit)
    return graph


def wrong_way(graph: dict[str, set[str]], floors: dict[str, int]) -> list[str]:
    """Every import of a package on the same floor or above (its own package aside)."""
    out = []
    for mod, deps in sorted(graph.items()):
        top = mod.split(".")[0]
        for dep in sorted(deps):
            other = dep.split(".")[0]
            if other != top and floors[other] >= floors[top]:
                out.append(
                    f"{mod} ({top}, floor {floors[top]}) imports {dep} (floor {floors[other]})"
                )
    return out


def top_level_packages(root: Path) -> list[str]:
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and p.name not in SKIP and not p.name.startswith(".") and any(p.rglob("*.py"))
    )


def test_every_top_level_folder_with_python_has_a_floor():
    assert sorted(FLOORS) == top_level_packages(ROOT)


def test_imports_only_go_down():
    graph = import_graph(ROOT, sorted(FLOORS))
    assert "acceptor.server" in graph and "harness.cli" in graph  # the tree was read
    assert wrong_way(graph, FLOORS) == []


def test_no_import_cycle_anywhere_in_the_tree():
    assert cycles(import_graph(ROOT, sorted(FLOORS))) == []


def private_imports(root: Path, packages: list[str]) -> list[str]:
    """Every `from project.module import _name`: a name its module keeps to itself."""
    out = []
    for mod, path in sorted(modules(root, packages).items()):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.split(".")[0] not in packages:
                    continue
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        out.append(f"{mod} imports {node.module}.{a.name}")
    return out


def test_no_module_imports_a_private_name_of_another():
    assert private_imports(ROOT, sorted(FLOORS)) == []


def test_the_checks_catch_an_upward_import_a_sideways_one_and_a_cycle(tmp_path: Path):
    for name, body in {
        "low/__init__.py": "",
        "low/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from high import h\n",
        "low/b.py": "def f():\n    from . import c\n",
        "low/c.py": "from low.b import f\n",
        "mid/__init__.py": "",
        "mid/m.py": "import low.a\n",
        "side/__init__.py": "",
        "side/s.py": "from mid import m\n",
        "high/__init__.py": "",
        "high/h.py": "from low import a\nimport mid.m\nfrom low.c import _x\n",
    }.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(body)
    floors = {"low": 0, "mid": 1, "side": 1, "high": 2}
    graph = import_graph(tmp_path, sorted(floors))
    assert graph["high.h"] == {"low.a", "low.c", "mid.m"}
    assert [line.split(" imports ")[1] for line in wrong_way(graph, floors)] == [
        "high.h (floor 2)",
        "mid.m (floor 1)",
    ]
    assert sorted(cycles(graph)) == [["high.h", "low.a", "mid.m"], ["low.b", "low.c"]]
    assert private_imports(tmp_path, sorted(floors)) == ["high.h imports low.c._x"]
