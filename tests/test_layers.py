"""Layers point one way (docs: DESIGN.md, house style 11): ``pipelines/`` → ``transforms/`` →
``models/``; ``pipelines/`` and ``transforms/`` → ``storage/``. ``models/`` and ``storage/``
import nothing from ``pipelines/`` or ``transforms/``, ``storage/`` and the record schema
import no Beam, and no import cycle joins two modules of the four packages."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("pipelines", "transforms", "models", "storage")
LOWER = ("models", "storage")  # may import neither of the two below
UPPER = ("pipelines", "transforms")


def modules(*packages: str) -> dict[str, Path]:
    """Every module of ``packages`` by dotted name (a package by its own name)."""
    found = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name ``path`` imports when it runs, at the top or inside functions
    (not under ``if TYPE_CHECKING:``, which never runs), ``from a import b`` as ``a.b`` and ``a``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    pending: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"), str(path))]
    while pending:
        node = pending.pop()
        if _type_checking_only(node):
            pending.extend(getattr(node, "orelse", []))
            continue
        pending.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """module → the modules of the four packages it imports (a name that is not a module,
    such as the class in ``from a.b import C``, counts as its module ``a.b``)."""
    known = modules(*PACKAGES)
    graph = {}
    for module, path in known.items():
        targets = set()
        for name in imported_names(path, module):
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_the_four_packages():
    graph = import_graph()
    assert len(graph) > 50 and "pipelines.run" in graph and graph["pipelines.run"]  # the walk sees them
    assert cycles(graph) == []


def test_models_and_storage_import_no_pipeline_code_and_storage_no_beam():
    wrong = []
    for module, path in modules(*LOWER).items():
        for name in sorted(imported_names(path, module)):
            top = name.split(".")[0]
            if top in UPPER or (module.startswith("storage") and top == "apache_beam"):
                wrong.append(f"{module} imports {name}")
    assert wrong == []


BLOCKER = """
import importlib, sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("apache_beam", "pipelines", "transforms"):
            raise ImportError(f"{name} is blocked")
        return None

sys.meta_path.insert(0, Blocked())
for name in sys.argv[1:]:
    importlib.import_module(name)
print("imported", len(sys.argv) - 1)
"""


def test_training_side_imports_without_beam_pipelines_or_transforms():
    """What a training job imports (the loader, shards, tiers) and every model wrapper,
    with ``apache_beam``, ``pipelines`` and ``transforms`` made unimportable."""
    names = sorted(modules("storage", "models"))
    assert {"storage.loader", "storage.tiers", "storage.shards", "models.anomaly"} <= set(names)
    result = subprocess.run([sys.executable, "-c", BLOCKER, *names], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"imported {len(names)}" in result.stdout


def test_the_record_schema_and_pure_text_functions_import_no_beam():
    code = ("import sys, transforms.doc, transforms.clean.signals; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'apache_beam'))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"


def test_the_record_types_are_rows_wherever_beam_routes_them():
    """The coders are registered beside Beam (``transforms.routing``), not by the schema."""
    import apache_beam as beam

    import transforms.routing  # noqa: F401  (registers them)
    from transforms.doc import ROW_TYPES, Doc

    assert Doc in ROW_TYPES
    assert all(isinstance(beam.coders.registry.get_coder(t), beam.coders.RowCoder) for t in ROW_TYPES)
