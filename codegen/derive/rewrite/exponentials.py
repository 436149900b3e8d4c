"""Rewrites of exponentials and the logistic family: softplus and log-sigmoid in their stable
forms, expm1 and log1p, sigmoid differences, exponentials absorbed into sigmoids and tanh.
"""

from __future__ import annotations

import sympy
from sympy.codegen.cfunctions import log1p
from sympy.codegen.rewriting import ReplaceOptim

from ...language.functions import sigmoid, softplus


def _is_exp(term) -> bool:
    return isinstance(term, sympy.exp)


def _exp_argument(term):
    """u for exp(u), 0 for the constant 1 (= exp(0)); None for anything else."""
    if _is_exp(term):
        return term.args[0]
    return sympy.S.Zero if term == 1 else None


def _two_exponentials(base):
    """(a, b) when ``base`` is exp(a) + exp(b) (1 counting as exp(0)), else None."""
    if not base.is_Add or len(base.args) != 2:
        return None
    a, b = (_exp_argument(term) for term in base.args)
    return None if a is None or b is None else (a, b)


# log(1 + exp(u)) -> softplus(u): torch's softplus does not overflow.
softplus_opt = ReplaceOptim(
    lambda e: (isinstance(e, sympy.log) and _two_exponentials(e.args[0]) is not None
               and sympy.S.Zero in _two_exponentials(e.args[0]))
    or (isinstance(e, log1p) and _is_exp(e.args[0])),
    lambda e: softplus(
        e.args[0].args[0] if isinstance(e, log1p)
        else sum(_two_exponentials(e.args[0]), sympy.S.Zero)
    ),
)

# log(sigmoid(u)) -> -softplus(-u): the log-sigmoid without log(0) for very negative u.
log_sigmoid_opt = ReplaceOptim(
    lambda e: isinstance(e, sympy.log) and isinstance(e.args[0], sigmoid),
    lambda e: -softplus(-e.args[0].args[0]),
)

def _softplus_and_argument(add):
    """(term, c, u) for terms c*softplus(u) and -c*u of ``add``; else None."""
    for term in add.args:
        c, call = term.as_coeff_Mul()
        if isinstance(call, softplus) and any(other == -c * call.args[0] for other in add.args):
            return term, c, call.args[0]
    return None


def _softplus_reflected(add):
    term, c, u = _softplus_and_argument(add)
    return add - term + c * u + c * softplus(-u)


# softplus(u) - u -> softplus(-u): softplus(u) rounds to u far out, and the difference, exp(-u) to
# first order, is 0 (log(1 + exp(x)) - x at x = 40: 0, true 4e-18; its derivatives lose every bit).
softplus_reflection_opt = ReplaceOptim(lambda e: e.is_Add and _softplus_and_argument(e) is not None,
                                       _softplus_reflected)

# log(1 + u) -> log1p(u): exact for small u.
log1p_opt = ReplaceOptim(
    lambda e: isinstance(e, sympy.log) and e.args[0].is_Add and sympy.S.One in e.args[0].args,
    lambda e: log1p(e.args[0] - 1),
)

def _unit_pair(add, kind):
    """(term, call, c) for a term c*kind(u) of ``add`` that also holds the constant -c, else None.

    Such an ``add`` is rest + c*(kind(u) - 1).
    """
    for term in add.args:
        coefficient, call = term.as_coeff_Mul()
        if isinstance(call, kind) and coefficient != 0 and -coefficient in add.args:
            return term, call, coefficient
    return None


def _replace_unit_pair(add, kind, minus_one):
    """rest + c*(kind(u) - 1) -> rest + c*minus_one(u), where minus_one(u) equals kind(u) - 1."""
    term, call, coefficient = _unit_pair(add, kind)
    rest = add - term + coefficient
    return rest + coefficient * minus_one(call.args[0])


# 1 - sigmoid(u) -> sigmoid(-u), sigmoid(u) - 1 -> -sigmoid(-u): no cancellation near sigmoid(u) = 1.
one_minus_sigmoid_opt = ReplaceOptim(
    lambda e: e.is_Add and _unit_pair(e, sigmoid) is not None,
    lambda e: _replace_unit_pair(e, sigmoid, lambda u: -sigmoid(-u)),
)


