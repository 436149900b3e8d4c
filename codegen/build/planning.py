"""A spec -> its plan, through the checks a build runs on the way: the formulas guarded (branches,
underflow, removable singularities, stable tails), the domain checked, auto's criteria (the memory
bound, the accuracy bound), and the reference domain of the generated tests.
"""

from __future__ import annotations

from typing import NamedTuple

from .. import limits as bounds
from ..spec import (
    Spec,
)


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
    elif rewrite:
        plan, report = _cheaper_where_accurate(spec, guarded, shown, plan, report)
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
    return any(value.has(sympy.tanh, Sech2) for value in _formulas(plan))


def _formulas(plan):
    """Every formula ``plan``'s Functions compute, block by block."""
    return (value for function in plan.functions for block in function.blocks for value in block.values)


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


# The note of a plan written with ``rewrite.stabilize_cheaply`` (``_cheaper_where_accurate``).
CHEAPER_FORMULAS = ("1 - sigmoid(u) and c + c*tanh(u) left as written (one kernel each, not another sigmoid): "
                    "within the accuracy bound on the domain at every order")


def _cheaper_where_accurate(spec: Spec, guarded, shown, plan, report):
    """The plan without the accuracy-only rewrites (``rewrite.ACCURACY_ONLY``: sigmoid(-u) for
    1 - sigmoid(u), ...) where it is within the accuracy bound at every order and estimated
    cheaper, else ``plan``: their extra kernels are paid only where the domain needs them. A spec
    with external functions has no exact values to measure, and keeps ``plan``."""
    from dataclasses import replace

    from ..derive.rewrite import ACCURACY_ONLY_WRITES, stabilize_cheaply
    from ..plan import estimated_cost, make_plan

    if spec.externs or not any(value.has(*ACCURACY_ONLY_WRITES) for value in _formulas(plan)):
        return plan, report
    accurate = AccuracyBound(spec)
    cheap = make_plan(spec, guarded, stabilize_cheaply, accept=_criteria(accurate), shown=shown)
    if cheap.functions == plan.functions or estimated_cost(cheap) >= estimated_cost(plan):
        return plan, report
    if accurate.refusal(cheap) is not None:
        return plan, report
    written = replace(cheap, reason=f"{cheap.reason}; {CHEAPER_FORMULAS}", notes=(*cheap.notes, CHEAPER_FORMULAS))
    return written, accurate.reports[cheap.strategy]


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
