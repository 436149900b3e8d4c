"""Stage 2b: removable singularities made exact at and near their point, at every order.

``sin(x)/x`` is 0/0 at x = 0, and near it its derivatives cancel: SymPy's third derivative,
``-cos(x)/x + 3*sin(x)/x**2 + 6*cos(x)/x**3 - 6*sin(x)/x**4``, adds terms of size 6/x**4 to make
about x/5, and loses 4 log2(1/x) bits (30 at x = 2**-6, all 53 below 1e-4). ``removable`` finds
such a point and splits the formula there, as Herbie splits regimes: the part of the formula that
is 0/0 (or inf - inf) at a point x0 of one input, with a finite limit there, becomes

    Piecewise((its Taylor polynomial about x0, abs(u) < eps), (the part, True)),  u = S*(x - x0)

where the polynomial is SymPy's series of the part (params symbolic) and S the part's own scale
(below). branches.guard then evaluates each branch only where it is taken, so no value or
derivative is NaN at x0 (nor does x**24 overflow far from it), and the polynomial is exact near
it. The polynomial is printed in Horner form, u**m*(c_0 + w*(c_1 + w*(...))) with w = u**s (s the
stride of its nonzero terms: 2 for an even part), through a node of its own, ``Horner``, that
SymPy differentiates as a polynomial (its class docstring says why). A part whose series ends
(``(x**2 - 1)/(x - 1)``) is replaced by its polynomial everywhere.

**Which parts.** A point is a zero x0 of a denominator (a base raised to a negative number) that
reads the input x and params alone: 0 where it vanishes at 0 (x, x**2, sinh(x), expm1(x)), and the
roots of a linear or quadratic polynomial one (log(x)/(x - 1): x0 = 1). The formula's tree is
walked bottom-up; the part replaced is the smallest sum or product that divides by such a
denominator and whose series about x0 has no negative or fractional power and no log: the
singular terms of a sum (sin(x)/x**3 - cos(x)/x**2 is removable though neither term is), the
factors of a product that vanish, are singular or may not be finite at x0 (of
sqrt(2/rc)*sin(k*pi*r/rc)/r*where(r < rc, ...), sin(k*pi*r/rc)/r: the rest stays outside). Left
alone: a part that reads another input (x*y/(x**2 + y**2) has no limit at 0, and sin(x*y)/x would
need eps in both), one that holds a choice on x (``sin(w*r)/where(r == 0, 1, r)`` is 0 at 0 by the
spec's own word), points that are not removable (1/x, (sigma/r)**12, exp(-1/x), x*log(x)), and a
split whose interval, |u| < eps at the params' defaults, misses the input's domain: it would cost
every call and serve none (sin(x)/x on [5, 10]; the Bessel basis's r in [0.5, 6] meets it, and
gains there: its second derivatives lose up to 7 bits at r = 0.5 as written).

**Scale.** Where the series' coefficients are a_j = A * c_j * S**j with numbers c_j, the part is A
times a function of u = S*(x - x0) alone, so eps and the degree, chosen in u at the params'
defaults, hold for every value of the params. S is the factor of x in an argument of the part's
functions where that fits (sin(n*pi*r/c)/r: S = pi*n/c, the u the part computes itself, which CSE
shares), else read off the ratio of the first two nonzero coefficients; where neither fits
((sin(x) + a*sin(2*x))/x), S = 1 and eps holds at the defaults only.

**eps and the degree, by measurement** (``_choice``, at the params' defaults, in u). The part's
derivatives up to the spec's order, as SymPy writes them, are evaluated in float64 at 8 points
per octave of |u| from 1/16 to 16 (and at each candidate eps), both signs, each with 7 neighbours
2**-45 apart (a cancellation's error is the luck of its roundings: x - tanh(x) loses 3.8 bits at
x = 0.0661, 8 at 0.06625), against mpmath at enough digits to cover their cancellation; a point's
*excess* is its error in bits beyond its conditioning, log2(1 + ulps) - log2(max(1, |x
f^(k+1)/f^(k)|)), as accuracy.py counts it, and E(eps) is the largest excess over the orders at
eps <= |u| <= the largest feasible eps (beyond it no polynomial serves, and tanh's tails would
rank every eps alike). The degree N(eps) is the smallest
whose truncation error, exact, is within 2**-56 of the value (times its conditioning) at every
order and at every sample eps/4 <= |u| <= eps; eps is feasible where N(eps) <= MAX_DEGREE. eps is
the smallest of ``THRESHOLDS`` with E(eps) <= DIRECT_BITS, or where no feasible one reaches that
(x/sinh(x): its series converges within pi, and its direct derivatives lose up to 6 bits out to
|x| = 8), the smallest within half a bit of the best feasible one. At order 3 that gives, in u,
sin(x)/x eps 2.5, (1 - cos(x))/x**2 3.5, expm1(x)/x 2.5, (sin(x) - x*cos(x))/x**2 2.5, x/sinh(x)
0.75, x - tanh(x) 0.5 (degrees 25 to 43); at order 1, eps 0.5 to 1.75 (degrees 17 to 36). The
series is taken to degree 25 first (FIRST_TERMS), and to MAX_DEGREE only
where that falls short of an eps with E(eps) <= DIRECT_BITS; sigmoid, softplus, expm1 and log1p
are written with exp and log for it (SymPy expands those fast, the others through derivatives).

**Cost.** A formula without a denominator in an input returns at once; one whose denominators
vanish at no point of one input (the spherical harmonics' x**2 + y**2 + z**2) after a substitution
each, and one with a pole (Lennard-Jones' r**-12) after a one-term series. A removable part's
analysis, series and measurement, takes 0.1 to 0.8 s (2.3 s for sin(x)/x at order 3, which needs
all 48 terms). Only parts whose series is known to be quick are tried (``_expandable``: elementary functions at an
argument linear in x), a rule on the formula rather than a time limit, so that the output is the
same on a loaded machine; bessel_j1(x)/x and (exp(sin(x)) - 1 - sin(x))/x**2 are left as written.
SECONDS bounds an analysis all the same, as a safety net: an ``attempt`` of the spec's time
budget (limits.py) when one is active, else a timer of its own where one can be had.
Results are cached per formula. The generated code pays a torch.where, a guard and a Horner
polynomial at each level: 3 to 6 times the time of the formula alone for sin(x)/x and its kin at
order 3 on CPU (2e5 elements), about 2.5 for the Bessel basis at order 2.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import signal
import threading
from typing import NamedTuple

import mpmath
import sympy
from sympy.codegen import cfunctions
from sympy.printing.precedence import PRECEDENCE

from .. import limits
from ..language.expr import sigmoid, softplus
from . import symbolic

SECONDS = 30.0  # a safety net only: the parts _expandable admits take 0.1 to 1.2 s (module docstring)
MAX_DEGREE = 48  # the highest degree of a polynomial branch
FIRST_TERMS = 26  # the series is taken to degree 25 first, to MAX_DEGREE only where that falls short
DIRECT_BITS = 2.5  # the excess the direct formula may have beyond eps (accuracy.py's bound is 4)
TRUNCATION = 2.0**-56  # the polynomial's truncation error allowed, relative to the value (with conditioning)
# eps candidates, in units of u: round numbers, about four per octave
THRESHOLDS = (0.0625, 0.125, 0.1875, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0,
              3.5, 4.0, 5.0, 6.0, 7.0, 8.0)
_OCTAVES = (-4, 4)  # the direct formula is measured at 2**-4 <= |u| < 2**4
_PER_OCTAVE = 8
_MAX_POINTS = 4  # points tried per input
_DIGITS = 40  # mpmath's digits beyond those the direct formula's cancellation needs


class _TooLong(BaseException):
    """A part's analysis went past SECONDS (a BaseException, as limits.LimitExceeded, so that
    SymPy's ``except Exception`` cannot swallow it)."""


