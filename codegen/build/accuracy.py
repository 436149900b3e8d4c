"""The accuracy oracle: each derivative order's error in bits against exact arithmetic.

The generated tests compare a Function with autograd through the composed formula in the same
floating-point arithmetic, so what both lose goes unseen. Here the truth is exact: every partial
derivative up to the spec's order is differentiated by SymPy from the formula as the user wrote it
and evaluated by mpmath at two precisions (kept where they agree). The Function under test is run
with autograd on the same points, in float64 and float32.

Error is counted as Herbie counts it, in bits: log2(1 + the number of floats of the result's dtype
between the result and the truth rounded to that dtype); a NaN or inf where the truth is finite
counts as every bit lost (64 or 32).

Conditioning. The points are floats and exact, but the generated code rounds its first operations
(k * r, x / c) and an ill-conditioned formula amplifies that: sin(pi * x) near x = 1 loses bits in
any arithmetic. A point's condition number is sum_v |v * dg/dv / g| over the inputs and params v
(estimated exactly, by a relative step of 1e-20 at the higher precision); an algorithm whose error
is at most a few roundings of its inputs has error at most about kappa ulps. The bits lost beyond
that, ``excess = max(0, bits - log2(max(1, kappa)))``, are what a better formula could recover, and
what the bound (``BOUND_BITS``) applies to. Points where the truth is 0, subnormal or outside the
dtype's range are left out of the excess (a relative error means nothing there).

Sampling follows Herbie: per input, points uniform over the float bit patterns of its domain (so
1e-150 and 1e-8 are drawn as often as 1 and 3), points uniform in value, the domain's ends, 0, and
the thresholds where a branch changes (``where``, comparisons), each with its neighbours.

Cost. Near 0 the truth needs more digits (``_extra_digits``: 8 per decade below 1e-3, 2,400 at
1e-300), which elementary functions afford and mpmath's Bessel, gamma-family and zeta functions
(SciPy's externals through mpmath too) do not: bessel_y1 at 1e-30 takes 2.5 s at 100 digits, 3
minutes at 1,200, and a build stalled on it. A formula holding one of those (``_slow``) is judged
only at points whose inputs and params are 0 or at least ``SLOW_SMALLEST`` in magnitude (at most
48 extra digits): the rule is by value, not by time, so the same spec measures the same on any
machine.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import random
import struct
from collections.abc import Callable, Sequence

import mpmath
import sympy

from ..derive import symbolic
from ..language import external, special

BOUND_BITS = {"float64": 4.0, "float32": 4.0}  # excess bits allowed where the truth is a normal float
DIGITS = (30, 60)  # the truth at both; where they disagree beyond TRUST, at twice the digits again
MORE_DIGITS = (120, 240, 480)  # ... up to these; a value no two successive precisions agree on is left out
TRUST = 1e-24
STEP = mpmath.mpf("1e-20")  # the relative step of the condition number's estimate (at DIGITS[1])
_FORMATS = {"float64": ("<d", "<q", 64), "float32": ("<f", "<i", 32)}
_SMALLEST_NORMAL = {"float64": 2.2250738585072014e-308, "float32": 1.1754943508222875e-38}
_LARGEST = {"float64": 1.7976931348623157e308, "float32": 3.4028234663852886e38}


SLOW_SMALLEST = 1e-6  # a slow formula's smallest nonzero input or param judged (module docstring)
_SLOW_EXACT = (sympy.polygamma, sympy.loggamma, sympy.gamma, sympy.zeta,
               sympy.lowergamma, sympy.uppergamma, sympy.expint, sympy.Ei,
               sympy.functions.special.bessel.BesselBase)


def _slow(formula: sympy.Expr) -> bool:
    """Whether mpmath's value of ``formula`` may take seconds at many digits (module docstring)."""
    return formula.has(*_SLOW_EXACT, external.ExternalFunctionBase) or any(
        f.slow_exact for f in formula.atoms(special.SpecialFunctionBase))


def _exact_functions() -> dict:
    from ..derive.domain import _EXACT_FUNCTIONS

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


# -- sampling -------------------------------------------------------------------------------------