def _sigmoid_difference(add):
    """(term, partner, replacement) for terms rest*sigmoid(w) and -rest*sigmoid(-w) of ``add``, or
    c*sigmoid(w) and the constant -c/2, whose sum is rest*tanh(w/2) or c/2*tanh(w/2); else None."""
    terms = set(add.args)
    for term in add.args:
        for factor in sympy.Mul.make_args(term):
            base, power = factor.as_base_exp()
            if isinstance(base, sigmoid) and power.is_Integer and power > 0:
                rest, half = term / base, sympy.tanh(base.args[0] / 2)
                partner = -rest * sigmoid(-base.args[0])
                if partner in terms:
                    return term, partner, rest * half
                if rest.is_Number and -rest / 2 in terms:
                    return term, -rest / 2, rest / 2 * half
    return None


def _tanh_of_half(add):
    term, partner, replacement = _sigmoid_difference(add)
    return add - term - partner + replacement


# c*sigmoid(u) - c*sigmoid(-u) -> c*tanh(u/2), 1 - 2*sigmoid(u) -> -tanh(u/2): the sigmoids are 1/2
# near u = 0, where the difference is u/4 (softplus's and SiLU's third derivatives, which hold it,
# lost every bit at u = 1e-17).
sigmoid_difference_opt = ReplaceOptim(lambda e: e.is_Add and _sigmoid_difference(e) is not None, _tanh_of_half)


def _sigmoid_form(factor):
    """(exp(a) + exp(b))**-n as exp(-n*a) * sigmoid(a - b)**n for either choice of a."""
    a, b = _two_exponentials(factor.base)
    n = -factor.exp
    return [sympy.exp(-n * first) * sigmoid(first - second) ** n for first, second in ((a, b), (b, a))]


def _is_exp_denominator(factor) -> bool:
    return (factor.is_Pow and factor.exp.is_Integer and factor.exp < 0
            and _two_exponentials(factor.base) is not None)


def _exponential_count(expr) -> int:
    return sum(1 for node in sympy.preorder_traversal(expr) if _is_exp(node))


def _sigmoid_product(mul):
    """Each 1/(exp(a) + exp(b))**n factor as sigmoids, choosing the form that leaves fewest exp()."""
    result = mul
    for factor in [f for f in sympy.Mul.make_args(mul) if _is_exp_denominator(f)]:
        rest = result / factor
        result = min((rest * form for form in _sigmoid_form(factor)),
                     key=lambda e: (_exponential_count(e), sympy.count_ops(e)))
    return result


def _has_exponential_factor(term) -> bool:
    return any(_is_exp(f) for f in sympy.Mul.make_args(term))


def _exponential_sum_index(mul):
    """Where a product over 1/(exp(a) + exp(b))**n has a sum with an exponential term, else None."""
    factors = sympy.Mul.make_args(mul)
    if not any(_is_exp_denominator(f) for f in factors):
        return None
    for index, factor in enumerate(factors):
        if factor.is_Add and any(_has_exponential_factor(term) for term in factor.args):
            return index
    return None


def _spread_over_exponential_sum(mul):
    """The product multiplied out over that sum."""
    factors = sympy.Mul.make_args(mul)
    index = _exponential_sum_index(mul)
    rest = sympy.Mul(*factors[:index], *factors[index + 1:])
    return sympy.Add(*(rest * term for term in factors[index].args))


# exp(a)*(exp(a)*A - exp(b)*B)/(exp(a) + exp(b))**2 -> exp(2*a)*A/(...)**2 - exp(a + b)*B/(...)**2, so that
# each term's exponentials meet the denominator (sigmoid(a - b)**2*A - sigmoid(a - b)*sigmoid(b - a)*B
# after the rules below); taken whole, the product keeps exp(-a) (a switch function's derivative:
# exp(1/(1 - x)) overflows near x = 1 and multiplies 0 there).
spread_opt = ReplaceOptim(lambda e: e.is_Mul and _exponential_sum_index(e) is not None, _spread_over_exponential_sum)


def _combined_exponentials(mul):
    factors = sympy.Mul.make_args(mul)
    exponents = [f.args[0] for f in factors if _is_exp(f)]
    return sympy.Mul(*(f for f in factors if not _is_exp(f))) * sympy.exp(sympy.Add(*exponents))


# exp(a)*exp(b) -> exp(a + b): finite wherever the product is (exp(100)*exp(-100) is inf*0 = NaN).
combine_exp_opt = ReplaceOptim(lambda e: e.is_Mul and sum(1 for f in e.args if _is_exp(f)) >= 2,
                               _combined_exponentials)


