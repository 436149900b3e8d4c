"""Numerically stable forms, rewritten in after differentiation, on the forward and every level.

SymPy differentiates log(1 + exp(x)) into exp(x)/(exp(x) + 1), which is inf/inf = NaN in float32
for x above 88. Rewriting the forward before differentiating is not enough (aesara-devs/aeppl#156):
differentiation re-creates the unstable shapes. So the planner differentiates the formulas as
written and passes every formula it is about to print through ``stabilize``.

Each rule is a ``ReplaceOptim`` from ``sympy.codegen.rewriting`` (SymPy's own ``expm1_opt`` and
``logaddexp_opt`` where they fit), applied bottom-up until nothing changes. Every rule returns a
formula equal to its input wherever both are finite; ``tests/test_rewrite.py`` checks each one.
"""

from __future__ import annotations

import functools

import sympy
from sympy.codegen.cfunctions import expm1, hypot, log1p
from sympy.codegen.numpy_nodes import logaddexp
from sympy.codegen.rewriting import ReplaceOptim, logaddexp_opt, optimize
from sympy.printing.precedence import PRECEDENCE

from ..language.expr import erfc, sigmoid, softplus
from .symbolic import merge_powers

MAX_PASSES = 8


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


LOG_COSH_SPLIT = 4  # |u| where log_cosh_opt's two forms meet: the far one loses half a bit there


class LogCoshNear(sympy.Function):
    """LogCoshNear(u) = log(cosh(u)), computed as log1p(2*sinh(u/2)**2) (cosh(u) - 1 is
    2*sinh(u/2)**2): exact near 0, where log(cosh(u)) rounds cosh(u) to 1. One node, not its
    formula, so that no strategy takes its sinh for a call to share (intermediates would write it
    through exp(u/2)); its derivative is tanh(u)."""

    nargs = 1

    def fdiff(self, argindex=1):
        return sympy.tanh(self.args[0])

    def _eval_is_real(self):
        return self.args[0].is_real

    def _torchcode(self, printer, **kwargs):  # printer.TorchPrinter
        half = printer.parenthesize(self.args[0], PRECEDENCE["Mul"], strict=True)
        return f"torch.log1p(2 * torch.sinh({half} / 2) ** 2)"


def _log_cosh(u):
    """log(cosh(u)) in two regimes. Near 0, ``LogCoshNear``: log(cosh(u)) rounds cosh(u) to 1 and
    the far form sums |u| and -|u| + u**2/2, both losing every bit of u**2/2 at u = 1e-9. Far out,
    |u| + softplus(-2|u|) - log(2): cosh(u) overflows long before log(cosh(u)) does (at 89 in
    float32). The near form reads u only where it is taken (a guard, so that autograd through it
    sends no 0 * inf from sinh(u/2)**2 = inf)."""
    from .branches import Guard

    near = sympy.Abs(u) < LOG_COSH_SPLIT
    far = sympy.Abs(u) + softplus(-2 * sympy.Abs(u)) - sympy.log(2)
    return sympy.Piecewise((LogCoshNear(Guard(u, near, 0)), near), (far, True))


def _log_cosh_argument(e):
    """u where ``e`` is ``_log_cosh(u)``, else None."""
    if not (isinstance(e, sympy.Piecewise) and len(e.args) == 2 and isinstance(e.args[0].expr, LogCoshNear)):
        return None
    u = e.args[0].expr.args[0].args[0]
    return u if e == _log_cosh(u) else None


# log(cosh(u)) -> _log_cosh(u): exact near 0, finite far out.
log_cosh_opt = ReplaceOptim(
    lambda e: isinstance(e, sympy.log) and isinstance(e.args[0], sympy.cosh),
    lambda e: _log_cosh(e.args[0].args[0]),
)

LOG_ERFC_SPLIT = sympy.Rational(1, 2)  # u where _log_erfc's log1p(-erf(u)) and erfcx forms meet: each within a bit there


class Erfcx(sympy.Function):
    """erfcx(u) = exp(u**2)*erfc(u) (torch.special.erfcx): erfc(u) without its Gaussian factor,
    which underflows from u = 26.6 (9.2 in float32) where log(erfc(u)) and exp(-u**2)/erfc(u)
    are finite. Its derivative is 2*u*erfcx(u) - 2/sqrt(pi)."""

    nargs = 1

    def fdiff(self, argindex=1):
        return 2 * self.args[0] * self - 2 / sympy.sqrt(sympy.pi)

    def _eval_is_real(self):
        return self.args[0].is_real

    def _eval_is_positive(self):
        return self.args[0].is_real

    def _eval_evalf(self, prec):
        u = self.args[0]
        return (sympy.exp(u**2) * sympy.erfc(u))._eval_evalf(prec)

    def _torchcode(self, printer, **kwargs):  # printer.TorchPrinter
        (u,) = self.args
        if printer.is_tensor(u):
            return f"torch.special.erfcx({printer._print(u)})"
        printer.uses_math = True  # params only: a number
        return f"(math.exp({printer._print(u**2)}) * math.erfc({printer._print(u)}))"

    def _sympystr(self, printer) -> str:  # formula.LanguagePrinter, in the spec's language
        return printer._print(sympy.exp(self.args[0] ** 2) * erfc(self.args[0]))