def removable(expr: sympy.Expr, spec) -> sympy.Expr:
    """``expr`` with each removable singularity of one input replaced by a regime split (module
    docstring), and each branch with a multiple root at its boundary (``_at_roots``); ``expr``
    itself when it has neither."""
    inputs = tuple(sympy.Symbol(name, real=True) for name in spec.inputs)
    bounds = tuple(tuple(map(float, spec.bounds(name))) for name in spec.inputs) if hasattr(spec, "bounds") else None
    if expr.has(sympy.Piecewise):
        expr = _at_roots(expr, inputs, tuple(spec.params), spec.order, bounds)
    if any(d.free_symbols & set(inputs) for d in symbolic.denominators(expr)):
        expr = _removed(expr, inputs, tuple(spec.params), spec.order, bounds)
    return _cancelling_at_zero(expr, inputs, tuple(spec.params), spec.order, bounds)


@functools.lru_cache(maxsize=256)
def _at_roots(expr: sympy.Expr, inputs: tuple, params: tuple, order: int, bounds) -> sympy.Expr:
    """``expr`` with each branch of a choice on one input x that vanishes to second order or more
    where the choice changes (x < c: c) split there as a removable singularity is: a Taylor
    polynomial about c near it, the branch beyond.

    An envelope that goes to 0 smoothly at its cutoff (MACE's and DimeNet's polynomial
    1 - 28*d**6 + 48*d**7 - 21*d**8, d = r/rc, has a triple root at d = 1) is a sum of terms of
    size 1 that cancel to (1 - d)**3 there: the value lost 11 bits at d = 0.993, its derivatives 5
    to 10 near the cutoff, in autograd as in the formula. The polynomial about the root has no
    such cancellation. A simple root is left alone (its loss is its conditioning's), and so is a
    branch with a function of x (``_algebraic``)."""
    def split(piecewise):
        pieces = []
        for value, cond in piecewise.args:
            for index, x in enumerate(inputs):
                for x0 in _boundaries(piecewise, x, inputs):
                    if value.free_symbols & set(inputs) == {x} and _algebraic(value, x) and _multiple_root(value, x, x0):
                        value = _root_split(value, x, x0, inputs, params, order, bounds[index] if bounds else None)
            pieces.append((value, cond))
        return sympy.Piecewise(*pieces)

    return expr.replace(lambda e: isinstance(e, sympy.Piecewise), split)


