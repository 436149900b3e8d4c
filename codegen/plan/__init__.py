"""Stage 4: a strategy -> what each generated Function computes, saves and returns.

The plan is a small tree of frozen dataclasses holding SymPy expressions, already CSE'd and with
readable temporary names; the renderer only prints it. Tensors reach ``backward`` only through
``save_for_backward`` of a Function's own inputs and outputs (``setup_context`` sees nothing
else), which is what makes the tutorial's ``SinhBad`` impossible to generate.
"""

from __future__ import annotations

import functools
import keyword
import math
import re
from dataclasses import dataclass, replace

import sympy

from .. import limits
from ..derive import branches, symbolic
from ..derive.rewrite import (
    factored,
    for_differentiation,
    in_ratios,
    smooth_norms,
    stabilize,
)
from ..errors import SpecErrors
from ..language import external
from ..spec import Spec
from . import cost

# Module-level names of the generated code. Its helpers (_broadcast, _fused, ...) need no entry:
# they start with "_", which no spec name and no Namer name does.
_MODULE_NAMES = {"torch", "math", "ctx", "ORDER", "STRATEGY", "FUSE"}
# Local names of the generated code's own, allocated first so that they avoid the spec's names.
LOCALS = ("inputs", "output", "function", "level", "needed")
COMPILE_SUFFIX = "ForCompile"


@dataclass(frozen=True)
class Result:
    """A value a block returns: an output of forward, or a gradient of backward.

    ``grad_of`` names the variable a gradient belongs to (``None`` for forward outputs).
    ``broadcast`` marks a forward output that does not mention every input, so it must be
    broadcast to all of them. Inside generated Functions every tensor has the inputs' common
    shape: the public function broadcasts the inputs first (as views), and autograd's own
    expand-backward sums each gradient back to its input's shape.
    """

    name: str
    expr: sympy.Expr
    grad_of: str | None = None
    broadcast: bool = False


@dataclass(frozen=True)
class Block:
    """Straight-line code: CSE'd temporaries, then results."""

    temporaries: tuple[tuple[str, sympy.Expr], ...]
    results: tuple[Result, ...]

    @property
    def values(self) -> tuple[sympy.Expr, ...]:
        """Every formula the block computes, temporaries first."""
        return tuple(value for _, value in self.temporaries) + tuple(r.expr for r in self.results)

    @property
    def reads(self) -> set[sympy.Symbol]:
        """The symbols its formulas read (inputs, saved values, cotangents and its own temporaries)."""
        return set().union(*(value.free_symbols for value in self.values))


@dataclass(frozen=True)
class FunctionPlan:
    """One generated ``torch.autograd.Function``."""

    class_name: str
    compile_name: str
    summary: str
    inputs: tuple[str, ...]
    forward: Block
    saved: tuple[str, ...]
    cotangents: tuple[str, ...]
    backward: Block | None
    next_level: str | None
    tangents: tuple[str, ...]
    jvp: Block
    saved_for_forward: tuple[str, ...]
    # intermediates: per gradient, (cotangent, name of d(output)/d(input) in ``backward``) for each
    # cotangent that contributes; cotangents of unused outputs arrive as None and are skipped
    accumulations: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    # intermediates: per gradient whose terms have constant parts in two or more places, (gradient,
    # name of their sum, (cotangent, name of the constant part) for each): summed apart from the rest,
    # then added, as (1 + expm1(x)) - (1 + expm1(-x)) would cancel where x is small (sinh at order 2)
    constant_sums: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = ()
    # nested: the trailing inputs that are values computed by an earlier level (constants to
    # autograd: their gradients are None), and the trailing outputs that are values for later levels
    constants: tuple[str, ...] = ()
    values: tuple[str, ...] = ()
    # nested, a level after the first (not fused): its last argument says which of its gradients the
    # caller's backward pass uses (``_needed_gradients``); the others it leaves out and returns as None
    masked: bool = False

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.forward.results)

    @property
    def blocks(self) -> tuple[Block, ...]:
        """Its code: forward, backward (where it has one) and jvp."""
        return tuple(block for block in (self.forward, self.backward, self.jvp) if block is not None)

    @property
    def differentiable_outputs(self) -> tuple[str, ...]:
        return self.outputs[: len(self.outputs) - len(self.values)]

    @property
    def differentiable_inputs(self) -> tuple[str, ...]:
        return self.inputs[: len(self.inputs) - len(self.constants)]

    @property
    def gradient_of(self) -> tuple[str | None, ...]:
        """For each output, the input of the level before whose gradient it is (None: a value)."""
        return tuple(r.grad_of for r in self.forward.results)


