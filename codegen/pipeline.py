"""The whole pipeline, spec files -> generated file contents, with no I/O beyond reading specs.

spec -> expr -> plan (symbolic inside) -> render. ``write`` and the CLI sit on top of this.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from . import __version__
from .errors import Problem, SpecErrors
from .expr import ExprError, parse_expr
from .plan import make_plan
from .rewrite import identity, stabilize
from .render import render_init, render_module, render_tests
from .spec import Spec, display_path, load_spec

SPEC_SUFFIXES = (".yaml", ".yml")


class SpecsPathError(SpecErrors):
    """SPECS itself is wrong (missing, or holding no spec files): an argument problem, not a problem
    in a spec, so the CLI reports it as one line without a line number."""


def discover(specs: Path) -> list[Path]:
    """The spec files under ``specs`` (a file or a directory, searched recursively), sorted."""
    if specs.is_file():
        return [specs]
    if not specs.is_dir():
        raise SpecsPathError([Problem(display_path(specs), 1, "no such file or directory; give a spec file or a folder of them")])
    found = sorted(
        (p for p in specs.rglob("*") if p.suffix in SPEC_SUFFIXES and p.is_file()),
        key=lambda p: p.relative_to(specs).as_posix(),
    )
    if not found:
        raise SpecsPathError([Problem(display_path(specs), 1, "no *.yaml or *.yml spec files found here")])
    return found


def load_specs(paths: list[Path], root: Path | None = None) -> list[Spec]:
    """Load every spec, reporting every problem of every file together; names must be unique."""
    problems: list[Problem] = []
    specs: list[Spec] = []
    for path in paths:
        try:
            specs.append(load_spec(path, display_path(path, root)))
        except SpecErrors as errors:
            problems.extend(errors.problems)
    first_seen: dict[str, Spec] = {}
    for spec in sorted(specs, key=lambda s: s.path):
        if spec.name in first_seen:
            other = first_seen[spec.name]
            problems.append(spec.problem("name", f"name '{spec.name}' is also used by {other.path}; names must be unique"))
        first_seen.setdefault(spec.name, spec)
    if problems:
        raise SpecErrors(problems)
    return sorted(specs, key=lambda s: s.name)


def generate(specs_path: Path, root: Path | None = None, rewrite: bool = True) -> dict[str, str]:
    """Relative output path -> file content for every spec under ``specs_path``; all or nothing.

    ``rewrite=False`` (``--no-rewrite``) prints formulas exactly as SymPy differentiates them.
    """
    specs = load_specs(discover(specs_path), root)
    files: dict[str, str] = {}
    problems: list[Problem] = []
    for spec in specs:
        try:
            files.update(generate_one(spec, rewrite))
        except SpecErrors as errors:
            problems.extend(errors.problems)
    if problems:
        raise SpecErrors(problems)
    digest = hashlib.sha256("".join(f"{s.name}:{s.digest(__version__)}\n" for s in specs).encode()).hexdigest()
    files["__init__.py"] = render_init([s.name for s in specs], display_path(specs_path, root), digest)
    return files


def generate_one(spec: Spec, rewrite: bool = True) -> dict[str, str]:
    try:
        expr = parse_expr(spec.expr, spec.inputs, spec.param_names)
    except ExprError as exc:
        raise SpecErrors([spec.problem("expr", f"expr: {exc}")]) from None
    plan = make_plan(spec, expr, stabilize if rewrite else identity)
    return {f"{spec.name}.py": render_module(plan), f"tests/test_{spec.name}.py": render_tests(plan)}
