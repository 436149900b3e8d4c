"""The whole pipeline, spec files -> generated file contents, with no I/O beyond reading specs.

spec -> expr -> plan (symbolic inside) -> render. ``write`` and the CLI sit on top of this.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import posixpath
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from .. import __version__
from .. import limits as bounds
from ..errors import Problem, SpecErrors
from ..provenance import header, header_source, seal, sealed_header
from ..spec import (
    DEFAULT_LINE_LENGTH,
    Spec,
    config,
    display_path,
    load_spec,
    native_problems,
)

SPEC_SUFFIXES = (".yaml", ".yml")
CHECKS_FILE = "_dbgen_checks.py"  # the generated tests' shared checks, one per tests folder


class SpecsPathError(SpecErrors):
    """SPECS itself is wrong (missing, or holding no spec files): an argument problem, not a problem
    in a spec, so the CLI reports it as one line without a line number."""


def discover(specs: Path | Sequence[Path]) -> list[Path]:
    """The spec files under ``specs`` (files and directories, searched recursively), each once:
    a folder's in the order of their paths in it, folders and files in the order given."""
    found: dict[Path, Path] = {}  # resolved -> as given: a file named twice (specs/ specs/a.yaml) is one
    for path in [specs] if isinstance(specs, (str, Path)) else specs:
        for spec_file in _discover_one(Path(path)):
            found.setdefault(spec_file.resolve(), spec_file)
    return list(found.values())


def _discover_one(specs: Path) -> list[Path]:
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


def shown_specs(specs: Path | Sequence[Path], root: Path | None = None) -> str:
    """How the header of a file made from all specs (``__init__.py``) names them: the one path
    given, else the folder that holds them all (``specs/*.yaml`` reads as ``specs``, as
    ``specs/`` does, so that the two builds write the same files)."""
    paths = [specs] if isinstance(specs, (str, Path)) else list(specs)
    if len(paths) == 1:
        return display_path(paths[0], root)
    folders = [str(p.resolve() if p.is_dir() else p.resolve().parent) for p in map(Path, paths)]
    return display_path(Path(os.path.commonpath(folders)), root)


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
            the accuracy oracle (accuracy.py) found losing more bits than its bound.
        limits: each spec's bound on symbolic work (``--time-limit``, ``--size-limit``; limits.py).
        tests: where the tests go (``tests_layout``); None: OUT/tests.
        line_length: what the code is wrapped and formatted to; None: the project's
            (``config.line_length`` from ``root``, else the current folder).
        strict: ``--strict``: an accuracy warning is a problem, and nothing is generated.

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
    if fuse:
        specs = [dataclasses.replace(spec, fuse=True) for spec in specs]
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


@dataclasses.dataclass(frozen=True)
class TestsLayout:
    """Where the generated tests go, relative to the output (OUT), and what makes pytest's default
    import mode (prepend) collect them beside a user's own tests of the same name.

    Inside OUT (the default OUT/tests): package markers (``__init__.py``) from OUT down to the
    folder, so that pytest names a test ``OUT.tests.test_NAME`` (OUT's own package: nothing is
    shadowed) instead of a bare ``test_NAME`` that clashes with the user's ``tests/test_NAME.py``.
    Outside OUT: no marker (the folder's name would become a top-level package, ``generated`` for
    ``tests/generated``, shadowing the real one), and basenames of their own, ``test_dbgen_NAME.py``.
    """

    folder: str = "tests"  # the tests' folder from OUT: normalized, '/' separators
    back: str = ".."  # OUT from the tests' folder

    @property
    def inside(self) -> bool:
        return not (self.folder == ".." or self.folder.startswith("../"))

    def test_file(self, name: str) -> str:
        return self.path(f"test_{name}.py" if self.inside else f"test_dbgen_{name}.py")

    def path(self, file_name: str) -> str:
        return posixpath.normpath(f"{self.folder}/{file_name}")

    def markers(self) -> list[str]:
        """The ``__init__.py`` files that make each folder from OUT (excluded) to the tests a package."""
        if not self.inside or self.folder == ".":
            return []
        parts = self.folder.split("/")
        return ["/".join([*parts[:end], "__init__.py"]) for end in range(1, len(parts) + 1)]

    def module_path(self, name: str) -> str:
        """The test files' ``_PATH`` expression: the module ``name``.py found from the test file, every
        folder name in it a string literal (data, whatever characters the name holds)."""
        parts = [p for p in self.back.split("/") if p != "."]
        ups = 0
        while parts and parts[0] == "..":
            ups, parts = ups + 1, parts[1:]
        base = "pathlib.Path(__file__).resolve()" + (".parent.parent" if ups == 1 else f".parents[{ups}]")
        return " / ".join([base, *(_string_literal(p) for p in [*parts, f"{name}.py"])])


