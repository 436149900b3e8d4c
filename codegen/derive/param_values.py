"""Non-default param values for the generated tests, chosen at build time.

At a param's default (often 1.0) a wrong power or factor of it in a derivative formula is
invisible (beta**2 * x == beta * x at beta = 1), so the generated tests also run at other values.
They must keep the function defined on the domain: a sign change or a zero can make it undefined
(sigma in a Lennard-Jones potential, beta in softplus's log(1 + exp(beta*x))/beta), and a
non-integer exponent makes x**p undefined for x < 0. So each rule below is tried in turn, and the
first whose values keep the function and its first derivatives finite (in float64) at every
sample point of the domain where they are finite at the defaults is taken.
"""

from __future__ import annotations

import math

import sympy

from .domain import UNEVALUATED, not_finite

# Each param gets its own factor, so that two params with the same default get different values
# (swapping epsilon and sigma in a formula is invisible when both are 1.25).
_FACTORS = (1.25, 1.5, 1.75, 1.375)
_SAMPLES = 17  # points of the domain the values are checked on (with both corners)


def _scaled(value: float, index: int) -> float:
    """Keeps the sign, so that a positive scale or a negative charge stays one; 0 becomes small
    and positive (a 0 default is usually an offset or a shift)."""
    factor = _FACTORS[index % len(_FACTORS)]
    return value * factor if value != 0 else factor - 1


def _integer_step(value: float, index: int) -> float:
    """An integer default stays an integer, one step or more away from zero: x**p with p = 6 is
    defined for x < 0, x**7.5 is not."""
    if value != int(value):
        return _scaled(value, index)
    step = 1 + index // len(_FACTORS)
    return value + step if value >= 0 else value - step


def _shrunk(value: float, index: int) -> float:
    """Smaller in size, same sign: for formulas that overflow when a param grows (exp(beta * x))."""
    factor = _FACTORS[index % len(_FACTORS)]
    return value / factor if value != 0 else -(factor - 1)


_RULES = (_scaled, _integer_step, _shrunk)


def other_param_values(expr: sympy.Expr, params, inputs, domain) -> dict[str, float] | None:
    """Values of every param, none 0, 1 or -1 nor its default, that keep ``expr`` finite on the
    domain; None when no rule finds such values (the tests then check the defaults only)."""
    if not params:
        return None
    defaults = dict(params)
    checks = _finite_checks(expr, inputs, domain)
    try:
        baseline = checks(defaults)
    except UNEVALUATED:  # a form math cannot evaluate: the first rule's values, unchecked
        checks = baseline = None
    for rule in _RULES:
        values = {name: _avoid_units(rule(value, i), value) for i, (name, value) in enumerate(params)}
        if None not in values.values() and (checks is None or _no_worse(checks(values), baseline)):
            return values
    return None


def _avoid_units(value: float, default: float) -> float | None:
    """0, 1 and -1 hide a wrong power or factor just as a default of 1.0 does: moved on (a few
    times); None where that cannot help (the value overflows)."""
    for _ in range(3):
        if not math.isfinite(value):
            return None
        if value not in (0.0, 1.0, -1.0) and value != default:
            return float(value)
        if value == int(value):
            value = value + math.copysign(1.0, value)
        else:  # a subnormal default rounds back to itself when scaled by 1.25
            value = value * 1.25 if value * 1.25 != value else value * 2
    return None


def _no_worse(finite: list[bool], baseline: list[bool]) -> bool:
    return all(now or not before for now, before in zip(finite, baseline))


def _finite_checks(expr: sympy.Expr, inputs, domain):
    """A function of param values -> for each (formula, point): is the formula finite there."""
    symbols = [sympy.Symbol(name, real=True) for name in inputs]
    formulas = [expr, *(sympy.diff(expr, s) for s in symbols)]
    points = _sample_points(inputs, domain)

    def checks(values: dict[str, float]) -> list[bool]:
        rule = {sympy.Symbol(n, real=True): sympy.Float(v) for n, v in values.items()}
        try:
            at_values = [f.xreplace(rule) for f in formulas]
        except TypeError:  # SymPy refuses a comparison that is not real there (x <= acos(a) at a = -2)
            return [False] * (len(formulas) * len(points))
        return [not bad for row in not_finite(at_values, symbols, points) for bad in row]

    return checks


def _sample_points(inputs, domain) -> list[tuple[float, ...]]:
    """Both corners of the domain box and points inside it that cover every input's range
    (a golden-ratio sequence per input, different for each input): deterministic and few."""
    bounds = dict(domain)
    points = []
    for k in range(_SAMPLES):
        point = []
        for j, name in enumerate(inputs):
            lo, hi = bounds[name]
            if k < 2:
                fraction = float(k)
            else:
                fraction = (k * 0.6180339887498949 + j * 0.4142135623730951) % 1.0
            point.append(lo + (hi - lo) * fraction)
        points.append(tuple(point))
    return points