def _ordered(value: float, dtype: str = "float64") -> int:
    """The float's place in the order of all floats of ``dtype`` (-0.0 and 0.0 both 0)."""
    fmt, ifmt, _ = _FORMATS[dtype]
    bits = struct.unpack(ifmt, struct.pack(fmt, value))[0]
    return bits if bits >= 0 else -(bits & ((1 << (_FORMATS[dtype][2] - 1)) - 1))


def _from_ordered(place: int, dtype: str = "float64") -> float:
    fmt, ifmt, width = _FORMATS[dtype]
    bits = place if place >= 0 else (-place) | (1 << (width - 1))
    if bits >= 1 << (width - 1):
        bits -= 1 << width
    return struct.unpack(fmt, struct.pack(ifmt, bits))[0]


def _rounded(value: float, dtype: str) -> float:
    """``value`` rounded to ``dtype`` (inf past its largest float, as a cast gives)."""
    if dtype == "float64" or not math.isfinite(value):
        return value
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


APPROACH = (2.0**-10, 2.0**-20, 2.0**-30)  # relative distances from a threshold sampled on both sides


def special_values(lo: float, hi: float, thresholds: Sequence[float] = ()) -> list[float]:
    """The ends, 0, and each threshold with its two float neighbours and points approaching it
    (``APPROACH``), where inside [lo, hi]. A formula that vanishes at a cutoff loses most between
    the two: (cos(pi*r/rc) + 1)/2 lost 10 bits beyond its conditioning at rc - 1e-4, which
    neither the neighbours (where the conditioning explains all) nor uniform draws reach."""
    values = [lo, hi] + ([0.0] if lo < 0 < hi else [])
    for t in thresholds:
        values += [t, math.nextafter(t, -math.inf), math.nextafter(t, math.inf)]
        values += [t + sign * (abs(t) or 1.0) * step for step in APPROACH for sign in (-1, 1)]
    return sorted({v for v in values if lo <= v <= hi})