@dataclass(frozen=True)
class ModulePlan:
    """Everything the module and its tests are rendered from."""

    spec: Spec
    exprs: tuple[sympy.Expr, ...]  # one per output of the spec, in order
    strategy: str
    reason: str
    functions: tuple[FunctionPlan, ...]
    derivatives: tuple[tuple[str, tuple[str, ...], sympy.Expr], ...]  # (f or the output's name, index, formula)
    more_derivatives: int
    locals: tuple[tuple[str, str], ...]
    # what auto left out (over a limit) or passed over (the memory bound), also at the end of ``reason``
    notes: tuple[str, ...] = ()

    def local(self, name: str) -> str:
        """The name the generated code uses for its own local ``name`` (inputs, output, ...)."""
        return dict(self.locals)[name]

    @property
    def expr(self) -> sympy.Expr:
        """The formula of a spec with one output (``expr:``)."""
        (expr,) = self.exprs
        return expr

    @property
    def every_formula(self) -> sympy.Expr:
        """The formula, or the outputs' formulas as one sum (unevaluated): finite where each is,
        with each one's conditions."""
        return self.expr if len(self.exprs) == 1 else sympy.Add(*self.exprs, evaluate=False)

    @functools.cached_property
    def externals(self) -> list[type]:
        """The external functions the formulas call (external.py): the module is then nested, and
        its last level's gradients raise when differentiated again."""
        return external.calls(self.exprs)

    @property
    def returned(self) -> int:
        """How many of the entry Function's outputs the public function returns: the spec's
        outputs; the rest are values for backward (intermediates, nested)."""
        return len(self.exprs)

    @property
    def entry(self) -> FunctionPlan:
        return self.functions[0]


class Namer:
    """Hands out Python names that collide with nothing already taken."""

    def __init__(self, taken):
        self.taken = set(taken)

    def fresh(self, base: str, numbered: bool = False) -> str:
        base = re.sub(r"\W", "_", base).strip("_") or "t"
        if base[0].isdigit() or keyword.iskeyword(base):  # not a Python name
            base = f"v_{base}"
        candidates = (f"{base}{i}" for i in range(10**6)) if numbered else _suffixed(base)
        name = next(c for c in candidates if c not in self.taken)
        self.taken.add(name)
        return name


def temporary_names(taken):
    """``name_for(expr)``: fresh names, from what they hold, for temporaries the printer adds
    (``TorchPrinter.name_for``), avoiding ``taken`` and the module's names."""
    namer = Namer({*taken, *_MODULE_NAMES})

    def name_for(value: sympy.Expr) -> str:
        base = _describe(value)
        return namer.fresh(base, numbered=base == "t")

    return name_for


def _suffixed(base: str):
    yield base
    for i in range(1, 10**6):
        yield f"{base}_{i}"


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
    """``stable``, then a norm's roots over its powers as ratios (``rewrite.in_ratios``) and choices
    between a guarded value and 0 as products with their mask (``branches.mask``): every formula
    printed goes through it."""
    def printed(expr: sympy.Expr) -> sympy.Expr:
        expr = in_ratios(stable(expr))
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


def _estimate(spec: Spec, strategy: str, functions, scalars) -> float:
    if spec.fuse:
        return cost.fused_second_order_cost(functions, scalars)
    if strategy == "nested":
        return cost.nested_second_order_cost(functions, scalars)
    return cost.second_order_cost(functions[0], scalars)


def _outputs(names, exprs) -> tuple[tuple[str, sympy.Expr], ...]:
    return tuple(zip(names, exprs, strict=True))