@functools.lru_cache(maxsize=256)
def _cancelling_at_zero(expr: sympy.Expr, inputs: tuple, params: tuple, order: int, bounds) -> sympy.Expr:
    """``expr`` with each sum of one input x that vanishes to second order or more at x = 0 while
    one of its terms does not (x - sin(x), tan(x) - sin(x)) split there as a multiple root is
    (``_root_split``): its terms cancel near 0, to x**3/6 from terms of size x, and every bit of
    x - sin(x) was lost at x = 1e-100 (0 against 1.7e-301), 60 at x = 1e-8. A polynomial in x is
    left to ``_at_roots`` and the rewrites (its terms vanish together, or it has no such root)."""
    def split(add):
        (x,) = add.free_symbols & set(inputs)
        index = inputs.index(x)
        return _root_split(add, x, sympy.S.Zero, inputs, params, order, bounds[index] if bounds else None)

    def cancels(e) -> bool:
        if not (e.is_Add and len(e.free_symbols & set(inputs)) == 1) or e.has(sympy.Piecewise):
            return False
        (x,) = e.free_symbols & set(inputs)
        if e.is_polynomial(x) or not _expandable(e, x) or not _multiple_root(e, x, sympy.S.Zero):
            return False
        return any(not _zero(sympy.diff(term, x).xreplace({x: 0})) for term in e.args)

    def walked(node):  # not into a choice: a split's own branches (sin(x) - x*cos(x) of (...)/x**2)
        if cancels(node):
            return split(node)
        if not node.args or isinstance(node, (sympy.Piecewise, sympy.core.relational.Relational)):
            return node
        args = [walked(arg) for arg in node.args]
        return node.func(*args) if args != list(node.args) else node

    return walked(expr)


@functools.lru_cache(maxsize=256)  # per branch: DimeNet's eight outputs share one envelope
def _root_split(value, x, x0, inputs, params, order, domain) -> sympy.Expr:
    """``value`` split at its multiple root x0 (``_replacement``), or ``value`` where it is not."""
    values = {sympy.Symbol(name, real=True): sympy.Rational(number) for name, number in params}
    site = _Site(x, x0, frozenset(inputs), values, order, {}, domain, root=True)
    return _replacement(value, site) or value


