"""The expression's constants checked: each must mean a float (not below its range, not complex),
and whether a constant is zero is decided without trusting floats (SymPy's exact simplification,
bounded in time, and a numeric check at enough digits).
"""

from __future__ import annotations

import functools
import math
import sys

import sympy
from mpmath.libmp import NoConvergence
from sympy.codegen.cfunctions import expm1
from sympy.core.evalf import PrecisionExhausted

from . import external, special
from .functions import (
    MAX_CONSTANT,
    ExprError,
    _sigmoid,
    _softplus,
    erfc,
    log1p,
    sigmoid,
    softplus,
)

# The float meaning of each function, to check constant parts such as asin(2) or exp(1000).
_FLOAT_FUNCTIONS = {
    sympy.exp: math.exp, sympy.log: math.log, log1p: math.log1p, expm1: math.expm1, sympy.sin: math.sin,
    sympy.cos: math.cos, sympy.tan: math.tan, sympy.asin: math.asin, sympy.acos: math.acos,
    sympy.atan: math.atan, sympy.atan2: math.atan2, sympy.sinh: math.sinh, sympy.cosh: math.cosh,
    sympy.tanh: math.tanh, sympy.asinh: math.asinh, sympy.acosh: math.acosh, sympy.atanh: math.atanh,
    sympy.erf: math.erf, erfc: math.erfc, sigmoid: _sigmoid, softplus: _softplus, sympy.Abs: abs,
    sympy.loggamma: math.lgamma, sympy.polygamma: special.FLOAT_VALUES["polygamma"],
    sympy.erfinv: special.FLOAT_VALUES["erfinv"], special.xlogy: special.FLOAT_VALUES["xlogy"],
}


class _NoFloatMeaning(Exception):
    pass


def _check_constants(expr: sympy.Expr) -> None:
    """Every part without inputs or params must be a real float: asin(2) would be NaN and
    exp(1000) infinite in the generated code. Evaluated in floats, so the work is bounded."""
    if expr.free_symbols:
        for arg in expr.args:
            _check_constants(arg)
        return
    if expr.is_Number:
        return
    try:
        value = _float_value(expr)
    except _NoFloatMeaning:
        return  # a SymPy form this check does not know: left to SymPy's own checks above
    except ZeroDivisionError:
        raise ExprError(f"the constant part {_short(expr)} divides by a value that rounds to 0 in float64; "
                        "write it so that it does not cancel (expm1, log1p, ...)") from None
    except ValueError:
        raise ExprError(f"the constant part {_short(expr)} has no real value; check the function's domain") from None
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or abs(value) > MAX_CONSTANT:
        raise ExprError(f"the constant part {_short(expr)} is too large for a float")
    if abs(value) < sys.float_info.min:
        _check_not_below_range(expr)


def _check_not_below_range(expr: sympy.Expr) -> None:
    """Refuse a constant whose exact value is not 0 but below float64's normal range: exp(-800) is
    3.7e-348, which the generated code computes as 0 (x*exp(-800) would be 0 for every x), and
    exp(-720) a subnormal with 10 digits. A constant that is exactly 0 is left to ``_zero_kind``."""
    try:
        exact = expr.evalf(20, strict=True)
    except (*_SYMPY_ERRORS, PrecisionExhausted):
        return  # not shown to be nonzero
    if exact.is_Number and 0 < abs(exact) < sys.float_info.min:  # not tanh(20) - 1: that cancels, in range
        raise ExprError(
            f"the constant part {_short(expr)} is {sympy.sstr(exact.evalf(2))}, below float64's normal range "
            "(2.2e-308): the generated code would round it to 0 or to a few digits; write the formula so that "
            "no constant leaves the range (exp(x - 800), not x*exp(-800))")


ZERO_DIGITS = 30  # a constant SymPy evaluates to this many digits, with its error bounds, is not 0
ZERO_DIGITS_MAX = 100  # the most digits SymPy works to before giving up on a constant that cancels
ZERO_SECONDS = 2.0  # per expression, for rewrites that try to show a constant that cancels is exactly 0
_TRIGONOMETRIC = (sympy.sin, sympy.cos, sympy.tan, sympy.sinh, sympy.cosh, sympy.tanh)
# what SymPy's evalf and rewrites raise on a constant they cannot handle (then: not known to be 0)
_SYMPY_ERRORS = (ArithmeticError, ValueError, TypeError, NotImplementedError, AttributeError, RecursionError,
                 NoConvergence)