def _single_level(classes, strategy, outputs, inputs, namer: Namer, stable) -> FunctionPlan:
    """save_inputs, save_outputs or intermediates: one Function whose backward is torch ops.

    ``outputs``: (name, formula) of each of the spec's outputs. Derivatives are taken of the
    formulas as written (``raw``) and then stabilised; the shared values and the outputs are
    found in, and saved from, the stabilised forms that run.
    """
    raw_forwards, extras = tuple(expr for _, expr in outputs), ()
    if strategy == "intermediates":
        raw_forwards, extras = _intermediates(raw_forwards, inputs, stable)
    forwards = [stable(raw_forward) for raw_forward in raw_forwards]
    raw = [*raw_forwards, *extras]

    results = [_output(name, forward, inputs) for (name, _), forward in zip(outputs, forwards)]
    results += [Result(namer.fresh(_describe(value)), value) for value in extras]
    cotangents = tuple(namer.fresh(f"grad_{r.name}") for r in results)

    known = [(_symbol(r.name), r.expr) for r in results[len(outputs):]]
    if strategy in ("save_outputs", "intermediates"):
        known += [(_symbol(name), forward) for (name, _), forward in zip(outputs, forwards)]
    exact = strategy != "save_outputs"
    local = Namer(namer.taken)
    grad_names = [local.fresh(f"grad_{x}") for x in inputs]
    accumulations = constant_sums = ()
    if len(results) > 1:
        backward, accumulations, constant_sums = _accumulated_backward(results, raw, cotangents, inputs, grad_names,
                                                                       local, known, stable)
    else:
        gradients = symbolic.vjp(raw, _symbols(cotangents), list(inputs))
        gradients = [symbolic.in_terms_of(stable(g), known, exact=exact) for g in gradients]
        backward = _block([Result(n, g, str(x)) for n, g, x in zip(grad_names, gradients, inputs)],
                          taken=local.taken, differentiated=True)
    limits.check(1, backward.values)  # the first derivative, as nested checks each of its levels
    used = backward.reads
    summed = {grad for grad, _, _ in constant_sums}
    used |= {x for x, (grad, contributions) in zip(inputs, accumulations)
             if not contributions and grad not in summed}  # zeros like x
    saved = tuple(name for name in (*(str(x) for x in inputs), *(r.name for r in results)) if _symbol(name) in used)
    tangents, jvp_block, saved_for_forward = _forward_mode(results, raw, inputs, namer, known, exact, stable)
    saved = _kept(saved, saved_for_forward, order=[*(str(x) for x in inputs), *(r.name for r in results)])
    return FunctionPlan(
        class_name=classes[0],
        compile_name=classes[1],
        summary=_SUMMARIES[strategy],
        inputs=tuple(str(x) for x in inputs),
        forward=_block(results, taken=namer.taken),
        saved=saved,
        cotangents=cotangents,
        backward=backward,
        next_level=None,
        tangents=tangents,
        jvp=jvp_block,
        saved_for_forward=saved,
        accumulations=accumulations,
        constant_sums=constant_sums,
    )


def _accumulated_backward(results, raw, cotangents, inputs, grad_names, local: Namer, known, stable):
    """The backward of a Function with extra outputs, term by term.

    Each term d(output)/d(input) is CSE'd without its cotangent, so that a cotangent that arrives
    as None (the caller never used that output) costs nothing: no zero-filled tensor, no product.
    An input no output depends on has no contributions: its gradient is zeros like the input.
    Where two or more terms have a constant part (a number or params: d expm1(u)/du = expm1(u) + 1),
    the constant parts are summed apart (``FunctionPlan.constant_sums``).
    """
    tensors = {*inputs, *_symbols(r.name for r in results)}
    terms, accumulations, constant_sums = [], [], []
    for x, grad_name in zip(inputs, grad_names):
        partials = []  # (result, cotangent, the partial, its variable and constant parts)
        for result, expr, cotangent in zip(results, raw, cotangents):
            partial = symbolic.in_terms_of(stable(symbolic.clean(sympy.diff(expr, x))), known, exact=True)
            if partial != 0:
                partials.append((result, cotangent, partial, *_constant_apart(partial, tensors)))
        apart = sum(constant != 0 for *_, constant in partials) > 1
        contributions, constants = [], []
        for result, cotangent, partial, variable, constant in partials:
            if not apart:
                variable, constant = partial, 0
            for part, kept, suffix in ((variable, contributions, ""), (constant, constants, "_constant")):
                if part != 0:
                    name = local.fresh(f"d{result.name}_d{x}{suffix}")
                    terms.append(Result(name, part))
                    kept.append((cotangent, name))
        accumulations.append((grad_name, tuple(contributions)))
        if constants:
            constant_sums.append((grad_name, local.fresh(f"constant_{grad_name}"), tuple(constants)))
    return _block(terms, taken=local.taken, inline=True, differentiated=True), tuple(accumulations), tuple(constant_sums)


