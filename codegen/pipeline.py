"""The whole pipeline, spec files -> generated file contents, with no I/O beyond reading specs.

spec -> expr -> plan (symbolic inside) -> render. ``write`` and the CLI sit on top of this.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
from pathlib import Path

from . import __version__, limits as bounds
from .errors import Problem, SpecErrors
from .write import header
from .spec import Spec, display_path, load_spec, native_problems

SPEC_SUFFIXES = (".yaml", ".yml")


class SpecsPathError(SpecErrors):
    """SPECS itself is wrong (missing, or holding no spec files): an argument problem, not a problem
    in a spec, so the CLI reports it as one line without a line number."""


def discover(specs: Path) -> list[Path]:
    """The spec files under ``specs`` (a file or a directory, searched recursively), sorted."""
    if specs.is_file():
        return [specs]
    if not specs.is_dir():
        raise SpecsPathError([Problem(display_path(specs), 1, "no such file or directory; give a spec file or a folder of them")])
    found = sorted(
        (p for p in specs.rglob("*") if p.suffix in SPEC_SUFFIXES and p.is_file()),
        key=lambda p: p.relative_to(specs).as_posix(),
    )
    if not found:
        raise SpecsPathError([Problem(display_path(specs), 1, "no *.yaml or *.yml spec files found here")])
    return found


def load_specs(paths: list[Path], root: Path | None = None, check_expr: bool = True) -> list[Spec]:
    """Load every spec, reporting every problem of every file together; names must be unique."""
    problems: list[Problem] = []
    specs: list[Spec] = []
    for path in paths:
        try:
            specs.append(load_spec(path, display_path(path, root), check_expr))
        except SpecErrors as errors:
            problems.extend(errors.problems)
    first_seen: dict[str, Spec] = {}
    for spec in sorted(specs, key=lambda s: s.path):
        if spec.name in first_seen:
            other = first_seen[spec.name]
            problems.append(spec.problem("name", f"name '{spec.name}' is also used by {other.path}; names must be unique"))
        first_seen.setdefault(spec.name, spec)
    if problems:
        raise SpecErrors(problems)
    return sorted(specs, key=lambda s: s.name)


def generate(
    specs_path: Path,
    root: Path | None = None,
    rewrite: bool = True,
    jobs: int = 1,
    reuse_from: Path | None = None,
    fuse: bool = False,
    on_spec=None,
    limits: bounds.Limits = bounds.DEFAULT,
) -> dict[str, str]:
    """Relative output path -> file content for every spec under ``specs_path``; all or nothing.

    ``rewrite=False`` (``--no-rewrite``) prints formulas exactly as SymPy differentiates them.
    ``fuse=True`` (``--fuse``) sets ``fuse: true`` on every spec. ``jobs`` > 1 generates specs in that many processes. With ``reuse_from``, a spec whose files
    there already carry its header (same spec hash, version and options) is not generated again:
    its files are read back. ``on_spec(spec, seconds)`` is called as each spec is done (``seconds``
    is None for a spec reused as up to date), for progress and --verbose lines. ``limits`` bounds
    each spec's symbolic work (``--time-limit``, ``--size-limit``; see ``limits.py``).
    """
    paths = discover(specs_path)
    try:
        specs = load_specs(paths, root, check_expr=reuse_from is None)
    except SpecErrors:
        if reuse_from is None:
            raise
        load_specs(paths, root, check_expr=True)  # raises again, now with every expression's problems too
        raise
    if fuse:
        specs = [dataclasses.replace(spec, fuse=True) for spec in specs]
    files: dict[str, str] = {}
    todo = []
    for spec in specs:
        kept = reusable_files(reuse_from, spec, spec.digest(__version__, rewrite)) if reuse_from else None
        if kept is None:
            todo.append(spec)
        else:
            files.update(kept)
            if on_spec is not None:
                on_spec(spec, None)
    # load_specs(check_expr=False) left native unchecked: check it for the specs generated now
    problems: list[Problem] = [p for spec in todo for p in native_problems(spec)] if reuse_from is not None else []
    generate_each = functools.partial(_generate_collecting, rewrite=rewrite, limits=limits)
    for spec, (generated, found, seconds) in zip(todo, _map(generate_each, todo, jobs)):
        files.update(generated)
        problems.extend(found)
        if on_spec is not None:
            on_spec(spec, seconds)
    if problems:
        raise SpecErrors(problems)
    digest = hashlib.sha256("".join(f"{s.name}:{s.digest(__version__, rewrite)}\n" for s in specs).encode()).hexdigest()
    shown = display_path(specs_path, root)
    kept = _reusable(reuse_from / "__init__.py", header(shown, digest)) if reuse_from else None
    # read back when up to date: rendering imports SymPy (0.6 s), most of an unchanged rebuild
    files["__init__.py"] = kept if kept is not None else render_init([s.name for s in specs], shown, digest)
    return files


def render_init(names: list[str], specs_path: str, digest: str) -> str:
    from .render import render_init as render

    return render(names, specs_path, digest)


def plan_spec(spec: Spec, rewrite: bool = True):
    """The ``ModulePlan`` of one spec (imports SymPy and the later stages on first use)."""
    from .expr import ExprError, parse_expr
    from .memory import excess
    from .plan import make_plan
    from .rewrite import identity, stabilize

    try:
        expr = parse_expr(spec.expr, spec.inputs, spec.param_names)
    except ExprError as exc:
        raise SpecErrors([spec.problem("expr", f"expr: {exc}")]) from None
    return make_plan(spec, expr, stabilize if rewrite else identity, accept=excess)


def generate_one(spec: Spec, rewrite: bool = True, limits: bounds.Limits = bounds.DEFAULT) -> dict[str, str]:
    """The module and test file of one spec; work past ``limits`` is a problem on its ``expr`` line."""
    from . import domain
    from . import memory  # noqa: F401 - imports torch before the time limit starts (memory.py)
    from .render import render_module, render_tests

    try:
        with bounds.enforced(limits):
            plan = plan_spec(spec, rewrite)
            domain.check(spec, plan.expr)
            digest = spec.digest(__version__, rewrite)
            return {f"{spec.name}.py": render_module(plan, digest),
                    f"tests/test_{spec.name}.py": render_tests(plan, digest)}
    except bounds.LimitExceeded as exceeded:
        raise SpecErrors([spec.problem("expr", f"expr: {exceeded.message()}")]) from None


def reusable_files(out: Path, spec: Spec, digest: str) -> dict[str, str] | None:
    """The spec's generated files in ``out`` if both carry exactly the header a build would write."""
    expected = header(spec.path, digest)
    kept = {}
    for rel in (f"{spec.name}.py", f"tests/test_{spec.name}.py"):
        text = _reusable(out / rel, expected)
        if text is None:
            return None
        kept[rel] = text
    return kept


def _reusable(path: Path, expected_header: str) -> str | None:
    """The text of ``path`` if it starts with ``expected_header``, else None."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return text if text.startswith(expected_header + "\n") else None


def _generate_collecting(spec: Spec, rewrite: bool, limits: bounds.Limits) -> tuple[dict[str, str], list[Problem], float]:
    """generate_one, with problems returned rather than raised (they cross process boundaries),
    and the seconds it took, measured where it ran."""
    start = time.perf_counter()
    try:
        return generate_one(spec, rewrite, limits), [], time.perf_counter() - start
    except SpecErrors as errors:
        return {}, errors.problems, time.perf_counter() - start


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
