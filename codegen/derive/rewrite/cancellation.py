"""Sums that cancel: common denominators, power and root differences, polynomials that cancel,
sums of trigonometric calls and of logs taken as one.
"""

from __future__ import annotations

import functools

import sympy
from sympy.codegen.cfunctions import expm1, log1p
from sympy.codegen.rewriting import ReplaceOptim

from ...language.functions import erfc
from ..symbolic import merge_powers
from .complements import _call_and_constant
from .norms import _squares

COMMON_TERMS = 6  # the most terms of a sum common_denominator combines: each is expanded


def _denominator_power(term, base) -> int:
    """k where ``term`` divides by base**k (k a positive whole number), else 0."""
    for factor in sympy.Mul.make_args(term):
        b, e = factor.as_base_exp()
        if b == base and e.is_Integer and e < 0:
            return int(-e)
    return 0


def _shared_denominators(add) -> list:
    """The sums that terms of ``add`` divide by (a power with a negative whole exponent), but sums of
    squares: norm_squares reduces those by the norm, whose ratios do not under- or overflow, where
    an expanded numerator (x**3 + x*y**2) would."""
    seen: dict = {}  # in order of appearance
    for term in add.args:
        for factor in sympy.Mul.make_args(term):
            b, e = factor.as_base_exp()
            if b.is_Add and e.is_Integer and e < 0 and _squares(b) is None:  # a norm's: norm_squares
                seen[b] = True
    return list(seen)


def _combined(add):
    """(the numerator, the base, K) of ``add`` over base**K where like terms of the numerator cancel
    when expanded (fewer terms than its parts expand to), else None."""
    if len(add.args) > COMMON_TERMS:
        return None
    for base in _shared_denominators(add):
        top = max(_denominator_power(term, base) for term in add.args)
        parts = [sympy.expand(term * base**top) for term in add.args]
        if any(_denominator_power(part, base) for part in parts):
            continue  # expand took a term's base apart from its power
        numerator = sympy.Add(*parts)
        cancelled = len(sympy.Add.make_args(numerator)) < sum(len(sympy.Add.make_args(part)) for part in parts)
        if cancelled and sympy.count_ops(numerator) <= sympy.count_ops(add):  # not a longer formula
            return numerator, base, top
    return None


def _over_common_denominator(add):
    numerator, base, top = _combined(add)
    return numerator / base**top


# e/(e - 1) - e**2/(e - 1)**2 -> -e/(e - 1)**2 (e = exp(x)): SymPy's quotient rule leaves a sum of
# fractions whose numerators cancel symbolically, and in floats only with the bits (the derivative
# of FPBench's expq2, exp(x)/(exp(x) - 1), lost 19 bits at x = 17). Over the common denominator,
# the like terms of the expanded numerator cancel exactly.
common_denominator_opt = ReplaceOptim(lambda e: e.is_Add and _combined(e) is not None, _over_common_denominator)


def _complement(add):
    term, c, u, constant = _call_and_constant(add, sympy.erf)
    rest = erfc(-u) if constant == c else -erfc(u)
    return add - term - constant + c * rest


# c + c*erf(u) -> c*erfc(-u), c*erf(u) - c -> -c*erfc(u): erf(u) rounds to -1 (or 1) far out, where
# the sum is as small as erfc of the other sign. GELU's x*(1 + erf(x/sqrt(2)))/2 lost 16 bits at
# x = -5.2 and was 0 from x = -8.3 (true: 1e-16 and less).
erf_complement_opt = ReplaceOptim(lambda e: e.is_Add and _call_and_constant(e, sympy.erf) is not None, _complement)


def _root_pair(add):
    """(one, other, R, a, b, e, d) for terms R*a**e and -R*b**e of ``add`` (e a number not 0 or 1)
    whose bases differ by a positive number d = a - b; else None."""
    terms = list(add.args)
    for i, first in enumerate(terms):
        for second in terms[i + 1:]:
            for one, other in ((first, second), (second, first)):
                found = _power_difference_parts(one, other)
                if found is not None:
                    return one, other, *found
    return None


