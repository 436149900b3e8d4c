"""The language as SymPy sees it: the parser's table of functions (``FUNCTIONS``: the names and
arities of ``registry.py``, each with its SymPy constructor), the constants, the size limits and
``ExprError``; and SymPy functions for sigmoid, softplus, erfc and log1p whose derivatives are in
terms of themselves.
"""

from __future__ import annotations

import math

import sympy
from sympy.codegen import cfunctions
from sympy.codegen.cfunctions import expm1

from . import conditions, external, special
from .registry import REGISTRY

conditions.install()  # before any choice on a choice is built or differentiated


class ExprError(ValueError):
    """A problem in an ``expr`` string, with a message a user can act on."""


class sigmoid(sympy.Function):  # lowercase: printed as the user wrote it
    """sigmoid(u) = 1/(1+exp(-u)); its derivative is a polynomial in its own value."""

    nargs = 1

    @classmethod
    def eval(cls, arg):
        if arg.is_zero:
            return sympy.S.Half

    def fdiff(self, argindex=1):
        value = sigmoid(self.args[0])
        return value * (1 - value)

    def _eval_rewrite_as_exp(self, arg, **kwargs):
        return 1 / (1 + sympy.exp(-arg))

    def _eval_evalf(self, prec):
        return self.rewrite(sympy.exp)._eval_evalf(prec)

    def _eval_is_real(self):
        return self.args[0].is_real


class softplus(sympy.Function):  # lowercase: printed as the user wrote it
    """softplus(u) = log(1+exp(u)); its derivative is sigmoid(u)."""

    nargs = 1

    @classmethod
    def eval(cls, arg):
        if arg.is_zero:
            return sympy.log(2)

    def fdiff(self, argindex=1):
        return sigmoid(self.args[0])

    def _eval_rewrite_as_exp(self, arg, **kwargs):
        return sympy.log(1 + sympy.exp(arg))

    def _eval_evalf(self, prec):
        return self.rewrite(sympy.exp)._eval_evalf(prec)

    def _eval_is_real(self):
        return self.args[0].is_real


class erfc(sympy.erfc):  # lowercase: printed as the user wrote it
    """erfc(u) with u as written. SymPy's writes erfc(-u) as 2 - erfc(u), which cancels where
    erfc(-u) is small: 0 in float64 where it is below 1e-16 (erfc(-x/sqrt(2)) for x < -8.3), so
    that log(erfc(-x/sqrt(2))/2), finite there, is -inf."""

    @classmethod
    def eval(cls, arg):
        if not arg.could_extract_minus_sign():
            return super().eval(arg)


class log1p(cfunctions.log1p):  # lowercase: printed as the user wrote it
    """log1p(c) of a number c as written. SymPy's is log(1 + c), which the generated code computes
    as math.log(1 + c), which cancels: 1.0000889e-12 for c = 1e-12. A Float c folds by mpmath's
    log1p. c = 0 and c <= -1 stay SymPy's: 0, and log(0) or a complex log, which the parser refuses."""

    @classmethod
    def eval(cls, arg):
        if not (arg.is_Number and arg > -1 and not arg.is_zero):
            return super().eval(arg)


# Name in specs -> the SymPy constructor a call of it builds (its arity and the rest: registry.py).
CONSTRUCTORS = {
    "exp": sympy.exp,
    "log": sympy.log,
    "log1p": log1p,
    "expm1": expm1,
    "sqrt": sympy.sqrt,
    "sin": sympy.sin,
    "cos": sympy.cos,
    "tan": sympy.tan,
    "asin": sympy.asin,
    "acos": sympy.acos,
    "atan": sympy.atan,
    "atan2": sympy.atan2,
    "sinh": sympy.sinh,
    "cosh": sympy.cosh,
    "tanh": sympy.tanh,
    "asinh": sympy.asinh,
    "acosh": sympy.acosh,
    "atanh": sympy.atanh,
    "erf": sympy.erf,
    "erfc": erfc,
    "sigmoid": sigmoid,
    "softplus": softplus,
    "abs": sympy.Abs,
    # piecewise (v2): Piecewise with each branch's condition; derivatives branch by branch, and at a
    # tie or boundary the native op's (torch.minimum splits the gradient of a tie in halves,
    # torch.clamp passes it at either bound, relu gives 0 at 0)
    "where": lambda cond, a, b: sympy.Piecewise((a, cond), (b, True)),
    "min": lambda a, b: sympy.Piecewise((a, a < b), (b, b < a), ((a + b) / 2, True)),
    "max": lambda a, b: sympy.Piecewise((a, a > b), (b, b > a), ((a + b) / 2, True)),
    "clamp": lambda x, lo, hi: sympy.Piecewise((hi, sympy.Or(x > hi, lo > hi)), (lo, x < lo), (x, True)),
    "relu": lambda x: sympy.Piecewise((x, x > 0), (0, True)),
    **special.CONSTRUCTORS,
    **external.SCIPY,
}


def _table() -> dict[str, tuple[object, int]]:
    """The parser's table, name -> (constructor, arity), in the registry's order; an alias calls its
    original's constructor. A function of the registry without a constructor, or a constructor of
    no function of the registry, is a mistake in this module: refused when it is imported."""
    unmatched = {f.name for f in REGISTRY.values() if f.alias_of is None}.symmetric_difference(CONSTRUCTORS)
    if unmatched:
        raise ImportError(f"codegen.language.functions: the registry and CONSTRUCTORS differ on {sorted(unmatched)}")
    return {f.name: (CONSTRUCTORS[f.alias_of or f.name], f.arity) for f in REGISTRY.values()}


FUNCTIONS = _table()
# Arguments that are conditions (comparisons, and/or/not of them); every other argument is a number,
# and a condition given where a number is wanted is its 0/1 indicator.
CONDITION_ARGUMENTS = {"where": (0,)}
# Arguments that must be a non-negative integer written as a literal: polygamma's order, expn's n.
LITERAL_ARGUMENTS = {"polygamma": 0, **external.LITERAL_ARGUMENTS}
USAGE = {"where": "where(cond, a, b): a where cond holds, else b", "min": "min(a, b)", "max": "max(a, b)",
         "clamp": "clamp(x, lo, hi)", "atan2": "atan2(y, x)",
         "polygamma": "polygamma(n, x), n a whole number such as 1", "xlogy": "xlogy(x, y), x*log(y) and 0 where x is 0",
         **{name: cls.usage for name, cls in external.SCIPY.items()}}
CONSTANTS = {"pi": sympy.pi, "E": sympy.E}

MAX_CHARS = 2000
MAX_NODES = 400
MAX_DEPTH = 40
MAX_EXPONENT = 1000  # |n| in u**n
MAX_CONSTANT_BITS = 1000  # size of a number folded from number**number
MAX_CONSTANT = 1e300


def _sigmoid(u: float) -> float:
    return 1 / (1 + math.exp(-u)) if u >= 0 else math.exp(u) / (1 + math.exp(u))


def _softplus(u: float) -> float:
    return max(u, 0.0) + math.log1p(math.exp(-abs(u)))