def _boundaries(piecewise: sympy.Piecewise, x: sympy.Symbol, inputs) -> list[sympy.Expr]:
    """The points c of the conditions x < c, x >= c, ... of ``piecewise`` (c free of inputs)."""
    found = []
    for _, cond in piecewise.args:
        for relation in (cond.atoms(sympy.core.relational.Relational) if cond is not sympy.true else ()):
            for side, other in ((relation.lhs, relation.rhs), (relation.rhs, relation.lhs)):
                if side == x and not other.free_symbols & set(inputs) and other not in found:
                    found.append(other)
    return found


def _algebraic(value: sympy.Expr, x: sympy.Symbol) -> bool:
    """Whether ``value`` is a polynomial in x (whole powers; params in the coefficients): its
    series about a root is the same polynomial, finite and exact for every value of the params,
    without the cancellation. Not a power x**p with p a param: its series about 1 never ends, and
    a polynomial chosen at p's default would be exact there only (27 bits off at p = 5.5 for p = 6),
    while the terms in p to the degree needed everywhere take SymPy a minute. Nor a function of x:
    1 + cos(u) has a rewrite of its own (2*cos(u/2)**2, rewrite.py), at no cost per call."""
    return value.is_polynomial(x)


def _multiple_root(value: sympy.Expr, x: sympy.Symbol, x0: sympy.Expr) -> bool:
    """Whether ``value`` and its derivative in x are 0 at x0 (for every value of the params)."""
    return all(_zero(sympy.expand(f.xreplace({x: x0}))) for f in (value, sympy.diff(value, x)))


@functools.lru_cache(maxsize=256)
def _removed(expr: sympy.Expr, inputs: tuple, params: tuple, order: int, bounds) -> sympy.Expr:
    # exactly the floats they are: a Float would be printed, and so evaluated, to 15 digits
    values = {sympy.Symbol(name, real=True): sympy.Rational(value) for name, value in params}
    tried: dict = {}
    for index, x in enumerate(inputs):
        for x0 in points(expr, x, inputs):
            site = _Site(x, x0, frozenset(inputs), values, order, tried, bounds[index] if bounds else None)
            expr = _fixed(expr, site)
    return expr


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


def points(expr: sympy.Expr, x: sympy.Symbol, inputs) -> list[sympy.Expr]:
    """The points where a denominator of ``expr`` that reads the input ``x`` alone (and params)
    vanishes: 0, and the roots of a polynomial one of degree 1 or 2 (free of inputs), at most
    ``_MAX_POINTS``."""
    found: list[sympy.Expr] = []
    others = set(inputs) - {x}
    for base in sorted(symbolic.denominators(expr), key=sympy.default_sort_key):
        if x not in base.free_symbols or base.free_symbols & others:
            continue
        candidates = [sympy.S.Zero] if _zero(base.xreplace({x: 0})) else _roots(base, x)
        found += [c for c in candidates if c not in found]
    return found[:_MAX_POINTS]


def _roots(base: sympy.Expr, x: sympy.Symbol) -> list[sympy.Expr]:
    if not base.is_polynomial(x):
        return []
    try:
        poly = sympy.Poly(base, x)
    except sympy.PolynomialError:
        return []
    if not 1 <= poly.degree() <= 2:
        return []
    return [r for r in sympy.roots(poly) if not r.has(sympy.I) and r.is_real is not False]


def _zero(value: sympy.Expr) -> bool:
    return value == 0 or value.is_zero is True


def _fixed(node, site: _Site):
    """``node`` with its smallest removable singular parts at ``site`` replaced, bottom-up."""
    if not isinstance(node, sympy.Basic) or not node.args or not _singular(node, site):
        return node
    if isinstance(node, sympy.core.relational.Relational):
        return node  # a condition: compared, not computed to an accuracy
    args = [_fixed(arg, site) for arg in node.args]
    new = node.func(*args) if args != list(node.args) else node
    if not isinstance(new, sympy.Expr) or not (new.is_Add or new.is_Mul) or not _singular(new, site):
        return new
    inside, outside = _split(new, site)
    key = (inside, site.x, site.x0)
    if key not in site.tried:
        site.tried[key] = _replacement(inside, site)
    replaced = site.tried[key]
    if replaced is None:
        return new
    return new.func(*outside, replaced)


