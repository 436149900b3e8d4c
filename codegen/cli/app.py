"""The ``dbgen`` command's shell: the Typer app, the options commands share, the spec and output
helpers, and ``run``, which turns every problem into a message and an exit code.

Exit codes: 0 success; 1 ``check`` found differences; 2 a problem in the specs or arguments;
3 an internal error (a bug in dbgen: please report it). No traceback reaches a user unless
DBGEN_DEBUG=1 is set.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from pathlib import Path

import typer

from .. import __version__, console, limits
from ..errors import SpecErrors
from .format import DbgenCommand, DbgenGroup

app = typer.Typer(
    cls=DbgenGroup,  # one-line 'dbgen: ...' usage errors, exit 2 (cli_format.py)
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: no boxes, no '<bool>' type column
    help="Generate PyTorch autograd Functions whose higher-order derivatives are correct by construction.",
)
command = functools.partial(app.command, cls=DbgenCommand)  # usage lines and Arguments as click shows them

SPECS_ARG = typer.Argument(..., metavar="SPECS", help="Spec files, or folders searched recursively for *.yaml / *.yml.")
# build and check take their defaults from [tool.dbgen] in pyproject.toml (codegen/spec/config.py)
CONFIGURED_SPECS_ARG = typer.Argument(
    None, metavar="SPECS",
    help="Spec files, or folders searched recursively for *.yaml / *.yml. "
         "Default: specs in pyproject.toml (tool.dbgen), else specs/.",
)
CONFIGURED_OUT_OPT = typer.Option(
    None, "-o", "--output", metavar="OUT",
    help="Folder for the generated package. Default: output in pyproject.toml (tool.dbgen), else generated.",
)
TESTS_OUT_OPT = typer.Option(
    None, "--tests-out", metavar="DIR",
    help="Folder for the generated tests. Default: tests in pyproject.toml (tool.dbgen), else OUT/tests.",
)
QUIET_OPT = typer.Option(False, "--quiet", "-q", help="Print only errors.")
VERBOSE_OPT = typer.Option(
    False, "--verbose", "-v", help="Also print a line per spec (generated or up to date, with timing)."
)
TIME_LIMIT_OPT = typer.Option(
    limits.DEFAULT.seconds, "--time-limit", min=0, metavar="SECONDS", help="Seconds of CPU time of symbolic work allowed per spec; 0: no limit."
)
SIZE_LIMIT_OPT = typer.Option(
    limits.DEFAULT.size, "--size-limit", min=0, metavar="NODES", help="Expression nodes allowed in one derivative order of a spec; 0: no limit."
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dbgen {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """dbgen: YAML spec -> torch.autograd.Function with verified double (and higher) backward."""


def _one_spec_file(path: Path, command: str) -> None:
    """show and graph take one spec file: a folder or a missing path exits 2 with an example made of
    the user's own files (a spec in that folder, or the one beside the missing path it names)."""
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "no such file"
        example = _spec_example(path)
        hint = f", e.g. dbgen {command} {example.as_posix()}" if example else " (a .yaml or .yml path)"
        console.Console().error(f"dbgen: {path.as_posix()}: {what}; {command} takes one spec file{hint}")
        raise typer.Exit(2)


