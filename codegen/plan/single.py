"""The single-level strategies (save_inputs, save_outputs, intermediates): one Function whose
backward autograd differentiates again.
"""

from __future__ import annotations

import sympy

from .. import limits
from ..derive import symbolic
from .blocks import _block, _forward_mode, _output
from .model import FunctionPlan, Result
from .naming import Namer, _describe, _symbol, _symbols


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


_SUMMARIES = {
    "save_inputs": "Saves its inputs; backward computes the first derivative in differentiable torch ops.",
    "save_outputs": "Saves its output; backward writes the first derivative in terms of the output.",
    "intermediates": (
        "Returns the shared intermediates as extra outputs; backward adds the gradients arriving on them."
    ),
}