def sample(bounds: Sequence[tuple[float, float]], count: int, seed: int = 0,
           thresholds: Sequence[Sequence[float]] = ()) -> list[tuple[float, ...]]:
    """``count`` points in the box (at least the special values' combinations, up to ``count``):
    half uniform over each input's float bit patterns, half uniform in value, the special values
    first, each beside random values of the other inputs."""
    rng = random.Random(seed)
    marks = [special_values(lo, hi, thresholds[i] if i < len(thresholds) else ()) for i, (lo, hi) in enumerate(bounds)]

    def draw(i: int, by_bits: bool) -> float:
        lo, hi = bounds[i]
        if by_bits:
            return _from_ordered(rng.randint(_ordered(lo), _ordered(hi)))
        return lo + (hi - lo) * rng.random()

    points: list[tuple[float, ...]] = []
    for i, values in enumerate(marks):
        for value in values:
            points.append(tuple(value if j == i else draw(j, len(points) % 2 == 0) for j in range(len(bounds))))
    if len(bounds) > 1:  # the special values together: corners, and 0 in every input at once
        points += list(itertools.islice(itertools.product(*marks), max(0, count // 4)))
    while len(points) < count:
        by_bits = len(points) % 2 == 0
        points.append(tuple(draw(i, by_bits) for i in range(len(bounds))))
    return points


def thresholds(exprs: Sequence[sympy.Expr], symbol: sympy.Symbol) -> list[float]:
    """The values of ``symbol`` at which a comparison in the formulas changes (x < c gives c), where
    the other side is a number (params at their values)."""
    found = []
    for expr in exprs:
        for rel in expr.atoms(sympy.core.relational.Relational):
            for side, other in ((rel.lhs, rel.rhs), (rel.rhs, rel.lhs)):
                if side == symbol and other.is_number:
                    try:
                        found.append(float(other))
                    except TypeError:
                        pass
    return sorted(set(found))


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


# -- error in bits --------------------------------------------------------------------------------


def bits(result: float, truth: mpmath.mpf, dtype: str) -> float:
    """log2(1 + floats of ``dtype`` between ``result`` and ``truth`` rounded to ``dtype``)."""
    width = _FORMATS[dtype][2]
    if not math.isfinite(result):
        return float(width)
    target = _rounded(float(truth), dtype)
    if not math.isfinite(target):
        return 0.0 if result == target else float(width)
    return min(float(width), math.log2(1 + abs(_ordered(result, dtype) - _ordered(target, dtype))))


def counted(truth: Truth, dtype: str) -> bool:
    """Whether the excess at this point counts: the truth is a normal float of ``dtype``."""
    if truth.value is None:
        return False
    size = abs(float(truth.value))
    return _SMALLEST_NORMAL[dtype] <= size <= _LARGEST[dtype]


def excess(result: float, truth: Truth, dtype: str) -> float:
    """The bits lost beyond what the point's conditioning explains (0 where not counted)."""
    if not counted(truth, dtype):
        return 0.0
    lost = bits(result, truth.value, dtype)
    if not math.isfinite(result) or lost <= min(BOUND_BITS.values()):
        return lost  # within the bound whatever the conditioning: the condition number is not needed
    return max(0.0, lost - math.log2(max(1.0, truth.kappa)))


# -- running a Function ---------------------------------------------------------------------------


def autograd_values(fn: Callable, points: Sequence[tuple[float, ...]], dtype: str, order: int,
                    outputs: int, stacked: bool = False) -> dict[tuple[int, tuple[int, ...]], list[float]]:
    """(output, index) -> the values of every partial up to ``order``, by autograd through ``fn``
    (an elementwise function of tensors) on all ``points`` at once."""
    import torch

    torch_dtype = getattr(torch, dtype)
    columns = list(zip(*points))
    xs = [torch.tensor(column, dtype=torch_dtype).requires_grad_() for column in columns]
    found: dict[tuple[int, tuple[int, ...]], list[float]] = {}
    with torch.enable_grad():
        result = fn(*xs)
        values = result.unbind(-1) if stacked else (result if isinstance(result, tuple) else (result,))
        for output, value in enumerate(values[:outputs]):
            cache = {(): value}
            for degree in range(order + 1):
                for combo in itertools.combinations_with_replacement(range(len(xs)), degree):
                    if combo:
                        cache[combo] = _grad(cache[combo[:-1]], xs[combo[-1]], keep=degree < order)
                    found[(output, combo)] = cache[combo].detach().double().tolist()
    return found


def _grad(value, x, keep: bool):
    import torch

    if not value.requires_grad:
        return torch.zeros_like(x)
    (grad,) = torch.autograd.grad(value.sum(), x, create_graph=keep, retain_graph=True, allow_unused=True)
    return torch.zeros_like(x) if grad is None else grad


# -- the report -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Figures:
    """One order's error over the points, in one dtype, for one implementation."""

    order: int
    dtype: str
    mean_bits: float
    max_bits: float
    max_excess: float
    worst: tuple[float, ...] | None  # the point of the largest excess (None: no excess anywhere)
    worst_partial: str
    counted: int


def figures(partial_list: Sequence[Partial], truths, values, points, dtype: str, names) -> list[Figures]:
    """Per order: mean and max bits over the counted points of its partials, and the worst excess."""
    by_order: dict[int, list[tuple[float, float, tuple[float, ...], str]]] = {}
    for partial, row in zip(partial_list, truths):
        got = values[(partial.output, partial.index)]
        label = _label(partial, names)
        for point, truth, result in zip(points, row, got):
            if counted(truth, dtype):
                by_order.setdefault(partial.order, []).append(
                    (bits(result, truth.value, dtype), excess(result, truth, dtype), point, label))
    report = []
    for order in sorted({p.order for p in partial_list}):
        rows = by_order.get(order, [])
        if not rows:
            report.append(Figures(order, dtype, 0.0, 0.0, 0.0, None, "", 0))
            continue
        worst = max(rows, key=lambda row: (row[1], row[0]))
        report.append(Figures(order, dtype, sum(r[0] for r in rows) / len(rows), max(r[0] for r in rows),
                              worst[1], worst[2] if worst[1] > 0 else None, worst[3], len(rows)))
    return report


def _label(partial: Partial, names) -> str:
    inputs, outputs = names
    head = outputs[partial.output] if len(outputs) > 1 else "f"
    if not partial.index:
        return head
    return f"d{len(partial.index)}{head}/" + "".join(f"d{inputs[i]}" for i in partial.index)


@dataclasses.dataclass(frozen=True)
class Report:
    """The oracle's figures for one spec: dbgen's Function and autograd through the composed
    formula (None where torch cannot run the formula), per dtype and order."""

    name: str
    path: str
    points: int
    dbgen: tuple[Figures, ...]
    autograd: tuple[Figures, ...] | None
    samples: tuple  # (dtype, point, partial label, dbgen bits, autograd bits or None) for a plot
    table: tuple = ()  # ExactRow: the generated tests' exact values
    limited_by: tuple[str, ...] = ()  # torch functions whose own error the figures include
    scipy_bits: float = 0.0  # SciPy's own float64 error in the functions called (``scipy_bits``)
    # float64 points where autograd through the composed expression is (True) or is not (False)
    # within a tenth of the generated tests' tolerance of the truth at every order (``_as_reference``)
    reference_points: tuple = ()

    def bound(self, dtype: str) -> float:
        """The excess allowed in ``dtype``: the bound, plus SciPy's own error in float64 (SciPy
        computes in float64; in float32 its error is rounded away)."""
        return BOUND_BITS[dtype] + (self.scipy_bits if dtype == "float64" else 0.0)

    def over_bound(self) -> list[Figures]:
        """The orders whose worst excess is over the bound of their dtype, unless torch's own
        functions (``limited_by``) account for it."""
        if self.limited_by:
            return []
        return [f for f in self.dbgen if f.max_excess > self.bound(f.dtype)]

    def warnings(self) -> list[str]:
        """One line for the build's output: the orders over the bound and the worst of them."""
        over = self.over_bound()
        if not over:
            return []
        f = max(over, key=lambda figures: figures.max_excess)
        orders = ", ".join(f"{o.order} ({o.dtype})" for o in over)
        return [(f"order(s) {orders} lose more bits than the bound ({self.bound(f.dtype):g}) beyond their "
                 f"conditioning; worst: order {f.order} loses {f.max_excess:.0f} bits in {f.dtype} "
                 f"({f.worst_partial} at {_point_text(f.worst)}); run dbgen accuracy {self.path} for the table")]


@dataclasses.dataclass(frozen=True)
class ExactRow:
    """One exact value the generated tests check: a partial of one output at one point, and the
    error allowed there in bits (the bound plus the point's conditioning, or what the build
    measured where that is more: the build warned of it)."""

    dtype: str
    point: tuple[float, ...]
    output: int
    index: tuple[int, ...]
    value: float
    bits: float


TABLE_POINTS = 6  # points per dtype in the generated tests' table (the special values first)
TABLE_ROWS = 96  # rows per dtype at most: fewer points where a spec has many partials

# torch functions whose own float64 error is larger than the bound, measured against mpmath:
# figures that include them say so, and are not counted against the bound.
TORCH_LIMITS = {
    "polygamma": "torch.polygamma(n >= 1, x): about 5e-10 relative in float64",
}


SCIPY_POINTS = 64  # points at which SciPy's own error is measured (each an mpmath call per function)


def scipy_bits(formulas: Sequence[sympy.Expr], inputs: Sequence[sympy.Symbol], points, spec) -> float:
    """The largest error, in float64 bits, of SciPy's own functions at the arguments the formulas
    call them with at ``points`` (params at their defaults): no formula built on them can be more
    exact. SciPy's kv, for one, is within 3 bits of mpmath at whole and half-whole orders and
    loses up to 10 at others (kv(0.4, x) on [1e-3, 60]); a fixed allowance would be too loose
    for the first and a false alarm for the second."""
    from ..derive.domain import at_defaults

    calls = {at_defaults(node.scipy_call(), spec)
             for formula in formulas for node in formula.atoms(external.ScipyFunctionBase)}
    worst = 0.0
    for node in calls:
        if not isinstance(node, external.ScipyFunctionBase):
            continue  # of numbers alone: SymPy has its value already
        arguments = sympy.lambdify(inputs, node.args, modules="math")
        for point in points[:SCIPY_POINTS]:
            worst = max(worst, _own_error(type(node), arguments, point))
    return round(worst, 1)


def _own_error(cls, arguments, point) -> float:
    """SciPy's error in bits for ``cls`` at the float64 arguments ``arguments(*point)``, beyond
    the function's conditioning in its last argument."""
    import scipy.special

    try:
        args = [float(value) for value in arguments(*point)]
    except (ArithmeticError, ValueError, TypeError):
        return 0.0
    value = eval(cls.call, {"special": scipy.special, **dict(zip(cls.params, args))})  # the table's own text, as the module runs it
    with mpmath.workprec(2 * 53 + 20):
        try:
            truth = cls.exact(*(mpmath.mpf(arg) for arg in args))
        except (ArithmeticError, ValueError):
            return 0.0
    if not isinstance(truth, mpmath.mpf) or not _SMALLEST_NORMAL["float64"] <= abs(truth) <= _LARGEST["float64"]:
        return 0.0
    # beyond the function's own conditioning, as the oracle counts: jv near a zero has few bits
    slope = cls.rule(*(sympy.Float(arg) for arg in args)).evalf(30)
    kappa = abs(args[-1] * float(slope) / float(truth)) if slope.is_Number else 1.0
    return max(0.0, bits(float(value), truth, "float64") - math.log2(max(1.0, kappa)))


def limited_by(exprs: Sequence[sympy.Expr]) -> tuple[str, ...]:
    """The torch functions with a known error of their own (special.py's torch_error, polygamma
    of order 1 and more) that the formulas call."""
    found = set()
    for expr in exprs:
        for node in expr.atoms(special.SpecialFunctionBase):
            if type(node).torch_error:
                found.add(f"torch.special.{type(node).__name__}: about {type(node).torch_error:g} absolute in float64")
        if any(isinstance(node, sympy.polygamma) for node in sympy.preorder_traversal(expr)):
            found.add(TORCH_LIMITS["polygamma"])
    return tuple(sorted(found))


def measure(plan, count: int = 256, dtypes: Sequence[str] = ("float64", "float32"), seed: int = 0,
            composed: bool = True, source: str | None = None) -> Report:
    """The oracle on ``plan``'s module (rendered and run eagerly) at ``count`` points of its spec's
    domain, params at their defaults.

    Args:
        plan: a ``plan.ModulePlan`` (what build renders).
        count: points sampled (special values included).
        dtypes: the dtypes the Function is run in; each has its own points (the float64 points
            rounded to it) and truth.
        seed: the sampling seed.
        composed: also measure autograd through the spec's formula written in torch ops.
        source: the module's text where the caller has rendered it already (else rendered here).

    Returns:
        A ``Report``.
    """
    return Oracle(plan.spec, count, dtypes, seed).measure(plan, composed, source)


class Oracle:
    """The truth for one spec: its partial derivatives, the sampled points and their exact values
    per dtype, computed once; ``measure`` compares any plan of the spec with them (auto measures
    each candidate it passes over with the same truth).

    Args:
        spec: the spec whose formulas are the truth's source (as parsed, before guards or rewrites).
        count, dtypes, seed: as ``measure``'s.
    """

    def __init__(self, spec, count: int = 256, dtypes: Sequence[str] = ("float64", "float32"), seed: int = 0):
        from ..derive.domain import at_defaults

        self.spec = spec
        self.inputs = [sympy.Symbol(name, real=True) for name in spec.inputs]
        params = [sympy.Symbol(name, real=True) for name in spec.param_names]
        self.exprs = _unguarded(spec)
        self.partials = partials(self.exprs, self.inputs, spec.order)
        marks = [thresholds([at_defaults(e, spec) for e in self.exprs], s) for s in self.inputs]
        base = sample([spec.bounds(name) for name in spec.inputs], count, seed, marks)
        self.sampled = len(base)
        self.dtypes = dtypes
        self._points = {dtype: [p for p in (tuple(_rounded(v, dtype) for v in point) for point in base)
                                if all(math.isfinite(v) for v in p)] for dtype in dtypes}
        self._variables = [*self.inputs, *params]
        self._truths: dict[str, list[list[Truth]]] = {}

    @functools.cached_property
    def scipy_bits(self) -> float:
        """SciPy's own error at this spec's points (``scipy_bits``): the spec's, whichever plan."""
        return scipy_bits([p.formula for p in self.partials], self.inputs, self._points["float64"], self.spec)

    def truths(self, dtype: str) -> list[list[Truth]]:
        """Per partial, per point of ``dtype``: the exact value, computed on first use."""
        if dtype not in self._truths:
            self._truths[dtype] = exact([p.formula for p in self.partials], self._variables, self._points[dtype],
                                        [value for _, value in self.spec.params])
        return self._truths[dtype]

    def _reference_points(self, plan, points) -> tuple:
        """``_as_reference`` of the generated tests' own reference (``memory.composed_function``:
        the formula as SymPy prints it, its branches guarded) at the float64 points; () where torch
        cannot differentiate it."""
        from .memory import composed_function

        spec = self.spec
        try:
            values = autograd_values(composed_function(plan), points, "float64", spec.order, len(self.exprs), spec.stack)
        except Exception:  # noqa: BLE001 - torch cannot run it: the tests compare nowhere then
            return ()
        return tuple(_as_reference(self.partials, self.truths("float64"), values, points))

    def measure(self, plan, composed: bool = True, source: str | None = None) -> Report:
        """The ``Report`` on ``plan`` (a plan of this spec), as ``measure`` describes it."""
        from .memory import module_function, written_function

        spec = self.spec
        subjects = {"dbgen": module_function(plan, source)}
        if composed:
            subjects["autograd"] = written_function(spec)
        names = (spec.inputs, [name for name, _ in spec.outputs] or [spec.name])
        results: dict[str, list[Figures]] = {name: [] for name in subjects}
        samples, table, reference = [], [], ()
        for dtype in self.dtypes:
            points = self._points[dtype]
            per_subject = {}
            for name, fn in list(subjects.items()):
                try:
                    values = autograd_values(fn, points, dtype, spec.order, len(self.exprs), spec.stack)
                except Exception:  # torch cannot run or differentiate the composed formula
                    if name == "dbgen":
                        if dtype == "float64" or not _refused_scalar(spec, dtype):
                            raise
                        continue
                    results.pop(name, None)
                    del subjects[name]  # in no dtype: a report has its figures in all or none
                    continue
                per_subject[name] = values
                results[name].extend(figures(self.partials, self.truths(dtype), values, points, dtype, names))
            if "dbgen" not in per_subject:
                continue  # a param that torch refuses as a scalar of this dtype (1e300 in float32)
            samples.extend(_samples(self.partials, self.truths(dtype), per_subject, points, dtype, names))
            table.extend(_table(self.partials, self.truths(dtype), per_subject["dbgen"], points, dtype))
            if dtype == "float64" and composed:
                reference = self._reference_points(plan, points)
        return Report(spec.name, spec.path, self.sampled, tuple(results["dbgen"]),
                      tuple(results["autograd"]) if "autograd" in results else None, tuple(samples), tuple(table),
                      limited_by([p.formula for p in self.partials]), self.scipy_bits,
                      reference)


# The generated tests compare with autograd through the composed expression at rtol 1e-7, atol 1e-9
# (float64): a point is a reference where autograd is within a tenth of that of the truth.
REFERENCE_RTOL, REFERENCE_ATOL = 1e-8, 1e-10


def _as_reference(partial_list, truths, values, points):
    """(point, whether autograd's values there are within REFERENCE_RTOL and REFERENCE_ATOL of the
    truth at every partial) per float64 point: NaN or inf where the truth is finite is not."""
    for p, point in enumerate(points):
        close = True
        for partial, row in zip(partial_list, truths):
            truth = row[p].value
            if truth is None:
                continue
            got = values[(partial.output, partial.index)][p]
            close = close and math.isfinite(got) and abs(got - float(truth)) <= (
                REFERENCE_RTOL * abs(float(truth)) + REFERENCE_ATOL)
        yield point, close


def _refused_scalar(spec, dtype: str) -> bool:
    """Whether a param's value overflows ``dtype``: torch refuses it as a scalar of a tensor of that
    dtype, in the generated Function as in any torch code."""
    return any(abs(value) > _LARGEST[dtype] for _, value in spec.params)


def _table(partial_list, truths, values, points, dtype) -> list[ExactRow]:
    """The first points' exact values (special values come first), with the bits allowed."""
    count = max(1, min(TABLE_POINTS, TABLE_ROWS // max(1, len(partial_list))))
    rows = []
    for partial, row in zip(partial_list, truths):
        got = values[(partial.output, partial.index)]
        for point, truth, result in list(zip(points, row, got))[:count]:
            if not counted(truth, dtype):
                continue
            # decided by the truth alone, so that every machine writes the same tests; a row the
            # build measured over it (and warned of) checks only that the value is finite
            width = float(_FORMATS[dtype][2])
            allowed = min(width, round(BOUND_BITS[dtype] + math.log2(max(1.0, truth.kappa)) + 0.05, 1))
            lost = bits(result, truth.value, dtype) > allowed
            rows.append(ExactRow(dtype, point, partial.output, partial.index, _rounded(float(truth.value), dtype),
                                 width if lost else allowed))
    return rows


def _samples(partial_list, truths, per_subject, points, dtype, names):
    for partial, row in zip(partial_list, truths):
        ours = per_subject["dbgen"][(partial.output, partial.index)]
        theirs = per_subject.get("autograd", {}).get((partial.output, partial.index))
        for p, (point, truth) in enumerate(zip(points, row)):
            if counted(truth, dtype):
                yield (dtype, point, _label(partial, names), partial.order, bits(ours[p], truth.value, dtype),
                       None if theirs is None else bits(theirs[p], truth.value, dtype))


def _unguarded(spec) -> list[sympy.Expr]:
    """The spec's formulas as parsed, before guards or rewrites: the truth's source. A product of a
    power and kv of its base is one function (external.bessel_powers): its derivatives as SymPy
    writes them apart cancel near 0 beyond any precision the oracle tries (terms of 1e864 for a
    value of 1e-288), so the truth there would be missing, and the points not counted."""
    from ..language.expr import spec_formulas

    return [external.bessel_powers(formula) for _, formula in spec_formulas(spec)]



def reference_domain(reports: Sequence[Report], domain: dict) -> dict | None:
    """Where the generated tests compare with autograd through the composed expression: input ->
    the intervals inside its domain where that was a reference (``_as_reference``) at each of the
    reports' float64 points. None where it was at every point, or no report says.

    The intervals are spanned by points measured good, never by unmeasured space. One input: each
    run of consecutive good points (in x) with no bad one between them. Several: one box, shrunk
    from the face nearest each bad point, the points farthest from its centre first (bad tails are
    cut off, the middle kept), then to the good points left in it. Intervals that together span a
    thousandth of the domain or less are none (None: the tests compare on the whole domain, and a
    failure there is the reference's).
    """
    good, bad = set(), set()
    for report in reports:
        for point, close in report.reference_points:
            (good if close else bad).add(point)
    good -= bad
    if not bad or not good:
        return None
    names = list(domain)
    if len(names) == 1:
        found = {names[0]: _good_runs(good, bad)}
    else:
        box = _shrunk_box(good, bad, [domain[n] for n in names])
        found = {name: [interval] for name, interval in zip(names, box)} if box else {}
    if not found or any(sum(hi - lo for lo, hi in found[n]) <= 1e-3 * (domain[n][1] - domain[n][0]) for n in names):
        return None
    return {name: tuple(intervals) for name, intervals in found.items()}


def _good_runs(good, bad) -> list[tuple[float, float]]:
    """Each run of good points with no bad one between them, as (its first, its last), where it
    spans more than one point."""
    marked = sorted([(v, True) for (v,) in good] + [(v, False) for (v,) in bad])
    runs, current = [], []
    for value, is_good in [*marked, (math.inf, False)]:
        if is_good:
            current.append(value)
            continue
        if len(current) > 1:
            runs.append((current[0], current[-1]))
        current = []
    return runs


def _shrunk_box(good, bad, bounds) -> list[tuple[float, float]] | None:
    """The box ``bounds`` cut past each bad point in it, farthest from the centre first, on the
    side and axis that keep the most good points; then the good points' own box within it."""
    box = [list(b) for b in bounds]
    centre = [(lo + hi) / 2 for lo, hi in bounds]
    widths = [(hi - lo) or 1.0 for lo, hi in bounds]

    def inside(point, limits) -> bool:
        return all(lo <= v <= hi for v, (lo, hi) in zip(point, limits))

    for point in sorted(bad, key=lambda p: -max(abs(v - c) / w for v, c, w in zip(p, centre, widths))):
        if not inside(point, box):
            continue
        cuts = []
        for axis, v in enumerate(point):
            for side, limit in ((0, math.nextafter(v, math.inf)), (1, math.nextafter(v, -math.inf))):
                cut = [list(b) for b in box]
                cut[axis][side] = limit
                cuts.append((sum(inside(g, cut) for g in good), cut))
        box = max(cuts, key=lambda found: found[0])[1]
    kept = [p for p in good if inside(p, box)]
    if not kept:
        return None
    return [(min(p[k] for p in kept), max(p[k] for p in kept)) for k in range(len(box))]


# -- what a person reads --------------------------------------------------------------------------


def report_text(report: Report) -> str:
    """The per-order table of one report: dbgen's bits against autograd's, the worst point."""
    lines = [(f"{report.name}: {report.path} ({report.points} points per dtype; error in bits against "
              f"mpmath, mean / max; excess: bits lost beyond the point's conditioning)")]
    header = f"  {'order':>5}  {'dtype':7}  {'dbgen mean/max':>14}  {'excess':>6}  {'autograd mean/max':>17}  {'excess':>6}  worst"
    lines.append(header)
    theirs = {(f.dtype, f.order): f for f in report.autograd or ()}
    for f in report.dbgen:
        other = theirs.get((f.dtype, f.order))
        other_text = f"{other.mean_bits:7.2f} / {other.max_bits:5.1f}  {other.max_excess:6.1f}" if other else f"{'n/a':>17}  {'':>6}"
        flag = "  OVER" if f.max_excess > report.bound(f.dtype) else ""
        worst = f"{f.worst_partial} at {_point_text(f.worst)}" if f.worst is not None else "-"
        lines.append(f"  {f.order:>5}  {f.dtype:7}  {f.mean_bits:6.2f} / {f.max_bits:5.1f}  {f.max_excess:6.1f}  "
                     f"{other_text}  {worst}{flag}")
    if report.limited_by:
        lines.append("  limited by torch's own error: " + "; ".join(report.limited_by))
    over = report.over_bound()
    bound = ", ".join(f"{report.bound(dtype):g} bits in {dtype}" for dtype in BOUND_BITS)
    if report.scipy_bits:
        bound += f" (float64's includes SciPy's own error, {report.scipy_bits:g} bits)"
    lines.append(f"  bound: {bound}: " + ("within it at every order" if not over else
                                          f"over it at order(s) {', '.join(sorted({str(f.order) for f in over}))}"))
    return "\n".join(lines) + "\n"


def _point_text(point) -> str:
    return "(" + ", ".join(f"{v:.6g}" for v in point) + ")"


def report_json(reports: Sequence[Report]) -> list[dict]:
    """The reports as JSON-ready data (the figures only, not the samples)."""
    def rows(figs):
        return None if figs is None else [dataclasses.asdict(f) for f in figs]

    return [{"name": r.name, "path": r.path, "points": r.points, "bound_bits": {dtype: r.bound(dtype) for dtype in BOUND_BITS},
             "within_bound": not r.over_bound(), "dbgen": rows(r.dbgen), "autograd": rows(r.autograd)}
            for r in reports]


def write_plot(reports: Sequence[Report], path) -> str | None:
    """Error in bits against the (first) input, per order, dbgen and autograd, as Herbie draws it;
    one row of panels per spec, one column per dtype. Returns why it was skipped, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib)"
    dtypes = sorted({s[0] for r in reports for s in r.samples}, reverse=True) or ["float64"]
    fig, axes = plt.subplots(len(reports), len(dtypes), figsize=(6 * len(dtypes), 3.2 * len(reports)), squeeze=False)
    for row, report in zip(axes, reports):
        for ax, dtype in zip(row, dtypes):
            _panel(ax, report, dtype)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def _panel(ax, report: Report, dtype: str) -> None:
    samples = [s for s in report.samples if s[0] == dtype]
    orders = sorted({s[3] for s in samples})
    for order in orders:
        xs = [s[1][0] for s in samples if s[3] == order]
        ax.scatter(xs, [s[4] for s in samples if s[3] == order], s=6, label=f"dbgen order {order}")
        theirs = [(s[1][0], s[5]) for s in samples if s[3] == order and s[5] is not None]
        if theirs:
            ax.scatter(*zip(*theirs), s=6, marker="x", alpha=0.5, label=f"autograd order {order}")
    ax.axhline(BOUND_BITS[dtype], color="grey", linewidth=0.8, linestyle="--")
    ax.set_xscale("symlog", linthresh=1e-3)
    ax.set_title(f"{report.name} ({dtype})")
    ax.set_xlabel("input (first)")
    ax.set_ylabel("bits of error")
    ax.legend(fontsize=6, ncol=2)
