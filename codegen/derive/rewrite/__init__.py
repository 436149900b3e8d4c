"""Numerically stable forms, rewritten in after differentiation, on the forward and every level.

SymPy differentiates log(1 + exp(x)) into exp(x)/(exp(x) + 1), which is inf/inf = NaN in float32
for x above 88. Rewriting the forward before differentiating is not enough (aesara-devs/aeppl#156):
differentiation re-creates the unstable shapes. So the planner differentiates the formulas as
written and passes every formula it is about to print through ``stabilize``.

Each rule is a ``ReplaceOptim`` from ``sympy.codegen.rewriting`` (SymPy's own ``expm1_opt`` and
``logaddexp_opt`` where they fit), applied bottom-up until nothing changes. Every rule returns a
formula equal to its input wherever both are finite; ``tests/unit/derive/test_rewrite.py`` checks each one.

The rules live by family (``exponentials``, ``tails``, ``complements``, ``cancellation``,
``norms``); this module orders them (``RULES``), says which functions each needs (``NEEDS``) and
applies them (``stabilize``, ``for_differentiation``, ``factored``).
"""

from __future__ import annotations

import functools

import sympy
from sympy.codegen.cfunctions import expm1, hypot, log1p
from sympy.codegen.numpy_nodes import logaddexp
from sympy.codegen.rewriting import logaddexp_opt, optimize

from ...language.functions import sigmoid, softplus
from .cancellation import (
    _merged_after,
    common_denominator_opt,
    erf_complement_opt,
    log_difference_opt,
    polynomial_cancellation_opt,
    power_difference_opt,
    power_polynomial_opt,
    root_difference_opt,
    root_regimes_fold_opt,
    sum_to_product_opt,
)
from .complements import (
    acos_complement_opt,
    cos_half_angle_opt,
    expm1_opt,
    expm1_reflection_opt,
    tanh_complement_opt,
)
from .exponentials import (
    absorb_opt,
    combine_exp_opt,
    exponents_through_log,
    log1p_opt,
    log_sigmoid_opt,
    one_minus_sigmoid_opt,
    sigmoid_difference_opt,
    sigmoid_opt,
    softplus_opt,
    softplus_reflection_opt,
    spread_opt,
    tanh_opt,
)
from .norms import (
    Norm,
    Ratio,
    Sech2,
    difference_of_squares_opt,
    hypot_opt,
    in_ratios,
    norm_squares_opt,
    sech2_opt,
    smooth_norms,
    zero_comparison_opt,
)
from .tails import (
    Erfcx,
    LogCoshNear,
    _log_cosh_argument,
    _log_erfc_argument,
    _log_erfc_undone,
    erfc_ratio_opt,
    log_cosh_opt,
    log_erfc_opt,
)

MAX_PASSES = 8


# Most specific first: softplus before logaddexp and log1p; sigmoids before 1 - sigmoid; acos(1 - u)
# before a common denominator or expm1 takes its 1 - u.
RULES = (
    ("acos_complement", acos_complement_opt),
    ("common_denominator", common_denominator_opt),
    ("softplus", softplus_opt),
    ("softplus_reflection", softplus_reflection_opt),
    ("log_sigmoid", log_sigmoid_opt),
    ("log_cosh", log_cosh_opt),
    ("log_erfc", log_erfc_opt),
    ("erfc_ratio", erfc_ratio_opt),
    ("logaddexp", logaddexp_opt),
    ("log1p", log1p_opt),
    ("expm1", expm1_opt),
    ("expm1_reflection", expm1_reflection_opt),
    ("spread_over_exponential_sum", spread_opt),
    ("sigmoid", sigmoid_opt),
    ("combine_exponentials", combine_exp_opt),
    ("absorb_exp_into_sigmoid", absorb_opt),
    ("one_minus_sigmoid", one_minus_sigmoid_opt),
    ("sigmoid_difference", sigmoid_difference_opt),
    ("cos_half_angle", cos_half_angle_opt),
    ("tanh_complement", tanh_complement_opt),
    ("sum_to_product", sum_to_product_opt),
    ("erf_complement", erf_complement_opt),
    ("power_difference", power_difference_opt),
    ("root_difference", root_difference_opt),
    ("root_regimes_fold", root_regimes_fold_opt),
    ("log_difference", log_difference_opt),
    ("power_polynomial", power_polynomial_opt),
    ("polynomial_cancellation", polynomial_cancellation_opt),
    ("tanh", tanh_opt),
    ("hypot", hypot_opt),
    ("norm_squares", norm_squares_opt),
    ("zero_comparison", zero_comparison_opt),
    ("sech2", sech2_opt),
    ("difference_of_squares", difference_of_squares_opt),
)

