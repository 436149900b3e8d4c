"""Removable singularities made exact at and near their point, at every order.

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
f^(k+1)/f^(k)|)), as the accuracy oracle counts it, and E(eps) is the largest excess over the orders at
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
order 3 on CPU (2e5 elements), about 2.5 for the Bessel basis at order 2."""

from __future__ import annotations

import functools
import math

import sympy
from sympy.codegen import cfunctions

from .. import limits
from ..language.functions import sigmoid, softplus
from . import symbolic
from .bounded import _bounded, _TooLong
from .taylor import (
    _MAX_POINTS,
    FIRST_TERMS,
    MAX_DEGREE,
    Expansion,
    _choice,
    _coefficients,
    _scale,
    _Site,
)

SECONDS = 30.0  # a safety net only: the parts _expandable admits take 0.1 to 1.2 s (module docstring)


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
    1 + cos(u) has a rewrite of its own (2*cos(u/2)**2, derive/rewrite/), at no cost per call."""
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