def _constant_apart(partial: sympy.Expr, tensors) -> tuple[sympy.Expr, sympy.Expr]:
    """(the terms of ``partial`` that read a tensor, the terms that do not), products distributed over
    sums at the top (a*(expm1(a*x) + 1) has the constant part a)."""
    variable, constant = [], []
    distributed = sympy.expand(partial, deep=False, mul=True, multinomial=False, power_exp=False, power_base=False,
                               log=False)
    for term in sympy.Add.make_args(distributed):
        (variable if term.free_symbols & tensors else constant).append(term)
    return sympy.Add(*variable), sympy.Add(*constant)


def _kept(*groups, order) -> tuple[str, ...]:
    """The tensors a Function saves, the same for backward and forward mode, in ``order``.

    With generate_vmap_rule, PyTorch records the batch dimensions of save_for_backward and
    save_for_forward in one slot (the later call wins): the two must save the same tensors.
    """
    wanted = set().union(*groups)
    return tuple(name for name in order if name in wanted)


def _forward_mode(results: list[Result], raw, inputs, namer: Namer, known, exact: bool, stable):
    """Tangent names, the jvp block (output tangents, in terms of saved values) and what it saves.

    ``raw`` holds the results' formulas as written, which are differentiated, then stabilised.
    """
    local = Namer(namer.taken)
    tangents = tuple(local.fresh(f"tangent_{x}") for x in inputs)
    products = symbolic.jvp(list(raw), list(inputs), _symbols(tangents))
    products = [symbolic.in_terms_of(stable(p), known, exact=exact) for p in products]
    names = [local.fresh(f"tangent_{r.name}") for r in results]
    used = set().union(*(p.free_symbols for p in products))
    candidates = (*(str(x) for x in inputs), *(r.name for r in results))
    saved = tuple(name for name in candidates if _symbol(name) in used)
    block = _block([Result(n, p, grad_of=tangents[0]) for n, p in zip(names, products)], taken=local.taken,
                   differentiated=True)
    return tangents, block, saved


def _intermediates(exprs, inputs, stable) -> tuple[tuple[sympy.Expr, ...], tuple[sympy.Expr, ...]]:
    """The forwards to differentiate and the shared values (stabilised forms) to return with them.

    When the forwards share no function call with their derivatives (sinh(x), whose derivative
    is cosh(x)), sinh and cosh are written through exp(u) and exp(-u), as the tutorial's Sinh does.
    """
    candidates = [exprs]
    if any(stable(e).has(sympy.sinh, sympy.cosh) for e in exprs):  # not where a rewrite removed them (log(cosh(u)))
        candidates.append(tuple(symbolic.exp_form(e) for e in exprs))
    for forwards in candidates:
        first = [stable(symbolic.clean(sympy.diff(forward, x))) for forward in forwards for x in inputs]
        shared = symbolic.shared_values([stable(forward) for forward in forwards], first, inputs)
        if shared:
            return forwards, shared
    return exprs, ()


@dataclass(frozen=True)
class _Link:
    """One level of the nested chain, before values are passed down."""

    names: tuple[str, ...]  # its differentiable inputs: cotangents of the level before, then that level's inputs
    results: tuple[Result, ...]  # what it computes: the output (level 0), else gradients
    cotangents: tuple[str, ...]
    gradients: tuple[Result, ...]  # its vector-Jacobian product: the next level's results
    local: Namer


@dataclass(frozen=True)
class _Passing:
    """A level's formulas in terms of the values earlier levels computed, the values it receives
    (constants) and the values it computes for later levels."""

    formulas: tuple[sympy.Expr, ...]
    constants: tuple[str, ...]
    values: tuple[Result, ...]