def _power_difference_parts(one, other):
    for factor in sympy.Mul.make_args(one):
        a, e = factor.as_base_exp()
        if not (e.is_Rational and e not in (0, 1) and a.free_symbols):
            continue
        rest = one / factor
        for partner in sympy.Mul.make_args(other):
            b, f = partner.as_base_exp()
            if f == e and b != a and b.free_symbols and sympy.expand(other / partner + rest) == 0:
                d = sympy.expand(a - b)
                if d.is_Number and d > 0:
                    return rest, a, b, e, d
    return None


def _power_difference(add):
    """R*(a**e - b**e), a - b a positive number d, without the cancellation where a and b are close
    in ratio: d times a sum of positive terms for a whole e (a**n - b**n = d*sum(a**(n-1-k)*b**k),
    and over a**n*b**n for e = -n), d/(sqrt(a) + sqrt(b)) for e = 1/2, else
    b**e*expm1(e*log1p(d/b)) (a power not whole is real for positive bases only, where that holds)."""
    one, other, rest, a, b, e, d = _root_pair(add)
    if e.is_Integer:
        n = abs(int(e))
        spread = d * sympy.Add(*(a ** (n - 1 - k) * b**k for k in range(n)))
        difference = spread if e > 0 else -spread / (a**n * b**n)
    elif e == sympy.Rational(1, 2):
        difference = d / (sympy.sqrt(a) + sympy.sqrt(b))
    else:
        difference = b**e * expm1(e * log1p(d / b))
    return add - one - other + rest * difference


# sqrt(x + 1) - sqrt(x) -> 1/(sqrt(x + 1) + sqrt(x)) and its kin (FPBench's 2sqrt, 2frac, and
# each derivative of them, -1/(2*sqrt(x)) + 1/(2*sqrt(x + 1)) and up): a difference of close powers
# of bases a few units apart lost 20 bits at x = 1e6.
power_difference_opt = ReplaceOptim(lambda e: e.is_Add and len(e.args) <= 8 and _root_pair(e) is not None,
                                    _power_difference)


def _root_and_its_square(add):
    """(one, other, R, u, v, s, d) for terms R*sqrt(u) and -R*v of ``add``, v = k*s with s a symbol
    and k a positive number, where u - v**2 = d cancels terms of u (sqrt(x**2 + 1) - x: d = 1);
    else None."""
    terms = add.args
    for one in terms:
        for root in sympy.Mul.make_args(one):
            if not (root.is_Pow and root.exp == sympy.S.Half and root.base.free_symbols):
                continue
            rest, u = one / root, root.base
            for other in terms:
                v = -other / rest
                k, s = v.as_coeff_Mul()
                if other is one or not (s.is_Symbol and k > 0):
                    continue
                d = sympy.expand(u - v**2)
                if d != 0 and len(sympy.Add.make_args(d)) < len(sympy.Add.make_args(sympy.expand(u))):
                    return one, other, rest, u, v, s, d
    return None


def _root_difference(add):
    """R*(sqrt(u) - v) as R*d/(sqrt(u) + v) where v > 0 and v**2 > 2*|d|, d = u - v**2 with the
    cancelling terms gone; as written elsewhere. Where v < 0 the difference is a sum of like
    signs, and the quotient would cancel instead; near v**2 = -d it is not a difference of close
    values, and the quotient's own derivatives cancel near v = 0 (the third of 1/(sqrt(x**2 + 1) +
    x) lost every bit at x = 1e-18). Each branch reads u and v only where it is taken, so neither
    a root of a negative number nor a division by 0 reaches a gradient, and the rule does not
    match its own fallback again."""
    from ..branches import Guard

    one, other, rest, u, v, s, d = _root_and_its_square(add)
    taken = sympy.And(s > 0, v**2 > 2 * sympy.Abs(d))
    quotient = rest * d / (sympy.sqrt(Guard(u, taken, 1)) + Guard(v, taken, 1))
    written = rest * (sympy.sqrt(u) - Guard(v, sympy.Not(taken), 0))
    return add - one - other + sympy.Piecewise((quotient, taken), (written, True))