def _log_erfc(u, c=1):
    """log(c*erfc(u)) in three regimes, each exact where it is taken, c a positive number.

    Below 0, log(2*c) + log1p(-erfc(-u)/2): c*erfc(u) is 2*c - c*erfc(-u), and the probit's
    log(erfc(-x/sqrt(2))/2) (c = 1/2) is -erfc(-u)/2 to first order far out, which log(erfc(u)) -
    log(2) rounds away (20 bits at x = 5). From 0 to 1/2, log(c) + log1p(-erf(u)): log(erfc(u))
    rounds erfc(u) to 1 near 0. From 1/2 on, log(c) + log(erfcx(u)) - u**2: erfc(u) underflows from
    u = 26.6 (9.2 in float32: the probit was -inf in float32 from x = -5.5). Each form reads u only
    where it is taken (guards: the first two are -inf beyond their regimes, erfcx(u) inf below)."""
    from .branches import Guard

    below, near, far = u < 0, u < LOG_ERFC_SPLIT, u >= LOG_ERFC_SPLIT
    safe_far = Guard(u, far, 1)
    return sympy.Piecewise(
        (sympy.log(2 * c) + log1p(-erfc(-Guard(u, below, 0)) / 2), below),
        (sympy.log(c) + log1p(-sympy.erf(Guard(u, near, 0))), near),
        (sympy.log(c) + sympy.log(Erfcx(safe_far)) - safe_far**2, True),
    )


def _log_erfc_argument(e):
    """(u, c) where ``e`` is ``_log_erfc(u, c)``, else None."""
    if not (isinstance(e, sympy.Piecewise) and len(e.args) == 3
            and isinstance(e.args[0].cond, sympy.StrictLessThan) and e.args[0].cond.rhs == 0):
        return None
    u = e.args[0].cond.lhs
    constant = e.args[1].expr.as_independent(*u.free_symbols, as_Add=True)[0]
    c = sympy.exp(constant)
    return (u, c) if e == _log_erfc(u, c) else None


def _log_erfc_undone(e):
    """log(c*erfc(u)) for ``e`` = ``_log_erfc(u, c)``."""
    u, c = _log_erfc_argument(e)
    return sympy.log(c * erfc(u))


def _scaled_erfc(arg):
    """(u, c) where ``arg`` is c*erfc(u), c a positive number; else None."""
    coefficient, rest = arg.as_coeff_Mul()
    if isinstance(rest, sympy.erfc) and coefficient > 0:
        return rest.args[0], coefficient
    return None


# log(c*erfc(u)) -> _log_erfc(u, c): log(erfc(-x/sqrt(2))/2) is log(Phi(x)), the probit's
# log-likelihood (torch.special.log_ndtr), which the language asks users to write so.
log_erfc_opt = ReplaceOptim(
    lambda e: isinstance(e, sympy.log) and _scaled_erfc(e.args[0]) is not None,
    lambda e: _log_erfc(*_scaled_erfc(e.args[0])),
)


def _gaussian_over_erfc(mul):
    """(the factor erfc(u)**-k, the factor exp(-k*u**2), u, k) of ``mul``, k a positive integer;
    else None."""
    factors = sympy.Mul.make_args(mul)
    for factor in factors:
        base, exponent = factor.as_base_exp()
        if isinstance(base, sympy.erfc) and exponent.is_Integer and exponent < 0:
            u, k = base.args[0], -exponent
            for other in factors:
                if isinstance(other, sympy.exp) and sympy.expand(other.args[0] + k * u**2) == 0:
                    return factor, other, u, k
    return None


def _over_erfcx(mul):
    factor, gaussian, u, k = _gaussian_over_erfc(mul)
    return mul / (factor * gaussian) * Erfcx(u) ** -k


# exp(-k*u**2)/erfc(u)**k -> 1/erfcx(u)**k: the derivatives of log(erfc(u)) (the inverse Mills
# ratio), 0/0 where both parts underflow (u > 26.6, or 9.2 in float32) and finite there.
erfc_ratio_opt = ReplaceOptim(lambda e: e.is_Mul and _gaussian_over_erfc(e) is not None, _over_erfcx)

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
    from .branches import Guard

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
    from .branches import Guard

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


def _tanh_ratio(mul):
    """sinh(u)**p * cosh(u)**q with q < 0 -> tanh(u)**p * cosh(u)**(p + q)."""
    factors = sympy.Mul.make_args(mul)
    powers: dict = {}
    for f in factors:
        base, exponent = f.as_base_exp()
        if isinstance(base, (sympy.sinh, sympy.cosh)):
            powers.setdefault(base.args[0], {})[type(base)] = exponent
    result = mul
    for u, found in powers.items():
        p, q = found.get(sympy.sinh), found.get(sympy.cosh)
        if p is not None and q is not None and p.is_positive and q.is_negative:
            result = result / (sympy.sinh(u) ** p * sympy.cosh(u) ** q) * sympy.tanh(u) ** p * sympy.cosh(u) ** (p + q)
    return result


