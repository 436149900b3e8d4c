"""The Taylor branch of a removable singularity: its polynomial in Horner form (``Horner``, a node
SymPy differentiates as a polynomial), and eps and the degree chosen by measurement against
mpmath (``_choice``; series.py's docstring gives the rule and the figures).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import mpmath
import sympy
from sympy.printing.precedence import PRECEDENCE

from . import symbolic
from .bounded import _tick

MAX_DEGREE = 48  # the highest degree of a polynomial branch
FIRST_TERMS = 26  # the series is taken to degree 25 first, to MAX_DEGREE only where that falls short
DIRECT_BITS = 2.5  # the excess the direct formula may have beyond eps (the oracle's bound is 4)
TRUNCATION = 2.0**-56  # the polynomial's truncation error allowed, relative to the value (with conditioning)
# eps candidates, in units of u: round numbers, about four per octave
THRESHOLDS = (0.0625, 0.125, 0.1875, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0,
              3.5, 4.0, 5.0, 6.0, 7.0, 8.0)
_OCTAVES = (-4, 4)  # the direct formula is measured at 2**-4 <= |u| < 2**4
_PER_OCTAVE = 8
_MAX_POINTS = 4  # points tried per input
_DIGITS = 40  # mpmath's digits beyond those the direct formula's cancellation needs


class _Site:
    """One input and one point of it, and what the walk needs: the inputs, the params' default
    values, the spec's order, the parts already tried ((part, x, x0) -> replacement or None) and
    the input's domain (None: everywhere)."""

    def __init__(self, x, x0, inputs, values, order, tried, domain=None, root=False):
        self.x, self.x0, self.inputs, self.values, self.order, self.tried = x, x0, inputs, values, order, tried
        self.domain = domain
        self.root = root  # a multiple root (_at_roots), not a singularity: the formula is fine away from it

    def at_x0(self, expr: sympy.Expr) -> sympy.Expr:
        return expr.xreplace({self.x: self.x0})


def _coefficients(expr: sympy.Expr, t: sympy.Dummy, n: int) -> list[sympy.Expr] | None:
    """a_0 .. a_(n-1) of the Taylor series of ``expr`` in ``t`` about 0; None where it has a
    negative or fractional power, a log, or SymPy cannot expand it."""
    try:
        series = sympy.series(expr, t, 0, n)
    except (ValueError, TypeError, NotImplementedError, ArithmeticError, sympy.PoleError):
        return None
    series = sympy.expand(series.removeO())
    if series.has(sympy.O, sympy.zoo, sympy.nan, sympy.oo, sympy.Subs, sympy.Derivative):
        return None
    found = [sympy.S.Zero] * n
    for term in sympy.Add.make_args(series):
        coefficient, power = term.as_coeff_exponent(t)
        if coefficient.has(t) or not power.is_Integer or power < 0:
            return None
        if power < n:
            found[int(power)] += coefficient
    return [sympy.expand(c) for c in found]


def _scale(coefficients: list[sympy.Expr], part: sympy.Expr, x: sympy.Symbol, x0: sympy.Expr) -> sympy.Expr:
    """S with a_j = c_j * A * S**j for numbers c_j: the part is A times a function of u = S*(x - x0)
    alone. Tried first: the factor of x in a function's argument (sin(n*pi*r/c)/r: S = pi*n/c, the
    u the part computes itself); then the ratio of successive nonzero coefficients, a_k/a_j, a
    rational number times S**(k - j). 1 where neither fits, or S would be a rational number."""
    nonzero = [(j, c) for j, c in enumerate(coefficients) if c != 0]
    candidates = []
    for call in sorted(part.atoms(sympy.Function), key=sympy.default_sort_key):
        for arg in (a for a in call.args if isinstance(a, sympy.Expr)):
            slope = sympy.expand(arg).coeff(x)
            if slope != 0 and not slope.has(x) and sympy.expand(arg - slope * (x - x0)).free_symbols.isdisjoint({x}):
                candidates.append(slope)
    if len(nonzero) > 1:
        (i, a), (j, b) = nonzero[:2]
        ratio = sympy.powsimp(sympy.expand_power_base(sympy.cancel(b / a), force=True), force=True)
        candidates.append(sympy.powdenest(ratio.as_coeff_Mul()[1] ** sympy.Rational(1, j - i), force=True))
    (m, lead) = nonzero[0]
    for scale in candidates:
        if scale.is_Rational or scale.free_symbols & {x}:
            continue
        if all(sympy.powsimp(c / (lead * scale ** (j - m)), force=True).is_number for j, c in nonzero):
            return scale
    return sympy.S.One


