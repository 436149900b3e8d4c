"""The ``dbgen`` command: a thin shell over ``pipeline`` and ``write``.

Exit codes: 0 success; 1 ``check`` found differences; 2 a problem in the specs or arguments;
3 an internal error (a bug in dbgen: please report it). No traceback reaches a user unless
DBGEN_DEBUG=1 is set.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from . import __version__
from .errors import SpecErrors

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Generate PyTorch autograd Functions whose higher-order derivatives are correct by construction.",
)

SPECS_ARG = typer.Argument(..., help="A spec file, or a folder searched recursively for *.yaml / *.yml.")
OUT_OPT = typer.Option(Path("generated"), "-o", "--output", help="Folder for the generated package.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dbgen {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """dbgen: YAML spec -> torch.autograd.Function with verified double (and higher) backward."""


@app.command()
def build(
    specs: Path = SPECS_ARG,
    output: Path = OUT_OPT,
    prune: bool = typer.Option(False, "--prune", help="Delete generated files whose spec is gone."),
    no_rewrite: bool = typer.Option(
        False, "--no-rewrite", help="Print formulas as SymPy differentiates them, without the stable rewrites."
    ),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Generate specs in this many processes."),
    fuse: bool = typer.Option(False, "--fuse", help="Set 'fuse: true' on every spec (levels compiled into kernels)."),
    force: bool = typer.Option(
        False, "--force", help="Regenerate every spec, even those whose files carry an up-to-date header."
    ),
) -> None:
    """Write OUTPUT/NAME.py, OUTPUT/tests/test_NAME.py and OUTPUT/__init__.py.

    A spec whose files already carry its header (same spec hash, dbgen version and options) is
    skipped. Example: dbgen build specs/ -o generated --jobs 2
    """
    from . import pipeline, write

    files = _run(lambda: pipeline.generate(specs, rewrite=not no_rewrite, jobs=jobs, reuse_from=None if force else output, fuse=fuse))
    _check_output_dir(output)
    _run(lambda: write.refuse_foreign(output, files, output.as_posix()))
    written = _io(output, lambda: write.write_files(output, files))
    orphans = [rel for rel, state in write.stale_files(output, files) if state == "orphaned"]
    removed = []
    if prune:
        for rel in orphans:
            _io(output, lambda rel=rel: (output / rel).unlink())
            removed.append(rel)
    specs_count = len([f for f in files if f.startswith("tests/")])
    typer.echo(
        f"dbgen: {specs_count} spec(s) -> {output.as_posix()}/ ({len(written)} file(s) written"
        + (f", {len(removed)} orphan(s) removed" if removed else "")
        + ")"
    )
    if orphans and not prune:
        for rel in orphans:
            typer.echo(f"{output.as_posix()}/{rel}: orphaned (its spec is gone)", err=True)
        typer.echo(f"dbgen: {len(orphans)} orphaned file(s) kept; rerun with --prune to delete them", err=True)


@app.command()
def check(
    specs: Path = SPECS_ARG,
    output: Path = OUT_OPT,
    no_rewrite: bool = typer.Option(False, "--no-rewrite", help="Compare with what 'build --no-rewrite' writes."),
    fuse: bool = typer.Option(False, "--fuse", help="Compare with what 'build --fuse' writes."),
) -> None:
    """Exit 0 if OUTPUT is exactly what build would write; else exit 1 listing the differences.

    Writes nothing. Example: dbgen check specs/ -o generated
    """
    from . import pipeline, write

    files = _run(lambda: pipeline.generate(specs, rewrite=not no_rewrite, fuse=fuse))
    report = write.stale_files(output, files)
    if not report:
        typer.echo(f"dbgen: {output.as_posix()}/ is up to date ({len(files)} files)")
        return
    for rel, state in report:
        typer.echo(f"{output.as_posix()}/{rel}: {state}", err=True)
    command = f"dbgen build {specs.as_posix()} -o {output.as_posix()}" + (" --no-rewrite" if no_rewrite else "")
    command += " --fuse" if fuse else ""
    if any(state == "stale" for _, state in report):
        command += " --force"  # an edited file may still carry an up-to-date header
    if any(state == "orphaned" for _, state in report):
        command += " --prune"
    typer.echo(f"dbgen: {len(report)} file(s) differ; run: {command}", err=True)
    raise typer.Exit(1)


@app.command()
def bench(
    specs: Path = SPECS_ARG,
    size: int = typer.Option(2**20, "--size", help="Elements per input (each input has shape (SIZE,))."),
    orders: str = typer.Option(
        "0,1,2,3", "--orders", help="Derivative orders to run: 0 = W1 forward, 1 = W2, 2 = W3, 3 = W4."
    ),
    strategies: str = typer.Option(
        "auto,save_inputs,save_outputs,intermediates,nested", "--strategies", help="Strategies to generate and time."
    ),
    threads: int = typer.Option(1, "--threads", help="torch.set_num_threads for the run."),
    repeats: int = typer.Option(10, "--repeats", help="Interleaved timing repeats; the median is reported."),
    report: Path = typer.Option(Path("bench/report.md"), "--report", help="Markdown report to write."),
    plot: Path = typer.Option(Path("bench/plot.png"), "--plot", help="PNG plot to write (needs matplotlib)."),
    dtype: str = typer.Option("float32", "--dtype", help="float32, float64, float16 or bfloat16."),
) -> None:
    """Time the generated Functions under each strategy against the composed expression and native op.

    Prints a table, writes a markdown report and a plot. Example: dbgen bench specs/ --size 4096
    """
    from . import bench as benchmark

    try:
        config = benchmark.make_config(size, orders, strategies, threads, repeats, dtype, report, plot)
        results = _run(lambda: benchmark.run(specs, config, echo=typer.echo))
    except benchmark.BenchError as exc:
        typer.echo(f"dbgen: {exc}", err=True)
        raise typer.Exit(2) from None
    _io(report, lambda: benchmark.write_report(results, report))
    skipped = _io(plot, lambda: benchmark.write_plot(results, plot))
    typer.echo(f"dbgen: report written to {report.as_posix()}")
    typer.echo(f"dbgen: plot skipped: {skipped}" if skipped else f"dbgen: plot written to {plot.as_posix()}")


def _run(action):
    """Run a pipeline step; spec problems exit 2 with one 'path:line: message' line each."""
    from .pipeline import SpecsPathError

    try:
        return action()
    except SpecsPathError as errors:
        for problem in errors.problems:
            typer.echo(f"dbgen: {problem.path}: {problem.message}", err=True)
        raise typer.Exit(2) from None
    except SpecErrors as errors:
        for problem in errors.problems:
            typer.echo(str(problem), err=True)
        typer.echo(f"dbgen: {len(errors.problems)} problem(s); nothing was written", err=True)
        raise typer.Exit(2) from None


def _check_output_dir(output: Path) -> None:
    if output.exists() and not output.is_dir():
        typer.echo(f"dbgen: {output.as_posix()}: exists and is not a folder; choose another -o", err=True)
        raise typer.Exit(2)


def _io(output: Path, action):
    """A file-system step of a build: an OSError is the user's environment, not a dbgen bug."""
    try:
        return action()
    except OSError as exc:
        where = exc.filename if exc.filename is not None else output
        typer.echo(f"dbgen: cannot write {Path(where).as_posix()}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None


def run() -> None:
    """Console entry point: no traceback reaches a user."""
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("dbgen: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence for users
        if os.environ.get("DBGEN_DEBUG", "") not in ("", "0"):
            raise
        typer.echo(f"dbgen: internal error: {type(exc).__name__}: {exc}", err=True)
        typer.echo("This is a bug in dbgen; rerun with DBGEN_DEBUG=1 for details and report it.", err=True)
        sys.exit(3)