def _string_literal(text: str) -> str:
    """``text`` as a Python string literal in double quotes, as ruff writes one: quotes, backslashes
    and what is not printable (line breaks, control characters, a non-UTF-8 name's surrogates)
    escaped."""
    return '"' + "".join("\\" + c if c in '\\"' else c if c.isprintable() else repr(c)[1:-1] for c in text) + '"'


DEFAULT_LAYOUT = TestsLayout()


def tests_layout(out: Path, tests: Path | None) -> TestsLayout:
    """The layout of tests in the folder ``tests`` for the output ``out`` (both as given, relative
    to the working directory or absolute); None: OUT/tests."""
    if tests is None:
        return DEFAULT_LAYOUT
    out_abs, tests_abs = os.path.abspath(out), os.path.abspath(tests)
    return TestsLayout(Path(os.path.relpath(tests_abs, out_abs)).as_posix(), Path(os.path.relpath(out_abs, tests_abs)).as_posix())


def _package_files(names: list[str], shown: str, layout: TestsLayout, reuse_from: Path | None,
                   line_length: int = DEFAULT_LINE_LENGTH) -> dict[str, str]:
    """OUT/__init__.py, and the tests' conftest.py, shared checks and package markers. Their headers
    hash only what they depend on (the set of names, the version), so that editing one spec
    rewrites that spec's files only; they are read back when up to date (rendering imports SymPy,
    0.6 s: most of an unchanged rebuild)."""
    init_digest = hashlib.sha256(
        f"dbgen {__version__}{_width_key(line_length)}\n{chr(10).join(sorted(names))}\n".encode()).hexdigest()
    support_digest = _support_digest(line_length)
    wanted = {"__init__.py": (init_digest, lambda: render_init(names, shown, init_digest, line_length)),
              layout.path("conftest.py"): (support_digest,
                                           lambda: render_support("conftest.py", shown, support_digest, line_length)),
              layout.path(CHECKS_FILE): (support_digest,
                                         lambda: render_support("dbgen_checks.py", shown, support_digest, line_length))}
    for marker in layout.markers():
        wanted[marker] = (support_digest,
                          lambda: render_support("tests_init.py", shown, support_digest, line_length))
    files = {}
    for rel, (digest, render) in wanted.items():
        kept = _reusable(reuse_from / rel, header(shown, digest)) if reuse_from else None
        files[rel] = kept if kept is not None else render()
    return files


def _support_digest(line_length: int = DEFAULT_LINE_LENGTH) -> str:
    """The header digest of the tests' files that depend on no spec: the version (and the line
    length) decide them."""
    return hashlib.sha256(f"dbgen {__version__} tests support{_width_key(line_length)}\n".encode()).hexdigest()


def _width_key(line_length: int) -> str:
    """What a line length adds to a package file's digest: nothing at the default, so that default
    builds keep their digests."""
    return "" if line_length == DEFAULT_LINE_LENGTH else f" line-length {line_length}"


def render_init(names: list[str], specs_path: str, digest: str, line_length: int = DEFAULT_LINE_LENGTH) -> str:
    from ..emit.render import render_init as render

    return seal(render(names, specs_path, digest, line_length))


def render_support(template: str, specs_path: str, digest: str,
                   line_length: int = DEFAULT_LINE_LENGTH) -> str:
    """A file of the generated tests' that depends on no spec (``templates/NAME.jinja``)."""
    from ..emit.render import render_support as render

    return seal(render(template, specs_path, digest, line_length))


def plan_spec(spec: Spec, rewrite: bool = True, check_domain: bool = False):
    """The ``ModulePlan`` of one spec (imports SymPy and the later stages on first use); with
    ``check_domain``, a spec not finite on its domain is refused first (domain.py)."""
    return _planned(spec, rewrite, check_domain)[0]


def _planned(spec: Spec, rewrite: bool, check_domain: bool):
    """``plan_spec``'s plan, and the accuracy oracle's report on it where auto measured it (else
    None)."""
    from ..derive.rewrite import identity, stabilize
    from ..plan import make_plan

    formulas = _guarded_formulas(spec, rewrite)
    guarded = tuple(formula.planned for formula in formulas)
    shown = tuple(formula.shown for formula in formulas)
    checked = not check_domain or all(_domain_checked(spec, f.planned, f.key) for f in formulas)
    accurate = AccuracyBound(spec)
    plan = make_plan(spec, guarded, stabilize if rewrite else identity, accept=_criteria(accurate), shown=shown)
    report = accurate.reports.get(plan.strategy)
    if rewrite and _over_in_tanhs_tails(plan, report):
        plan, report = _with_exact_tails(spec, guarded, shown, plan, report)
    if not checked:
        from ..derive import domain

        for formula in formulas:
            domain.check(spec, formula.planned, formula.key)
    return plan, report