def _spec_example(path: Path) -> Path | None:
    """A spec file near ``path``: in it (a folder) or beside it, the name closest to the one given."""
    import difflib

    folder = path if path.is_dir() else path.parent
    try:
        found = sorted(p for p in folder.glob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    except OSError:
        return None
    if not found:
        return None
    closest = difflib.get_close_matches(path.name, [p.name for p in found], n=1)
    return folder / closest[0] if closest and not path.is_dir() else found[0]


def _settings(specs: list[Path] | None, output: Path | None, jobs: int | None, fuse: bool | None,
              tests: Path | None = None, cpp: bool | None = None):
    """Command-line values over [tool.dbgen] in pyproject.toml over defaults; a bad table exits 2."""
    from ..spec import config

    try:
        return config.resolve(specs, output, jobs, fuse, tests=tests, cpp=cpp)
    except config.ConfigError as exc:
        console.Console().error(f"dbgen: {exc}")
        raise typer.Exit(2) from None


def _build_hint(spec: Path) -> str:
    """The build that includes a new spec: one build's SPECS is the whole set of its output's specs,
    so the hint names the configured or conventional specs folder, never just the new spec's own."""
    from ..spec import config

    _, table = config.load()
    if "specs" in table:
        return "dbgen build"
    top = Path("specs")
    inside = spec.parent == top or top in spec.parents
    return f"dbgen build {top.as_posix()}/" if inside else f"dbgen build SPECS (the folder of all your specs, {spec.parent.as_posix()} or above)"


def _configured_specs_folder() -> Path:
    """Where new specs go: [tool.dbgen] specs when it names a folder, else specs/."""
    from ..spec import config

    root, table = config.load()
    folder = config.project_path(root, table["specs"]) if "specs" in table else None
    return folder if folder is not None and folder.suffix not in (".yaml", ".yml") else Path("specs")


def _spec_reporter(say: console.Console, specs):
    """pipeline's per-spec callback: the progress line, and with --verbose a line per spec. Its
    ``total`` is the number of specs found."""
    from ..build.discover import SpecsPathError, discover

    try:
        total = len(discover(specs))
    except SpecsPathError:
        total = 0  # generate reports the problem itself
    done = 0

    def report(spec, seconds: float | None, notes=(), warnings=()) -> None:
        nonlocal done
        done += 1
        say.progress(done, total, spec.name)
        say.detail(f"{spec.path}: " + ("up to date, skipped" if seconds is None else f"generated in {seconds:.2f} s"))
        for note in notes:  # what auto left out (a limit) or passed over (the memory bound)
            say.detail(f"{spec.path}: auto: {note}")
        for warning in warnings:  # the accuracy oracle: an order over its bound
            say.note(f"{spec.path}: accuracy: {warning}")

    report.total = total
    return report


def _run(action, writes: bool = True):
    """Run a pipeline step; spec problems exit 2 with one 'path:line: message' line each, then a
    count (a command that ``writes`` adds that it wrote nothing; show and check never write)."""
    from ..build.discover import SpecsPathError

    try:
        return action()
    except SpecsPathError as errors:
        for problem in errors.problems:
            console.Console().error(f"dbgen: {problem.path}: {problem.message}")
        raise typer.Exit(2) from None
    except SpecErrors as errors:
        for problem in errors.problems:
            console.Console().error(str(problem))
        summary = f"dbgen: {len(errors.problems)} problem(s)"
        console.Console().error(summary + ("; nothing was written" if writes else "; fix the spec(s) and rerun"))
        raise typer.Exit(2) from None


@contextlib.contextmanager
def _locked(output: Path):
    """Hold OUTPUT's build lock (write.lock_output); another build holding it exits 2."""
    from ..build import write

    try:
        lock = _io(output, lambda: write.lock_output(output))
    except write.OutputBusy as busy:
        console.Console().error(f"dbgen: {busy}")
        raise typer.Exit(2) from None
    try:
        yield
    finally:
        lock.release()


def _check_output_dir(output: Path) -> None:
    if output.exists() and not output.is_dir():
        console.Console().error(f"dbgen: {output.as_posix()}: exists and is not a folder; choose another -o")
        raise typer.Exit(2)


def _io(output: Path, action):
    """A file-system step of a build: an OSError is the user's environment, not a dbgen bug."""
    try:
        return action()
    except OSError as exc:
        where = exc.filename if exc.filename is not None else output
        console.Console().error(
            f"dbgen: cannot write {Path(where).as_posix()}: {exc.strerror or exc}; check the path and its permissions"
        )
        raise typer.Exit(2) from None


def _stop_on_signals() -> None:
    """SIGINT and SIGTERM raise signals.Interrupted, so that a build undoes what it started (see
    write.py) and exits 128 + the signal number (click would turn a KeyboardInterrupt into exit 1).
    A signal the caller set to be ignored stays ignored."""
    from ..signals import Interrupted

    def stop(signum, frame):
        raise Interrupted(signum)

    for name in ("SIGINT", "SIGTERM"):
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, stop)


def run() -> None:
    """Console entry point: no traceback reaches a user."""
    from ..signals import Interrupted

    _stop_on_signals()
    try:
        app()
    except Interrupted as stop:
        console.clear_progress()  # a line of its own, not glued to '[3/12] mish'
        name = signal.Signals(stop.signum).name
        typer.echo(f"dbgen: interrupted by {name}; a build changes all of its files or none", err=True)
        sys.exit(128 + stop.signum)
    except limits.LimitExceeded as exceeded:  # a BaseException, normally reported as a spec's problem
        console.clear_progress()
        typer.echo(f"dbgen: {exceeded.message()}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        console.clear_progress()
        typer.echo("dbgen: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        console.clear_progress()
        if os.environ.get("DBGEN_DEBUG", "") not in ("", "0"):
            raise
        typer.echo(f"dbgen: internal error: {type(exc).__name__}: {exc}", err=True)
        typer.echo("This is a bug in dbgen; rerun with DBGEN_DEBUG=1 for details and report it.", err=True)
        sys.exit(3)