def _has_tanh_ratio(mul) -> bool:
    if not mul.is_Mul:
        return False
    bases = {}
    for f in mul.args:
        base, exponent = f.as_base_exp()
        if isinstance(base, (sympy.sinh, sympy.cosh)):
            bases.setdefault(base.args[0], {})[type(base)] = exponent
    return any(
        sympy.sinh in found and sympy.cosh in found and found[sympy.sinh].is_positive and found[sympy.cosh].is_negative
        for found in bases.values()
    )


# sinh(u)/cosh(u) -> tanh(u): inf/inf = NaN for large u otherwise.
tanh_opt = ReplaceOptim(_has_tanh_ratio, _tanh_ratio)


def _one_minus_square(add):
    """(c, u) when ``add`` is c*(1 - u**2) with c = +-1, else None."""
    if len(add.args) != 2:
        return None
    for constant, square in (add.args, add.args[::-1]):
        c = constant
        coefficient, power = square.as_coeff_Mul()
        if c in (1, -1) and coefficient == -c and power.is_Pow and power.exp == 2:
            return c, power.base
    return None


class Sech2(sympy.Function):
    """Sech2(y) = 1 - y**2 for y = tanh(u), a rounded tanh: sech(u)**2, the derivative of tanh(u).

    Times a tensor the printer writes it as torch's fused ``tanh_backward(g, y)``, one kernel where
    ``g*(1 - y)*(1 + y)`` takes four, and what autograd itself runs for tanh (its derivatives are
    torch ops too). For a rounded y, 1 - y*y is within 1.5 times the error of (1 - y)*(1 + y): y's
    own rounding dominates both near |y| = 1. Alone it prints as that product.
    """

    nargs = 1
    recomputed = True  # a product, recomputed where needed rather than passed down (symbolic.reused_calls)

    @classmethod
    def eval(cls, y):
        return 1 - y**2 if y.is_Number else None

    def _eval_derivative(self, symbol):
        (y,) = self.args
        return -2 * y * y.diff(symbol)

    def _eval_is_real(self):
        return self.args[0].is_real


def _tanh_square(add):
    """(c, tanh(u)) when ``add`` is c*(1 - tanh(u)**2), else None."""
    found = _one_minus_square(add)
    return found if found is not None and isinstance(found[1], sympy.tanh) else None


# 1 - tanh(u)**2 -> Sech2(tanh(u)): printed with its cotangent as torch's tanh_backward.
sech2_opt = ReplaceOptim(
    lambda e: e.is_Add and _tanh_square(e) is not None,
    lambda e: _tanh_square(e)[0] * Sech2(_tanh_square(e)[1]),
)

# 1 - u**2 -> (1 - u)*(1 + u): exact near u = +-1, where asin, acos and atanh need it most. Not for
# u = Ratio(x, r) (in_ratios), itself rounded: 1 - u loses as much as 1 - u**2, a kernel dearer.
difference_of_squares_opt = ReplaceOptim(
    lambda e: e.is_Add and _one_minus_square(e) is not None and not isinstance(_one_minus_square(e)[1], Ratio),
    lambda e: _one_minus_square(e)[0] * sympy.Mul(1 - _one_minus_square(e)[1], 1 + _one_minus_square(e)[1],
                                                   evaluate=False),
)


def _squares(base):
    """(a, b, ...) when ``base`` is a sum of squares a**2 + b**2 + ..., else None."""
    if not base.is_Add:
        return None
    roots = []
    for term in base.args:
        if not (term.is_Pow and term.exp == 2):
            return None
        roots.append(term.base)
    return tuple(roots)


# sqrt(a**2 + b**2) -> hypot(a, b), sqrt(a**2 + b**2 + c**2) -> hypot(hypot(a, b), c), and odd
# powers of them: a**2 overflows before the result does, and torch.hypot's backward divides by
# the norm once where autograd through sqrt divides the sum by its root (a distance's third
# derivative is inf at a norm of 1e-150). Two kernels for three squares, where the sum takes six.
hypot_opt = ReplaceOptim(
    lambda e: e.is_Pow and e.exp.is_Rational and e.exp.q == 2 and _squares(e.base) is not None,
    lambda e: functools.reduce(hypot, _squares(e.base)) ** (2 * e.exp),
)


