"""Spec files found and loaded: the folders and files a command names -> the specs, each problem
with its file and line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import Problem, SpecErrors
from ..spec import (
    Spec,
    display_path,
    load_spec,
)

SPEC_SUFFIXES = (".yaml", ".yml")


class SpecsPathError(SpecErrors):
    """SPECS itself is wrong (missing, or holding no spec files): an argument problem, not a problem
    in a spec, so the CLI reports it as one line without a line number."""


def discover(specs: Path | Sequence[Path]) -> list[Path]:
    """The spec files under ``specs`` (files and directories, searched recursively), each once:
    a folder's in the order of their paths in it, folders and files in the order given."""
    found: dict[Path, Path] = {}  # resolved -> as given: a file named twice (specs/ specs/a.yaml) is one
    for path in [specs] if isinstance(specs, (str, Path)) else specs:
        for spec_file in _discover_one(Path(path)):
            found.setdefault(spec_file.resolve(), spec_file)
    return list(found.values())


def _discover_one(specs: Path) -> list[Path]:
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


def shown_specs(specs: Path | Sequence[Path], root: Path | None = None) -> str:
    """How the header of a file made from all specs (``__init__.py``) names them: the one path
    given, else the folder that holds them all (``specs/*.yaml`` reads as ``specs``, as
    ``specs/`` does, so that the two builds write the same files)."""
    paths = [specs] if isinstance(specs, (str, Path)) else list(specs)
    if len(paths) == 1:
        return display_path(paths[0], root)
    folders = [str(p.resolve() if p.is_dir() else p.resolve().parent) for p in map(Path, paths)]
    return display_path(Path(os.path.commonpath(folders)), root)


def load_specs(paths: list[Path], root: Path | None = None, check_expr: bool = True) -> list[Spec]:
    """Load every spec, reporting every problem of every file together; names must be unique."""
    problems: list[Problem] = []
    specs: list[Spec] = []
    for path in paths:
        try:
            specs.append(load_spec(path, display_path(path, root), check_expr))
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