@functools.lru_cache(maxsize=1024)
def _zero_kind(value: sympy.Expr, rewrite: bool = True) -> str | None:
    """Whether a constant SymPy leaves unfolded is 0: None when it is not (SymPy's evalf finds its
    value to ZERO_DIGITS digits, error bounds kept), "zero" when it is exactly 0 (evaluated exactly,
    as xlogy(0, 2), or shown by a rewrite, as log(2) + log(3) - log(6) by logcombine), "unproven"
    when it cancels to 0 at every precision SymPy tries (ZERO_DIGITS_MAX digits) and no rewrite
    decides. SymPy's ``is_zero`` alone is not enough: it is None for log(2) + log(3) - log(6), and
    even False for erf(3 - log(8)/log(2)), which is 0. A declared extern's value is not known here.

    ``rewrite=False``: no rewrites (the expression's time for them is spent). The rewrites are
    cheap ones that stay out of SymPy's polynomial code, and so is ``is_zero`` (for an algebraic
    number it computes a minimal polynomial): simplify, radsimp, cancel and minimal_polynomial
    compile and exec code of their own, which the guard that no code runs while a spec loads
    refuses (tests/properties/test_fuzz.py). 1/(1 + sqrt(2)) - sqrt(2) + 1 is then "unproven"."""
    if any(isinstance(call, external.UserExternBase) for call in value.atoms(sympy.Function)):
        return None
    numeric = _numeric_zero(value)
    if numeric != "cancels":
        return numeric
    if not rewrite:
        return "unproven"
    rewrites = [lambda v: sympy.logcombine(v, force=True), lambda v: sympy.expand_log(v, force=True),
                lambda v: sympy.expand(v, force=True)]  # force=True: a constant has no symbols to assume things of
    if value.has(*_TRIGONOMETRIC):
        rewrites.append(sympy.trigsimp)
    for rewritten_by in rewrites:
        try:
            rewritten = rewritten_by(value)
        except _SYMPY_ERRORS:
            continue
        numeric = _numeric_zero(rewritten)
        if numeric != "cancels":
            return numeric  # 0, or a value too small for SymPy's precision as written (exp(-1000) + 0)
    return "unproven"


def _numeric_zero(value: sympy.Expr) -> str | None:
    """SymPy's evalf of a constant: None when it finds a value to ZERO_DIGITS digits that is not 0
    (or cannot evaluate it at all), "zero" when the value is exactly 0 (mpmath gives an exact 0
    from exact arguments), "cancels" when it is 0 to all the ZERO_DIGITS_MAX digits it tries."""
    from sympy.core.evalf import PrecisionExhausted

    if value.is_Number:
        return "zero" if value == 0 else None
    try:
        approx = value.evalf(ZERO_DIGITS, maxn=ZERO_DIGITS_MAX, strict=True)
    except PrecisionExhausted:
        try:
            approx = value.evalf(ZERO_DIGITS, maxn=ZERO_DIGITS_MAX)
        except _SYMPY_ERRORS:
            return "cancels"
        return "zero" if approx is sympy.S.Zero else "cancels"
    except _SYMPY_ERRORS:
        return None
    return "zero" if approx.is_Number and approx == 0 else None


def _float_value(expr: sympy.Expr) -> float:
    if expr.is_Number or expr in (sympy.pi, sympy.E):
        value = float(expr)
    elif expr.is_Add:
        value = math.fsum(_float_value(arg) for arg in expr.args)
    elif expr.is_Mul:
        value = math.prod(_float_value(arg) for arg in expr.args)
    elif expr.is_Pow:
        base, exponent = _float_value(expr.base), _float_value(expr.exp)
        if base == 0 and exponent < 0:
            raise ZeroDivisionError  # math.pow's ValueError would read as no real value
        value = math.pow(base, exponent)
    elif expr.func in _FLOAT_FUNCTIONS:
        value = _FLOAT_FUNCTIONS[expr.func](*(_float_value(arg) for arg in expr.args))
    elif isinstance(expr, (special.SpecialFunctionBase, external.ScipyFunctionBase)):
        value = special.real_float(expr.exact(*(_float_value(arg) for arg in expr.args)))
    else:
        raise _NoFloatMeaning(type(expr).__name__)
    if not math.isfinite(value):
        raise OverflowError
    return value


def _short(expr: sympy.Expr) -> str:
    text = sympy.sstr(expr)
    return text if len(text) <= 40 else text[:37] + "..."