# sqrt(x**2 + 1) - x -> 1/(sqrt(x**2 + 1) + x) for x > 0, and the quadratic formula's
# -b + sqrt(b**2 - 4*a*c) -> -4*a*c/(sqrt(b**2 - 4*a*c) + b) for b > 0 (FPBench's quadp): the root
# and v agree in most of their digits where v is large (17 bits of sqrt(x**2 + 1) - x lost at
# x = 1524, all of them from 1e8; the quadratic formula's root 30 bits at b = 1e4).
root_difference_opt = ReplaceOptim(lambda e: e.is_Add and len(e.args) <= 8 and _root_and_its_square(e) is not None,
                                   _root_difference)


def _is_root_regimes(e) -> bool:
    """Whether ``e`` is a Piecewise that ``_root_difference`` wrote: its quotient takes the root of
    a guarded u where v > 0 and v**2 > 2*|d|, its fallback guards v by the negation."""
    if not (isinstance(e, sympy.Piecewise) and len(e.args) == 2):
        return False
    from ..branches import Guard

    taken = e.args[0].cond
    roots = [p for p in e.args[0].expr.atoms(sympy.Pow) if p.exp == sympy.S.Half and isinstance(p.base, Guard)]
    positive = isinstance(taken, sympy.And) and any(
        isinstance(c, sympy.StrictGreaterThan) and c.lhs.is_Symbol and c.rhs == 0 for c in taken.args)
    return (positive and any(p.base.args[1] == taken for p in roots)
            and any(g.args[1] == sympy.Not(taken) and g.args[2] == 0 for g in e.args[1].expr.atoms(Guard)))


# c*Piecewise((q, t), (w, True)) -> Piecewise((c*q, t), (c*w, True)) for root_difference's
# regimes: the quadratic formula's 1/(2*a) times -4*a*c/(sqrt(D) + b) is -2*c/(sqrt(D) + b); apart,
# the derivative in a of the product cancels what the quotient had gained (30 bits at b = 1e4).
root_regimes_fold_opt = ReplaceOptim(
    lambda e: e.is_Mul and any(_is_root_regimes(f) for f in e.args), sympy.piecewise_fold)


def _is_rational_sum(e) -> bool:
    """A sum of at most 8 terms of symbols and numbers alone (no call), cheap to expand, no term
    holding a sum to a power other than 1 (expanded, (x - 1)**3 + (x - 1)**2 would cancel near 1)."""
    return (e.is_Add and len(e.args) <= 8 and bool(e.free_symbols)
            and all(node.is_Atom or node.is_Add or node.is_Mul or node.is_Pow for node in sympy.preorder_traversal(e))
            and not any(node.is_Pow and node.base.is_Add and node.exp != 1 for node in sympy.preorder_traversal(e)))


@functools.lru_cache(maxsize=4096)
def _expanded_if_cancelling(add):
    """``add`` expanded where a monomial of its terms, expanded one by one, cancels whole (a + b*x
    - a*(1 + c*x): a - a); else None. The difference is then exact symbolically, where floats round
    each part to an error of its size."""
    if not _is_rational_sum(add):
        return None
    totals: dict = {}
    for term in add.args:
        for part in sympy.Add.make_args(sympy.expand(term)):
            number, monomial = part.as_coeff_Mul()
            totals.setdefault(monomial, []).append(number)
    return sympy.expand(add) if any(len(n) > 1 and sum(n) == 0 for n in totals.values()) else None


# sqrt(5)/l + 10*r/(3*l) - sqrt(5)*(1 + sqrt(5)*r/l + 5*r**2/(3*l**2))/l ... -> -5*r/(3*l) - ...:
# the product rule's terms of a polynomial times exp(-a*r) (the Matern 5/2 kernel's first
# derivative) cancel symbolically in their constant terms, in floats to an error of size a where
# the derivative is of size r (3e-7 relative at r = 1e-9, every bit below 1e-16).
polynomial_cancellation_opt = ReplaceOptim(lambda e: e.is_Add and _expanded_if_cancelling(e) is not None,
                                           _expanded_if_cancelling)