def _criteria(accurate: AccuracyBound):
    """auto's criteria in their order (plan.strategy._ranked_choice): the memory bound, then the accuracy
    bound as ``accurate`` measures it."""
    from .memory import excess

    return (("the memory bound", excess), ("the accuracy bound", accurate.refusal))


class GuardedFormula(NamedTuple):
    """One formula of a spec as planning takes it (``planned``: flat exponentials cut where they
    underflow, removable singularities split, branches guarded) and as the docstrings and the
    tests' reference write it (``shown``: without the cuts, which are not the user's formula)."""

    key: str
    planned: object
    shown: object


def _guarded_formulas(spec: Spec, rewrite: bool = True) -> tuple[GuardedFormula, ...]:
    """Per formula of ``spec`` (underflow.py, series.py, branches.py), in the spec's order."""
    import sympy

    from ..derive.branches import guard
    from ..derive.rewrite import identity, inverse_hyperbolics
    from ..derive.series import removable
    from ..derive.underflow import cut_underflows
    from ..language.expr import spec_formulas
    from ..language.external import bessel_powers

    def whole(formula):  # --no-rewrite: the derivatives as SymPy writes them
        return inverse_hyperbolics(bessel_powers(formula)) if rewrite else identity(formula)

    inputs = [sympy.Symbol(name, real=True) for name in spec.inputs]
    guarded = []
    for key, formula in spec_formulas(spec):
        written = whole(formula)
        cut = cut_underflows(written, inputs)
        planned = guard(removable(cut, spec), spec)
        guarded.append(GuardedFormula(key, planned, planned if cut is written else guard(removable(written, spec), spec)))
    return tuple(guarded)


def check_finite(spec: Spec) -> None:
    """Raise SpecErrors where the function or a derivative up to the spec's order is not finite
    somewhere on its domain, as ``build`` refuses it (domain.py): what ``dbgen new`` checks before
    it writes a spec. A check that meets a size or time limit passes here; the build reports it."""
    for formula in _guarded_formulas(spec):
        _domain_checked(spec, formula.planned, formula.key)


def _over_in_tanhs_tails(plan, report) -> bool:
    """Whether ``plan`` is over the accuracy bound and computes tanh or its derivative, which
    ``rewrite.stabilize_tails`` writes exactly in its tails."""
    import sympy

    from ..derive.rewrite import Sech2

    if report is None or not report.over_bound():
        return False
    values = (value for function in plan.functions for block in function.blocks for value in block.values)
    return any(value.has(sympy.tanh, Sech2) for value in values)


def _with_exact_tails(spec: Spec, guarded, shown, plan, report):
    """The plan with tanh's derivative as sigmoids (``rewrite.stabilize_tails``) where that one is
    within the accuracy bound at every order, else ``plan``: the sigmoids cost about four kernels
    where ``tanh_backward`` takes one, paid only where the domain reaches the tails."""
    from dataclasses import replace

    from ..derive.rewrite import stabilize_tails
    from ..plan import make_plan

    accurate = AccuracyBound(spec)
    exact = make_plan(spec, guarded, stabilize_tails, accept=_criteria(accurate), shown=shown)
    exact_report = accurate.reports.get(exact.strategy)
    if exact_report is None or exact_report.over_bound():  # measured only where within the memory bound
        return plan, report
    worst = max(report.over_bound(), key=lambda figures: figures.max_excess)
    note = (f"tanh's derivative written with sigmoids, exact in its tails: with 1 - tanh(u)**2 the plan lost "
            f"{worst.max_excess:.0f} bits at order {worst.order} in {worst.dtype} on the domain")
    return replace(exact, reason=f"{exact.reason}; {note}", notes=(*exact.notes, note)), exact_report


