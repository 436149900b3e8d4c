"""The ``dbgen`` command: a thin shell over ``pipeline`` and ``write``.

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


@command()
def build(
    specs: list[Path] | None = CONFIGURED_SPECS_ARG,
    output: Path | None = CONFIGURED_OUT_OPT,
    tests_out: Path | None = TESTS_OUT_OPT,
    prune: bool = typer.Option(
        False, "--prune",
        help="Delete the files this output's builds wrote that it no longer writes (not those edited since).",
    ),
    no_rewrite: bool = typer.Option(
        False, "--no-rewrite", help="Print formulas as SymPy differentiates them, without the stable rewrites."
    ),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", min=1, metavar="N",
        help="Generate specs in this many processes (at most one per usable core and ~300 MB of available "
             "memory). Default: jobs in pyproject.toml (tool.dbgen), else 1.",
    ),
    fuse: bool | None = typer.Option(
        None, "--fuse/--no-fuse",
        help="Set 'fuse: true' on every spec (levels compiled into kernels). Default: fuse in pyproject.toml (tool.dbgen).",
    ),
    force: bool = typer.Option(
        False, "--force", help="Regenerate every spec, even those whose files are up to date."
    ),
    strict: bool = typer.Option(
        False, "--strict", help="Refuse a spec whose derivatives lose more bits than the accuracy bound (else a warning)."
    ),
    time_limit: float = TIME_LIMIT_OPT,
    size_limit: int = SIZE_LIMIT_OPT,
    quiet: bool = QUIET_OPT,
    verbose: bool = VERBOSE_OPT,
) -> None:
    """Write OUT/NAME.py, OUT/tests/test_NAME.py and OUT/__init__.py.

    A spec whose files are up to date (their header has the same spec hash, dbgen version and
    options, and their body hash shows no hand edit) is skipped; a file edited by hand is
    rewritten. Example: dbgen build specs/ -o generated --jobs 2
    """
    from ..build import pipeline, write

    say = console.Console(console.level_from_flags(quiet, verbose))
    settings = _settings(specs, output, jobs, fuse, tests_out)
    specs, output, jobs, fuse = settings.specs, settings.output, _usable_jobs(settings.jobs, say), settings.fuse
    layout = pipeline.tests_layout(output, settings.tests)
    on_spec = _spec_reporter(say, specs)
    bounds = limits.Limits(seconds=time_limit, size=size_limit)
    _check_output_dir(output)
    with _locked(output):  # for the whole build: a second one into OUTPUT exits 2 at once
        files = _run(lambda: pipeline.generate(specs, root=settings.root, rewrite=not no_rewrite, jobs=jobs,
                                               line_length=settings.line_length,
                                               reuse_from=None if force else output, fuse=fuse, on_spec=on_spec,
                                               limits=bounds, tests=layout, strict=strict))
        _run(lambda: write.refuse_foreign(output, files, output.as_posix()))
        done = _io(output, lambda: write.commit(output, files, prune=prune, tests=layout.folder))  # all or nothing
    written, removed, orphans = done.written, done.removed, done.orphans
    shown = functools.partial(write.shown, output.as_posix())
    for rel in written:
        say.detail(f"{shown(rel)}: written")
    for rel in done.hand_edited:
        say.note(f"dbgen: rewrote hand-edited {shown(rel)} (generated files are not to be edited; change the spec)")
    say.result(
        f"dbgen: {on_spec.total} spec(s) -> {output.as_posix()}/ ({len(written)} file(s) written"
        + (f", {len(removed)} orphan(s) removed" if removed else "")
        + ")"
    )
    kept = {**{rel: "edited" for rel in done.edited_orphans}, **{rel: "unrecorded" for rel in done.unrecorded_orphans}}
    if orphans and not prune:
        named = _paths_text(specs)
        for rel in orphans:
            why = f" ({_KEPT_SHORT[kept[rel]]}: --prune keeps it)" if rel in kept else ""
            say.note(f"{shown(rel)}: orphaned (no spec under {named} generates it){why}")
        advice = (f"if {named} holds all your specs, rerun with --prune to delete them, else build the folder "
                  "that holds them all") if set(orphans) - set(kept) else "delete or move them yourself"
        say.note(f"dbgen: {len(orphans)} orphaned file(s) kept; {advice}")
    else:
        for rel, why in sorted(kept.items()):
            say.note(f"{shown(rel)}: orphaned but {_KEPT_LONG[why]}; kept (delete it yourself when you no longer "
                     "need it)")


# why --prune keeps an orphan (write.Orphans.kept), in a line's parentheses and in a note of its own
_KEPT_SHORT = {"edited": "edited by hand", "unrecorded": "in no manifest"}
_KEPT_LONG = {"edited": "edited by hand since dbgen wrote it",
              "unrecorded": "in no manifest of this output (written before dbgen kept one, or a copy of "
                            "a generated file): nothing shows it is this build's"}


@command()
def check(
    specs: list[Path] | None = CONFIGURED_SPECS_ARG,
    output: Path | None = CONFIGURED_OUT_OPT,
    tests_out: Path | None = TESTS_OUT_OPT,
    no_rewrite: bool = typer.Option(False, "--no-rewrite", help="Compare with what 'build --no-rewrite' writes."),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", min=1, metavar="N",
        help="Generate the specs it regenerates in this many processes, as build does. Default: jobs in "
             "pyproject.toml (tool.dbgen), else 1.",
    ),
    fuse: bool | None = typer.Option(
        None, "--fuse/--no-fuse",
        help="Compare with what 'build --fuse' writes. Default: fuse in pyproject.toml (tool.dbgen).",
    ),
    force: bool = typer.Option(
        False, "--force",
        help="Regenerate every spec and compare, even where the file headers vouch for them (for work on "
             "dbgen itself, whose output can change without its version).",
    ),
    time_limit: float = TIME_LIMIT_OPT,
    size_limit: int = SIZE_LIMIT_OPT,
    quiet: bool = QUIET_OPT,
    verbose: bool = VERBOSE_OPT,
) -> None:
    """Exit 0 if OUT is exactly what build would write; else exit 1 listing the differences.

    A spec whose files carry the header a build would write (the same spec hash, dbgen version
    and options) and no hand edit is up to date without regenerating it, as build skips it; the
    others are regenerated and compared. Writes nothing. Example: dbgen check specs/ -o generated
    """
    from .. import provenance
    from ..build import pipeline, write

    say = console.Console(console.level_from_flags(quiet, verbose))
    settings = _settings(specs, output, jobs, fuse, tests_out)
    specs, output, fuse = settings.specs, settings.output, settings.fuse
    jobs = _usable_jobs(settings.jobs, say)
    layout = pipeline.tests_layout(output, settings.tests)
    on_spec = _spec_reporter(say, specs)
    bounds = limits.Limits(seconds=time_limit, size=size_limit)
    files = _run(lambda: pipeline.generate(specs, root=settings.root, rewrite=not no_rewrite, fuse=fuse, on_spec=on_spec,
                                           line_length=settings.line_length, jobs=jobs,
                                           reuse_from=None if force else output,
                                           limits=bounds, tests=layout), writes=False)
    report = write.stale_files(output, files)
    if not report:
        say.result(f"dbgen: {output.as_posix()}/ is up to date ({len(files)} files)")
        return
    orphans = write.find_orphans(output, files, write.read_manifest(output))
    kept_orphans = orphans.kept  # edited by hand or in no manifest
    for rel, state in report:
        if state == "orphaned" and rel in kept_orphans:
            why = _KEPT_SHORT["edited" if rel in orphans.edited else "unrecorded"]
            state += f" ({why}: --prune keeps it; delete it yourself)"
        elif state == "stale" and provenance.edited_by_hand(output / rel):
            state += " (edited by hand)"
        say.error(f"{write.shown(output.as_posix(), rel)}: {state}")
    command = f"dbgen build {_paths_text(specs)} -o {output.as_posix()}" + (" --no-rewrite" if no_rewrite else "")
    command += f" --tests-out {settings.tests.as_posix()}" if settings.tests is not None else ""
    command += " --fuse" if fuse else ""
    if any(state == "stale" and _kept_by_build(output / rel, files[rel]) for rel, state in report):
        command += " --force"  # only a file as dbgen wrote it that is not what it writes now
    if any(state == "orphaned" and rel not in kept_orphans for rel, state in report):
        command += " --prune"
    if all(rel in kept_orphans for rel, _ in report):  # no build changes them: the user decides
        kinds = " or ".join(_KEPT_SHORT[k] for k in ("edited", "unrecorded") if getattr(orphans, k))
        say.error(f"dbgen: {len(report)} file(s) differ: orphans {kinds}; delete or move them")
    else:
        say.error(f"dbgen: {len(report)} file(s) differ; run: {command}")
    raise typer.Exit(1)


JOB_MEMORY = 300 * 2**20  # bytes one build process holds, about (torch, SymPy, a spec's plan)


def _usable_jobs(requested: int, say: console.Console) -> int:
    """``requested`` build processes, lowered to what the machine can run at once: one per core
    this process may use and per ``JOB_MEMORY`` of available memory (more only swap or wait);
    a lowered number is said once on stderr."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    memory = _available_memory()
    usable = max(1, min(cores, memory // JOB_MEMORY if memory is not None else cores))
    if requested <= usable:
        return requested
    why = f"{cores} usable core(s)" + (f", {memory / 2**30:.1f} GiB memory available" if memory is not None else "")
    say.note(f"dbgen: --jobs {requested} lowered to {usable} ({why}; each build process needs about "
             f"{JOB_MEMORY // 2**20} MB)")
    return usable


def _available_memory() -> int | None:
    """Bytes of memory available for new processes (``MemAvailable`` of /proc/meminfo); None where
    the system does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                name, _, value = line.partition(":")
                if name == "MemAvailable":
                    return int(value.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None
    return None


def _kept_by_build(path: Path, fresh: str) -> bool:
    """Whether a build would read ``path`` back as up to date (pipeline.reusable_files) although it
    differs from ``fresh``: its header is the one a build writes and its body hash matches (a file
    written by another version of ruff, say), and, for a test file, it tests the module the fresh one
    does (after OUT was renamed, it leads to the old folder, and a build writes it anew). Only then
    does the build need --force."""
    from .. import provenance
    from ..build import write

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return (provenance.sealed_header(text) == provenance.header_lines(fresh)
            and write.tested_folder(path, text) == write.tested_folder(path, fresh))


def _paths_text(paths) -> str:
    """Spec paths as a command line names them."""
    return " ".join(Path(p).as_posix() for p in paths)


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


@command()
def show(
    spec: list[Path] = typer.Argument(..., metavar="SPEC", help="Spec files."),
    latex: bool = typer.Option(False, "--latex", help="Write formulas in LaTeX instead of unicode text."),
    time_limit: float = TIME_LIMIT_OPT,
    size_limit: int = SIZE_LIMIT_OPT,
) -> None:
    """Print what build would generate for each spec, for a person to read.

    The formula and its derivatives, the strategy and why, and for each
    generated Function its shared subexpressions, what it computes, saves
    and returns, and its operation counts. Writes nothing.

    Example: dbgen show specs/sinh.yaml (add --latex for LaTeX formulas)
    """
    from ..tools.show import show_text

    for path in spec:
        _one_spec_file(path, "show")
    bounds = limits.Limits(seconds=time_limit, size=size_limit)
    reports = [_run(lambda path=path: show_text(path, latex=latex, bounds=bounds), writes=False) for path in spec]
    typer.echo("\n".join(reports), nl=False)


@command()
def graph(
    spec: Path = typer.Argument(..., metavar="SPEC", help="One spec file."),
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE", help="The picture to write: a .svg or .png file."),
    order: int = typer.Option(
        2, "--order", metavar="N",
        help="Take N-1 gradients with create_graph=True (1: the value's graph; 2: the first derivative's).",
    ),
    time_limit: float = TIME_LIMIT_OPT,
    size_limit: int = SIZE_LIMIT_OPT,
) -> None:
    """Draw the autograd graph of a generated function and its derivatives.

    Builds the spec into a temporary folder, runs it on inputs from its
    domain and draws the graph as the torchviz pictures of PyTorch's
    double-backward tutorial do. Needs the torchviz package (the viz extra
    of dbgen) and Graphviz's dot program (apt or brew install graphviz).

    Example: dbgen graph specs/cube.yaml -o cube.svg --order 3
    """
    from ..tools.graph import GraphError, draw

    _one_spec_file(spec, "graph")
    try:
        bounds = limits.Limits(seconds=time_limit, size=size_limit)
        name = _io(output, lambda: _run(lambda: draw(spec, output, order, bounds)))
    except GraphError as exc:
        console.Console().error(f"dbgen: {exc}")
        raise typer.Exit(2) from None
    console.Console().result(f"dbgen: graph of {name} (order {order}) written to {output.as_posix()}")


NEW_DOMAIN_OPT = typer.Option(
    [], "--domain", metavar="INPUT=LOW,HIGH",
    help="Where an input's values lie (the build checks every order is finite there; default -2,2); repeat per input.",
)


@command()
def new(
    name: str = typer.Argument(..., metavar="NAME", help="The function's name, lower snake_case; the file is NAME.yaml."),
    expr: str = typer.Option(..., "--expr", metavar="EXPR", help="The formula, e.g. 'x * tanh(softplus(x))'; ** is power."),
    inputs: str = typer.Option(..., "--inputs", metavar="NAMES", help="The input names in call order, comma-separated: x,y."),
    order: int = typer.Option(2, "--order", metavar="N", help="Highest derivative order written out and verified (1 to 8)."),
    params: list[str] = typer.Option([], "--params", metavar="NAME=NUMBER", help="Constants as NAME=NUMBER, comma-separated or repeated."),
    strategy: str | None = typer.Option(
        None, "--strategy", metavar="STRATEGY", help="auto (the default), save_inputs, save_outputs, intermediates or nested."
    ),
    domain: list[str] = NEW_DOMAIN_OPT,
    doc: str | None = typer.Option(None, "--doc", metavar="TEXT", help="A one-line description for the docstring."),
    output: Path | None = typer.Option(
        None, "-o", "--output", metavar="PATH",
        help="A folder, or a .yaml path. Default: specs in pyproject.toml (tool.dbgen), else specs/.",
    ),
) -> None:
    """Write a new spec file, checked as build checks it; never overwrites one.

    Its first line points editors at the spec schema: the nearest
    dbgen-spec.schema.json in its folder or above, else one written beside it.

    Example: dbgen new swish --expr 'x * sigmoid(beta * x)' --inputs x --params beta=1.0 --domain x=-8,8
    """
    from ..spec import config
    from ..tools import scaffold

    try:
        new_spec = scaffold.NewSpec(name, expr, scaffold.parse_inputs(inputs), order,
                                    scaffold.parse_params(params), strategy, doc, scaffold.parse_domain(domain))
        target = scaffold.target_path(name, output, _configured_specs_folder())
        written = _io(target, lambda: scaffold.create(new_spec, target))
    except (scaffold.NewSpecError, config.ConfigError) as exc:
        for line in getattr(exc, "lines", [f"dbgen: {exc}"]):
            console.Console().error(line)
        raise typer.Exit(2) from None
    say = console.Console()
    if written.schema is not None:
        say.result(f"dbgen: wrote {written.schema.as_posix()} (the JSON Schema editors check specs with)")
    shown = written.spec.as_posix()
    say.result(f"dbgen: wrote {shown}; next: dbgen show {shown}, then {_build_hint(written.spec)}")


@command()
def schema(
    output: Path | None = typer.Option(
        None, "-o", "--output", metavar="FILE", help="Write the schema to this file instead of printing it."
    ),
) -> None:
    """Print the JSON Schema (draft 2020-12) of spec files, for editors.

    A spec whose first line is
    # yaml-language-server: $schema=dbgen-spec.schema.json
    is checked against it as you type (VS Code's YAML extension, ...).

    Example: dbgen schema -o specs/dbgen-spec.schema.json
    """
    from ..spec.schema import schema_text

    if output is None:
        typer.echo(schema_text(), nl=False)
        return
    _io(output, lambda: output.write_text(schema_text(), encoding="utf-8"))
    console.Console().result(f"dbgen: schema written to {output.as_posix()}")


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
              tests: Path | None = None):
    """Command-line values over [tool.dbgen] in pyproject.toml over defaults; a bad table exits 2."""
    from ..spec import config

    try:
        return config.resolve(specs, output, jobs, fuse, tests=tests)
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
    from ..build.pipeline import SpecsPathError, discover

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
    from ..build.pipeline import SpecsPathError

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