class Expansion:
    """The Taylor coefficients a_j of a part about its point, and its scale S."""

    def __init__(self, coefficients: list[sympy.Expr], scale: sympy.Expr):
        self.coefficients = coefficients
        self.scale = scale
        nonzero = [j for j, c in enumerate(coefficients) if c != 0]
        self.lowest = nonzero[0]
        self.stride = functools.reduce(math.gcd, [j - self.lowest for j in nonzero[1:]], 0) or 1
        lead = coefficients[self.lowest]
        # a_j = factor * c_j * S**j: the numbers c_j of the polynomial in u, and the factor (a
        # number factor goes into the c_j: a product of a number and a sum would be distributed)
        self.factor = sympy.powsimp(lead / scale**self.lowest, force=True)
        self.numbers = [sympy.powsimp(c / (lead * scale ** (j - self.lowest)), force=True) for j, c in enumerate(coefficients)]
        if self.factor.is_number or not all(c.is_number for c in self.numbers):
            # no scale (sin(x)/x + a*sin(2*x)/x): the coefficients as they are, dividing by none
            self.numbers = [c / scale**j for j, c in enumerate(coefficients)]
            self.factor = sympy.S.One

    def in_u(self, values: dict) -> list[mpmath.mpf]:
        """The coefficients of the polynomial in u, params at ``values``, as mpmath numbers (times
        the factor): b_j with part = sum b_j u**j."""
        factor = self.factor.xreplace(values)
        with mpmath.workdps(50):
            return [mpmath.mpf(sympy.N(factor * c.xreplace(values), 50)) if c != 0 else mpmath.mpf(0)
                    for c in self.numbers]

    def polynomial(self, u: sympy.Expr, degree: int) -> sympy.Expr:
        """factor * u**lowest * (c_lowest + w*Horner(w, c_(lowest + stride), ...)), w = u**stride, to
        ``degree`` in u."""
        numbers = [_number(self.numbers[j]) for j in range(self.lowest, degree + 1, self.stride)]
        w = u**self.stride
        # the first level written out: w twice in the tree, so that CSE computes it once (a
        # temporary) where a lone Horner node would print (pi*n*r/c)**2 at every level
        return self.factor * u**self.lowest * (numbers[0] + w * Horner(w, *numbers[1:]))


