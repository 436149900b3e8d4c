"""``dbgen audit``: find silently wrong higher derivatives in hand-written autograd Functions.

targets (what to audit) -> static (the source) and dynamic (the Function run) checks -> a verdict
per Function (``ok``, ``wrong`` at some order, ``limited``, or ``unchecked`` where it could not be
checked) -> report (a table, or JSON) and, where ``--expr`` agrees with an elementwise Function at
every order, the spec that replaces it (``replacement``). ``run`` imports and audits each target in
a worker process with a time limit (``isolation``): one that exits, hangs or crashes is reported as
such and the others still are. docs/guide/audit.md is the user's account.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import isolation
from .model import (
    DEFAULT_TIMEOUT,
    LIMITED,
    NOT_CHECKABLE,
    OK,
    UNCHECKED,
    WRONG,
    Audit,
    Options,
    unchecked,
)
from .targets import TargetError

__all__ = ["DEFAULT_TIMEOUT", "LIMITED", "NOT_CHECKABLE", "OK", "UNCHECKED", "WRONG", "Audit", "Options",
           "TargetError", "run", "unchecked"]


def run(texts: Sequence[str], options: Options, skipped=None) -> list[Audit]:
    """Audit every Function the targets name, in order, each in a worker process (``isolation``).
    TargetError for a target that names nothing (no such file, module, class); a module or file that
    defines no Function is skipped (``skipped(message)``) among others, an error alone; one that
    exits, hangs or raises at import, and a Function whose audit exits, hangs or crashes, is an
    ``unchecked`` Audit in its place."""
    return isolation.run(texts, options, skipped)
