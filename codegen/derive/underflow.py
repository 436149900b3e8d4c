"""Flat exponentials cut to 0 where they underflow, so that no derivative is 0 * inf there.

``exp(-1/x)`` (e3nn's soft_unit_step), ``exp(-1/x**2)`` (a C-infinity bump), ``exp(-1/(1 - x))``
(SpookyNet's switch): each of their derivatives is ``exp(A)`` times a polynomial in ``1/x``. Where
``A`` is below about -745 the exponential is 0 in float64 (-104 in float32) while ``1/x**k`` goes on
growing, and from ``x`` of about 1e-100 it overflows: 0 * inf is NaN (soft_unit_step's first
derivative at x = 1e-300, its third at 1e-100; the bump's at 1e-160), where the true value is 0.

``cut_underflows`` writes each such ``exp(A)`` as

    Piecewise((0, 0 < b < t), (exp(A), True))        (|b| < t where both sides are flat)

where ``A = c*b**(-k) + R``, ``b`` a linear function of one input, ``c < 0`` and ``R`` finite at
``b = 0``, and ``t`` the point where ``c*t**(-k) = -CUT_EXPONENT``: there the exponential is
``exp(-2000)``, about 1e-869, so the product with any power of ``1/b`` the derivatives up to the
highest order hold (``t**(-(k + 1)*8)``, about 1e40 for ``exp(-1/x**2)``) is still below float64's
smallest subnormal: 0 is the true value rounded, at every order. branches.guard then evaluates the
exponential's branch only where it is taken, as for any choice, so no derivative is NaN there.

Left alone: a ``c`` that reads a param (its sign is the caller's), an ``R`` not finite at the point,
and an exponent that is not such a sum (``exp(-1/x)**2`` is ``exp(-2/x)`` to SymPy already).
"""

from __future__ import annotations

import sympy

CUT_EXPONENT = 2000  # exp(-2000) ~ 1e-869: every product of it with 1/b**m (m <= 200) underflows


def cut_underflows(expr: sympy.Expr, inputs) -> sympy.Expr:
    """``expr`` with every flat exponential of an input cut to 0 where it underflows (module
    docstring); ``expr`` itself where it has none.

    Args:
        expr: a formula of the spec, as parsed.
        inputs: the input symbols (params are never cut on).

    Returns:
        The formula, each flat ``exp(A)`` replaced by ``Piecewise((0, cut), (exp(A), True))``.
    """
    inputs = set(inputs)
    replacements, cuts = {}, {}
    for call in expr.atoms(sympy.exp):
        condition = _cut(call.args[0], inputs)
        if condition is not None:
            replacements[call] = cut = sympy.Piecewise((0, condition), (call, True))
            cuts[cut] = (condition, call)
    if not replacements:
        return expr
    expr = expr.xreplace(replacements)
    return expr.replace(lambda node: isinstance(node, sympy.Piecewise) and any(v in cuts for v, _ in node.args),
                        lambda node: _joined(node, cuts))


def _joined(choice: sympy.Piecewise, cuts: dict) -> sympy.Piecewise:
    """A choice one of whose values is a cut, with the cut's 0 joined to it: ``where(x > 0,
    exp(-1/x), 0)`` is then ``where(x >= t, exp(-1/x), 0)``, one guard and one mask per level
    rather than two (and one tensor fewer saved for backward)."""
    pieces = []
    for value, condition in choice.args:
        if value in cuts:
            inside, call = cuts[value]
            pieces += [(call, _simplified(condition & ~inside)), (0, condition)]
        else:
            pieces.append((value, condition))
    return sympy.Piecewise(*pieces)


def _simplified(condition: sympy.Basic) -> sympy.Basic:
    """A condition on one input as the intervals it holds on (``x >= t``), else as it is."""
    used = condition.free_symbols
    if len(used) != 1:
        return condition
    try:
        return condition.as_set().as_relational(next(iter(used)))
    except (NotImplementedError, TypeError):  # a condition SymPy cannot solve for its input
        return condition


def _cut(exponent: sympy.Expr, inputs: set) -> sympy.Basic | None:
    """Where ``exp(exponent)`` is below exp(-CUT_EXPONENT), or None where it is not flat."""
    conditions = []
    for term in sympy.Add.make_args(exponent):
        found = _flat_term(term, inputs)
        if found is None:
            continue
        base, power, sides = found
        rest = exponent - term
        x = next(iter(base.free_symbols))
        at_point = rest.subs(x, sympy.solve(base, x)[0])
        if not (at_point.is_number and at_point.is_finite and abs(float(at_point)) < CUT_EXPONENT / 4):
            continue
        coefficient = abs(float(term / base**-power))
        t = sympy.Float((coefficient / CUT_EXPONENT) ** (1 / float(power)), 17)
        inside = {"+": (base > 0) & (base < t), "-": (base < 0) & (base > -t), "both": sympy.Abs(base) < t}[sides]
        conditions.append(inside)
    if not conditions:
        return None
    return sympy.Or(*conditions)


def _flat_term(term: sympy.Expr, inputs: set) -> tuple[sympy.Expr, sympy.Expr, str] | None:
    """(b, k, the side(s) where the term goes to -inf) where ``term`` is c*b**(-k), c a negative
    number, k a positive number, b linear in one input and in nothing else; else None."""
    coefficient, factors = term.as_coeff_mul()
    if len(factors) != 1 or not coefficient.is_number or coefficient == 0:
        return None
    power_node = factors[0]
    if not isinstance(power_node, sympy.Pow):
        return None
    base, exponent = power_node.args
    used = base.free_symbols
    if not (exponent.is_number and exponent.is_negative) or len(used) != 1 or not used <= inputs:
        return None
    x = next(iter(used))
    if not base.is_polynomial(x) or sympy.degree(base, x) != 1:
        return None
    k = -exponent
    if k.is_integer and k.is_even:
        return (base, k, "both") if coefficient < 0 else None
    if k.is_integer:  # odd: c*b**(-k) is -inf on the side where c*b has c's sign... of -1
        return (base, k, "+") if coefficient < 0 else (base, k, "-")
    return (base, k, "+") if coefficient < 0 else None  # b**(-1/2): real for b > 0 only
