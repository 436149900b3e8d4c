"""``dbgen audit``: hand-written autograd Functions checked at every order, in workers of their own.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from .. import console
from .app import _io, command

AUDIT_PARAMS_OPT = typer.Option(
    [], "--params", metavar="NAME=NUMBER",
    help="--expr's params (comma-separated or repeated); one named like a Function argument is passed there.",
)


@command()
def audit(
    targets: list[str] = typer.Argument(
        ..., metavar="TARGET",
        help="package.module:Class, path/to/file.py:Class, a module or a .py file (every Function in it).",
    ),
    domain: list[str] = typer.Option(
        [], "--domain", metavar="NAME=LO,HI", help="Where an input is drawn from (default -2,2); repeat per input."
    ),
    shape: str = typer.Option("6", "--shape", metavar="N[,M...]", help="The shape of every input."),
    dtype: str = typer.Option(
        "float64", "--dtype", metavar="DTYPE",
        help="float64 (the checks' own); float32 also checks every order in float32 against float64.",
    ),
    order: int = typer.Option(3, "--order", min=1, max=8, metavar="N", help="Check every order up to N."),
    expr: str | None = typer.Option(
        None, "--expr", metavar="EXPR", help="Compare with this formula of the inputs (the spec language)."
    ),
    params: list[str] = AUDIT_PARAMS_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON (a list, one object per Function) for CI."),
    write_spec: Path | None = typer.Option(
        None, "--write-spec", metavar="DIR",
        help="Write the replacing spec of each Function whose value --expr matches into DIR (also of one whose "
             "derivatives are wrong: that is what replacing it is for).",
    ),
    timeout: float = typer.Option(
        60.0, "--timeout", min=0, metavar="SECONDS",
        help="The most one target's import, or one Function's audit, may take (0: no limit); past it, reported as timed out.",
    ),
) -> None:
    """Audit hand-written torch.autograd.Functions: silently wrong higher derivatives, torch.func limits.

    Imports each target in a worker process (code you already run: nothing of it runs beyond its
    import until the checks call its Functions); one that exits, hangs past --timeout or crashes
    is reported as not checked, and the others still are. Exit 1 when a Function is silently wrong
    at some order up to --order, else 2 when a target could not be checked (not finite on its
    domain: give --domain), else 0. Example: dbgen audit mypkg/ops.py --domain x=0.1,5 --order 3
    """
    from ..signals import import_torch

    import_torch()
    from .. import audit as auditing
    from ..audit import report
    from ..tools.scaffold import NewSpecError

    try:
        if dtype not in ("float64", "float32"):
            raise ValueError(f"--dtype {dtype!r} must be float64 or float32")
        options = auditing.Options(_domains(domain), _shape(shape), order, expr, dtype,
                                   params=_audit_params(params), timeout=timeout or None)
        audits = auditing.run(targets, options, skipped=lambda text: typer.echo(f"dbgen: skipped {text}", err=True))
    except (auditing.TargetError, ValueError) as exc:
        console.Console().error(f"dbgen: {exc}")
        raise typer.Exit(2) from None
    except NewSpecError as exc:
        console.Console().error(exc.lines[0])
        raise typer.Exit(2) from None
    written = [_io(write_spec, lambda a=a: _write_spec(a, write_spec)) for a in audits if a.spec] if write_spec else []
    if as_json:
        typer.echo(report.as_json(audits), nl=False)
        for path in written:
            typer.echo(f"dbgen: wrote {path.as_posix()}", err=True)
    else:
        _print_audit(audits, options, written)
    verdicts = {a.verdict for a in audits}
    raise typer.Exit(1 if auditing.WRONG in verdicts else 2 if auditing.UNCHECKED in verdicts else 0)


def _audit_params(texts: list[str]) -> dict[str, float]:
    """--params NAME=NUMBER (repeated or comma-separated), as ``dbgen new`` reads them."""
    from ..tools.scaffold import parse_params

    return {name: float(value) for name, value in parse_params(texts)}


def _domains(texts: list[str]) -> dict[str, tuple[float, float]]:
    domains = {}
    for text in texts:
        name, _, bounds = text.partition("=")
        try:
            lo, hi = (float(part) for part in bounds.split(","))
        except ValueError:
            raise ValueError(f"--domain {text!r} must be NAME=LO,HI, e.g. --domain x=-3,3") from None
        if not lo < hi:
            raise ValueError(f"--domain {text!r}: LO must be below HI")
        domains[name.strip()] = (lo, hi)
    return domains


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--shape {text!r} must be sizes separated by commas, e.g. --shape 6 or --shape 3,4") from None
    if not shape or any(size < 1 for size in shape):
        raise ValueError(f"--shape {text!r}: every size must be at least 1")
    return shape


def _write_spec(audit, folder: Path) -> Path:
    from ..audit.replacement import write_spec

    return write_spec(audit.spec, folder)


def _print_audit(audits, options, written) -> None:
    from rich.console import Console
    from rich.markup import escape

    from .. import audit as auditing
    from ..audit import report

    out = Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160, emoji=False)
    out.print(report.table(audits, options.order, options.expr is not None))
    for audit in audits:
        for line in report.details(audit):
            out.print(escape(line), soft_wrap=True)
    for line in report.refusals(audits):
        out.print(escape(line), soft_wrap=True)
    for path in written:
        out.print(f"dbgen: wrote {escape(path.as_posix())}")
    wrong = sum(a.verdict == auditing.WRONG for a in audits)
    unchecked = sum(a.verdict == auditing.UNCHECKED for a in audits)
    out.print(f"dbgen: {len(audits)} Function(s) audited, {wrong} silently wrong"
              + (f", {unchecked} not checked" if unchecked else ""))
