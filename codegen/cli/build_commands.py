"""``dbgen build`` and ``dbgen check``: specs -> generated files, and whether those are up to date.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import typer

from .. import console, limits
from .app import (
    CONFIGURED_OUT_OPT,
    CONFIGURED_SPECS_ARG,
    QUIET_OPT,
    SIZE_LIMIT_OPT,
    TESTS_OUT_OPT,
    TIME_LIMIT_OPT,
    VERBOSE_OPT,
    _check_output_dir,
    _io,
    _locked,
    _run,
    _settings,
    _spec_reporter,
    command,
)


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
    cpp: bool | None = typer.Option(
        None, "--cpp/--no-cpp",
        help="Set 'cpp: true' on every spec (its Functions also as the C++ op torch.ops.dbgen.NAME). "
             "Default: cpp in pyproject.toml (tool.dbgen).",
    ),
    force: bool = typer.Option(
        False, "--force", help="Regenerate every spec, even those whose files are up to date."
    ),
    compile_ops: bool = typer.Option(
        False, "--compile",
        help="Compile each C++ op (cpp: true) now, in a fresh process, and print its library's path; a failed "
             "compile exits 1 with the compiler's message.",
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
    settings = _settings(specs, output, jobs, fuse, tests_out, cpp)
    specs, output, jobs, fuse = settings.specs, settings.output, _usable_jobs(settings.jobs, say), settings.fuse
    layout = pipeline.tests_layout(output, settings.tests)
    on_spec = _spec_reporter(say, specs)
    bounds = limits.Limits(seconds=time_limit, size=size_limit)
    _check_output_dir(output)
    with _locked(output):  # for the whole build: a second one into OUTPUT exits 2 at once
        files = _run(lambda: pipeline.generate(specs, root=settings.root, rewrite=not no_rewrite, jobs=jobs,
                                               line_length=settings.line_length,
                                               reuse_from=None if force else output, fuse=fuse, on_spec=on_spec,
                                               limits=bounds, tests=layout, strict=strict, cpp=settings.cpp))
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
    if compile_ops:
        _compile_ops(output, files, say)


def _compile_ops(output: Path, files: dict[str, str], say) -> None:
    """build --compile: each module's C++ op compiled, its library's path printed; exit 1 if one fails."""
    from ..build import compile as ahead

    results = ahead.compile_ops(output, ahead.modules_with_ops(output, files))
    for result in results:
        where = f"{output.as_posix()}/{result.module}"
        if result.library:
            say.result(f"{where}: C++ op compiled: {result.library}")
        else:
            say.error(f"dbgen: {where}: the C++ op could not be built: {result.error}")
    if not results:
        say.note("dbgen: --compile: no spec has cpp: true; nothing to compile")
    if any(result.error for result in results):
        raise typer.Exit(1)


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
    cpp: bool | None = typer.Option(
        None, "--cpp/--no-cpp",
        help="Compare with what 'build --cpp' writes. Default: cpp in pyproject.toml (tool.dbgen).",
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
    settings = _settings(specs, output, jobs, fuse, tests_out, cpp)
    specs, output, fuse = settings.specs, settings.output, settings.fuse
    jobs = _usable_jobs(settings.jobs, say)
    layout = pipeline.tests_layout(output, settings.tests)
    on_spec = _spec_reporter(say, specs)
    bounds = limits.Limits(seconds=time_limit, size=size_limit)
    files = _run(lambda: pipeline.generate(specs, root=settings.root, rewrite=not no_rewrite, fuse=fuse, on_spec=on_spec,
                                           line_length=settings.line_length, jobs=jobs,
                                           reuse_from=None if force else output,
                                           limits=bounds, tests=layout, cpp=settings.cpp), writes=False)
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
    command += " --cpp" if settings.cpp else ""
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