class Norm(sympy.Function):
    """Norm(a, b, c, ...) = sqrt(a**2 + b**2 + c**2 + ...): hypot(hypot(a, b), c) in a formula that
    autograd differentiates (``smooth_norms``).

    torch.hypot's backward divides by its value: through hypot(hypot(a, b), c) at a = b = 0 the
    inner one sends 0/0, so the second derivative of a distance is NaN on every axis (where it is
    1/|c|). Printed as the generated module's ``_norm``, which scales the components by the norm
    (held constant: the norm is the same at every scale) and so is smooth wherever it is not 0, and
    no square underflows or overflows. About 1.5 times the time of the two hypot kernels, 2.3 times
    with its backward (cost.py), in the formulas that autograd differentiates only.
    """

    def fdiff(self, argindex=1):
        return self.args[argindex - 1] / self

    def _eval_is_real(self):
        return all(arg.is_real for arg in self.args) or None

    def _eval_is_nonnegative(self):
        return all(arg.is_real for arg in self.args) or None

    def _torchcode(self, printer, **kwargs):  # printer.TorchPrinter
        call = "_norm"
        if not printer.is_tensor(self):  # params only: a number
            printer.uses_math, call = True, "math.hypot"
        return f"{call}({', '.join(printer._print(arg) for arg in self.args)})"

    def _sympystr(self, printer) -> str:  # formula.LanguagePrinter, as the spec writes a norm
        return f"sqrt({printer._print(sympy.Add(*(arg**2 for arg in self.args)))})"