def _nested(classes, outputs, inputs, order, namer: Namer, stable, masked: bool) -> tuple[FunctionPlan, ...]:
    """The tutorial's Cube/CubeBackward chain: level k's backward applies level k+1.

    Level k takes the cotangents of level k-1's outputs and level k-1's inputs, and returns
    their vector-Jacobian product, derived symbolically from level k-1's formulas. A function
    call that a level computes and later levels need again (mish's tanh(softplus(x)), then
    sigmoid(x)) is returned as a non-differentiable extra output and passed down as a constant
    (``_passed_values``): each is computed once. The last level's backward is the product again,
    in differentiable torch ops of its inputs alone: a constant would hide its dependence on x
    from autograd at higher order. ``masked``: levels after the first compute only the gradients
    the running backward pass uses.
    """
    chain = _nested_chain(outputs, inputs, order, namer, stable)
    # jvp is written in the differentiable inputs alone, like the last backward: under reverse-over-
    # forward (torch.func.hessian), autograd records it, and a constant would hide x from it
    forward_modes = [
        _forward_mode(list(link.results), [r.expr for r in link.results], _symbols(link.names), namer, [], True,
                      stable)
        for link in chain
    ]
    passing = _passed_values(chain, inputs, namer, stable)
    value_names = {v.name for passed in passing for v in passed.values}
    functions = []
    for level, (link, passed, (tangents, jvp_block, _)) in enumerate(zip(chain, passing, forward_modes)):
        last = level == order - 1
        printed = [Result(r.name, formula, r.grad_of, r.broadcast) for r, formula in zip(link.results, passed.formulas)]
        printed += list(passed.values)
        if last:
            saved = link.names
        else:
            handed = set(passing[level + 1].constants)
            outputs = (*(r.name for r in link.results), *(v.name for v in passed.values))
            saved = (*link.names, *(n for n in (*passed.constants, *outputs) if n in handed))
        functions.append(
            FunctionPlan(
                class_name=classes[level][0],
                compile_name=classes[level][1],
                summary=_level_summary(level),
                inputs=(*link.names, *passed.constants),
                forward=_block(printed, taken={*link.local.taken, *value_names}),
                saved=saved,
                cotangents=link.cotangents,
                backward=_last_backward(link, stable) if last else None,
                next_level=None if last else classes[level + 1][0],
                tangents=tangents,
                jvp=jvp_block,
                saved_for_forward=saved,
                constants=passed.constants,
                values=tuple(v.name for v in passed.values),
                masked=masked and level > 0 and len(link.results) > 1,  # one gradient: always used
            )
        )
    return tuple(functions)


def _nested_chain(outputs, inputs, order, namer: Namer, stable) -> list[_Link]:
    """Each level's formulas: level k differentiates level k-1's results by its inputs.

    Each level's results are stabilised before the next level differentiates them: the next level
    derives its formulas from what this level prints (sigmoid(w), whose derivatives are sigmoids),
    not from the unstable shapes SymPy's derivative of the raw formula has (exp(-1/(1 - x)) over a
    sum of exponentials, whose next derivative leaves exp(2/(1 - x)) times a vanishing factor).
    They are kept in ``for_differentiation`` form (smooth, as autograd differentiates the printed
    jvp and last backward) and stabilised again where printed (``_passed_values``, ``_forward_mode``).
    """
    names = tuple(str(x) for x in inputs)
    results = tuple(_output(name, for_differentiation(stable(expr)), inputs) for name, expr in outputs)
    chain = []
    for level in range(order):
        cotangents = tuple(_cotangent_name(namer, level + 1, r) for r in results)
        local = Namer(namer.taken)
        products = symbolic.vjp([r.expr for r in results], _symbols(cotangents), _symbols(names))
        limits.check(level + 1, products)  # stops a spec whose derivatives blow up
        products = [for_differentiation(stable(p)) for p in products]
        gradients = tuple(Result(local.fresh(f"grad_{n}"), g, n) for n, g in zip(names, products))
        chain.append(_Link(names, results, cotangents, gradients, local))
        names = (*cotangents, *names)
        results = gradients
    return chain


