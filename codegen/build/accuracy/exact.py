"""Exact values from mpmath: each derivative of a formula at a point, to as many digits as it
takes, with its condition number.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import mpmath
import sympy

from ...derive import symbolic
from ...language import external, special

DIGITS = (30, 60)  # the truth at both; where they disagree beyond TRUST, at twice the digits again
MORE_DIGITS = (120, 240, 480)  # ... up to these; a value no two successive precisions agree on is left out
TRUST = 1e-24
STEP = mpmath.mpf("1e-20")  # the relative step of the condition number's estimate (at DIGITS[1])


SLOW_SMALLEST = 1e-6  # a slow formula's smallest nonzero input or param judged (module docstring)
_SLOW_EXACT = (sympy.polygamma, sympy.loggamma, sympy.gamma, sympy.zeta,
               sympy.lowergamma, sympy.uppergamma, sympy.expint, sympy.Ei,
               sympy.functions.special.bessel.BesselBase)


def _slow(formula: sympy.Expr) -> bool:
    """Whether mpmath's value of ``formula`` may take seconds at many digits (module docstring)."""
    return formula.has(*_SLOW_EXACT, external.ExternalFunctionBase) or any(
        f.slow_exact for f in formula.atoms(special.SpecialFunctionBase))


def _exact_functions() -> dict:
    from ...derive.domain import _EXACT_FUNCTIONS

    return _EXACT_FUNCTIONS


# mpmath's functions behind SymPy's slow ones (_SLOW_EXACT), by the names lambdify prints
_SLOW_MPMATH = ("besselj", "bessely", "besseli", "besselk", "gamma", "loggamma", "polygamma", "psi",
                "zeta", "expint", "ei", "gammainc", "beta", "hyper", "meijerg")


def _memoized_functions() -> dict:
    """The exact functions for lambdify, the slow ones remembering their values by precision and
    arguments: every partial of a spec holds the same Bessel function of the same argument, and
    where the joint function of a point raises (a common subexpression hoisted out of a branch not
    taken divides by 0), the partials are evaluated one by one, each calling it again (a 4th-order
    spec of 3 inputs through modified_bessel_k1: 28 s without, the values are the same)."""
    slow = {name: getattr(mpmath, name) for name in _SLOW_MPMATH}
    slow_special = {cls.__name__ for cls in special.ALL if cls.slow_exact}
    slow.update((name, function) for name, function in _exact_functions().items()
                if name in slow_special or name in external.evaluated())
    cache: dict = {}

    def remembered(name, function):
        def call(*args):
            key = (name, mpmath.mp.prec, args)
            if key not in cache:
                cache[key] = function(*args)
            return cache[key]
        return call

    return {**_exact_functions(), **{name: remembered(name, function) for name, function in slow.items()}}


@dataclasses.dataclass(frozen=True)
class Partial:
    """One derivative the oracle measures: of output ``output`` in the inputs ``index`` (by
    position; () is the value itself)."""

    output: int
    index: tuple[int, ...]
    formula: sympy.Expr

    @property
    def order(self) -> int:
        return len(self.index)


def partials(exprs: Sequence[sympy.Expr], inputs: Sequence[sympy.Symbol], order: int) -> list[Partial]:
    """Every partial derivative of every output up to ``order``, lowest orders first."""
    found = []
    for output, expr in enumerate(exprs):
        found.append(Partial(output, (), expr))
        derivatives, _ = symbolic.partial_derivatives(expr, tuple(inputs), order, limit=math.inf)
        found += [Partial(output, tuple(inputs.index(s) for s in index), derivative)
                  for index, derivative in derivatives]
    return found


# -- the truth ------------------------------------------------------------------------------------


class Truth:
    """A partial's exact value at one point (None: no real value there, or the two precisions
    disagree) and, computed when first asked for, its condition number there."""

    def __init__(self, value, point=None, formula: int = 0):
        self.value = value
        self._point, self._formula = point, formula
        self._kappa = None if value else math.inf  # 0 or None: no relative error to speak of

    @property
    def kappa(self) -> float:
        if self._kappa is None:
            self._kappa = self._point.condition(self._formula, self.value)
        return self._kappa


