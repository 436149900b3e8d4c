"""The package's imports flow one way: from a stage to an earlier one, never back, and never in a
circle (lazy imports inside functions included: they tie modules as surely as top-level ones).

Each module belongs to one stage (``STAGES``, in pipeline order); a module added without a stage
fails here, so that its place is decided, not drifted into.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "codegen"

# Pipeline order: a module may import from its own stage or an earlier one.
STAGES = (
    ("base", {"codegen", "codegen.errors", "codegen.limits", "codegen.signals", "codegen.provenance",
              "codegen.console"}),
    ("language", {"codegen.language"}),
    ("spec", {"codegen.spec"}),
    ("derive", {"codegen.derive"}),
    ("plan", {"codegen.plan"}),
    ("emit", {"codegen.emit"}),
    ("build", {"codegen.build"}),
    ("tools", {"codegen.tools", "codegen.audit"}),
    ("cli", {"codegen.cli", "codegen.__main__"}),
)

def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(path: Path) -> str:
    """The package a module of the package imports relatively from: itself for an __init__."""
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imported_from(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from X import ...`` reads, its relative form resolved against ``package``."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _imports(path: Path, modules) -> set[str]:
    """The modules of ``modules`` that ``path`` imports, anywhere in it: ``from . import x`` is
    codegen.x where that is a module, else (a name defined in the package) codegen itself."""
    name = _module_name(path)
    package = _package_of(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            target = _imported_from(node, package)
            found.update(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & set(modules) - {name}


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: _imports(path, modules) for name, path in modules.items()}


def _stage(module: str) -> int | None:
    """The index of the stage that holds ``module``: its own entry, else its package's (audit's)."""
    for index, (_, members) in enumerate(STAGES):
        if module in members or any(module.startswith(f"{m}.") for m in members if m != "codegen"):
            return index
    return None


def test_every_module_has_a_stage():
    assert [m for m in _graph() if _stage(m) is None] == []


def test_no_import_from_a_later_stage():
    backwards = [f"{module} ({STAGES[_stage(module)][0]}) imports {target} ({STAGES[_stage(target)][0]})"
                 for module, targets in _graph().items() for target in targets
                 if _stage(target) is not None and _stage(module) is not None and _stage(target) > _stage(module)]
    assert backwards == []


def test_no_import_circle():
    graph = _graph()
    state: dict[str, str] = {}
    circles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                circles.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


MODULES = ("codegen", "codegen.a", "codegen.x", "codegen.spec", "codegen.audit", "codegen.audit.m", "codegen.m")


@pytest.mark.parametrize("source, where, imported", [
    ("from . import a, __version__\n", "m.py", {"codegen.a", "codegen"}),
    ("def f():\n    from .x import y\n", "m.py", {"codegen.x"}),
    ("from ..spec import Spec\n", "audit/m.py", {"codegen.spec"}),
    ("from . import Audit\n", "audit/m.py", {"codegen.audit"}),
    ("import codegen.x\n", "m.py", {"codegen.x"}),
])
def test_the_import_reader_sees_lazy_and_relative_imports(tmp_path, monkeypatch, source, where, imported):
    """The checks above are only as good as this reader: it must see imports inside functions
    (circles hid behind lazy imports) and relative ones at every level, and tell a submodule from a
    name its package defines."""
    package = tmp_path / "codegen"
    (package / "audit").mkdir(parents=True)
    (package / where).write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    assert _imports(package / where, MODULES) == imported


def _imported_names(path: Path, package: str | None):
    """(line, module, name) of each ``from codegen... import name`` in ``path``, lazy ones included;
    relative imports resolved against ``package`` (None outside the package: left out)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or (node.level and package is None):
            continue
        module = _imported_from(node, package)
        if module == "codegen" or module.startswith("codegen."):
            yield from ((node.lineno, module, alias.name) for alias in node.names)


def test_every_import_from_the_package_names_what_it_holds():
    """A module moved or split leaves no import behind naming its old home: lazy imports inside
    functions fail only when their function runs, which a test may never do."""
    root = PACKAGE.parent
    sources = [*PACKAGE.rglob("*.py"), *(root / "tests").rglob("*.py"), *(root / "tools").glob("*.py"),
               *(root / "benchmarks").glob("*.py")]
    missing = []
    for path in sources:
        package = _package_of(path) if path.is_relative_to(PACKAGE) else None
        for line, module, imported in _imported_names(path, package):
            held = importlib.import_module(module)
            submodule = hasattr(held, "__path__") and importlib.util.find_spec(f"{module}.{imported}") is not None
            if not hasattr(held, imported) and not submodule:
                missing.append(f"{path.relative_to(root)}:{line}: {module} has no {imported}")
    assert missing == []


MAX_MODULE_LINES = 550  # "about 500": a module past it holds more than one responsibility


def test_every_module_says_what_it_holds_and_holds_one_thing():
    """Each module opens with a docstring whose first line names its responsibility, and stays
    small enough to hold one: past MAX_MODULE_LINES, split it along its seams."""
    unsaid, large = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(text))
        if path.name != "__main__.py" and not (docstring and docstring.splitlines()[0].strip()):
            unsaid.append(str(path.relative_to(PACKAGE)))
        if text.count("\n") > MAX_MODULE_LINES:
            large.append(f"{path.relative_to(PACKAGE)}: {text.count(chr(10))} lines")
    assert unsaid == [] and large == []


def stage_graph() -> dict[tuple[str, str], int]:
    """(stage, stage it imports from) -> how many imports, between different stages."""
    graph, edges = _graph(), {}
    for module, targets in graph.items():
        for target in targets:
            pair = (STAGES[_stage(module)][0], STAGES[_stage(target)][0])
            if pair[0] != pair[1]:
                edges[pair] = edges.get(pair, 0) + 1
    return edges


if __name__ == "__main__":  # the import graph between stages: python tests/unit/test_layering.py
    order = [name for name, _ in STAGES]
    for (importer, imported), count in sorted(stage_graph().items(), key=lambda e: (order.index(e[0][0]),
                                                                                  order.index(e[0][1]))):
        print(f"{importer} -> {imported}: {count}")
