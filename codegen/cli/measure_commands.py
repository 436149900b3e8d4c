"""``dbgen bench`` and ``dbgen accuracy``: speed and memory against autograd, bits against exact
arithmetic.
"""

from __future__ import annotations

from pathlib import Path

import typer

from .. import console
from .app import SPECS_ARG, _io, _run, command


@command()
def bench(
    specs: list[Path] = SPECS_ARG,
    size: int = typer.Option(2**20, "--size", metavar="N", help="Elements per input (each input has shape (N,))."),
    orders: str = typer.Option(
        "0,1,2,3", "--orders", metavar="ORDERS", help="Derivative orders to run: 0 = W1 forward, 1 = W2, 2 = W3, 3 = W4."
    ),
    strategies: str = typer.Option(
        "auto,save_inputs,save_outputs,intermediates,nested", "--strategies", metavar="STRATEGIES",
        help="Strategies to generate and time."
    ),
    threads: int = typer.Option(1, "--threads", metavar="N", help="torch.set_num_threads for the run."),
    repeats: int = typer.Option(10, "--repeats", metavar="N", help="Interleaved timing repeats; the median is reported."),
    report: Path | None = typer.Option(
        None, "--report", metavar="FILE", help="Also write the markdown report (tables and command) to FILE."
    ),
    plot: Path | None = typer.Option(
        None, "--plot", metavar="FILE", help="Also write a PNG plot to FILE (needs matplotlib)."
    ),
    dtype: str = typer.Option("float32", "--dtype", metavar="DTYPE", help="float32, float64, float16 or bfloat16."),
    fuse: bool = typer.Option(False, "--fuse", help="Generate every candidate fused, as 'build --fuse' does."),
) -> None:
    """Time the generated Functions under each strategy against the composed expression and native op.

    Prints the tables on stdout; writes files only where asked: the markdown report with
    --report FILE, the plot with --plot FILE. Example: dbgen bench specs/ --size 4096 --report bench.md
    """
    from ..signals import import_torch

    import_torch()  # bench imports it; a signal inside torch's import would be lost
    from ..tools import bench as benchmark

    try:
        config = benchmark.make_config(size, orders, strategies, threads, repeats, dtype, report, plot, fuse)
        results = _run(lambda: benchmark.run(specs, config, echo=typer.echo))
    except benchmark.BenchError as exc:
        console.Console().error(f"dbgen: {exc}")
        raise typer.Exit(2) from None
    if report is not None:
        _io(report, lambda: benchmark.write_report(results, report))
        typer.echo(f"dbgen: report written to {report.as_posix()}")
    if plot is not None:
        skipped = _io(plot, lambda: benchmark.write_plot(results, plot))
        typer.echo(f"dbgen: plot skipped: {skipped}" if skipped else f"dbgen: plot written to {plot.as_posix()}")
    if report is None and plot is None:
        typer.echo("dbgen: nothing written; add --report FILE (markdown) and --plot FILE (PNG) to keep them")


@command()
def accuracy(
    spec: list[Path] = SPECS_ARG,
    points: int = typer.Option(256, "--points", min=8, metavar="N", help="Points sampled per spec and dtype."),
    dtypes: str = typer.Option("float64,float32", "--dtype", metavar="DTYPES", help="float64, float32 or both."),
    plot: Path | None = typer.Option(None, "--plot", metavar="FILE", help="Also write a PNG of error against the input."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON instead of tables."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="The sampling seed."),
) -> None:
    """Measure each order's error in bits against exact arithmetic (mpmath), for the generated
    Function and for autograd through the composed formula, in float64 and float32.

    Points are sampled over the domain as Herbie samples (uniform over float bit patterns and in
    value, plus the ends, 0 and branch thresholds). Exits 1 when a generated order loses more
    bits than the bound anywhere. Example: dbgen accuracy specs/sinh.yaml --plot sinh.png
    """
    from ..signals import import_torch

    import_torch()
    import json

    from ..build import accuracy as oracle
    from ..build.pipeline import discover, load_specs, plan_spec

    chosen = tuple(d.strip() for d in dtypes.split(",") if d.strip())
    if not chosen or any(d not in oracle.BOUND_BITS for d in chosen):
        console.Console().error(f"dbgen: --dtype {dtypes!r}: give float64, float32 or both (comma-separated)")
        raise typer.Exit(2)
    specs = _run(lambda: load_specs(discover(spec)), writes=False)
    reports = []
    for one in specs:
        if one.externs:
            typer.echo(f"{one.name}: {one.path}: skipped (declared externs have no exact values)")
            continue
        plan = _run(lambda one=one: plan_spec(one), writes=False)
        report = oracle.measure(plan, points, chosen, seed)
        reports.append(report)
        if not as_json:
            typer.echo(oracle.report_text(report))
    if as_json:
        typer.echo(json.dumps(oracle.report_json(reports), indent=2))
    if plot is not None:
        skipped = _io(plot, lambda: oracle.write_plot(reports, plot))
        typer.echo(f"dbgen: plot skipped: {skipped}" if skipped else f"dbgen: plot written to {plot.as_posix()}",
                   err=as_json)
    if any(r.over_bound() for r in reports):
        raise typer.Exit(1)
