"""The whole pipeline: spec files -> generated file contents, each spec in a worker of its own.

Each spec goes spec -> language -> derive -> plan (``planning``, with the checks a build runs) ->
emit; ``discover`` finds and loads the spec files, ``layout`` places the tests and the package's
files. Nothing is written here: ``write`` commits what this returns. This module is the build
stage's face: ``generate`` and the names the CLI, the tools and the tests read (``__all__``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from .. import limits as bounds
from ..errors import Problem, SpecErrors
from ..provenance import header, header_source, seal
from ..spec import DEFAULT_LINE_LENGTH, Spec, config, load_spec, native_problems
from .discover import discover, load_specs, shown_specs
from .layout import (
    CHECKS_FILE,
    DEFAULT_LAYOUT,
    TestsLayout,
    _package_files,
    _reusable,
    _support_digest,
    render_support,
    tests_layout,
)
from .planning import (
    BUILD_POINTS,
    _planned,
    _reference_domain,
    external_calls,
    measured_accuracy,
    plan_spec,
)

__all__ = [  # the build stage as the CLI, the tools and the tests read it
    "BUILD_POINTS", "discover", "external_calls", "generate", "generate_one", "load_spec", "load_specs",
    "measured_accuracy", "plan_spec", "render_support", "reusable_files", "spec_state", "tests_layout",
]


def generate(
    specs_path: Path | Sequence[Path],
    root: Path | None = None,
    rewrite: bool = True,
    jobs: int = 1,
    reuse_from: Path | None = None,
    fuse: bool = False,
    on_spec=None,
    limits: bounds.Limits = bounds.DEFAULT,
    tests: TestsLayout | None = None,
    line_length: int | None = None,
    strict: bool = False,
    cpp: bool = False,
) -> dict[str, str]:
    """Every spec under ``specs_path`` generated: its module and test files, all or nothing.

    Args:
        specs_path: a spec file or folder, or several.
        root: the project's folder, which the generated headers' spec paths are relative to.
        rewrite: False (``--no-rewrite``) prints formulas exactly as SymPy differentiates them.
        jobs: more than 1 generates specs in that many processes.
        reuse_from: the output folder; a spec whose files there carry the header a build would
            write (same spec hash, version and options) and are as dbgen wrote them (their body
            hash matches) is read back, not generated again.
        fuse: True (``--fuse``) sets ``fuse: true`` on every spec.
        on_spec: ``on_spec(spec, seconds, notes=(), warnings=())`` as each spec is done, for
            progress and --verbose lines: ``seconds`` None for a spec read back; ``notes`` the
            candidates auto left out or passed over (``ModulePlan.notes``); ``warnings`` the orders
            the accuracy oracle (accuracy/) found losing more bits than its bound.
        limits: each spec's bound on symbolic work (``--time-limit``, ``--size-limit``; limits.py).
        tests: where the tests go (``tests_layout``); None: OUT/tests.
        line_length: what the code is wrapped and formatted to; None: the project's
            (``config.line_length`` from ``root``, else the current folder).
        strict: ``--strict``: an accuracy warning is a problem, and nothing is generated.
        cpp: True (``--cpp``) sets ``cpp: true`` on every spec.

    Returns:
        Relative output path -> file content (headers sealed), for ``write.commit``.

    Raises:
        SpecErrors: every problem of every spec, each at its file and line.
    """
    paths = discover(specs_path)
    try:
        specs = load_specs(paths, root, check_expr=reuse_from is None)
    except SpecErrors:
        if reuse_from is None:
            raise
        load_specs(paths, root, check_expr=True)  # raises again, now with every expression's problems too
        raise
    options = {**({"fuse": True} if fuse else {}), **({"cpp": True} if cpp else {})}
    specs = [dataclasses.replace(spec, **options) for spec in specs]
    if line_length is None:
        line_length = config.line_length(root)
    if line_length != DEFAULT_LINE_LENGTH:
        specs = [dataclasses.replace(spec, line_length=line_length) for spec in specs]
    layout = tests or DEFAULT_LAYOUT
    files: dict[str, str] = {}
    todo = []
    for spec in specs:
        kept = reusable_files(reuse_from, spec, spec.digest(__version__, rewrite), layout) if reuse_from else None
        if kept is None:
            todo.append(spec)
        else:
            files.update(kept)
            if on_spec is not None:
                on_spec(spec, None)
    # load_specs(check_expr=False) left native unchecked: check it for the specs generated now
    problems: list[Problem] = [p for spec in todo for p in native_problems(spec)] if reuse_from is not None else []
    generate_each = functools.partial(_generate_collecting, rewrite=rewrite, limits=limits, layout=layout,
                                      strict=strict)
    for spec, (generated, found, seconds, notes, warnings) in zip(todo, _map(generate_each, todo, jobs)):
        files.update(generated)
        problems.extend(found)
        if on_spec is not None:
            on_spec(spec, seconds, notes, warnings)
    if problems:
        raise SpecErrors(problems)
    files.update(_package_files([s.name for s in specs], shown_specs(specs_path, root), layout, reuse_from,
                                line_length))
    return files


def generate_one(spec: Spec, rewrite: bool = True, limits: bounds.Limits = bounds.DEFAULT) -> dict[str, str]:
    """The module and test file of one spec, and the checks the test file imports (so that the
    files run as they are written); work past ``limits`` is a problem on its ``expr`` line."""
    files = _generate_noting(spec, rewrite, limits)[0]
    checks = render_support("dbgen_checks.py", spec.path, _support_digest(spec.line_length), spec.line_length)
    return {**files, f"tests/{CHECKS_FILE}": checks}


def _generate_noting(spec: Spec, rewrite: bool, limits: bounds.Limits) -> tuple[dict[str, str], tuple[str, ...], tuple[str, ...]]:
    """generate_one, what auto left out or passed over (``ModulePlan.notes``, for --verbose), and
    the orders the accuracy oracle found over its bound (warnings)."""
    from ..signals import import_torch

    import_torch()  # before the time limit starts (memory.py imports it)
    from ..emit.cpp import CppUnsupported
    from ..emit.render import render_module
    from ..emit.suite import render_tests

    try:
        with bounds.enforced(limits):
            plan, measured = _planned(spec, rewrite, check_domain=True)
    except bounds.LimitExceeded as exceeded:
        raise SpecErrors([spec.problem("expr", f"expr: {exceeded.message()}")]) from None
    digest = spec.digest(__version__, rewrite)
    try:
        module = render_module(plan, digest)
    except CppUnsupported as refused:
        how = "remove cpp" if "cpp" in dict(spec.lines) else "build this spec without --cpp (or cpp in [tool.dbgen])"
        raise SpecErrors([spec.problem("cpp", f"cpp: true cannot compute {refused} in C++ yet; {how}")]) from None
    # what is measured: the Python Functions (a C++ op's, the same formulas, is compiled on import)
    python_only = render_module(plan, digest, with_op=False) if spec.cpp else module
    if measured is None:  # a strategy the spec chose: measured here, outside the time limit
        measured = measured_accuracy(plan, python_only)
    from ..derive.param_values import other_param_values

    other = other_param_values(plan.every_formula, spec.params, spec.inputs, spec.domain)
    reference = _reference_domain(plan, measured, python_only, other)
    tests = render_tests(plan, digest, measured, reference, other)
    files = {f"{spec.name}.py": module, f"tests/test_{spec.name}.py": tests}
    return files, plan.notes, tuple(measured.warnings()) if measured else ()


def reusable_files(out: Path, spec: Spec, digest: str, layout: TestsLayout | None = None) -> dict[str, str] | None:
    """The spec's generated files in ``out`` if both carry exactly the header a build would write
    and are as dbgen wrote them (a file edited by hand is generated again, and so rewritten), and
    the test file tests the module in ``out``."""
    from .write import tested_folder

    expected = header(spec.path, digest)
    kept = {}
    module, test = f"{spec.name}.py", (layout or DEFAULT_LAYOUT).test_file(spec.name)
    for rel in (module, test):
        text = _reusable(out / rel, expected)
        if text is None:
            return None
        kept[rel] = text
    # the test file's _PATH names the output's folder where the tests lie outside it: after OUT
    # was renamed (out -> out2), the old file led to out/ and was kept, and check called it current
    if tested_folder(out / test, kept[test]) != Path(os.path.realpath(out)):
        return None
    return kept


@dataclasses.dataclass(frozen=True)
class SpecState:
    """Whether a generated file's spec still says what the file was built from (``spec_state``):
    ``state`` is "current", "absent" (no spec file found, or no dbgen header) or "changed";
    ``message`` says which file and what to run."""

    state: str
    message: str = ""


def spec_state(generated: Path) -> SpecState:
    """Compare the spec named in ``generated``'s header with the hash the header records.

    The spec is looked for at the header's path (relative to the project's root) from each folder
    above the file, nearest first. Its hash is computed as the build computed it, with the
    version the header names (so that a newer dbgen alone changes nothing here; ``dbgen check``
    tells that), the project's line length and each of the build options a digest can hold
    (--no-rewrite, --fuse, --cpp), none of which the header records apart. What the generated tests run
    (``test_spec_unchanged``): tests that pass against a spec edited since are no evidence."""
    try:
        first, second = generated.read_text(encoding="utf-8").split("\n", 2)[:2]
    except (OSError, UnicodeDecodeError, ValueError):
        return SpecState("absent", f"{generated.name}: cannot read its header")
    source = header_source(first)
    if source is None or not second.startswith("# spec-sha256: "):
        return SpecState("absent", f"{generated.name} has no dbgen header")
    version, spec_path = source
    root = next((folder for folder in generated.resolve().parents if (folder / spec_path).is_file()), None)
    if root is None:
        return SpecState("absent", f"{spec_path} is not found in any folder above {generated.name}")
    command = _rebuild_command(generated.resolve().parent, root)
    try:
        spec = load_spec(root / spec_path, spec_path, check_expr=False)
    except SpecErrors as errors:
        return SpecState("changed", f"{spec_path} no longer loads ({errors.problems[0]}); fix it, then run: {command}")
    line_length = config.line_length(root)
    if line_length != DEFAULT_LINE_LENGTH:
        spec = dataclasses.replace(spec, line_length=line_length)
    digests = {dataclasses.replace(spec, fuse=fuse, cpp=cpp).digest(version, rewrite)
               for fuse in {spec.fuse, True} for cpp in {spec.cpp, True} for rewrite in (True, False)}
    if second.removeprefix("# spec-sha256: ") in digests:
        return SpecState("current")
    return SpecState("changed", f"{spec_path} has changed since dbgen built {generated.name} from it; run: {command}")


def _rebuild_command(out: Path, root: Path) -> str:
    """The build that brings OUT up to date, as far as OUT's files tell (its ``__init__.py`` names
    the specs it was built from)."""
    try:
        first = (out / "__init__.py").read_text(encoding="utf-8").split("\n", 1)[0]
    except (OSError, UnicodeDecodeError):
        first = ""
    specs = (header_source(first) or ("", ""))[1]
    built = Path(os.path.relpath(out, root)).as_posix()
    return (f"dbgen build {specs + ' ' if specs else ''}-o {built} (with your other build options); "
            "dbgen check lists every stale file")


def _placed(files: dict[str, str], name: str, layout: TestsLayout,
            line_length: int = DEFAULT_LINE_LENGTH) -> dict[str, str]:
    """``generate_one``'s files where ``layout`` puts them, each sealed with its body hash."""
    test_text = files.pop(f"tests/test_{name}.py")
    if layout.back != DEFAULT_LAYOUT.back:
        test_text = _relocated(test_text, name, layout, line_length)
    files[layout.test_file(name)] = test_text
    return {rel: seal(text) for rel, text in files.items()}


