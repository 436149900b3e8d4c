"""``dbgen audit``'s report: a table a person reads in ten seconds, the findings under it, or JSON.

One row per Function, one column per check (the first finding's file:line, gradcheck,
gradgradcheck, each order, --expr's orders, the torch.func transforms together, torch.compile) and
the verdict; under the table, for each Function that is not ok, what makes it so, each with its
file:line or the check's one-line reason. A target that could not be checked has a row too, its
verdict cell saying why in a few words ("timed out", "exits at import", "n/a: give --domain").
Names and paths come from the user's code: the table escapes them for rich's markup (the printer
turns emoji codes off: a name such as ``:Up:`` is printed as written).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from rich.markup import escape

from .dynamic import FAIL, NOT_APPLICABLE, PASS, TRANSFORMS
from .dynamic import WRONG as WRONG_NUMBER
from .model import LIMITED, OK, UNCHECKED, WRONG, Audit
from .static import ERROR, LIMIT, NOTE, SUSPECT

_STYLE = {PASS: "green", FAIL: "yellow", WRONG_NUMBER: "bold red", NOT_APPLICABLE: "dim"}
_VERDICT_STYLE = {OK: "green", LIMITED: "yellow", WRONG: "bold red", UNCHECKED: "bold magenta"}
_SHOWN = {PASS: "ok", FAIL: "raises", WRONG_NUMBER: "WRONG", NOT_APPLICABLE: "n/a"}
_FUNC = tuple(name for name in TRANSFORMS if name != "compile")


def as_json(audits: Sequence[Audit]) -> str:
    """The JSON report (docs/guide/audit.md): function, verdict (ok, wrong, limited, or unchecked where the audit could
    not check it: summary says why), wrong_at_order, findings (file, line, message), and each
    check's status and reason."""
    return json.dumps([{
        "function": a.function,
        "verdict": a.verdict,
        "wrong_at_order": a.wrong_at_order,
        "correct_to_order": a.correct_to_order,
        "summary": a.summary,
        "inputs": list(a.inputs),
        "findings": [{"file": f.file, "line": f.line, "message": f.message, "kind": f.kind} for f in a.findings],
        "checks": {r.check: {"status": r.status, "reason": r.reason} for r in a.results},
        "spec": a.spec,
    } for a in audits], indent=2) + "\n"


def table(audits: Sequence[Audit], order: int, with_expr: bool):
    """The rich Table of the audits."""
    from rich.table import Table

    legend = ("gc, ggc: gradcheck, gradgradcheck; 1..N: each order against differences of the order below"
              + ("; e0..eN: the value and each order against autograd through --expr" if with_expr else "")
              + "; dim: an order above a wrong one; func: the torch.func transforms and forward-mode AD; "
              "compile: fullgraph=True")
    grid = Table(title="dbgen audit", title_justify="left", caption=legend, caption_justify="left")
    columns = ["Function", "first finding", "gc", "ggc", *(str(k) for k in range(1, order + 1))]
    if with_expr:
        columns += [f"e{k}" for k in range(order + 1)]
    columns += ["func", "compile", "verdict"]
    for column in columns:
        grid.add_column(column, no_wrap=True)
    for audit in audits:
        checks = {r.check: r for r in audit.results}
        cells = [escape(_short_name(audit)), _first_finding(audit)]
        cells += [_cell(checks.get(name)) for name in ("gradcheck", "gradgradcheck")]
        cells += _order_cells([checks.get(f"order {k}") for k in range(1, order + 1)])
        if with_expr:
            cells += _order_cells([checks.get(f"expr order {k}") for k in range(order + 1)])
        cells += [_transforms_cell([checks[n] for n in _FUNC if n in checks]), _cell(checks.get("compile"))]
        shown = audit.label if audit.verdict == UNCHECKED and audit.label else audit.verdict
        cells.append(f"[{_VERDICT_STYLE[audit.verdict]}]{escape(shown)}[/]")
        grid.add_row(*cells)
    return grid


def _short_name(audit: Audit) -> str:
    """The class's name: after the file's ``.py:`` (a class may be named ``:smile:``), else the
    last part of ``module.Class``."""
    if audit.shown:
        return audit.shown
    if ".py:" in audit.function:
        return audit.function.split(".py:", 1)[1]
    return audit.function.rsplit(".", 1)[-1]