class AccuracyBound:
    """auto's second criterion, after the memory bound: a candidate the accuracy oracle finds over
    its bound is passed over where a dearer one is within it (softplus at order 3: autograd through
    save_inputs' backward, torch.sigmoid's, loses every bit of the third derivative near 0, which
    nested's formulas keep). Each candidate is measured once at ``BUILD_POINTS``, all against one
    truth (``accuracy.Oracle``); the chosen one's report is the build's."""

    def __init__(self, spec: Spec):
        self._spec = spec
        self._oracle = None
        self.reports = {}  # strategy -> accuracy.Report

    def refusal(self, plan) -> str | None:
        """None where ``plan`` is within the bound at every order; else where it loses most."""
        from .. import limits
        from . import accuracy

        if plan.spec.externs:
            return None  # no exact values to compare with
        with limits.paused():  # measuring is not symbolic work
            report = self._measured(plan)
        over = report.over_bound()
        if not over:
            return None
        worst = max(over, key=lambda figures: figures.max_excess)
        return (f"loses {worst.max_excess:.0f} bits beyond its conditioning at order {worst.order} in "
                f"{worst.dtype} (the accuracy oracle's bound: {accuracy.BOUND_BITS[worst.dtype]:g})")

    def _measured(self, plan):
        from . import accuracy

        if plan.strategy not in self.reports:
            if self._oracle is None:
                self._oracle = accuracy.Oracle(plan.spec, BUILD_POINTS)
            self.reports[plan.strategy] = self._oracle.measure(plan)  # autograd's too: the tests' reference domain
        return self.reports[plan.strategy]


def external_calls(spec: Spec) -> list[str]:
    """The names of the external functions (SciPy's, the spec's externs) the spec calls: it is then
    generated nested only, and has no formula in torch ops to compare or time it against."""
    from ..language.expr import spec_formulas
    from ..language.external import calls

    return [cls.language for cls in calls([formula for _, formula in spec_formulas(spec)])]


def _domain_checked(spec: Spec, expr, key: str = "expr") -> bool:
    """Refuse a spec not finite on its domain before auto's memory bound runs the candidates' code
    there (0**x: a NaN gradient); False where the check's own derivatives meet a limit first, so
    that planning reports the limit for every strategy it tries, and the check runs after it."""
    from ..derive import domain

    try:
        domain.check(spec, expr, key)
    except bounds.LimitExceeded:
        return False
    return True


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
    from ..emit.render import render_module
    from ..emit.suite import render_tests

    try:
        with bounds.enforced(limits):
            plan, measured = _planned(spec, rewrite, check_domain=True)
    except bounds.LimitExceeded as exceeded:
        raise SpecErrors([spec.problem("expr", f"expr: {exceeded.message()}")]) from None
    digest = spec.digest(__version__, rewrite)
    module = render_module(plan, digest)
    if measured is None:  # a strategy the spec chose: measured here, outside the time limit
        measured = measured_accuracy(plan, module)
    from ..derive.param_values import other_param_values

    other = other_param_values(plan.every_formula, spec.params, spec.inputs, spec.domain)
    reference = _reference_domain(plan, measured, module, other)
    tests = render_tests(plan, digest, measured, reference, other)
    files = {f"{spec.name}.py": module, f"tests/test_{spec.name}.py": tests}
    return files, plan.notes, tuple(measured.warnings()) if measured else ()


BUILD_POINTS = 256  # the accuracy oracle's points per dtype at build time, as dbgen accuracy's: one set of warnings


def _reference_domain(plan, measured, module: str, other: dict | None) -> dict | None:
    """Where the generated tests compare with autograd through the composed expression
    (``accuracy.reference_domain``): measured at the params' defaults, and where that leaves out
    part of the domain, at ``other``, the params' other values the tests run at too (whose bad
    tails lie elsewhere: softplus(beta*x)/beta's scale with 1/beta)."""
    from dataclasses import replace

    from . import accuracy

    if measured is None:
        return None
    spec = plan.spec
    domain = dict(spec.domain)
    if accuracy.reference_domain([measured], domain) is None:
        return None
    reports = [measured]
    if other:
        at_other = replace(plan, spec=replace(spec, params=tuple((name, other[name]) for name, _ in spec.params)))
        reports.append(accuracy.measure(at_other, BUILD_POINTS, source=module))
    return accuracy.reference_domain(reports, domain)


def measured_accuracy(plan, module: str):
    """The accuracy oracle's report on ``plan``'s ``module`` (its text) at ``BUILD_POINTS`` points,
    or None for a spec with declared externs (no exact values to compare with)."""
    from . import accuracy

    if plan.spec.externs:
        return None
    return accuracy.measure(plan, BUILD_POINTS, source=module)


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
    (--no-rewrite, --fuse), none of which the header records apart. What the generated tests run
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
    digests = {dataclasses.replace(spec, fuse=fuse).digest(version, rewrite)
               for fuse in {spec.fuse, True} for rewrite in (True, False)}
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


def _reusable(path: Path, expected_header: str) -> str | None:
    """The text of ``path`` if it starts with ``expected_header`` and its body hash matches, else None."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return text if sealed_header(text) == expected_header else None


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