def smooth_norms(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each hypot(hypot(a, b), c) as ``Norm(a, b, c)``: for a formula that autograd
    differentiates (a single level's backward, a jvp, nested's last backward). Elsewhere the two
    hypot kernels compute the value, and dbgen's own formulas its derivatives."""
    if not expr.has(hypot):
        return expr
    return expr.replace(_is_nested_hypot, lambda e: Norm(*_hypot_leaves(e)))


def _is_nested_hypot(e) -> bool:
    return isinstance(e, hypot) and any(isinstance(arg, hypot) for arg in e.args)


def _hypot_leaves(norm) -> tuple:
    """a, b, c of hypot(hypot(a, b), c): the values whose squares sum to the norm's square."""
    return tuple(leaf for arg in norm.args for leaf in (_hypot_leaves(arg) if isinstance(arg, hypot) else (arg,)))


def _norm_of(base):
    """The leaves of ``base`` as a frozenset, with 1 for a norm (hypot) and 2 for a sum of their
    squares (its square); else None."""
    if isinstance(base, hypot):
        return frozenset(_hypot_leaves(base)), 1
    roots = _squares(base)
    return (frozenset(roots), 2) if roots and len(roots) > 1 else None


def _norm_power(term, leaves):
    """(rest, k): ``term`` as rest * R**k, R the norm of ``leaves`` (as hypot, or as the sum of
    their squares R**2), rest free of R's powers."""
    rest, k = [], 0
    for factor in sympy.Mul.make_args(term):
        base, exponent = factor.as_base_exp()
        found = _norm_of(base)
        if found and found[0] == leaves and exponent.is_Integer:
            k += found[1] * int(exponent)
        else:
            rest.append(factor)
    return sympy.Mul(*rest), k


def _norm_leaf_sets(add) -> list:
    found = {_norm_of(node.as_base_exp()[0]) for node in sympy.preorder_traversal(add)
             if isinstance(node, (sympy.Pow, sympy.Add, hypot))} - {None}
    return sorted({leaves for leaves, _ in found}, key=sympy.default_sort_key)


NORM_TERMS = 8  # the most terms of a sum norm_squares_opt expands: a level's whole vjp is dearer than it gains


@functools.lru_cache(maxsize=4096)
def _norm_form(add, leaves):
    """``add`` with the powers of the norm R of ``leaves`` reduced by R**2 = a**2 + b**2 + ...,
    term by term over the lowest power of R, where that cancels terms (else None)."""
    if len(add.args) > NORM_TERMS:
        return None
    split = [_norm_power(term, leaves) for term in add.args]
    lowest = min(k for _, k in split)
    if all(k == lowest for _, k in split):
        return None
    square = sympy.Add(*(leaf**2 for leaf in leaves))
    parts, written = {0: [], 1: []}, 0
    for rest, k in split:
        q, odd = divmod(k - lowest, 2)
        expanded = sympy.expand(rest * square**q)
        written += len(sympy.Add.make_args(expanded))
        parts[odd].append(expanded)
    sums = {odd: sympy.Add.make_args(sympy.expand(sympy.Add(*terms))) for odd, terms in parts.items()}
    if sum(len(terms) for terms in sums.values() if terms != (0,)) >= written:
        return None  # nothing cancelled: the sum had no r**2 - x**2 in it
    norms = [node for node in sympy.preorder_traversal(add) if isinstance(node, hypot)
             and frozenset(_hypot_leaves(node)) == leaves]

    def power(j):
        return norms[0] ** j if norms else square ** sympy.Rational(j, 2)

    return sympy.Add(*(term * power(lowest + odd) for odd, terms in sums.items() for term in terms))


def _reduced_norms(add):
    for leaves in _norm_leaf_sets(add):
        reduced = _norm_form(add, leaves)
        if reduced is not None:
            return reduced
    return add


def _has_reducible_norm(add) -> bool:
    return add.is_Add and any(_norm_form(add, leaves) is not None for leaves in _norm_leaf_sets(add))


# 1/r - x**2/r**3 -> (y**2 + z**2)/r**3, r = hypot(hypot(x, y), z) (the same for powers of
# x**2 + y**2 + z**2 = r**2): the terms of a norm's derivatives cancel where one component is much
# the largest (every bit of d2r/dx2 at (0.7, 1e-13, 1e-245)). Term by term, each x*y/r**3 as in_ratios
# writes them (Ratio(x, r)*Ratio(y, r)/r), so that no r**3 underflows.
norm_squares_opt = ReplaceOptim(_has_reducible_norm, _reduced_norms)


def _even_power_roots(total) -> tuple | None:
    """(u, v, ...) when ``total`` is a sum c*u**(2k) + d*v**(2m) + ..., the c, d positive numbers
    (so 0 exactly where every root is); else None."""
    roots = []
    for term in sympy.Add.make_args(total):
        coefficient, power = term.as_coeff_Mul()
        base, exponent = power.as_base_exp()
        if not (coefficient > 0 and exponent.is_even and base.free_symbols and base.is_real):
            return None
        roots.append(base)
    return tuple(roots)


def _zero_comparison(relation) -> tuple | None:
    """(roots, the sum is nonzero) for a comparison of a sum of even powers with 0 that says whether
    it is 0 (s > 0, s != 0, s == 0, s <= 0, either way round); else None."""
    if not isinstance(relation, sympy.core.relational.Relational) or relation.rhs != 0:
        return None
    roots = _even_power_roots(relation.lhs)
    if roots is None or relation.rel_op not in (">", "!=", "==", "<="):
        return None
    return roots, relation.rel_op in (">", "!=")


def _by_roots(relation):
    roots, nonzero = _zero_comparison(relation)
    if nonzero:
        return sympy.Or(*(sympy.Ne(root, 0) for root in roots))
    return sympy.And(*(sympy.Eq(root, 0) for root in roots))


# x**2 + y**2 + z**2 > 0 -> (x != 0) | (y != 0) | (z != 0), and == 0 as all of them 0: the squares
# underflow, so the sum is 0 at a norm of 1e-200 and a guard at 0 takes the branch for the origin
# (JAX-MD's safe norm returned 0 there, not 1e-200, and 0 for its derivatives). 0 < s is s > 0.
zero_comparison_opt = ReplaceOptim(lambda e: _zero_comparison(_canonical_side(e)) is not None,
                                   lambda e: _by_roots(_canonical_side(e)))


def _canonical_side(relation):
    """``relation`` with 0 on the right (0 < s as s > 0), or unchanged."""
    if isinstance(relation, sympy.core.relational.Relational) and relation.lhs == 0 and relation.rhs != 0:
        return relation.reversed
    return relation


class Ratio(sympy.Function):
    """Ratio(a, r) = a/r for a value a that the norm r bounds (|a| <= r): a root of r = hypot(a, b).

    A norm's derivatives divide by its powers: x*y/r**3, whose parts underflow or overflow where the
    value does not (r**3 = 0 at r = 1e-150, where x*y/r**3 is 1e150). As Ratio(x, r)*Ratio(y, r)/r,
    every factor but the last is at most 1, and the last has the size of the value. Printed as one
    division, which CSE cannot split into a product with 1/r.
    """

    nargs = 2
    recomputed = True  # a division, recomputed where needed rather than passed down (symbolic.reused_calls)
    # parenthesized as a factor, g * (x / r) and not g * x / r, also of a product with a sign (whose
    # factors SymPy's printers parenthesize at the precedence of a sum: -g * (x / r))
    precedence = PRECEDENCE["Add"]

    def fdiff(self, argindex=1):
        norm = self.args[1]
        return 1 / norm if argindex == 1 else -self / norm

    def _division(self, printer, separator: str) -> str:
        a, norm = self.args
        mul = PRECEDENCE["Mul"]
        return f"{printer.parenthesize(a, mul, strict=True)}{separator}{printer.parenthesize(norm, mul)}"

    def _torchcode(self, printer) -> str:  # printer.TorchPrinter
        return self._division(printer, " / ")

    def _sympystr(self, printer) -> str:  # formula.LanguagePrinter, as SymPy writes a division
        return self._division(printer, "/")


def _norm_roots(norm) -> set:
    """The values a norm bounds: a, b and c of hypot(hypot(a, b), c), and the inner hypot(a, b)."""
    roots = set()
    for arg in norm.args:
        roots.add(arg)
        if isinstance(arg, hypot):
            roots |= _norm_roots(arg)
    return roots


def _norm_divisions(mul) -> list:
    """The factors r**-j of ``mul``, r a norm (hypot) and j a positive integer."""
    return [f for f in sympy.Mul.make_args(mul)
            if f.is_Pow and isinstance(f.base, hypot) and f.exp.is_Integer and f.exp < 0]


def _root_power(factor, roots):
    """(c, root, k) when ``factor`` is (c*root)**k with c a number and k a positive integer, else
    None: hypot's derivative holds (2*a - 2*b)/2 for the root a - b."""
    base, k = factor.as_base_exp()
    if not (k.is_Integer and k > 0):
        return None
    content, primitive = base.as_content_primitive()
    for sign in (1, -1):
        if sign * primitive in roots:
            return sign * content, sign * primitive, int(k)
    return None


def _pairs_with_a_norm(mul) -> bool:
    """True when ``_over_norms`` changes ``mul``: a root over its norm, or a norm's power below -1."""
    factors = sympy.Mul.make_args(mul)
    return any(division.exp <= -2 or any(_root_power(f, _norm_roots(division.base)) for f in factors)
               for division in _norm_divisions(mul))


def _over_norms(mul):
    """(c*a)**k / r**j -> c**k * Ratio(a, r)**m * a**(k - m) / r**(j - m), m = min(k, j), for each
    root a of r; what is left of 1/r**j, if more than 1/r, as Ratio(1, r)**(j - m).

    In a formula autograd differentiates (a single level's backward), a division by r**2 has the
    backward -g*(v/r**2)/r**2 for the value v: 1/r**4 where the derivative has the size of v/r
    (inf at r = 1e-100 for a Coulomb potential's second derivative). A product with (1/r)**2 has
    backward g*2*(1/r), and the reciprocal's backward g*(1/r)**2: each the size of a derivative.
    """
    factors = list(sympy.Mul.make_args(mul))
    for division in _norm_divisions(mul):
        norm, left = division.base, -int(division.exp)
        roots = _norm_roots(norm)
        for index, factor in enumerate(factors):
            found = _root_power(factor, roots) if left else None
            if found:
                c, root, k = found
                m = min(k, left)
                factors[index] = c**k * Ratio(root, norm) ** m * root ** (k - m)
                left -= m
        factors[factors.index(division)] = norm ** -left if left < 2 else Ratio(1, norm) ** left
    return sympy.Mul(*factors)


over_norm_opt = ReplaceOptim(lambda e: e.is_Mul and _pairs_with_a_norm(e), _over_norms)


def in_ratios(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each norm's roots over its powers as ``Ratio``s, for printing.

    Not one of the ``RULES``: the stable forms keep x/r**3 whole, as the rules and factoring see
    it; this is how the planner evaluates it, (x/r)*(1/r)**2. ``for_differentiation`` undoes it.
    A sum of the squares of a norm's leaves (``norm_squares`` writes y**2/(x**2 + y**2 + z**2)) is
    first that norm squared: the sum underflows at a norm of 1e-160, and y**2/r**2 is Ratio(y, r)**2.
    """
    if not expr.has(hypot):
        return expr
    return optimize(_sums_as_norms(expr), [over_norm_opt])


def _sums_as_norms(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each sum of the squares of a norm's leaves in it written as that norm squared."""
    norms = {_norm_of(node)[0]: node for node in sympy.preorder_traversal(expr) if isinstance(node, hypot)}

    def is_norms_square(e) -> bool:
        found = _norm_of(e) if e.is_Add else None
        return found is not None and found[0] in norms

    return expr.replace(is_norms_square, lambda add: norms[_norm_of(add)[0]] ** 2)


# Most specific first: softplus before logaddexp and log1p; sigmoids before 1 - sigmoid; acos(1 - u)
# before a common denominator or expm1 takes its 1 - u.
RULES = (
    ("acos_complement", acos_complement_opt),
    ("common_denominator", common_denominator_opt),
    ("softplus", softplus_opt),
    ("softplus_reflection", softplus_reflection_opt),
    ("log_sigmoid", log_sigmoid_opt),
    ("log_cosh", log_cosh_opt),
    ("log_erfc", log_erfc_opt),
    ("erfc_ratio", erfc_ratio_opt),
    ("logaddexp", logaddexp_opt),
    ("log1p", log1p_opt),
    ("expm1", expm1_opt),
    ("expm1_reflection", expm1_reflection_opt),
    ("spread_over_exponential_sum", spread_opt),
    ("sigmoid", sigmoid_opt),
    ("combine_exponentials", combine_exp_opt),
    ("absorb_exp_into_sigmoid", absorb_opt),
    ("one_minus_sigmoid", one_minus_sigmoid_opt),
    ("sigmoid_difference", sigmoid_difference_opt),
    ("cos_half_angle", cos_half_angle_opt),
    ("tanh_complement", tanh_complement_opt),
    ("sum_to_product", sum_to_product_opt),
    ("erf_complement", erf_complement_opt),
    ("power_difference", power_difference_opt),
    ("root_difference", root_difference_opt),
    ("root_regimes_fold", root_regimes_fold_opt),
    ("log_difference", log_difference_opt),
    ("power_polynomial", power_polynomial_opt),
    ("polynomial_cancellation", polynomial_cancellation_opt),
    ("tanh", tanh_opt),
    ("hypot", hypot_opt),
    ("norm_squares", norm_squares_opt),
    ("zero_comparison", zero_comparison_opt),
    ("sech2", sech2_opt),
    ("difference_of_squares", difference_of_squares_opt),
)

# What a formula must hold for each rule to match anywhere in it: every group, one of each group's
# kinds. Each rule is a walk of the whole formula; most formulas hold no exp() or log(), and a
# high order's formulas are large (tests/test_rewrite.py checks that no rule matches without them).
NEEDS = {
    "common_denominator": ((sympy.Pow,),),
    "softplus": ((sympy.exp,), (sympy.log, log1p)),
    "softplus_reflection": ((softplus,),),
    "log_sigmoid": ((sympy.log,), (sigmoid,)),
    "log_cosh": ((sympy.log,), (sympy.cosh,)),
    "log_erfc": ((sympy.log,), (sympy.erfc,)),
    "erfc_ratio": ((sympy.exp,), (sympy.erfc,)),
    "logaddexp": ((sympy.log,),),
    "log1p": ((sympy.log,),),
    "expm1": ((sympy.exp,),),
    "expm1_reflection": ((sympy.exp,), (expm1,)),
    "acos_complement": ((sympy.acos,),),
    "spread_over_exponential_sum": ((sympy.exp,),),
    "sigmoid": ((sympy.exp,),),
    "combine_exponentials": ((sympy.exp,),),
    "absorb_exp_into_sigmoid": ((sympy.exp,), (sigmoid,)),
    "one_minus_sigmoid": ((sigmoid,),),
    "sigmoid_difference": ((sigmoid,),),
    "cos_half_angle": ((sympy.cos,),),
    "tanh_complement": ((sympy.tanh,),),
    "sum_to_product": ((sympy.sin, sympy.cos),),
    "erf_complement": ((sympy.erf,),),
    "power_difference": ((sympy.Pow,),),
    "root_difference": ((sympy.Pow,),),
    "root_regimes_fold": ((sympy.Piecewise,),),
    "log_difference": ((sympy.log, log1p),),
    "power_polynomial": ((sympy.Pow,),),
    "polynomial_cancellation": ((sympy.Add,),),
    "tanh": ((sympy.sinh,), (sympy.cosh,)),
    "hypot": ((sympy.Pow,),),
    "norm_squares": ((sympy.Pow, hypot),),
    "zero_comparison": ((sympy.core.relational.Relational,),),
    "sech2": ((sympy.tanh,),),
    "difference_of_squares": ((sympy.Pow,),),
}


def kinds(expr: sympy.Expr) -> frozenset:
    """The classes of the nodes of ``expr``, with exp for E**u too (isinstance counts it as exp)."""
    found = set()
    for node in sympy.preorder_traversal(expr):
        found.add(type(node))
        if node.is_Pow and node.base is sympy.E:
            found.add(sympy.exp)
    return frozenset(found)


def may_match(name: str, found: frozenset) -> bool:
    """Whether rule ``name`` can match a formula whose node classes are ``found``."""
    return all(any(issubclass(k, kind) for k in found for kind in group) for group in NEEDS[name])


def _square_pair(mul):
    """Factors 1 - u and 1 + u of ``mul``, with their product 1 - u**2, else None."""
    factors = [f for f in sympy.Mul.make_args(mul) if f.is_Add and len(f.args) == 2]
    for i, first in enumerate(factors):
        for second in factors[i + 1:]:
            if first + second == 2:
                return first, second, 1 - ((second - first) / 2) ** 2
    return None


def _is_log_cosh_tail(e) -> bool:
    """softplus(-2*|u|), which ``log_cosh_opt`` writes next to |u| - log(2)."""
    return (isinstance(e, softplus) and e.args[0].is_Mul and len(e.args[0].args) == 2
            and e.args[0].args[0] == -2 and isinstance(e.args[0].args[1], sympy.Abs))


def inverse_hyperbolics(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with ``log(u + sqrt(u**2 + 1))`` written ``asinh(u)`` and ``log(u + sqrt(u**2 - 1))``
    ``acosh(u)``: the same function where the log's is real, and what a person writes for it.

    Applied to a spec's formula before it is differentiated (pipeline), not to printed formulas:
    as written, the log cancels for u < 0 (u + sqrt(u**2 + 1) is 1/(2|u|), computed as a
    difference of two numbers near |u|: all bits lost from |u| of about 1e8), and SymPy's
    derivative, (1 + u/sqrt(u**2 + 1))/(u + sqrt(u**2 + 1)), cancels twice; asinh's is
    1/sqrt(u**2 + 1). A held-out probe's ``log(x + sqrt(x**2 + 1))`` on [-1e6, 1e6] warned at every
    order and its generated gradcheck failed at x = -8e5.
    """
    return expr.replace(lambda e: isinstance(e, sympy.log) and _inverse_hyperbolic(e.args[0]) is not None,
                        lambda e: _inverse_hyperbolic(e.args[0]))


def _inverse_hyperbolic(arg: sympy.Expr) -> sympy.Expr | None:
    """asinh(u) for u + sqrt(u**2 + 1), acosh(u) for u + sqrt(u**2 - 1), else None."""
    if not arg.is_Add or len(arg.args) != 2:
        return None
    for root, u in (arg.args, arg.args[::-1]):
        if root.is_Pow and root.exp == sympy.S.Half:
            difference = sympy.expand(root.base - u**2)
            if difference == 1:
                return sympy.asinh(u)
            if difference == -1:
                return sympy.acosh(u)
    return None


def for_differentiation(expr: sympy.Expr) -> sympy.Expr:
    """A stabilised formula as the next nested level differentiates it, with three rewrites undone.

    A ``Ratio`` is a division again (``in_ratios`` writes the derivative's own). (1 - u)*(1 + u)
    is multiplied back into 1 - u**2: that rewrite is for accuracy only (``stabilize`` applies it
    again to the derivative), and the product rule on the two factors would print twice the terms.
    ``_log_cosh(u)`` and |u| + softplus(-2*|u|) - log(2) are log(cosh(u)) again, and
    ``_log_erfc(u, c)`` log(c*erfc(u)): the regimes' derivatives would be a choice between two formulas
    of tanh(u), and the far one's parts have kinks at u = 0 whose derivatives (sign(u), then 0
    almost everywhere) lose the smooth whole's.
    """
    def multiplied(mul):
        first, second, product = _square_pair(mul)
        return mul / (first * second) * product

    expr = expr.replace(lambda e: isinstance(e, Ratio), lambda e: e.args[0] / e.args[1])
    expr = expr.replace(lambda e: e.is_Mul and _square_pair(e) is not None, multiplied)
    expr = expr.replace(lambda e: _log_cosh_argument(e) is not None,
                        lambda e: sympy.log(sympy.cosh(_log_cosh_argument(e))))
    expr = expr.replace(lambda e: _log_erfc_argument(e) is not None, _log_erfc_undone)
    return expr.replace(_is_log_cosh_tail, lambda e: sympy.log(sympy.cosh(e.args[0].args[1].args[0]))
                        - e.args[0].args[1] + sympy.log(2))


@functools.lru_cache(maxsize=4096)
def factored(expr: sympy.Expr) -> sympy.Expr:
    """``sympy.factor_terms(expr)``, remembered: ``stabilize`` factors each formula to see whether
    its factored form is stable too, and the planner factors the same formula again before CSE
    (factoring is about half of a large spec's planning)."""
    return sympy.factor_terms(expr)


@functools.lru_cache(maxsize=4096)  # pure; nested levels stabilise each formula where derived and where printed
def stabilize(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with every rule applied, bottom-up, until nothing changes, also in the factored
    form that the planner prints (``plan.blocks._block`` factors each formula before CSE).

    Factoring can uncover a pattern: s - s**2, a nested level's derivative of sigmoid(u) = s, is
    printed as s*(1 - s), which cancels near s = 1 unless rewritten to s*sigmoid(-u). So a formula
    is stable only if its factored form is a fixed point too.
    """
    for _ in range(MAX_PASSES):
        expr = _apply_rules(expr)
        factored_form = factored(expr)
        if factored_form == expr:
            break
        rewritten = _apply_rules(factored_form)
        if rewritten == factored_form:
            break
        expr = rewritten
    return expr


@functools.lru_cache(maxsize=4096)
def stabilize_tails(expr: sympy.Expr) -> sympy.Expr:
    """``stabilize``, with tanh's derivative exact in its tails: ``Sech2(tanh(u))`` (printed
    ``1 - y**2`` or torch's ``tanh_backward``, as autograd computes it) as
    ``4*sigmoid(2*u)*sigmoid(-2*u)``.

    tanh(u) rounds to +-1 in the tails, where 1 - tanh(u)**2 is 0 from |u| = 19 (9 in float32)
    and loses about 2.9 bits per unit of |u| before, 4 from |u| = 2. The sigmoids are exact there
    and NaN-free under autograd too (1/cosh(u)**2 is not: cosh overflows, and its derivative is
    inf*0). They cost about four kernels where tanh_backward takes one, so a build uses this form
    only where the plain one is over the accuracy bound on the spec's domain (pipeline.py).
    """
    return _sigmoid_sech2(stabilize(expr))


def _sigmoid_sech2(expr: sympy.Expr) -> sympy.Expr:
    def sigmoids(call):
        (u,) = call.args[0].args
        return 4 * sigmoid(2 * u) * sigmoid(-2 * u)

    return expr.replace(lambda e: isinstance(e, Sech2) and isinstance(e.args[0], sympy.tanh), sigmoids)


def _apply_rules(expr: sympy.Expr) -> sympy.Expr:
    for _ in range(MAX_PASSES):
        before = expr
        found = kinds(expr)
        for name, rule in RULES:
            if may_match(name, found):
                rewritten = optimize(expr, [rule])
                if rewritten != expr:
                    rewritten = _merged_after(name, rewritten)
                    expr, found = rewritten, kinds(rewritten)
        if expr == before:
            break
    return expr


def identity(expr: sympy.Expr) -> sympy.Expr:
    """The ``--no-rewrite`` build: formulas exactly as SymPy differentiates them."""
    return expr


__all__ = [
    "RULES",
    "Erfcx",
    "LogCoshNear",
    "Norm",
    "Ratio",
    "Sech2",
    "expm1",
    "factored",
    "for_differentiation",
    "hypot",
    "identity",
    "in_ratios",
    "inverse_hyperbolics",
    "log1p",
    "logaddexp",
    "smooth_norms",
    "stabilize",
    "stabilize_tails",
]