# What a formula must hold for each rule to match anywhere in it: every group, one of each group's
# kinds. Each rule is a walk of the whole formula; most formulas hold no exp() or log(), and a
# high order's formulas are large (tests/unit/derive/test_rewrite.py checks that no rule matches without them).
NEEDS = {
    "common_denominator": ((sympy.Pow,),),
    "softplus": ((sympy.exp,), (sympy.log, log1p)),
    "softplus_reflection": ((softplus,),),
    "log_sigmoid": ((sympy.log,), (sigmoid,)),
    "log_cosh": ((sympy.log,), (sympy.cosh,)),
    "log_erfc": ((sympy.log,), (sympy.erfc,)),
    "erfc_ratio": ((sympy.exp,), (sympy.erfc,)),
    "logaddexp": ((sympy.log,),),
    "log1p": ((sympy.log,),),
    "expm1": ((sympy.exp,),),
    "expm1_reflection": ((sympy.exp,), (expm1,)),
    "acos_complement": ((sympy.acos,),),
    "spread_over_exponential_sum": ((sympy.exp,),),
    "sigmoid": ((sympy.exp,),),
    "combine_exponentials": ((sympy.exp,),),
    "absorb_exp_into_sigmoid": ((sympy.exp,), (sigmoid,)),
    "one_minus_sigmoid": ((sigmoid,),),
    "sigmoid_difference": ((sigmoid,),),
    "cos_half_angle": ((sympy.cos,),),
    "tanh_complement": ((sympy.tanh,),),
    "sum_to_product": ((sympy.sin, sympy.cos),),
    "erf_complement": ((sympy.erf,),),
    "power_difference": ((sympy.Pow,),),
    "root_difference": ((sympy.Pow,),),
    "root_regimes_fold": ((sympy.Piecewise,),),
    "log_difference": ((sympy.log, log1p),),
    "power_polynomial": ((sympy.Pow,),),
    "polynomial_cancellation": ((sympy.Add,),),
    "tanh": ((sympy.sinh,), (sympy.cosh,)),
    "hypot": ((sympy.Pow,),),
    "norm_squares": ((sympy.Pow, hypot),),
    "zero_comparison": ((sympy.core.relational.Relational,),),
    "sech2": ((sympy.tanh,),),
    "difference_of_squares": ((sympy.Pow,),),
}


def kinds(expr: sympy.Expr) -> frozenset:
    """The classes of the nodes of ``expr``, with exp for E**u too (isinstance counts it as exp)."""
    found = set()
    for node in sympy.preorder_traversal(expr):
        found.add(type(node))
        if node.is_Pow and node.base is sympy.E:
            found.add(sympy.exp)
    return frozenset(found)


def may_match(name: str, found: frozenset) -> bool:
    """Whether rule ``name`` can match a formula whose node classes are ``found``."""
    return all(any(issubclass(k, kind) for k in found for kind in group) for group in NEEDS[name])


def _square_pair(mul):
    """Factors 1 - u and 1 + u of ``mul``, with their product 1 - u**2, else None."""
    factors = [f for f in sympy.Mul.make_args(mul) if f.is_Add and len(f.args) == 2]
    for i, first in enumerate(factors):
        for second in factors[i + 1:]:
            if first + second == 2:
                return first, second, 1 - ((second - first) / 2) ** 2
    return None


def _is_log_cosh_tail(e) -> bool:
    """softplus(-2*|u|), which ``log_cosh_opt`` writes next to |u| - log(2)."""
    return (isinstance(e, softplus) and e.args[0].is_Mul and len(e.args[0].args) == 2
            and e.args[0].args[0] == -2 and isinstance(e.args[0].args[1], sympy.Abs))