class Horner(sympy.Function):
    """Horner(w, c_0, ..., c_n) = c_0 + c_1*w + ... + c_n*w**n, written c_0 + w*(c_1 + w*(...)).

    A node of its own so that SymPy differentiates it as a polynomial, d/dw Horner(w, c_0, c_1,
    ...) = Horner(w, c_1, 2*c_2, ...): written out as nested sums and products, the product rule
    repeats each inner level in the derivative of every outer one, d**(k+1) nodes at order k (an
    order-3 build of expm1(x)/x went past the 60 s limit at 67,000 nodes); as a sum of monomials
    the derivatives stay small, but every level of the generated code computes a ladder of powers
    (x**2 ... x**24) and 12 scaled sums, and reads as such. Each printer prints the nested form
    through its own rules (``printmethod``): the generated code (``_torchcode``), the docstring's
    formula (``_sympystr``) and the build's float and exact evaluations (lambdify's
    ``_pythoncode``, ``_mpmathcode``). Not in branches' list of functions finite everywhere, the
    polynomial branch is guarded like the other: far from x0 it is evaluated at a safe point."""

    precedence = PRECEDENCE["Add"]  # printed as a sum: parenthesized as one (printing.precedence reads it)
    taylor_branch = True  # formula.py prints the formula the user wrote, not this branch

    @classmethod
    def eval(cls, w, *coefficients):
        if not coefficients:
            return sympy.S.Zero
        while len(coefficients) > 1 and coefficients[-1] == 0:
            coefficients = coefficients[:-1]
        if len(coefficients) == 1 or w == 0:
            return coefficients[0]
        if w.is_Number and all(c.is_Number for c in coefficients):
            return _nested(w, coefficients)
        return None

    def fdiff(self, argindex=1):
        w, *coefficients = self.args
        if argindex == 1:
            return Horner(w, *[k * c for k, c in enumerate(coefficients)][1:])
        return w ** (argindex - 2)

    def _eval_is_real(self):
        return all(arg.is_real for arg in self.args) or None

    def _print_nested(self, printer, **kwargs):
        """c_0 + w*(c_1 + w*(...)), each level printed once (a printer that prints a sum's terms
        twice to decide its parentheses, as the torch printer does, would take 2**n)."""
        w, *coefficients = self.args
        base = printer.parenthesize(w, PRECEDENCE["Mul"])
        last = coefficients[-1]
        text = None
        for c in reversed(coefficients[:-1]):
            if text is None:  # the innermost level: c_(n-1) + c_n*w
                text = f"{printer.parenthesize(last, PRECEDENCE['Mul'])}*{base}"
            else:
                text = f"{base}*({text})"
            if c.is_Number and c < 0:
                text = f"{text} - {printer._print(-c)}"
            elif c != 0:
                text = f"{text} + {printer.parenthesize(c, PRECEDENCE['Add'])}"
        return text

    _sympystr = _pythoncode = _mpmathcode = _lambdacode = _numpycode = _print_nested

    def _torchcode(self, printer, **kwargs):
        """``_horner(w, (c_0, ..., c_n))``: the generated module's loop computes c_0 + w*(c_1 +
        w*(...)) in the same order as the nested form, which, printed, nests 20 to 48 levels of
        parentheses that no line length holds. The tests' composed reference, which has no
        helpers, writes the nested form."""
        if getattr(printer, "reference", False):
            return self._print_nested(printer, **kwargs)
        w, *coefficients = self.args
        return f"_horner({printer._print(w)}, ({', '.join(printer._print(c) for c in coefficients)}))"


def _nested(w: sympy.Expr, coefficients) -> sympy.Expr:
    value = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        value = c + w * value
    return value


def _number(c: sympy.Expr) -> sympy.Expr:
    """A coefficient as the generated code writes it: the float nearest to it (1/6 ->
    0.16666666666666666); one of params, with its numbers so."""
    return sympy.Float(float(c)) if c.is_number else sympy.nfloat(c, 17)


# -- measurement ----------------------------------------------------------------------------------


def _choice(part: sympy.Expr, site: _Site, expansion: Expansion) -> tuple[tuple[float, int] | None, bool]:
    """(eps in units of u, degree in u) by the rule of the module docstring, or None where the
    part cannot be evaluated at the defaults; and whether more terms of the series than the
    expansion holds could give a larger eps where the direct formula is within DIRECT_BITS."""
    evaluators = _evaluators(part, site, expansion)
    if evaluators is None:
        return None, False
    lo, hi = _OCTAVES
    magnitudes = sorted({*(2.0 ** (k / _PER_OCTAVE) for k in range(lo * _PER_OCTAVE, hi * _PER_OCTAVE)), *THRESHOLDS})
    direct, needed, inside = _measured(site, expansion, evaluators, magnitudes)

    def beyond(eps: float, reach: float = math.inf) -> float:
        return max((bits for u, bits in direct.items() if eps <= u <= reach), default=0.0)

    feasible = []
    for eps in THRESHOLDS:
        within = [needed.get(u) for u in magnitudes if eps / 4 <= u <= eps]
        if None in within:
            break
        feasible.append((eps, max(within)))
    short = len(expansion.coefficients) - 1 < MAX_DEGREE
    if not feasible:
        return None, short
    reach = feasible[-1][0]

    def worst(eps: float) -> float:
        """The direct formula from eps to the farthest feasible eps, the polynomial within eps:
        what the choice of eps changes (beyond the reach no polynomial serves; x - tanh(x)'s
        derivatives lose 8 bits in tanh's tails whatever eps is, and counting them chose the
        smallest eps, past which x - tanh(x) itself loses 8 bits at x = 0.066)."""
        return max(beyond(eps, reach), max((bits for u, bits in inside.items() if u < eps), default=0.0))

    enough = max(DIRECT_BITS, min(worst(eps) for eps, _ in feasible) + 0.5)
    chosen = next((eps, degree) for eps, degree in feasible if worst(eps) <= enough)
    return chosen, short and beyond(chosen[0]) > DIRECT_BITS


