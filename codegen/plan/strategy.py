"""A spec and a strategy -> its ``ModulePlan``; ``auto`` ranks the strategies with the cost model.

Tensors reach ``backward`` only through ``save_for_backward`` of a Function's own inputs and
outputs (``setup_context`` sees nothing else), which is what makes the tutorial's ``SinhBad``
impossible to generate.
"""

from __future__ import annotations

import math
from dataclasses import replace

import sympy

from .. import limits
from ..derive import branches, symbolic
from ..derive.rewrite import (
    exponents_through_log,
    factored,
    in_ratios,
    stabilize,
)
from ..errors import SpecErrors
from ..language import external
from ..spec import Spec
from . import cost
from .blocks import _with_power_ladders
from .model import COMPILE_SUFFIX, LOCALS, FunctionPlan, ModulePlan
from .naming import _MODULE_NAMES, Namer, _symbols
from .nested import _nested
from .single import _single_level


def make_plan(spec: Spec, expr, stable=stabilize, accept=(), shown=None) -> ModulePlan:
    """What each generated Function of ``spec`` computes, saves and returns.

    ``auto`` ranks its candidates by estimated cost (``choose_strategy``) and takes the first that
    every criterion of ``accept`` takes; ``_ranked_choice`` says which where none does.

    Args:
        spec: the loaded spec (its strategy, order, inputs, params, outputs).
        expr: its formula, guarded (branches.guard) and split at removable singularities
            (series.removable); a tuple of them, one per output, for a vector-valued spec.
        stable: rewrites each formula about to be printed (rewrite.stabilize; ``identity`` for
            ``--no-rewrite``).
        accept: (name, plan -> None or why not) pairs, in rank order: in a build the memory
            bound, then the accuracy bound.
        shown: the formulas the docstrings, ``dbgen show`` and the tests' reference write, where
            they differ from ``expr`` (underflow.py's cuts); None: ``expr``.

    Returns:
        A ``ModulePlan``: the strategy taken and why, its Functions, the docstring's derivatives.

    Raises:
        limits.NoCandidateFits: no candidate of auto within the time and size limits.
    """
    exprs = expr if isinstance(expr, tuple) else (expr,)
    inputs = tuple(sympy.Symbol(name, real=True) for name in spec.inputs)
    stable = _masking(by_cotangents(stable, {*spec.inputs, *spec.param_names}), inputs)
    outside = external.calls(exprs)
    if outside:
        spec = _nested_for_externals(spec, outside)
    if spec.strategy == "auto":
        candidates, dropped = _candidates_within_limits(spec, exprs, inputs, stable)
    else:
        candidates, dropped = {spec.strategy: _functions(spec, spec.strategy, exprs, inputs, stable, spec.order)}, {}
    labels = tuple(name for name, _ in spec.outputs) or ("f",)
    shown = exprs if shown is None else shown
    derivatives, more = _documented_derivatives(_outputs(labels, shown), inputs, spec.order)

    def module_plan(strategy: str, reason: str) -> ModulePlan:
        functions, local_names = candidates[strategy]
        return ModulePlan(
            spec=spec,
            exprs=shown,
            strategy=strategy,
            reason=reason,
            functions=functions,
            derivatives=tuple((label, tuple(str(s) for s in idx), d) for label, idx, d in derivatives),
            more_derivatives=more,
            locals=local_names,
        )

    if outside:
        return module_plan("nested", _external_reason(outside))
    if spec.strategy != "auto":
        return module_plan(spec.strategy, "chosen in the spec")
    functions_of = {s: functions for s, (functions, _) in candidates.items()}
    strategy, reason = choose_strategy(spec, functions_of)
    notes = [f"{s} left out: {exceeded.dropped()}" for s, exceeded in dropped.items()]
    if accept:
        costs = _costs(spec, functions_of)
        ranked = [strategy, *sorted((s for s in candidates if s != strategy), key=costs.get)]
        strategy, taken = _ranked_choice(ranked, lambda s: module_plan(s, reason), accept)
        notes += taken
    return replace(module_plan(strategy, "; ".join([reason, *notes])), notes=tuple(notes))


def _ranked_choice(ranked: list[str], plan_of, criteria) -> tuple[str, list[str]]:
    """The first of ``ranked`` that every one of ``criteria`` ((name, plan -> None or why not)
    pairs) takes, and the notes that say why each one before it was passed over.

    Where none takes them all, the first that passes the most of them in order (the first
    outranks the second: a candidate within the memory bound but over the accuracy bound beats one
    over the memory bound), with one note for a later criterion that none met in place of each
    candidate's (the build warns of the accuracy bound itself); where none passes even the first,
    ``ranked[0]``, with every candidate's.
    """
    refusals, passed = [], {}  # refusals: (how many criteria the candidate passed, note)
    for candidate in ranked:
        plan = plan_of(candidate)
        passed[candidate] = 0
        for _, criterion in criteria:
            refused = criterion(plan)
            if refused is not None:
                refusals.append((passed[candidate], f"{candidate} passed over: {refused}"))
                break
            passed[candidate] += 1
        else:
            notes = [note for _, note in refusals]
            return candidate, notes + ([f"so {candidate}, the next cheapest"] if candidate != ranked[0] else [])
    chosen = max(ranked, key=passed.get)  # the first of the best
    kept = passed[chosen]
    names = [name for name, _ in criteria]
    fallback = "the cheapest" if kept == 0 else f"the cheapest that keeps {' and '.join(names[:kept])}"
    return chosen, [note for k, note in refusals if k < kept or kept == 0] + [f"none keeps {names[kept]}, so {fallback}: {chosen}"]


