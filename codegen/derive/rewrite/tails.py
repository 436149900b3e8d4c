"""Rewrites for the tails: log(cosh(u)) and log(erfc(u)) without overflow, erfc ratios through
the scaled erfcx.
"""

from __future__ import annotations

import sympy
from sympy.codegen.cfunctions import log1p
from sympy.codegen.rewriting import ReplaceOptim
from sympy.printing.precedence import PRECEDENCE

from ...language.functions import erfc, softplus

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
    from ..branches import Guard

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
    from ..branches import Guard

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