class _Evaluators(NamedTuple):
    """The part at the params' defaults: u = scale * (x - x0); its derivatives to the spec's order
    in floats (``floats``) and, one order further (for conditioning), exactly (``exact``)."""

    scale: float
    x0: float
    exact_scale: mpmath.mpf
    exact_x0: mpmath.mpf
    floats: list
    exact: list


def _evaluators(part: sympy.Expr, site: _Site, expansion: Expansion) -> _Evaluators | None:
    """The part's derivatives as functions of x at the defaults, or None where they cannot be had."""
    from .domain import _EXACT_FUNCTIONS, _functions

    x, values = site.x, site.values
    with mpmath.workdps(50):
        exact_scale, exact_x0 = (mpmath.mpmathify(sympy.N(v.xreplace(values), 50)) for v in (expansion.scale, site.x0))
    if any(isinstance(v, mpmath.mpc) or not mpmath.isfinite(v) for v in (exact_scale, exact_x0)) or exact_scale == 0:
        return None
    derivatives = [part.xreplace(values)]
    for _ in range(site.order + 1):
        _tick()
        derivatives.append(symbolic.clean(sympy.diff(derivatives[-1], x)))
    try:
        floats = [sympy.lambdify([x], d, modules=[_functions(), "math"]) for d in derivatives[:-1]]
        exact = [sympy.lambdify([x], d, modules=[_EXACT_FUNCTIONS, "mpmath"]) for d in derivatives]
    except (NameError, TypeError, AttributeError, KeyError, SyntaxError):
        return None
    return _Evaluators(float(exact_scale), float(exact_x0), exact_scale, exact_x0, floats, exact)


def _measured(site: _Site, expansion: Expansion, ev: _Evaluators, magnitudes: list[float]):
    """(direct, needed, inside) by |u|: the direct formula's largest excess over the orders at u and
    -u; the degree the polynomial needs there (None: past MAX_DEGREE, or outside the part's domain);
    the polynomial's own excess in float64 (its terms may alternate)."""
    polynomial = _Derivatives(expansion, site.values, ev.exact_scale, site.order)
    direct: dict[float, float] = {}
    needed: dict[float, int | None] = {}
    inside: dict[float, float] = {}
    for magnitude in magnitudes:
        for u in (magnitude, -magnitude):
            _tick()
            point = ev.x0 + u / ev.scale
            truths = _truths(ev.exact, point, site.order)
            if truths is None:  # outside the part's domain (log(x)/(x - 1) at x < 0)
                needed[magnitude] = None
                continue
            direct[magnitude] = max(direct.get(magnitude, 0.0), _direct_excess(ev.floats, truths, point))
            if magnitude > THRESHOLDS[-1] or needed.get(magnitude, 0) is None:
                continue
            with mpmath.workdps(50):
                exact_u = (mpmath.mpf(point) - ev.exact_x0) * ev.exact_scale  # the u of the float point, exactly
            degree = polynomial.degree(exact_u, truths, point)
            needed[magnitude] = None if degree is None else max(needed.get(magnitude, 0), degree)
            if degree is not None:
                rounded = polynomial.rounding_excess(float(exact_u), degree, truths, point)
                inside[magnitude] = max(inside.get(magnitude, 0.0), rounded)
    return direct, needed, inside


# The direct formula's error at a point is the luck of its roundings: x - tanh(x) loses 3.8 bits
# beyond its conditioning at x = 0.0661 and 8 at 0.06625 (a held-out probe found the split's eps
# chosen past such points). Each point is measured with NEIGHBOURS more, 2**-45 apart relative
# (other roundings, the same truth to first order: f(x + h) = f(x) + h f'(x), h**2 f'' below 2**-90).
NEIGHBOURS = 7
NEIGHBOUR_STEP = 2.0**-45


