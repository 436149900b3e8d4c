"""The audit's data: what the command line sets (``Options``), one Function's result (``Audit``),
the verdicts, and the Audit of a target that could not be checked (``unchecked``).

Read by every other module of the package; imports only ``static`` and ``dynamic``'s result types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import dynamic, static

OK, WRONG, LIMITED, UNCHECKED = "ok", "wrong", "limited", "unchecked"
NOT_CHECKABLE = "n/a: give --domain"  # the verdict cell of a Function with an order not compared (not finite)
DEFAULT_TIMEOUT = 60.0  # seconds: about 30 times the slowest Function of dbgen's own examples on a loaded core


@dataclass(frozen=True)
class Options:
    """What the command line sets: domains by input name, shape, dtype, order and --expr."""

    domains: dict = field(default_factory=dict)
    shape: tuple[int, ...] = (6,)
    order: int = 3
    expr: str | None = None
    dtype: str = "float64"  # float32: also check every order in float32 against float64
    # --params: the values of --expr's params; one that names a Function argument is passed there
    params: dict = field(default_factory=dict)
    # the seconds one Function's audit, or one target's import, may take (None: no limit)
    timeout: float | None = DEFAULT_TIMEOUT


@dataclass(frozen=True)
class Audit:
    """One Function's audit: its findings (static and dynamic), each check's result, the verdict."""

    function: str
    inputs: tuple[str, ...]
    findings: tuple[static.Finding, ...]
    results: tuple[dynamic.Result, ...]
    verdict: str
    wrong_at_order: int | None
    correct_to_order: int
    summary: str
    spec: str | None = None  # the replacing spec's YAML, where --expr agrees
    label: str = ""  # unchecked: why, in a few words (the table's verdict cell: "timed out", "n/a: give --domain")
    shown: str = ""  # the table's name for it, where it is not a Function's class (a module that exits at import)


def unchecked(function: str, label: str, message: str, file: str, line: int, findings=(), inputs=(),
              shown: str = "") -> Audit:
    """The Audit of a target the audit could not check: verdict ``unchecked``, ``label`` in the
    table, ``message`` its summary and an ``error`` finding at ``file:line``."""
    finding = static.Finding(file, line, message, static.ERROR, "audit")
    return Audit(function, tuple(inputs), (*findings, finding), (), UNCHECKED, None, 0, message, label=label,
                 shown=shown)