def _passed_values(chain: list[_Link], inputs, namer: Namer, stable) -> list[_Passing]:
    """Which function calls each level computes for later levels, and which values it receives.

    Level by level: a call among a level's formulas that later levels' formulas use again becomes
    a value of that level and is replaced by its name in the later formulas (larger calls first,
    in one top-down pass). Level 0's outputs are themselves such values when they are calls
    (exp(x), whose derivatives are exp(x)). A value no later level reads in the end is dropped.
    """
    current = [[stable(r.expr) for r in link.results] for link in chain]
    outputs = {}  # level 0's outputs by formula (the first name where two outputs are equal)
    for result, formula in zip(chain[0].results, current[0]):
        outputs.setdefault(formula, result.name)
    found = []  # per level: its values (name, formula in terms of earlier values)
    for level in range(len(chain)):
        later = [f for fs in current[level + 1:] for f in fs]
        named = {}
        for value in symbolic.reused_calls(current[level], later, inputs):
            base = _describe(value)
            is_output = level == 0 and value in outputs
            named[value] = outputs[value] if is_output else namer.fresh(base, numbered=base == "t")
        replacements = {value: _symbol(name) for value, name in named.items()}
        for j in range(level + 1, len(chain)):
            current[j] = [f.xreplace(replacements) for f in current[j]]
        found.append([(name, value) for value, name in named.items() if name not in outputs.values()])
    reads = [
        set().union(*(f.free_symbols for f in current[level]), *(v.free_symbols for _, v in found[level]))
        for level in range(len(chain))
    ]
    passing, earlier = [], []  # earlier: the values computed before a level, level 0's outputs first
    for level in range(len(chain)):
        read_here_or_after, read_after = set().union(*reads[level:]), set().union(*reads[level + 1:])
        constants = tuple(name for name in earlier if _symbol(name) in read_here_or_after)
        values = tuple(Result(name, value) for name, value in found[level] if _symbol(name) in read_after)
        passing.append(_Passing(tuple(current[level]), constants, values))
        earlier += [r.name for r in chain[0].results] * (level == 0) + [name for name, _ in found[level]]
    return passing


def _last_backward(link: _Link, stable) -> Block:
    gradients = [Result(g.name, stable(g.expr), g.grad_of) for g in link.gradients]
    return _block(gradients, taken=link.local.taken, differentiated=True)


def _output(name: str, expr: sympy.Expr, inputs) -> Result:
    return Result(name, expr, broadcast=not set(inputs) <= expr.free_symbols)


def _cotangent_name(namer: Namer, level: int, result: Result) -> str:
    if result.grad_of is None:
        return namer.fresh(f"grad_{result.name}")
    return namer.fresh(f"grad{level}_{result.grad_of}")


def _level_summary(level: int) -> str:
    if level == 0:
        return "Forward value; backward applies the next level (the tutorial's nested pattern)."
    return f"Level {level}: the vector-Jacobian product of level {level - 1}, with explicit symbolic formulas."


_SUMMARIES = {
    "save_inputs": "Saves its inputs; backward computes the first derivative in differentiable torch ops.",
    "save_outputs": "Saves its output; backward writes the first derivative in terms of the output.",
    "intermediates": (
        "Returns the shared intermediates as extra outputs; backward adds the gradients arriving on them."
    ),
}


def _block(results: list[Result], taken, inline: bool = False, differentiated: bool = False) -> Block:
    """CSE over the results, with temporaries named after what they hold.

    ``inline``: the results are printed where they are used, so none claims a temporary's name.
    ``differentiated``: autograd differentiates the block (a single level's backward, a jvp,
    nested's last backward), so its norms are written smooth (``rewrite.smooth_norms``).
    """
    smooth = smooth_norms if differentiated else (lambda expr: expr)
    replacements, reduced = symbolic.common_subexpressions([factored(smooth(r.expr)) for r in results])
    namer = Namer({*taken, *(r.name for r in results)})
    # A temporary that is itself a plain result (no reduction, no broadcast) takes the result's name.
    claimed = {}
    for r, e in zip(results, reduced):
        if not inline and e in dict(replacements) and e not in claimed and r.grad_of is None and not r.broadcast:
            claimed[e] = r.name
    names: dict[sympy.Symbol, sympy.Symbol] = {}
    temporaries = []
    for symbol, value in replacements:
        value = value.xreplace(names)
        if symbol in claimed:
            name = claimed[symbol]
        else:
            base = _describe(value)
            name = namer.fresh(base, numbered=base == "t")
        names[symbol] = _symbol(name)
        temporaries.append((name, value))
    return Block(
        temporaries=tuple(temporaries),
        results=tuple(
            Result(r.name, e.xreplace(names), r.grad_of, r.broadcast) for r, e in zip(results, reduced)
        ),
    )


def _with_power_ladders(fn: FunctionPlan, params, taken) -> FunctionPlan:
    """``fn`` with integer powers of each tensor computed from shared products (``_power_ladder``)."""
    def ladder(block: Block | None) -> Block | None:
        return None if block is None else _power_ladder(block, params, taken)

    return replace(fn, forward=ladder(fn.forward), backward=ladder(fn.backward), jvp=ladder(fn.jvp))