def _direct_excess(floats: list, truths, point: float) -> float:
    """The direct formula's largest excess over the orders at ``point`` and its neighbours."""
    worst = 0.0
    for j in range(NEIGHBOURS + 1):
        x = point * (1 + j * NEIGHBOUR_STEP) if point else j * NEIGHBOUR_STEP
        for k, function in enumerate(floats):
            try:
                got = float(function(x))
            except (ArithmeticError, ValueError, TypeError):
                got = math.nan
            truth = truths[k] + truths[k + 1] * (mpmath.mpf(x) - mpmath.mpf(point))
            worst = max(worst, _excess(got, truth, truths[k + 1], x))
    return worst


def _truths(exact, x: float, order: int) -> list[mpmath.mpf] | None:
    """The part's derivatives 0..order+1 at ``x``, exactly (None where one is not finite)."""
    digits = _DIGITS + int((order + 2) * max(0.0, -math.log10(abs(x)))) if x else _DIGITS
    found = []
    with mpmath.workdps(digits):
        for function in exact:
            try:
                value = function(mpmath.mpf(x))
            except (ArithmeticError, ValueError, TypeError):
                return None
            if isinstance(value, mpmath.mpc):
                if value.imag:
                    return None
                value = value.real
            if not mpmath.isfinite(value):
                return None
            found.append(+value)
    return found


def _excess(got: float, truth: mpmath.mpf, slope: mpmath.mpf, x: float) -> float:
    """Bits lost beyond the conditioning |x f'/f| (0 where the truth is 0)."""
    if truth == 0:
        return 0.0
    if not math.isfinite(got):
        return 64.0
    ulps = float(abs(mpmath.mpf(got) - truth) / abs(truth)) / 2.0**-53
    kappa = float(abs(x * slope / truth))
    return max(0.0, math.log2(1 + ulps) - math.log2(max(1.0, kappa)))


class _Derivatives:
    """The polynomial's derivatives in x up to ``order`` (params at their defaults), exactly: per
    order k, the coefficients d_j of u**(j - k) for the degrees j of its terms."""

    def __init__(self, expansion: Expansion, values: dict, scale: mpmath.mpf, order: int):
        self.order = order
        self.steps = list(range(expansion.lowest, len(expansion.coefficients), expansion.stride))
        coefficients = expansion.in_u(values)
        with mpmath.workdps(50):
            self.terms = [[(j, coefficients[j] * math.perm(j, k) * scale**k) for j in self.steps if j >= k]
                          for k in range(order + 1)]

    def degree(self, u: mpmath.mpf, truths, x: float) -> int | None:
        """The smallest degree whose truncation error at u is within TRUNCATION (relative to the
        value, times its conditioning |x f^(k+1)/f^(k)| where that is more than 1) for every
        order; None where the highest degree at hand's is not."""
        with mpmath.workdps(50):
            powers = [mpmath.mpf(1)]
            for _ in range(self.steps[-1]):
                powers.append(powers[-1] * u)
            found = self.steps[0]
            for k, terms in enumerate(self.terms):
                values = [d * powers[j - k] for j, d in terms]
                tail = truths[k] - mpmath.fsum(values)  # what the highest degree at hand leaves out
                allowed = TRUNCATION * max(abs(truths[k]), abs(x * truths[k + 1]))
                if abs(tail) > allowed:
                    return None
                tail, allowed = float(tail), float(allowed)
                for (j, _), value in zip(reversed(terms), reversed(values)):  # each shorter polynomial's error
                    if abs(tail + float(value)) > allowed:
                        found = max(found, j)
                        break
                    tail += float(value)
        return found

    def rounding_excess(self, u: float, degree: int, truths, x: float) -> float:
        """The largest excess over the orders of the polynomial to ``degree`` evaluated in float64
        by Horner's rule at u, as the generated code evaluates it: about 0 where its terms fall
        off, bits where they alternate and cancel (an envelope's polynomial about its triple
        root, 7 bits at u = -0.7)."""
        worst = 0.0
        for k, terms in enumerate(self.terms):
            by_power = {j - k: float(d) for j, d in terms if j <= degree}
            value = 0.0
            for power in range(max(by_power, default=0), -1, -1):
                value = value * u + by_power.get(power, 0.0)
            worst = max(worst, _excess(value, truths[k], truths[k + 1], x))
        return worst
