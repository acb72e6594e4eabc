"""The package's import structure: the import-linter contracts of pyproject.toml hold (the
layers, renderers that read result types only, util a leaf), no module-level import cycle, and
no private name imported across packages.

import-linter counts every import, the lazy ones too; the two checks here are about what runs at
import time (a cycle of module-level imports breaks depending on which module is imported
first) and about names (a ``_private`` name belongs to its package). Each check is tested on a
small package of its own, so removing the mechanism fails a test.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module of ``package`` under ``root``: dotted name -> (file, is a package)."""
    out = {}
    for p in sorted((root / package).rglob("*.py")):
        parts = list(p.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def imports(
    root: Path, package: str
) -> tuple[dict[str, set[str]], list[tuple[str, str, str, int]]]:
    """The module-level import graph of ``package`` (module -> the modules it imports when it is
    imported: not inside functions, not under ``if TYPE_CHECKING``; ``from P import m`` of a
    submodule ``m`` is an edge to ``P.m``, of a name an edge to ``P``) and every import of a
    ``_private`` name from a module of another package (importer, module, name, line),
    wherever the import sits."""
    mods = modules(root, package)

    def package_of(m: str) -> str:
        return m if mods[m][1] else m.rsplit(".", 1)[0]

    graph: dict[str, set[str]] = {m: set() for m in mods}
    private: list[tuple[str, str, str, int]] = []
    for m, (path, is_pkg) in mods.items():

        def visit(
            nodes: list[ast.stmt], at_import: bool, m: str = m, is_pkg: bool = is_pkg
        ) -> None:
            for n in nodes:
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit(n.body, False)
                    continue
                if isinstance(n, ast.If) and _type_checking(n):
                    visit(n.body, False)
                    visit(n.orelse, at_import)
                    continue
                if isinstance(n, ast.ImportFrom):
                    base = n.module or ""
                    if n.level:  # relative: from the importer's package up
                        pk = m if is_pkg else m.rsplit(".", 1)[0]
                        for _ in range(n.level - 1):
                            pk = pk.rsplit(".", 1)[0]
                        base = f"{pk}.{base}" if base else pk
                    for a in n.names:
                        target = f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                        if target not in mods:
                            continue
                        if at_import:
                            graph[m].add(target)
                        private_name = a.name.startswith("_") and not a.name.startswith("__")
                        if private_name and package_of(target) != package_of(m):
                            private.append((m, target, a.name, n.lineno))
                elif isinstance(n, ast.Import):
                    for a in n.names:
                        if a.name in mods and at_import:
                            graph[m].add(a.name)
                for field in ("body", "orelse", "finalbody"):
                    sub = getattr(n, field, None)
                    if isinstance(sub, list):
                        visit([s for s in sub if isinstance(s, ast.stmt)], at_import)
                for h in getattr(n, "handlers", []) or []:
                    visit(h.body, at_import)

        visit(ast.parse(path.read_text(encoding="utf-8")).body, True)
    return graph, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing
    itself), each sorted (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1 or v in graph[v]:
                    out.append(sorted(comp))
    return out


def test_no_module_level_import_cycle() -> None:
    graph, _ = imports(REPO, "traceinsight")
    assert len(graph) > 150  # the whole package was read
    assert "traceinsight.metrics.rank_summary" in graph["traceinsight.diagnose.sections"]
    assert "traceinsight.store.window" not in graph["traceinsight.diagnose"]  # lazy there
    assert cycles(graph) == []


def test_no_private_name_imported_across_packages() -> None:
    _, private = imports(REPO, "traceinsight")
    assert private == []


def test_the_checks_find_a_cycle_and_a_private_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import thing\n")
    (pkg / "b.py").write_text("from pkg import a\nthing = 1\n")
    (pkg / "c.py").write_text("def f():\n    from pkg.d import x\n")  # lazy: no cycle
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.c\nx = 1\n"
    )
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "e.py").write_text("def f():\n    from pkg.b import _hidden\n")
    (pkg / "sub" / "f.py").write_text("from pkg.sub.e import _own\n")  # same package: fine
    graph, private = imports(tmp_path, "pkg")
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    assert private == [("pkg.sub.e", "pkg.b", "_hidden", 2)]


@pytest.mark.skipif(importlib.util.find_spec("importlinter") is None, reason="import-linter absent")
def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    cmd = [str(lint)] if lint.exists() else [sys.executable, "-m", "importlinter.cli"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout, whatever is installed
    res = subprocess.run(
        [*cmd, "--no-cache", "--no-logo"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert re.search(r"Contracts: [5-9] kept, 0 broken\.", res.stdout), res.stdout[-2000:]