def _singular(node, site: _Site) -> bool:
    """Whether ``node`` divides by something that vanishes at the site's point."""
    return any(base.has(site.x) and _zero(site.at_x0(base)) for base in symbolic.denominators(node))


def _split(node: sympy.Expr, site: _Site) -> tuple[sympy.Expr, list[sympy.Expr]]:
    """The part of a sum or product to expand (the singular terms; the factors that are singular,
    vanish or may not be finite at the point), and the rest."""
    inside, outside = [], []
    for arg in node.args:
        if node.is_Add:
            keep = _singular(arg, site)
        else:
            keep = arg.has(site.x) and not _regular(arg, site)
        (inside if keep else outside).append(arg)
    return node.func(*inside), outside


def _regular(factor: sympy.Expr, site: _Site) -> bool:
    """Whether ``factor`` is finite and not 0 at the point (params at their defaults)."""
    if _singular(factor, site):
        return False
    try:
        value = complex(site.at_x0(factor).xreplace(site.values).evalf(30))
    except (TypeError, ValueError):
        return False
    return value.imag == 0 and math.isfinite(value.real) and value.real != 0


# -- one part -------------------------------------------------------------------------------------


def _replacement(part: sympy.Expr, site: _Site) -> sympy.Expr | None:
    """The regime split of ``part`` at the site, or None where it is not a removable singularity
    of one input or its analysis takes longer than SECONDS."""
    if part.free_symbols & site.inputs != {site.x} or not _expandable(part, site.x):
        return None
    if any(piece.cond.has(site.x) for piecewise in part.atoms(sympy.Piecewise) for piece in piecewise.args):
        return None  # a choice the spec makes on x (sin(w*r)/where(r == 0, 1, r) is 0 at 0): kept as written
    from .domain import _functions

    _functions()  # imports torch (its float special functions) outside the time bound: never cut short
    try:
        with _bounded(SECONDS):
            return _split_at(part, site)
    except (_TooLong, limits.LimitExceeded):
        return None


# functions whose series SymPy takes in a second at most, at an argument linear in x
_SERIES_FUNCTIONS = (sympy.sin, sympy.cos, sympy.tan, sympy.sinh, sympy.cosh, sympy.tanh, sympy.exp, sympy.log,
                     sympy.atan, sympy.asinh, sympy.atanh, sympy.asin, sympy.erf, cfunctions.expm1, cfunctions.log1p,
                     sigmoid, softplus)


def _expandable(part: sympy.Expr, x: sympy.Symbol) -> bool:
    """Whether ``part`` is one whose series is quick to take: each function of x one of
    _SERIES_FUNCTIONS at an argument linear in x, roots of polynomials in x aside.

    Deterministic, so that a build's output does not depend on the machine's load, as a time limit
    alone would make it: (sigmoid(x) - 1/2)/x is expanded, bessel_j1(x)/x and (exp(sin(x)) - 1 -
    sin(x))/x**2 (a series of a series, 10 s and more) are left as written."""
    for call in part.atoms(sympy.Function):
        if not call.has(x):
            continue
        if not isinstance(call, _SERIES_FUNCTIONS) or any(
                not (arg.is_polynomial(x) and sympy.degree(arg, x) <= 1) for arg in call.args if arg.has(x)):
            return False
    return True