def inverse_hyperbolics(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with ``log(u + sqrt(u**2 + 1))`` written ``asinh(u)`` and ``log(u + sqrt(u**2 - 1))``
    ``acosh(u)``: the same function where the log's is real, and what a person writes for it.

    Applied to a spec's formula before it is differentiated (pipeline), not to printed formulas:
    as written, the log cancels for u < 0 (u + sqrt(u**2 + 1) is 1/(2|u|), computed as a
    difference of two numbers near |u|: all bits lost from |u| of about 1e8), and SymPy's
    derivative, (1 + u/sqrt(u**2 + 1))/(u + sqrt(u**2 + 1)), cancels twice; asinh's is
    1/sqrt(u**2 + 1). A held-out probe's ``log(x + sqrt(x**2 + 1))`` on [-1e6, 1e6] warned at every
    order and its generated gradcheck failed at x = -8e5.
    """
    return expr.replace(lambda e: isinstance(e, sympy.log) and _inverse_hyperbolic(e.args[0]) is not None,
                        lambda e: _inverse_hyperbolic(e.args[0]))


def _inverse_hyperbolic(arg: sympy.Expr) -> sympy.Expr | None:
    """asinh(u) for u + sqrt(u**2 + 1), acosh(u) for u + sqrt(u**2 - 1), else None."""
    if not arg.is_Add or len(arg.args) != 2:
        return None
    for root, u in (arg.args, arg.args[::-1]):
        if root.is_Pow and root.exp == sympy.S.Half:
            difference = sympy.expand(root.base - u**2)
            if difference == 1:
                return sympy.asinh(u)
            if difference == -1:
                return sympy.acosh(u)
    return None


def for_differentiation(expr: sympy.Expr) -> sympy.Expr:
    """A stabilised formula as the next nested level differentiates it, with three rewrites undone.

    A ``Ratio`` is a division again (``in_ratios`` writes the derivative's own). (1 - u)*(1 + u)
    is multiplied back into 1 - u**2: that rewrite is for accuracy only (``stabilize`` applies it
    again to the derivative), and the product rule on the two factors would print twice the terms.
    ``_log_cosh(u)`` and |u| + softplus(-2*|u|) - log(2) are log(cosh(u)) again, and
    ``_log_erfc(u, c)`` log(c*erfc(u)): the regimes' derivatives would be a choice between two formulas
    of tanh(u), and the far one's parts have kinks at u = 0 whose derivatives (sign(u), then 0
    almost everywhere) lose the smooth whole's.
    """
    def multiplied(mul):
        first, second, product = _square_pair(mul)
        return mul / (first * second) * product

    expr = expr.replace(lambda e: isinstance(e, Ratio), lambda e: e.args[0] / e.args[1])
    expr = expr.replace(lambda e: e.is_Mul and _square_pair(e) is not None, multiplied)
    expr = expr.replace(lambda e: _log_cosh_argument(e) is not None,
                        lambda e: sympy.log(sympy.cosh(_log_cosh_argument(e))))
    expr = expr.replace(lambda e: _log_erfc_argument(e) is not None, _log_erfc_undone)
    return expr.replace(_is_log_cosh_tail, lambda e: sympy.log(sympy.cosh(e.args[0].args[1].args[0]))
                        - e.args[0].args[1] + sympy.log(2))


@functools.lru_cache(maxsize=4096)
def factored(expr: sympy.Expr) -> sympy.Expr:
    """``sympy.factor_terms(expr)``, remembered: ``stabilize`` factors each formula to see whether
    its factored form is stable too, and the planner factors the same formula again before CSE
    (factoring is about half of a large spec's planning)."""
    return sympy.factor_terms(expr)


# Rules that buy accuracy only, with a transcendental kernel more than the plain form: sigmoid(-u)
# for 1 - sigmoid(u) (exact where sigmoid(u) rounds to 1), 2*c*sigmoid(2*u) for c + c*tanh(u)
# (exact where tanh(u) rounds to -1). The plain forms are never NaN; they lose bits in a tail. A
# build leaves these rules out where the formulas keep the accuracy bound on the spec's domain
# without them and cost less (build/planning.py). sigmoid_difference stays: its cancellation is at
# u = 0, inside most domains.
ACCURACY_ONLY = ("one_minus_sigmoid", "tanh_complement")
# What the accuracy-only rules write: a formula without these holds nothing they could have changed.
ACCURACY_ONLY_WRITES = (sigmoid, sympy.tanh)
CHEAP_RULES = tuple((name, rule) for name, rule in RULES if name not in ACCURACY_ONLY)


def stabilize(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with every rule applied, bottom-up, until nothing changes, also in the factored
    form that the planner prints (``plan.blocks._block`` factors each formula before CSE).

    Factoring can uncover a pattern: s - s**2, a nested level's derivative of sigmoid(u) = s, is
    printed as s*(1 - s), which cancels near s = 1 unless rewritten to s*sigmoid(-u). So a formula
    is stable only if its factored form is a fixed point too.
    """
    return _stabilized(expr, RULES)


def stabilize_cheaply(expr: sympy.Expr) -> sympy.Expr:
    """``stabilize`` without the ``ACCURACY_ONLY`` rules: every NaN and overflow still rewritten
    away, 1 - sigmoid(u) left as written (one kernel on a saved sigmoid, not another sigmoid)."""
    return _stabilized(expr, CHEAP_RULES)


@functools.lru_cache(maxsize=4096)  # pure; nested levels stabilise each formula where derived and where printed
def _stabilized(expr: sympy.Expr, rules) -> sympy.Expr:
    for _ in range(MAX_PASSES):
        expr = _apply_rules(expr, rules)
        factored_form = factored(expr)
        if factored_form == expr:
            break
        rewritten = _apply_rules(factored_form, rules)
        if rewritten == factored_form:
            break
        expr = rewritten
    return expr


@functools.lru_cache(maxsize=4096)
def stabilize_tails(expr: sympy.Expr) -> sympy.Expr:
    """``stabilize``, with tanh's derivative exact in its tails: ``Sech2(tanh(u))`` (printed
    ``1 - y**2`` or torch's ``tanh_backward``, as autograd computes it) as
    ``4*sigmoid(2*u)*sigmoid(-2*u)``.

    tanh(u) rounds to +-1 in the tails, where 1 - tanh(u)**2 is 0 from |u| = 19 (9 in float32)
    and loses about 2.9 bits per unit of |u| before, 4 from |u| = 2. The sigmoids are exact there
    and NaN-free under autograd too (1/cosh(u)**2 is not: cosh overflows, and its derivative is
    inf*0). They cost about four kernels where tanh_backward takes one, so a build uses this form
    only where the plain one is over the accuracy bound on the spec's domain (pipeline.py).
    """
    return _sigmoid_sech2(stabilize(expr))


def _sigmoid_sech2(expr: sympy.Expr) -> sympy.Expr:
    def sigmoids(call):
        (u,) = call.args[0].args
        return 4 * sigmoid(2 * u) * sigmoid(-2 * u)

    return expr.replace(lambda e: isinstance(e, Sech2) and isinstance(e.args[0], sympy.tanh), sigmoids)


def _apply_rules(expr: sympy.Expr, rules) -> sympy.Expr:
    for _ in range(MAX_PASSES):
        before = expr
        found = kinds(expr)
        for name, rule in rules:
            if may_match(name, found):
                rewritten = optimize(expr, [rule])
                if rewritten != expr:
                    rewritten = _merged_after(name, rewritten)
                    expr, found = rewritten, kinds(rewritten)
        if expr == before:
            break
    return expr


def identity(expr: sympy.Expr) -> sympy.Expr:
    """The ``--no-rewrite`` build: formulas exactly as SymPy differentiates them."""
    return expr


__all__ = [
    "ACCURACY_ONLY",
    "ACCURACY_ONLY_WRITES",
    "RULES",
    "Erfcx",
    "LogCoshNear",
    "Norm",
    "Ratio",
    "Sech2",
    "expm1",
    "exponents_through_log",
    "factored",
    "for_differentiation",
    "hypot",
    "identity",
    "in_ratios",
    "inverse_hyperbolics",
    "log1p",
    "logaddexp",
    "smooth_norms",
    "stabilize",
    "stabilize_cheaply",
    "stabilize_tails",
]