def _relocated(test_text: str, name: str, layout: TestsLayout, line_length: int = DEFAULT_LINE_LENGTH) -> str:
    """A test file whose ``_PATH`` line finds the module from the layout's tests folder (the
    template writes the default layout's; a path of any length is then formatted as ruff does)."""
    from ..emit.text import ruff_formatted

    default = f"\n_PATH = {DEFAULT_LAYOUT.module_path(name)}\n"
    if default not in test_text:
        raise RuntimeError(f"the test template's _PATH line is not {default.strip()!r}")
    return ruff_formatted(test_text.replace(default, f"\n_PATH = {layout.module_path(name)}\n", 1), line_length)


def _generate_collecting(spec: Spec, rewrite: bool, limits: bounds.Limits,
                         layout: TestsLayout = None, strict: bool = False):
    """generate_one, placed by the tests layout and sealed, with problems returned rather than
    raised (they cross process boundaries), the seconds it took, measured where it ran, the
    plan's notes and the accuracy warnings (problems with ``strict``)."""
    start = time.perf_counter()
    try:
        files, notes, warnings = _generate_noting(spec, rewrite, limits)
        if strict and warnings:
            return {}, [spec.problem("expr", f"expr: accuracy: {w}") for w in warnings], 0.0, (), ()
        placed = _placed(files, spec.name, layout or DEFAULT_LAYOUT, spec.line_length)
        return placed, [], time.perf_counter() - start, notes, warnings
    except SpecErrors as errors:
        return {}, errors.problems, time.perf_counter() - start, (), ()


def _map(function, items: list, jobs: int):
    """``map`` in order, in ``jobs`` processes when there is more than one thing to do."""
    if jobs <= 1 or len(items) <= 1:
        yield from map(function, items)
        return
    import multiprocessing

    # A Pool rather than a ProcessPoolExecutor: leaving the block on an exception (SIGTERM, Ctrl-C)
    # terminates the workers instead of waiting up to a time limit for the specs they are on.
    with multiprocessing.Pool(min(jobs, len(items)), initializer=_worker_signals) as pool:
        yield from pool.imap(function, items)  # one result at a time, in order, for progress


def _worker_signals() -> None:
    """Workers leave SIGINT (a Ctrl-C reaches the whole process group) to the main process,
    which terminates them, and die quietly on SIGTERM instead of running the CLI's handler."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