def _close_arguments(a, b) -> bool:
    """Whether a - b cancels terms of a and b (x + eps and x: eps), and is not 0."""
    def terms(e) -> int:
        return len(sympy.Add.make_args(sympy.expand(e)))

    difference = sympy.expand(a - b)
    return difference != 0 and terms(difference) < terms(a) + terms(b)


def _trig_pair(add):
    """(one, other, kind, c, a, b) for terms c*kind(a) and -c*kind(b) of ``add``, kind sin or cos,
    a and b close (``_close_arguments``); else None."""
    for one in add.args:
        c, call = one.as_coeff_Mul()
        if not isinstance(call, (sympy.sin, sympy.cos)):
            continue
        for other in add.args:
            d, partner = other.as_coeff_Mul()
            if (other is not one and d == -c and type(partner) is type(call)
                    and _close_arguments(call.args[0], partner.args[0])):
                return one, other, type(call), c, call.args[0], partner.args[0]
    return None


def _sum_to_product(add):
    one, other, kind, c, a, b = _trig_pair(add)
    half_sum, half_difference = (a + b) / 2, sympy.expand(a - b) / 2
    if kind is sympy.cos:
        product = -2 * c * sympy.sin(half_sum) * sympy.sin(half_difference)
    else:
        product = 2 * c * sympy.cos(half_sum) * sympy.sin(half_difference)
    return add - one - other + product


# cos(x + e) - cos(x) -> -2*sin(x + e/2)*sin(e/2), sin(a) - sin(b) -> 2*cos((a + b)/2)*sin((a - b)/2)
# where a - b cancels terms (FPBench's 2cos and 2sin): the difference of two cosines of close
# arguments lost 56 bits at (x, e) = (1e-8, 1e-9), 20 at e = 1e-12.
sum_to_product_opt = ReplaceOptim(lambda e: e.is_Add and len(e.args) <= 8 and _trig_pair(e) is not None,
                                  _sum_to_product)


POWER_TERMS = 8  # the most terms, and the highest degree, of a sum power_polynomial factors


def _symbolic_powers(term) -> dict:
    """{B: e} for each base B that ``term`` raises to a power whose exponent is not a number,
    with e the sum of the exponents of all of ``term``'s factors of base B."""
    factors = [f.as_base_exp() for f in sympy.Mul.make_args(term)]
    bases = {b for b, e in factors if not e.is_Number and b.free_symbols}
    return {base: sympy.Add(*(e for b, e in factors if b == base)) for base in bases}


def _without_base(term, base):
    """``term`` without its factors of base ``base``."""
    return sympy.Mul(*(f for f in sympy.Mul.make_args(term) if f.as_base_exp()[0] != base))


def _power_polynomial(add):
    """(B, a, P, t) where ``add`` is B**a * P(B) with P a polynomial in t = B of two terms or more
    and a degree of at most POWER_TERMS, the exponent a not a number (x**p with p a param), its
    coefficients free of floats; else None."""
    if len(add.args) > POWER_TERMS:
        return None
    for base, first in _symbolic_powers(add.args[0]).items():
        exponents = [_symbolic_powers(term).get(base) for term in add.args]
        if any(e is None for e in exponents):
            continue
        offsets = [sympy.expand(e - first) for e in exponents]
        if not all(k.is_Integer for k in offsets):
            continue
        lowest = first + min(offsets)
        steps = [k - min(offsets) for k in offsets]
        if max(steps) > POWER_TERMS:
            continue
        coefficients = [_without_base(term, base) for term in add.args]
        if any(c.has(sympy.Float) for c in coefficients):
            continue  # SymPy's factor over floats is inexact, and raised on TorchANI's angular term
        t = sympy.Dummy("t")
        polynomial = sympy.Add(*(c * t**k for c, k in zip(coefficients, steps)))
        return base, lowest, polynomial, t
    return None


