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
) -> None:
    """Write OUTPUT/NAME.py, OUTPUT/tests/test_NAME.py and OUTPUT/__init__.py.

    Example: dbgen build specs/ -o generated
    """
    from . import pipeline, write

    files = _run(lambda: pipeline.generate(specs, rewrite=not no_rewrite))
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
) -> None:
    """Exit 0 if OUTPUT is exactly what build would write; else exit 1 listing the differences.

    Writes nothing. Example: dbgen check specs/ -o generated
    """
    from . import pipeline, write

    files = _run(lambda: pipeline.generate(specs, rewrite=not no_rewrite))
    report = write.stale_files(output, files)
    if not report:
        typer.echo(f"dbgen: {output.as_posix()}/ is up to date ({len(files)} files)")
        return
    for rel, state in report:
        typer.echo(f"{output.as_posix()}/{rel}: {state}", err=True)
    command = f"dbgen build {specs.as_posix()} -o {output.as_posix()}" + (" --no-rewrite" if no_rewrite else "")
    if any(state == "orphaned" for _, state in report):
        command += " --prune"
    typer.echo(f"dbgen: {len(report)} file(s) differ; run: {command}", err=True)
    raise typer.Exit(1)


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
