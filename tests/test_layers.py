"""The folders are the layers: host < core < controller < cli. An import only goes down (or
sideways inside a layer), no two packages import each other, and the product never imports the
lab (docs/architecture.md, "Layers, one folder each")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"host": 0, "core": 1, "controller": 2, "cli": 3}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "lab":
        parts = parts[1:]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(path: Path) -> str:
    module = _module(path)
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _imports(path: Path) -> list[str]:
    """Every gpuprov module or name ``path`` imports, at any depth (lazy imports count)."""
    tree = ast.parse(path.read_text(), str(path))
    package = _package(path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found += [f"{base}.{a.name}" for a in node.names]
    return [m for m in found if m.split(".")[0] in ("gpuprov", "gpuprov_lab")]


def _resolve(imported: str, modules: set[str]) -> str:
    """The module ``imported`` names (``pkg.mod.Name`` -> ``pkg.mod``)."""
    while imported not in modules and "." in imported:
        imported = imported.rpartition(".")[0]
    return imported


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 and parts[0] == "gpuprov" else None


PRODUCT = sorted(p for p in (ROOT / "gpuprov").rglob("*.py") if "__pycache__" not in p.parts)
MODULES = {_module(p) for p in PRODUCT}


def _arrows(paths: list[Path]) -> list[tuple[str, str]]:
    return [(_module(p), _resolve(i, MODULES)) for p in paths for i in _imports(p)]


def test_every_module_is_in_one_layer():
    loose = [m for m in MODULES if _layer(m) is None and m not in ("gpuprov", "gpuprov.__main__")]
    assert loose == []


def test_no_import_runs_back_up():
    up = [
        f"{a} -> {b}"
        for a, b in _arrows(PRODUCT)
        if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a)
    ]
    assert up == []


def test_the_product_never_imports_the_lab():
    assert [f"{a} -> {b}" for a, b in _arrows(PRODUCT) if b.startswith("gpuprov_lab")] == []


def _cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package_edges(paths: list[Path], modules: set[str]) -> set[tuple[str, str]]:
    packages = {
        m for m in modules if any(_module(p) == m and p.name == "__init__.py" for p in paths)
    }

    def package_of(module: str) -> str:
        return module if module in packages else module.rpartition(".")[0]

    edges = set()
    for path in paths:
        if path.name == "__main__.py":  # an entry point: nothing imports it
            continue
        for imported in _imports(path):
            target = package_of(_resolve(imported, modules))
            source = _package(path)
            if target != source and target in packages:
                edges.add((source, target))
    return edges


@pytest.mark.parametrize("top", ["gpuprov", "lab/gpuprov_lab"])
def test_no_two_packages_import_each_other(top):
    paths = sorted(p for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)
    modules = {_module(p) for p in paths} | MODULES
    assert _cycles(_package_edges(paths, modules)) == []


def test_a_cycle_between_a_package_and_its_child_is_found():
    edges = {("gpuprov.host", "gpuprov.host.mig"), ("gpuprov.host.mig", "gpuprov.host")}
    assert _cycles(edges) == [["gpuprov.host", "gpuprov.host.mig"]]