# exp(u)/(1 + exp(u)) -> sigmoid(u), exp(a)/(exp(a) + exp(b)) -> sigmoid(a - b),
# exp(-u)/(1 + exp(-u))**2 -> sigmoid(u)*sigmoid(-u): no inf/inf for large u.
sigmoid_opt = ReplaceOptim(
    lambda e: (e.is_Mul and any(_is_exp_denominator(f) for f in e.args)) or _is_exp_denominator(e),
    _sigmoid_product,
)


def _absorb_exponential(mul):
    """exp(-k*w) * sigmoid(w)**n -> sigmoid(-w)**k * sigmoid(w)**(n - k), for whole 0 < k <= n.

    exp(-w) * sigmoid(w) = sigmoid(-w): the product no longer multiplies inf by 0.
    """
    factors = sympy.Mul.make_args(mul)
    exponent = sympy.Add(*(f.args[0] for f in factors if _is_exp(f)))
    rest = sympy.Mul(*(f for f in factors if not _is_exp(f)))
    for factor in sympy.Mul.make_args(rest):
        base, n = factor.as_base_exp()
        if isinstance(base, sigmoid) and n.is_Integer and n > 0:
            k = sympy.simplify(exponent / -base.args[0]) if base.args[0] != 0 else None
            if k is not None and k.is_Integer and 0 < k <= n:
                w = base.args[0]
                return rest / factor * sigmoid(-w) ** k * sigmoid(w) ** (n - k)
    return mul


def _has_absorbable_exponential(mul) -> bool:
    return mul.is_Mul and any(_is_exp(f) for f in mul.args) and _absorb_exponential(mul) != mul


absorb_opt = ReplaceOptim(_has_absorbable_exponential, _absorb_exponential)


def _hyperbolic_powers(mul) -> dict:
    """u -> {sinh: p, cosh: q} for the factors sinh(u)**p and cosh(u)**q of ``mul``."""
    powers: dict = {}
    for f in sympy.Mul.make_args(mul):
        base, exponent = f.as_base_exp()
        if isinstance(base, (sympy.sinh, sympy.cosh)):
            powers.setdefault(base.args[0], {})[type(base)] = exponent
    return powers


def _opposite_signs(found: dict) -> bool:
    p, q = found.get(sympy.sinh), found.get(sympy.cosh)
    return p is not None and q is not None and ((p.is_positive and q.is_negative) or (p.is_negative and q.is_positive))


def _tanh_ratio(mul):
    """sinh(u)**p * cosh(u)**q with q < 0 < p -> tanh(u)**p * cosh(u)**(p + q); with p < 0 < q
    -> tanh(u)**(-q) * sinh(u)**(p + q)."""
    result = mul
    for u, found in _hyperbolic_powers(mul).items():
        if not _opposite_signs(found):
            continue
        p, q = found[sympy.sinh], found[sympy.cosh]
        kept = sympy.cosh(u) ** (p + q) if p.is_positive else sympy.sinh(u) ** (p + q)
        result = result / (sympy.sinh(u) ** p * sympy.cosh(u) ** q) * sympy.tanh(u) ** (p if p.is_positive else -q) * kept
    return result


def _has_tanh_ratio(mul) -> bool:
    return mul.is_Mul and any(_opposite_signs(found) for found in _hyperbolic_powers(mul).values())


# sinh(u)/cosh(u) -> tanh(u), cosh(u)**3/sinh(u)**4 -> 1/(tanh(u)**3*sinh(u)): inf/inf = NaN for
# large u otherwise (x/sinh(x)'s third derivative in float32 at x = 40).
tanh_opt = ReplaceOptim(_has_tanh_ratio, _tanh_ratio)


def exponents_through_log(expr: sympy.Expr, inputs) -> sympy.Expr:
    """``expr`` with each power of a positive base by an exponent that reads an input written
    ``exp(e*log(b))``: the same value, and no ``torch.pow`` of two tensors for autograd to
    differentiate. torch's pow backward masks the base's gradient where the exponent is 0, so a
    derivative autograd takes of it loses the exponent's part there: d2/dxdy (abs(x) + 1)**y at
    y = 0 was 1/(abs(x) + 1) short, in dbgen's own formulas under save_inputs."""
    inputs = frozenset(inputs)
    return expr.replace(
        lambda e: e.is_Pow and e.exp.free_symbols & inputs and e.base.free_symbols & inputs and e.base.is_positive,
        lambda e: sympy.exp(e.exp * sympy.log(e.base)))