class _Point:
    """Every formula at one point, evaluated together: the formulas of a spec's partials share most
    of their subexpressions (a Bessel function of the same argument in each), so one function of
    them all, its common subexpressions computed once, costs about as much as one formula. The
    values at each shifted point of the condition number are kept for every formula's kappa."""

    def __init__(self, joint, single, kept, values, fast=frozenset()):
        self._joint, self._single, self._kept, self.values = joint, single, kept, values
        self._fast = fast  # the formulas worth more digits (not a Bessel function's: seconds each)
        self._shifted: dict[int, list] = {}
        self._digits = DIGITS[1] + _extra_digits(self.values)  # the precision the values agreed at

    def agreed(self) -> list:
        """Each formula's value where two successive precisions agree (else None).

        A formula whose terms cancel (the quadratic formula's root at b = 6500: 20 digits lost, its
        second derivative 40) needs more digits than DIGITS: such points are the hardest, and
        leaving them out measured the quadratic formula 23 bits over the bound where it was 87.
        """
        extra = _extra_digits(self.values)
        low, high = (self._all(self.values, d + extra) for d in DIGITS)
        values = [_agreeing(a, b) for a, b in zip(low, high)]
        unsure = {i: b for i, (a, b) in enumerate(zip(low, high)) if a is not None and b is not None
                  and values[i] is None and self._kept[i] in self._fast}
        for digits in MORE_DIGITS:
            if not unsure:
                break
            self._digits = digits + extra
            more = {i: _evaluated(self._single(self._kept[i]), self.values, self._digits) for i in unsure}
            for i, value in more.items():
                values[i] = _agreeing(unsure[i], value)
            unsure = {i: value for i, value in more.items() if value is not None and values[i] is None}
        return values

    def condition(self, formula: int, value) -> float:
        """sum_v |v * dg/dv / g| over the variables, by a relative step of STEP at the precision
        the values agreed at."""
        kappa = mpmath.mpf(0)
        digits = self._digits
        with mpmath.workdps(digits):
            for i, v in enumerate(self.values):
                if v == 0:
                    continue
                if i not in self._shifted:
                    moved = list(self.values)
                    moved[i] = mpmath.mpf(v) * (1 + STEP)
                    self._shifted[i] = self._all(moved, digits)
                shifted = self._shifted[i][formula]
                if shifted is None:
                    return math.inf
                kappa += abs((shifted - value) / (value * STEP))
        return float(kappa)

    def _all(self, values, digits) -> list:
        """Every formula's value at ``digits``; one at a time where the joint function raises (one
        formula undefined at the point leaves the others defined)."""
        with mpmath.workdps(digits):
            try:
                results = self._joint(*(mpmath.mpf(v) for v in values))
            except (ArithmeticError, ValueError, TypeError, ZeroDivisionError):
                return [_evaluated(self._single(i), values, digits) for i in self._kept]
            return [_real(result, digits) for result in results]


def _agreeing(low, high):
    """``high`` where it and ``low``, the same value at fewer digits, agree within TRUST; else None."""
    return None if low is None or high is None or abs(low - high) > TRUST * abs(high) else high


def exact(partial_formulas: Sequence[sympy.Expr], variables: Sequence[sympy.Symbol],
          points: Sequence[tuple[float, ...]], params: Sequence[float] = ()) -> list[list[Truth]]:
    """Per formula, per point: the exact value (agreeing at both DIGITS) and condition number.

    ``variables`` are the inputs then the params, whose values are ``params`` at every point;
    the condition number runs over all of them."""
    modules = [_memoized_functions(), "mpmath"]
    formulas = list(partial_formulas)

    @functools.cache
    def single(i: int):
        """Formula i on its own, lambdified where first needed: only at a point where the joint
        function raises, and lambdifying every formula up front was a fifth of the oracle's time."""
        return sympy.lambdify(variables, formulas[i], modules=modules)

    every = list(range(len(formulas)))
    fast = [i for i in every if not _slow(formulas[i])]  # the formulas judged at every point
    joints = {}
    table: list[list[Truth]] = [[] for _ in formulas]
    for point in points:
        values = (*point, *params)
        kept = every if all(v == 0 or abs(v) >= SLOW_SMALLEST for v in values) else fast
        key = tuple(kept)
        if key not in joints:
            joints[key] = sympy.lambdify(variables, [formulas[i] for i in kept], modules=modules, cse=True)
        at = _Point(joints[key], single, kept, values, frozenset(fast))
        truths = dict(zip(kept, at.agreed()))
        for i, row in enumerate(table):
            row.append(Truth(truths[i], at, kept.index(i)) if i in truths else Truth(None))
    return table


def _evaluated(function, values, digits):
    with mpmath.workdps(digits):
        try:
            result = function(*(mpmath.mpf(v) for v in values))
        except (ArithmeticError, ValueError, TypeError, ZeroDivisionError):
            return None
        return _real(result, digits)


def _real(result, digits):
    """An mpmath result as a finite real mpf, or None (complex beyond rounding, not a number, inf)."""
    if isinstance(result, mpmath.mpc):
        if abs(result.imag) > abs(result.real) * mpmath.mpf(10) ** (-digits // 2):
            return None
        result = result.real
    try:
        result = mpmath.mpf(result)
    except (TypeError, ValueError):
        return None
    return result if mpmath.isfinite(result) else None


def _extra_digits(values) -> int:
    """Digits to add near 0: at x = 1e-200, sin(x) rounds to x and cos(x) to 1 at 60 digits,
    and both precisions would agree on a wrong value of (1 - cos(x))/x**2."""
    smallest = min((abs(v) for v in values if v != 0), default=1.0)
    return 0 if smallest >= 1e-3 else int(8 * -math.log10(smallest))