def _nested_for_externals(spec: Spec, called) -> Spec:
    """A spec that calls external functions is generated ``nested``: autograd cannot differentiate
    through them, so every derivative up to the order must be a level's explicit formulas. Unfused:
    a ``fuse: true`` in the spec file is refused when it loads, and ``--fuse`` leaves it out."""
    problems = [spec.problem(key, message) for key, message in external.conflicts(spec.strategy, False, called)]
    if problems:
        raise SpecErrors(problems)
    return replace(spec, strategy="nested", fuse=False)


def _external_reason(called) -> str:
    names = ", ".join(cls.language for cls in called)
    return (f"{names} {'is' if len(called) == 1 else 'are'} computed outside autograd: every level's "
            "formulas are explicit, and differentiating past the order raises")


def by_cotangents(stable, names):
    """``stable``, or where its result leaves a cotangent's (or tangent's) coefficient unstable,
    ``stable`` applied to each coefficient apart; the symbols not in ``names`` (the spec's inputs
    and params) are the cotangents.

    A level's formula sums one output's derivative per cotangent: rewritten as one sum, a common
    denominator can mix them and hide each one's own cancellation (d2r/dx2 = 1/r - x**2/r**3 of
    cartesian_to_spherical's r lost every bit where y and z are small, expanded over theta's
    denominator). Where the whole is stable term by term it is kept: it shares more.
    """
    def each_apart(expr: sympy.Expr) -> sympy.Expr:
        whole = stable(expr)
        cotangents = frozenset(s for s in expr.free_symbols if s.name not in names)
        if not cotangents:
            return whole
        if all(stable(c) == c for c in symbolic.by_monomial(whole, cotangents).values()):
            return whole
        shared: dict = {}  # each coefficient's symbolic part: the monomials it multiplies, with their numbers
        for monomial, coefficient in symbolic.by_monomial(expr, cotangents).items():
            number, part = stable(coefficient).as_coeff_Mul()
            shared[part] = shared.get(part, 0) + number * monomial
        return sympy.Add(*(factored(monomials) * part for part, monomials in shared.items()))

    return each_apart


def _masking(stable, inputs):
    """``stable``, then a norm's roots over its powers as ratios (``rewrite.in_ratios``), powers by
    an input's exponent through exp and log (``rewrite.exponents_through_log``) and choices
    between a guarded value and 0 as products with their mask (``branches.mask``): every formula
    printed goes through it."""
    def printed(expr: sympy.Expr) -> sympy.Expr:
        expr = exponents_through_log(in_ratios(stable(expr)), inputs)
        return branches.mask(expr, inputs) if expr.has(sympy.Piecewise) else expr

    return printed


# Each auto candidate may use this share of the spec's time left: one that blows up (nested at a
# high order) is dropped and leaves the rest to the others, the docstring's derivatives and rendering.
CANDIDATE_TIME_SHARE = 0.5


def _candidates_within_limits(spec: Spec, exprs, inputs, stable):
    """The planned auto candidates that stay within the limits (limits.py), and the
    ``LimitExceeded`` of each one dropped; ``NoCandidateFits`` when none is left."""
    planned, dropped = {}, {}
    for strategy in auto_candidates(spec):
        try:
            with limits.attempt(CANDIDATE_TIME_SHARE):
                planned[strategy] = _functions(spec, strategy, exprs, inputs, stable, spec.order)
        except limits.LimitExceeded as exceeded:
            dropped[strategy] = exceeded
    if not planned:
        raise limits.NoCandidateFits(dropped)
    return planned, dropped


# The docstring's derivatives may use this share of the time left after the candidates.
DERIVATIVES_TIME_SHARE = 0.5


def _documented_derivatives(outputs, inputs, order: int):
    """The docstring's partial derivatives (label, multi-index, derivative), at most 24 over all
    ``outputs`` ((label, formula) pairs), and how many more there are up to ``order``.

    They document; no code runs them. So they are an attempt (limits.py): past the size limit
    the orders below are shown, past their share of the time none, and the count says how many
    more there are, rather than failing a spec whose generated code fits.
    """
    total = len(outputs) * (math.comb(order + len(inputs), len(inputs)) - 1)  # multi-indices of degree 1 to order
    shown_order, derivatives = order, []
    while shown_order > 0:
        try:
            with limits.attempt(DERIVATIVES_TIME_SHARE):
                derivatives = []
                for label, expr in outputs:
                    shown, _ = symbolic.partial_derivatives(expr, inputs, shown_order, limit=24 - len(derivatives))
                    derivatives += [(label, index, derivative) for index, derivative in shown]
            break
        except limits.LimitExceeded as exceeded:
            shown_order = exceeded.order - 1 if exceeded.kind == "size" else 0
    return derivatives, total - len(derivatives)