def _has_a_root(polynomial, t) -> bool:
    """True when ``polynomial`` in ``t``, factored, has a factor of degree 1 or a factor of two
    factors in t (with their powers): else it is one irreducible sum, which prints as it is."""
    factors = [f.as_base_exp() for f in sympy.Mul.make_args(polynomial) if f.has(t)]
    return any(sympy.degree(b, t) == 1 for b, _ in factors) or sum(int(e) for _, e in factors) > 1


@functools.lru_cache(maxsize=1024)  # the rule's test and its replacement factor the same sum
def _factored_power_polynomial(add):
    """``add`` as B**a times its polynomial factored, or None where that has no root (an
    irreducible factor of degree 2 or more would print as it is)."""
    found = _power_polynomial(add)
    if found is None:
        return None
    base, lowest, polynomial, t = found
    try:
        factored_polynomial = sympy.factor(polynomial, t)
    except (TypeError, sympy.PolynomialError):  # SymPy's own limits: left as it is
        return None
    if not _has_a_root(factored_polynomial, t):
        return None
    return base**lowest * factored_polynomial.subs(t, base)


def _merged_after(name: str, expr: sympy.Expr) -> sympy.Expr:
    """``expr`` tidied after rule ``name`` changed it: a factored power polynomial's powers merged
    again (x**(p - 2) * (...) / x**2 ... is x**p * (...)/x**2, NaN at x = 0, otherwise); the float
    factors tanh_complement made 1.0 or -1.0 dropped (GELU's 0.5*x*(1 + tanh(u)) is
    x*sigmoid(2*u), not 1.0*x*sigmoid(2*u): one product less at every level)."""
    if name == "power_polynomial":
        return merge_powers(expr)
    if name == "tanh_complement":
        return expr.replace(lambda e: e.is_Mul and e.args[0].is_Float and abs(float(e.args[0])) == 1.0,
                            lambda e: (1 if e.args[0] > 0 else -1) * sympy.Mul(*e.args[1:]))
    return expr


# -p(p+1)(p+2)/2 * (x**(p-1) - 2*x**p + x**(p+1)) -> -p(p+1)(p+2)/2 * x**(p-1)*(x - 1)**2: the
# derivatives of MACE's and NequIP's polynomial envelope, whose exponent p is a param, are sums of
# powers of x that cancel at their root x = 1 (14 bits of the first derivative at x = 0.999;
# SymPy factors a polynomial of whole powers itself, not one in x**p).
power_polynomial_opt = ReplaceOptim(lambda e: e.is_Add and _factored_power_polynomial(e) is not None,
                                    _factored_power_polynomial)


def _logged(call):
    """u where ``call`` is log(u), 1 + u where it is log1p(u) (the log1p rule runs first); else None."""
    if isinstance(call, sympy.log):
        return call.args[0]
    if isinstance(call, log1p):
        return 1 + call.args[0]
    return None


def _log_pair(add):
    """(first, second, c, b, d) for terms c*log(a) and -c*log(b) of ``add`` (or log1p(a - 1)) with
    d = a - b a positive number; else None."""
    terms = list(add.args)
    for first in terms:
        for second in terms:
            c, call = first.as_coeff_Mul()
            c2, other = second.as_coeff_Mul()
            a, b = _logged(call), _logged(other)
            if first is not second and a is not None and b is not None and c2 == -c and a.free_symbols:
                d = sympy.expand(a - b)
                if d.is_Number and d > 0:
                    return first, second, c, b, d
    return None


def _log_difference(add):
    first, second, c, b, d = _log_pair(add)
    return add - first - second + c * log1p(d / b)


# log(x + 1) - log(x) -> log1p(1/x): FPBench's 2log, 20 bits lost at x = 1e6.
log_difference_opt = ReplaceOptim(lambda e: e.is_Add and len(e.args) <= 8 and _log_pair(e) is not None,
                                  _log_difference)