def _power_ladder(block: Block, params, taken) -> Block:
    """Integer powers (|n| >= 4) of a tensor, built by squaring and multiplying shared temporaries.

    torch.pow with an exponent other than 2, 3, -1 or -2 costs about seven memory passes on CPU
    (measured, 2**20 float32): r**-13 and r**-7 next to r**-12 and r**-6 (lennard_jones) become
    one reciprocal, one cube and four products of temporaries.
    """
    ladders = symbolic.power_ladders(block.values, params)
    if not ladders:
        return block
    namer = Namer({*taken, *(name for name, _ in block.temporaries), *(r.name for r in block.results)})
    symbols = {power: _symbol(namer.fresh(_describe(power))) for power, _, _ in ladders}
    named = {**symbols, **{dummy: symbols[power] for power, dummy, _ in ladders}}
    # A step's arguments, not the step itself, are renamed: the step r**3 is the power r**3.
    definitions = {symbols[power]: step.func(*(a.xreplace(named) for a in step.args)) for power, _, step in ladders}
    temporaries = [(_symbol(name), value.xreplace(symbols)) for name, value in block.temporaries]
    results = tuple(replace(r, expr=r.expr.xreplace(symbols)) for r in block.results)
    ordered = _on_demand(temporaries, definitions, [r.expr for r in results])
    return Block(temporaries=tuple((str(s), v) for s, v in ordered), results=results)


def _on_demand(temporaries, definitions: dict, uses) -> list:
    """``temporaries`` in order, each new ``definitions`` entry placed just before its first use."""
    ordered, placed = [], set()

    def place(symbols):
        for symbol in sorted(symbols, key=str):
            if symbol in definitions and symbol not in placed:
                placed.add(symbol)
                place(definitions[symbol].free_symbols)
                ordered.append((symbol, definitions[symbol]))

    for symbol, value in temporaries:
        place(value.free_symbols)
        ordered.append((symbol, value))
    for expr in uses:
        place(expr.free_symbols)
    return ordered


# A temporary's name is at most this long: a longer description is replaced by its outline.
MAX_NAME = 24
# An argument named inside another name (tanh_<arg>) is at most this long, else its outline.
MAX_PART = 14
# A symbol named inside another name is whole up to this long: the cotangents' and tangents' own
# names (tangent_grad2_x, grad_grad_out) are read as a whole or misread
MAX_SYMBOL_PART = 18


def _describe(value: sympy.Expr) -> str:
    """A short name for a temporary, from what it holds: exp_x, tanh_softplus_x, x_pow3, neg_x,
    then, where that is too long, its outline by the outermost operation and short forms of its
    arguments (tanh_prod, one_minus_tanh, sum_x_y, prod_x_sigmoid); 't' (numbered) only when
    nothing describes it."""
    for text in (_describe_rec(value, depth=0), _outline(value)):
        if text and len(text) <= MAX_NAME:
            return text
    return "t"


_RELATION_WORDS = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


def _describe_rec(value: sympy.Expr, depth: int) -> str | None:
    if depth > 3:
        return None
    if value.is_Symbol:
        return value.name
    if isinstance(value, branches.Guard):  # the input, or a safe value where the branch is not taken
        inner = _describe_rec(value.args[0], depth + 1)
        return f"safe_{inner}" if inner else None
    if isinstance(value, branches.Masked):  # a value where its branch is taken, else 0
        return f"masked_{_part(value.args[0], depth)}"
    if isinstance(value, sympy.core.relational.Relational):
        left, right = (_describe_rec(side, depth + 1) or _signed_constant(side) or ("bound" if side.is_Float else None)
                       for side in (value.lhs, value.rhs))
        word = _RELATION_WORDS[value.rel_op]
        return f"{left}_{word}_{right}" if left and right else None
    if isinstance(value, sympy.Function) and len(value.args) == 1:
        inner = _describe_rec(value.args[0], depth + 1)
        return f"{type(value).__name__.lower()}_{inner}" if inner else None
    if value.is_Pow and value.exp.is_Integer:
        inner = _describe_rec(value.base, depth + 1)
        n = int(value.exp)
        if inner is None:
            return None
        return f"inv_{inner}" if n == -1 else f"{inner}_pow{n}".replace("pow-", "pow_neg")
    if value.is_Mul and len(value.args) == 2 and value.args[0] == -1:
        inner = _describe_rec(value.args[1], depth + 1)
        return f"neg_{inner}" if inner else None
    return None