def _order_cells(results) -> list[str]:
    """Each order's cell, as the JSON says it; after a wrong order dimmed: the orders above are
    derivatives of a wrong one, whatever they are measured to be."""
    cells, wrong = [], False
    for result in results:
        cells.append(f"[dim]{_SHOWN[result.status]}[/]" if wrong and result is not None else _cell(result))
        wrong = wrong or (result is not None and result.status == WRONG_NUMBER)
    return cells


def _cell(result) -> str:
    if result is None:
        return "[dim]-[/]"
    return f"[{_STYLE[result.status]}]{_SHOWN[result.status]}[/]"


def _transforms_cell(results) -> str:
    if not results:
        return "[dim]-[/]"
    wrong = [r.check for r in results if r.status == WRONG_NUMBER]
    if wrong:
        return f"[bold red]WRONG ({', '.join(wrong)})[/]"
    failed = [r for r in results if r.status == FAIL]
    if not failed:
        return "[green]ok[/]"
    if len(failed) == len(results):
        return "[yellow]refused[/]"
    return f"[yellow]{len(results) - len(failed)}/{len(results)} ok[/]"


def _first_finding(audit: Audit) -> str:
    ordered = [f for kind in (SUSPECT, ERROR, LIMIT) for f in audit.findings if f.kind == kind]
    if not ordered:
        return "[dim]-[/]"
    first = ordered[0]
    style = {SUSPECT: "bold red", ERROR: "bold magenta"}.get(first.kind, "yellow")
    line = f":{first.line}" if first.line else ""
    return f"[{style}]{escape(first.file.rsplit('/', 1)[-1])}{line}[/]"


def details(audit: Audit) -> list[str]:
    """What makes a Function wrong (every finding and wrong number), limited (one line) or unchecked
    (why, and where), its notes, and the spec that replaces it where --expr agrees. Plain text: the
    printer escapes it."""
    lines = []
    if audit.verdict == UNCHECKED:
        errors = [f for f in audit.findings if f.kind == ERROR]
        where = f" ({errors[-1].file}:{errors[-1].line})" if errors and errors[-1].line else ""
        lines.append(f"{audit.function}: not checked{where}: {audit.summary}")
        lines += [f"  {f.file}:{f.line}: {f.message}" for f in audit.findings if f.kind == SUSPECT]
    elif audit.verdict == WRONG:
        lines.append(f"{audit.function}: {audit.summary}")
        lines += [f"  {f.file}:{f.line}: {f.message}" for f in audit.findings if f.kind == SUSPECT]
        lines += [f"  {r.check}: {r.reason}" for r in audit.results if r.status == WRONG_NUMBER]
    elif audit.verdict == LIMITED:
        limits = [f for f in audit.findings if f.kind == LIMIT]
        where = f" ({limits[0].file}:{limits[0].line}: {', '.join(_label(f.message) for f in limits)})" if limits else ""
        lines.append(f"{audit.function}: limited, {audit.summary}{where}")
        lines += [f"  {r.check}: {r.reason}" for r in audit.results
                  if r.check.startswith(("order", "expr order", "float32")) and r.status == FAIL]
    lines += [f"{audit.function}: note: {f.message}" for f in audit.findings if f.kind == NOTE]
    if audit.spec:
        lines.append(f"{audit.function}: the spec that replaces it (dbgen build generates its Function):")
        lines += [f"    {line}" for line in audit.spec.splitlines()]
    return lines


def refusals(audits: Sequence[Audit]) -> list[str]:
    """Each reason PyTorch gave for refusing a transform, once, with the Functions and checks it
    refused."""
    by_reason: dict[str, dict[str, list[str]]] = {}
    for audit in audits:
        name = _short_name(audit)
        for result in audit.results:
            if result.check in TRANSFORMS and result.status == FAIL:
                by_reason.setdefault(_short(result.reason), {}).setdefault(name, []).append(result.check)
    lines = []
    for reason, functions in by_reason.items():
        checks = sorted({c for found in functions.values() for c in found}, key=TRANSFORMS.index)
        lines.append(f"refused ({', '.join(checks)}) for {', '.join(functions)}: {reason}")
    return lines


def _label(message: str) -> str:
    """A limit's short name: its message up to the colon, without parentheses."""
    return re.sub(r" \(.*?\)", "", message.split(":", 1)[0])


def _short(text: str, width: int = 220) -> str:
    text = text.split(". For more details")[0]
    return text if len(text) <= width else text[: width - 3] + "..."