def _functions(spec: Spec, strategy: str, exprs, inputs, stable, order: int):
    """The generated Functions of ``strategy`` (``order`` levels when nested) and the local names."""
    output_names = [name for name, _ in spec.outputs]
    namer = Namer({*spec.inputs, *spec.param_names, spec.name, *_MODULE_NAMES, *output_names})
    local_names = tuple((name, namer.fresh(name)) for name in LOCALS)
    outputs = tuple(output_names) or (namer.fresh("out"),)
    camel = "".join(part.capitalize() for part in spec.name.split("_"))
    levels = 1 if strategy != "nested" else order
    # Level k's class is CamelLevelK, never CamelBackward: autograd names the node of a Function X
    # "XBackward", so a class of that name would read as Camel's own node in graphs and tracebacks
    bases = [camel] + [f"{camel}Level{k}" for k in range(1, levels)]
    classes = [(namer.fresh(base), namer.fresh(base + COMPILE_SUFFIX)) for base in bases]
    if strategy == "nested":
        functions = _nested(classes, _outputs(outputs, exprs), inputs, order, namer, stable, masked=not spec.fuse)
    else:
        functions = (_single_level(classes[0], strategy, _outputs(outputs, exprs), inputs, namer, stable),)
    params = frozenset(_symbols(spec.param_names))
    return tuple(_with_power_ladders(fn, params, namer.taken) for fn in functions), local_names


# Candidates for auto, simplest first: a tie goes to the earlier one. ``intermediates`` is never one:
# measured (dbgen bench, W3, 2**20 float32, one thread) it was never faster beyond the noise of
# identical code, and slower on most examples (geometric mean 0.81 x composed against 0.75 for
# save_inputs). ``nested`` is one from order 2 (it needs a second level).
AUTO_CANDIDATES = ("save_inputs", "save_outputs")
NESTED_AUTO_CANDIDATES = (*AUTO_CANDIDATES, "nested")


def auto_candidates(spec: Spec) -> tuple[str, ...]:
    return NESTED_AUTO_CANDIDATES if spec.order >= 2 else AUTO_CANDIDATES


def choose_strategy(spec: Spec, candidates: dict[str, tuple[FunctionPlan, ...]]) -> tuple[str, str]:
    """The strategy ``auto`` resolves to, among ``candidates`` (``auto_candidates``, planned), and
    a one-line reason: the cheapest estimated W3 work.

    Each candidate is costed by ``cost.second_order_cost`` (``cost.nested_second_order_cost`` for
    nested), or ``cost.fused_second_order_cost`` in a fused build (kernel time in units of one
    tensor product, from measured weights). The
    estimate is not finer than about 3 %: a candidate wins only if it is that much cheaper than
    the simpler ones before it.
    """
    costs = _costs(spec, candidates)
    order = list(candidates)
    best = order[0]
    for strategy in order[1:]:
        if costs[strategy] < 0.97 * costs[best]:
            best = strategy
    listed = ", ".join(f"{s} {costs[s]:.1f}" for s in order)
    why = "the cheapest estimated second-order work" if costs[best] == min(costs.values()) else (
        "the simpler one, within 3 % of the cheapest estimated second-order work")
    mode = "auto, fused" if spec.fuse else "auto"
    return best, f"{mode}: {why} (in tensor-product times: {listed})"


def _costs(spec: Spec, candidates: dict[str, tuple[FunctionPlan, ...]]) -> dict[str, float]:
    scalars = frozenset(_symbols(spec.param_names))
    return {s: _estimate(spec, s, functions, scalars) for s, functions in candidates.items()}


def estimated_cost(plan: ModulePlan) -> float:
    """The estimated W3 work of ``plan`` as ``choose_strategy`` costs its strategy (tensor-product
    times): what two plans of one spec, written with different rewrites, are compared by."""
    scalars = frozenset(_symbols(plan.spec.param_names))
    return _estimate(plan.spec, plan.strategy, plan.functions, scalars)


def _estimate(spec: Spec, strategy: str, functions, scalars) -> float:
    if spec.fuse:
        return cost.fused_second_order_cost(functions, scalars)
    if strategy == "nested":
        return cost.nested_second_order_cost(functions, scalars)
    return cost.second_order_cost(functions[0], scalars)


def _outputs(names, exprs) -> tuple[tuple[str, sympy.Expr], ...]:
    return tuple(zip(names, exprs, strict=True))