def _split_at(part: sympy.Expr, site: _Site) -> sympy.Expr | None:
    t = sympy.Dummy("t", real=True)
    shifted = _for_series(part).xreplace({site.x: site.x0 + t})
    if _coefficients(shifted, t, 1) is None:  # the leading term first: a pole is found cheaply
        return None
    coefficients = _coefficients(shifted, t, FIRST_TERMS)
    if coefficients is None or not any(c != 0 for c in coefficients):
        return None
    last = max(j for j, c in enumerate(coefficients) if c != 0)
    # a polynomial ((x**2 - 1)/(x - 1)): the part is its series, everywhere; but not a polynomial
    # about its root, whose terms alternate and cancel away from it
    if last < FIRST_TERMS // 2 and not site.root:
        exact = sympy.Add(*(c * t**j for j, c in enumerate(coefficients)))
        if sympy.cancel(shifted - exact) == 0:
            return exact.xreplace({t: site.x - site.x0})
    scale = _scale(coefficients, part, site.x, site.x0)
    expansion = Expansion(coefficients, scale)
    choice, more = _choice(part, site, expansion)
    if more:  # the first terms fell short of eps where the direct formula is accurate: all of them
        coefficients = _coefficients(shifted, t, MAX_DEGREE + 1)
        if coefficients is None:
            return None
        expansion = Expansion(coefficients, scale)
        choice, _ = _choice(part, site, expansion)
    if choice is None:
        return None
    threshold, degree = choice
    if site.domain is not None and not _reaches(site, expansion, threshold):
        return None
    u = expansion.scale * (site.x - site.x0)
    return sympy.Piecewise((expansion.polynomial(u, degree), sympy.Abs(u) < sympy.Float(threshold)), (part, True))


_ELEMENTARY = {sigmoid: sympy.exp, softplus: sympy.exp, cfunctions.expm1: sympy.exp, cfunctions.log1p: sympy.log}


def _for_series(part: sympy.Expr) -> sympy.Expr:
    """``part`` with sigmoid, softplus, expm1 and log1p written with exp and log, which SymPy
    expands fast (through their derivatives, (log1p(x) - x)/x**2 takes 4 s to degree 48, 0.1 s so);
    the series is exact either way."""
    def elementary(call):
        return call.rewrite(next(form for kind, form in _ELEMENTARY.items() if isinstance(call, kind)))

    return part.replace(lambda e: isinstance(e, tuple(_ELEMENTARY)), elementary)


def _reaches(site: _Site, expansion: Expansion, threshold: float) -> bool:
    """Whether the polynomial's interval, |u| < eps at the params' defaults, meets the input's
    domain: a split wholly outside it (sin(x)/x on [5, 10]) would cost every call and serve none."""
    scale = abs(float(sympy.N(expansion.scale.xreplace(site.values))))
    x0 = float(sympy.N(site.x0.xreplace(site.values)))
    lo, hi = site.domain
    return x0 - threshold / scale <= hi and lo <= x0 + threshold / scale


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


# -- the time bound -------------------------------------------------------------------------------


_until: contextvars.ContextVar[float | None] = contextvars.ContextVar("dbgen_series_until", default=None)


@contextlib.contextmanager
def _bounded(seconds: float):
    """Run the body for at most ``seconds``: as an attempt of the spec's time budget when one is
    active (its timer raises limits.LimitExceeded, which ends the attempt only), else by a timer
    of its own where one can be had (raising _TooLong); and ``_tick`` raises _TooLong between
    steps past it either way."""
    token = _until.set(limits.now() + seconds)
    try:
        budget = limits._current.get()
        if budget is not None and budget.deadline is not None:
            left = budget.deadline - limits.now()
            try:
                with limits.attempt(1.0 if left <= seconds else seconds / left):
                    yield
            except limits.LimitExceeded:
                budget.check_time()  # the spec's own deadline passed: that still ends the spec
                raise
        elif budget is None and _timer_available():
            def on_alarm(signum, frame):
                raise _TooLong()

            previous = signal.signal(limits.TIMER_SIGNAL, on_alarm)
            try:
                signal.setitimer(limits.TIMER, seconds)
                yield
            finally:
                signal.setitimer(limits.TIMER, 0)
                signal.signal(limits.TIMER_SIGNAL, previous)
        else:
            yield
    finally:
        _until.reset(token)


def _tick() -> None:
    """Raise _TooLong where the part's analysis is past its time (``_bounded``)."""
    until = _until.get()
    if until is not None and limits.now() > until:
        raise _TooLong()


def _timer_available() -> bool:
    return (hasattr(signal, "setitimer") and limits.TIMER is not None
            and threading.current_thread() is threading.main_thread()
            and signal.getitimer(limits.TIMER) == (0.0, 0.0))
