"""Complements that cancel: 1 - tanh**2, acos's complement, cos's half angle, expm1's reflection.
"""

from __future__ import annotations

import sympy
from sympy.codegen.cfunctions import expm1
from sympy.codegen.rewriting import ReplaceOptim

from ...language.functions import sigmoid
from .exponentials import _is_exp, _replace_unit_pair, _unit_pair

# exp(u) - 1 -> expm1(u), 1 - exp(u) -> -expm1(u): exact for small u.
expm1_opt = ReplaceOptim(
    lambda e: e.is_Add and _unit_pair(e, sympy.exp) is not None,
    lambda e: _replace_unit_pair(e, sympy.exp, expm1),
)


def _exp_over_expm1(mul):
    """(exp(k*u), expm1(u)**-m, k, m) for factors of ``mul`` with whole 0 < k <= m, else None."""
    factors = sympy.Mul.make_args(mul)
    for power in factors:
        base, exponent = power.as_base_exp()
        if not (isinstance(base, expm1) and exponent.is_Integer and exponent < 0):
            continue
        for factor in factors:
            k = factor.args[0] / base.args[0] if _is_exp(factor) else None
            if k is not None and k.is_Integer and 0 < k <= -exponent:
                return factor, power, k, -exponent
    return None


def _reflected_expm1(mul):
    """exp(k*u)/expm1(u)**m -> (-1)**k/(expm1(-u)**k * expm1(u)**(m - k)), as exp(u)/expm1(u) is
    -1/expm1(-u)."""
    exponential, power, k, m = _exp_over_expm1(mul)
    u = power.as_base_exp()[0].args[0]
    rest = sympy.Mul(*(f for f in sympy.Mul.make_args(mul) if f not in (exponential, power)))
    return rest * (-1) ** k * expm1(-u) ** -k * expm1(u) ** (k - m)


# exp(k*u)/expm1(u)**m -> (-1)**k/(expm1(-u)**k*expm1(u)**(m - k)): the derivatives of
# x**3/(exp(x) - 1) (Planck's law) are inf/inf = NaN for x above 44 in float32 otherwise.
expm1_reflection_opt = ReplaceOptim(lambda e: e.is_Mul and _exp_over_expm1(e) is not None, _reflected_expm1)

# acos(1 - u) -> 2*atan2(sqrt(u), sqrt(2 - u)): 1 - u rounds u away near 0, where acos(1 - u) is
# about sqrt(2*u) (16 bits of acos(1 - x) lost at x = 1e-6); the two are equal for 0 <= u <= 2.
# Not 2*asin(sqrt(u/2)): SymPy writes sqrt(u/2) as sqrt(2)*sqrt(u)/2, which rounds above 1 at
# u = 2, where asin is NaN. (SymPy writes atan2(a, b) as atan(a/b) where it knows b > 0.)
acos_complement_opt = ReplaceOptim(
    lambda e: isinstance(e, sympy.acos) and e.args[0].is_Add and sympy.S.One in e.args[0].args,
    lambda e: 2 * sympy.atan2(sympy.sqrt(1 - e.args[0]), sympy.sqrt(1 + e.args[0])),
)


def _call_and_constant(add, kind):
    """(term, c, u, constant) for a term c*kind(u) of ``add`` that also holds the constant c or -c,
    else None."""
    for term in add.args:
        coefficient, call = term.as_coeff_Mul()
        if isinstance(call, kind) and coefficient != 0:
            for constant in (coefficient, -coefficient):
                if constant in add.args:
                    return term, coefficient, call.args[0], constant
    return None


def _half_angle(add):
    term, c, u, constant = _call_and_constant(add, sympy.cos)
    square = sympy.cos(u / 2) ** 2 if constant == c else -sympy.sin(u / 2) ** 2
    return add - term - constant + 2 * c * square


# c + c*cos(u) -> 2*c*cos(u/2)**2, c*cos(u) - c -> -2*c*sin(u/2)**2: cos(u) rounds near -1 (or 1),
# where the sum is of the size of the rounding. The cosine cutoff (cos(pi*r/rc) + 1)/2 lost 10 bits
# beyond its conditioning at r = rc - 1e-4, 14 at rc - 1e-6; cos(u/2) near its zero loses none.
cos_half_angle_opt = ReplaceOptim(lambda e: e.is_Add and _call_and_constant(e, sympy.cos) is not None, _half_angle)


def _tanh_complement(add):
    term, c, u, constant = _call_and_constant(add, sympy.tanh)
    half = sigmoid(2 * u) if constant == c else -sigmoid(-2 * u)
    return add - term - constant + 2 * c * half


# c + c*tanh(u) -> 2*c*sigmoid(2*u), c*tanh(u) - c -> -2*c*sigmoid(-2*u): tanh(u) rounds to -1 (or
# 1) in the tail, where the sum is e**(2*u) small: GELU's tanh form 0.5*x*(1 + tanh(...)) lost 55
# bits of its value at x = -7.6 and was 0 from x = -10 on.
tanh_complement_opt = ReplaceOptim(lambda e: e.is_Add and _call_and_constant(e, sympy.tanh) is not None,
                                   _tanh_complement)