def _outline(value: sympy.Expr, depth: int = 0) -> str | None:
    """The name of ``value`` by its outermost operation and short forms of its arguments."""
    if isinstance(value, sympy.Piecewise):  # its pieces are (value, condition) pairs, not arguments
        return "choice"
    if isinstance(value, sympy.Function):
        name = type(value).__name__.lower()
        if len(value.args) > 2:  # a polynomial's coefficients (Horner) would read as c_c_c
            return name
        full = "_".join([name, *(_part(arg, depth) for arg in value.args)])
        return full if len(full) <= MAX_NAME else name
    if value.is_Pow:
        return _power_name(value.base, value.exp, depth)
    if value.is_Add:
        constant, terms = value.as_coeff_Add()
        if not terms.is_Add and constant != 0:
            return _shifted(terms, constant, depth)
        parts = [_part(term, depth) for term in sympy.Add.make_args(value) if not term.is_Number]
        return _joined("sum", parts)
    if value.is_Mul:
        coefficient, factors = value.as_coeff_Mul()
        parts = [_part(factor, depth) for factor in sympy.Mul.make_args(factors)]
        name = parts[0] if len(parts) == 1 else _joined("prod", parts)
        if coefficient == -1:
            return f"neg_{name}"
        scaled = f"scaled_{name}"
        return name if coefficient == 1 or len(scaled) > MAX_NAME else scaled
    return _constant(value)


def _part(value: sympy.Expr, depth: int) -> str:
    """A short form of an argument: its name or description if short, else its outline if short,
    else its outermost operation. A symbol keeps its whole name up to MAX_SYMBOL_PART characters
    (the first word of tangent_grad2_x, 'tangent', named its product with x prod_tangent_x), a
    longer one its first word."""
    if value.is_Symbol:
        return value.name if len(value.name) <= MAX_SYMBOL_PART else value.name.split("_")[0]
    if depth < 3:
        for text in (_describe_rec(value, depth=1), _constant(value), _outline(value, depth + 1)):
            if text and len(text) <= MAX_PART:
                return text
    if isinstance(value, sympy.Function):
        return type(value).__name__.lower()
    if value.is_Pow:
        return "sqrt" if value.exp == sympy.S.Half else "rsqrt" if value.exp == -sympy.S.Half else "pow"
    if value.is_Add:
        return "sum"
    if value.is_Mul:
        return "prod"
    return "c"


def _power_name(base: sympy.Expr, exp: sympy.Expr, depth: int) -> str:
    inner = _part(base, depth)
    if exp == sympy.S.Half:
        return f"sqrt_{inner}"
    if exp == -sympy.S.Half:
        return f"rsqrt_{inner}"
    if exp == -1:
        return f"inv_{inner}"
    if exp.is_Integer:
        return f"{inner}_pow{int(exp)}".replace("pow-", "pow_neg")
    return f"{inner}_pow"


def _shifted(term: sympy.Expr, constant: sympy.Expr, depth: int) -> str:
    """c + t as t_plus_1, 1 - t as one_minus_t."""
    coefficient, rest = term.as_coeff_Mul()
    number = _constant(abs(constant)) or "c"
    if coefficient == -1 and constant == 1:
        return f"one_minus_{_part(rest, depth)}"
    if coefficient == -1:  # c - rest: a name must not start with a digit
        return f"neg_{_part(rest, depth)}_plus_{number}"
    sign = "plus" if constant > 0 else "minus"
    return f"{_part(term, depth)}_{sign}_{number}"


def _joined(kind: str, parts: list[str]) -> str:
    """sum_x_y, prod_x_sigmoid: every part when they fit, else the first."""
    full = "_".join([kind, *parts])
    return full if len(full) <= MAX_NAME else f"{kind}_{parts[0]}"


def _constant(value: sympy.Expr) -> str | None:
    """A name for a number without tensors: 2, half, pi, sqrt_2; None for a float."""
    if value.is_Integer:
        return str(abs(int(value)))
    if value == sympy.S.Half:
        return "half"
    if value is sympy.pi:
        return "pi"
    if value is sympy.E:
        return "e"
    return None


def _signed_constant(value: sympy.Expr) -> str | None:
    name = _constant(value)
    return f"neg{name}" if name and value.is_negative else name


def _symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, real=True)


def _symbols(names) -> list[sympy.Symbol]:
    return [_symbol(n) for n in names]
