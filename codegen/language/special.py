"""Special functions (docs/guide/specs.md) as SymPy functions whose derivatives stay in the set.

Each derivative is written with functions of the same kind (J0' = -J1, J1' = J0 - J1/x, ...), so
every order is a formula dbgen can print. Quotients such as J1(x)/x would be 0/0 at x = 0 and
cancel near it, so derivatives use the families ``J_n(x)/x**n``, ``I_n(x)/x**n``,
``exp(-|x|) I_n(x)/x**n`` and ``j_n(x)/x**n`` (spherical), which are even, finite at 0 and close
under d/dx (``d/dx [J_n(x)/x**n] = -x J_(n+1)(x)/x**(n+1)``): sinc and spherical_bessel_j0 are
exact at and near 0 at every order.

lgamma, digamma, polygamma, erfinv and xlogy print as torch ops, whose autograd derivatives are
the same formulas. The Bessel functions and sinc print as calls of the generated module's
``_Special`` Function (``templates/special.py.jinja``): torch.special.bessel_j0 and its kin have no
derivative at all, and autograd's second derivative of torch.sinc is NaN at 0 and wrong near it
(torch 2.13: -5.21 at x = 1e-8, where it is -3.29). ``_Special``'s backward applies ``_Special``
again with the formula below, so autograd differentiates them to every order, under every strategy.
"""

from __future__ import annotations

import functools
import math

import mpmath
import sympy


class SpecialFunctionBase(sympy.Function):  # "Base": SymPy printers dispatch on it (Printer._print)
    """A function of the language the generated module computes with ``_Special``.

    ``op``: the function that computes its value (a torch op, or a family's helper in the
    generated module, which takes the index ``n`` first); ``exact``: its value by mpmath (the
    domain check, constant folding). Named as in specs (``language``), and ``_NAME`` in the
    generated module (``runtime``); ``value``: the generated code of its value.
    """

    op = ""
    family = False  # the first argument is an index n, not differentiated
    # torch's largest error in float64 (the generated tests' tolerance): measured against mpmath
    # on [1/64, 25] by 1/64 steps, torch 2.13; bessel_j0/j1/y0/y1 are off by up to 8.5e-7
    # (their float64 approximations jump by about that at x = 5), the others by 1e-15 relative
    torch_error = 0.0
    # mpmath's value costs seconds at hundreds of digits (bessel_y1 at 1e-30: 2.5 s at 100 digits);
    # the accuracy oracle judges such a formula away from 0 only (accuracy.SLOW_SMALLEST)
    slow_exact = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.language = "" if cls.family else cls.__name__
        cls.runtime = f"_{cls.__name__}"
        cls.value = f"{cls.op}(n, x)" if cls.family else f"{cls.op}(x)"

    @classmethod
    def exact(cls, *args):
        raise NotImplementedError

    def _eval_is_real(self):
        return self.args[-1].is_real

    def fdiff(self, argindex=1):
        if self.family and argindex == 1:
            raise sympy.ArgumentIndexError(self, argindex)
        return self.derivative(*self.args)

    def _eval_evalf(self, prec):
        return evalf_by(self.exact, self.args, prec)


def evalf_by(exact, args, prec: int):
    """``exact(*args)`` in mpmath at ``prec`` bits, where every argument evaluates to a real number
    (acos(tanh(1)/2) does; an argument SymPy leaves symbolic, or a value mpmath refuses or gives
    no real value for, leaves the call unevaluated: None)."""
    if any(arg.free_symbols for arg in args):
        return None
    values = [arg.evalf(prec) for arg in args]
    if not all(value.is_Float or value.is_Rational for value in values):
        return None
    with mpmath.workprec(prec):
        try:
            return sympy.Float(exact(*(mpmath.mpf(sympy.Float(v, prec)) for v in values)), precision=prec)
        except (ValueError, ZeroDivisionError, TypeError):
            return None


def _spherical_j_over_power_at(n: int, x):
    """j_n(x)/x**n for x > 0, from the Bessel function of half-integer order."""
    return mpmath.sqrt(mpmath.pi / (2 * x)) * mpmath.besselj(n + 0.5, x) / x**n


def _at_zero(value_away, limit):
    """A family's exact value: ``limit(n)`` at 0, where x**n divides 0 by 0."""
    def exact(n, x):
        return limit(int(n)) if x == 0 else value_away(int(n), x)
    return exact


class bessel_j0(SpecialFunctionBase):  # lowercase: named as in specs, as are the classes below
    nargs, op = 1, "torch.special.bessel_j0"
    torch_error = 1e-6

    @staticmethod
    def derivative(x):
        return -bessel_j1(x)

    @classmethod
    def exact(cls, x):
        return mpmath.besselj(0, x)


class bessel_j1(SpecialFunctionBase):
    nargs, op = 1, "torch.special.bessel_j1"
    torch_error = 1e-6

    @staticmethod
    def derivative(x):
        return bessel_j0(x) - bessel_j_over_power(1, x)

    @classmethod
    def exact(cls, x):
        return mpmath.besselj(1, x)


class bessel_j_over_power(SpecialFunctionBase):
    """J_n(x) / x**n."""

    nargs, family, op = 2, True, "_bessel_j_over_power_value"

    @staticmethod
    def derivative(n, x):
        return -x * bessel_j_over_power(n + 1, x)

    exact = staticmethod(_at_zero(lambda n, x: mpmath.besselj(n, x) / x**n,
                                  lambda n: 1 / (mpmath.mpf(2) ** n * mpmath.factorial(n))))


class bessel_y0(SpecialFunctionBase):
    nargs, op = 1, "torch.special.bessel_y0"
    torch_error = 1e-6

    @staticmethod
    def derivative(x):
        return -bessel_y1(x)

    @classmethod
    def exact(cls, x):
        return mpmath.bessely(0, x)


class bessel_y1(SpecialFunctionBase):
    nargs, op = 1, "torch.special.bessel_y1"
    torch_error = 1e-6

    @staticmethod
    def derivative(x):
        return bessel_y0(x) - bessel_y1(x) / x

    @classmethod
    def exact(cls, x):
        return mpmath.bessely(1, x)


class i0(SpecialFunctionBase):
    nargs, op = 1, "torch.special.i0"

    @staticmethod
    def derivative(x):
        return i1(x)

    @classmethod
    def exact(cls, x):
        return mpmath.besseli(0, x)


class i1(SpecialFunctionBase):
    nargs, op = 1, "torch.special.i1"

    @staticmethod
    def derivative(x):
        return i0(x) - bessel_i_over_power(1, x)

    @classmethod
    def exact(cls, x):
        return mpmath.besseli(1, x)


class bessel_i_over_power(SpecialFunctionBase):
    """I_n(x) / x**n."""

    nargs, family, op = 2, True, "_bessel_i_over_power_value"

    @staticmethod
    def derivative(n, x):
        return x * bessel_i_over_power(n + 1, x)

    exact = staticmethod(_at_zero(lambda n, x: mpmath.besseli(n, x) / x**n,
                                  lambda n: 1 / (mpmath.mpf(2) ** n * mpmath.factorial(n))))


class i0e(SpecialFunctionBase):
    nargs, op = 1, "torch.special.i0e"

    @staticmethod
    def derivative(x):
        return i1e(x) - sympy.sign(x) * i0e(x)

    @classmethod
    def exact(cls, x):
        return mpmath.besseli(0, x) * mpmath.exp(-abs(x))


class i1e(SpecialFunctionBase):
    nargs, op = 1, "torch.special.i1e"

    @staticmethod
    def derivative(x):
        return i0e(x) - scaled_bessel_i_over_power(1, x) - sympy.sign(x) * i1e(x)

    @classmethod
    def exact(cls, x):
        return mpmath.besseli(1, x) * mpmath.exp(-abs(x))


class scaled_bessel_i_over_power(SpecialFunctionBase):
    """exp(-|x|) I_n(x) / x**n."""

    nargs, family, op = 2, True, "_scaled_bessel_i_over_power_value"

    @staticmethod
    def derivative(n, x):
        return x * scaled_bessel_i_over_power(n + 1, x) - sympy.sign(x) * scaled_bessel_i_over_power(n, x)

    exact = staticmethod(_at_zero(lambda n, x: mpmath.besseli(n, x) * mpmath.exp(-abs(x)) / x**n,
                                  lambda n: 1 / (mpmath.mpf(2) ** n * mpmath.factorial(n))))


class modified_bessel_k0(SpecialFunctionBase):
    nargs, op = 1, "torch.special.modified_bessel_k0"

    @staticmethod
    def derivative(x):
        return -modified_bessel_k1(x)

    @classmethod
    def exact(cls, x):
        return mpmath.besselk(0, x)


class modified_bessel_k1(SpecialFunctionBase):
    nargs, op = 1, "torch.special.modified_bessel_k1"

    @staticmethod
    def derivative(x):
        return -modified_bessel_k0(x) - modified_bessel_k1(x) / x

    @classmethod
    def exact(cls, x):
        return mpmath.besselk(1, x)


class scaled_modified_bessel_k0(SpecialFunctionBase):
    nargs, op = 1, "torch.special.scaled_modified_bessel_k0"

    @staticmethod
    def derivative(x):
        return scaled_modified_bessel_k0(x) - scaled_modified_bessel_k1(x)

    @classmethod
    def exact(cls, x):
        return mpmath.besselk(0, x) * mpmath.exp(x)


class scaled_modified_bessel_k1(SpecialFunctionBase):
    nargs, op = 1, "torch.special.scaled_modified_bessel_k1"

    @staticmethod
    def derivative(x):
        return scaled_modified_bessel_k1(x) - scaled_modified_bessel_k0(x) - scaled_modified_bessel_k1(x) / x

    @classmethod
    def exact(cls, x):
        return mpmath.besselk(1, x) * mpmath.exp(x)


class spherical_bessel_j0(SpecialFunctionBase):
    nargs, op = 1, "torch.special.spherical_bessel_j0"
    slow_exact = False  # sin(x)/x

    @staticmethod
    def derivative(x):
        return -x * spherical_j_over_power(1, x)

    @classmethod
    def exact(cls, x):
        return mpmath.sinc(x)


class spherical_j_over_power(SpecialFunctionBase):
    """j_n(x) / x**n, the spherical Bessel function over x**n."""

    nargs, family, op = 2, True, "_spherical_j_over_power_value"

    @staticmethod
    def derivative(n, x):
        return -x * spherical_j_over_power(n + 1, x)

    # even in x (j_n has the parity of x**n): taken at |x|, where sqrt(pi/(2x)) is real (at x < 0 it
    # is imaginary, and the formula's product came out with the wrong sign)
    exact = staticmethod(_at_zero(lambda n, x: _spherical_j_over_power_at(n, abs(x)),
                                  lambda n: 1 / mpmath.fac2(2 * n + 1)))


class sinc(SpecialFunctionBase):
    """torch.sinc: sin(pi x)/(pi x), 1 at 0."""

    nargs, op = 1, "torch.sinc"
    slow_exact = False  # sin(pi x)/(pi x)

    @staticmethod
    def derivative(x):
        return -sympy.pi**2 * x * spherical_j_over_power(1, sympy.pi * x)

    @classmethod
    def exact(cls, x):
        return mpmath.sincpi(x)


class xlogy(sympy.Function):
    """torch.xlogy: x*log(y), 0 where x == 0 (also where y is 0 or NaN)."""

    nargs = 2

    def fdiff(self, argindex=1):
        x, y = self.args
        return sympy.log(y) if argindex == 1 else x / y

    def _eval_is_real(self):
        return None

    def _eval_evalf(self, prec):
        x, y = self.args
        return sympy.S.Zero if x == 0 else (x * sympy.log(y))._eval_evalf(prec)


# name in specs -> its SymPy function (the registry holds the rest of each, registry.py); each of
# the torch ops' own derivatives is exact
TORCH_DIFFERENTIABLE = {
    "lgamma": sympy.loggamma,
    "digamma": lambda x: sympy.polygamma(0, x),
    "polygamma": sympy.polygamma,
    "erfinv": sympy.erfinv,
    "xlogy": xlogy,
}
LANGUAGE_CLASSES = (
    bessel_j0, bessel_j1, bessel_y0, bessel_y1, i0, i1, i0e, i1e, modified_bessel_k0, modified_bessel_k1,
    scaled_modified_bessel_k0, scaled_modified_bessel_k1, spherical_bessel_j0, sinc,
)
# The special functions' constructors by name; an alias (torch.special's modified_bessel_i0 is i0)
# is its original's, by the registry's alias_of (functions.py)
CONSTRUCTORS = {**TORCH_DIFFERENTIABLE, **{cls.language: cls for cls in LANGUAGE_CLASSES}}
FAMILIES = (bessel_j_over_power, bessel_i_over_power, scaled_bessel_i_over_power, spherical_j_over_power)
ALL = (*LANGUAGE_CLASSES, *FAMILIES)
MAX_POLYGAMMA_ORDER = 50  # polygamma(n, x) for n up to this (torch computes any, SymPy slows down)

# The index and argument the runtime's derivative formulas are printed with.
INDEX, ARGUMENT = sympy.Symbol("n", integer=True, nonnegative=True), sympy.Symbol("x", real=True)


def closure(classes) -> set[type]:
    """``classes`` and every ``SpecialFunctionBase`` class their derivatives call, at any order:
    the generated module's ``_Special`` must know each, as autograd may differentiate any order."""
    found = set(classes)
    pending = list(found)
    while pending:
        cls = pending.pop()
        for called in derivative_of(cls).atoms(SpecialFunctionBase):
            if type(called) not in found:
                found.add(type(called))
                pending.append(type(called))
    return found


def derivative_of(cls: type) -> sympy.Expr:
    """The derivative of ``cls`` in the runtime's own names ``n`` and ``x``."""
    args = (INDEX, ARGUMENT) if cls.family else (ARGUMENT,)
    return cls.derivative(*args)


def in_floats(cls: type):
    """``cls`` on Python floats, for the build's domain check: the torch op itself where there is
    one (mpmath's besselk takes 1.2 ms a call, torch's 4 us), mpmath's value for the families."""
    if cls.family:
        return lambda n, x: real_float(cls.exact(n, mpmath.mpf(x)))
    import torch  # imported by the build already (memory.py), before any spec's time limit

    op = functools.reduce(getattr, cls.op.split(".")[1:], torch)
    return lambda x: op(torch.tensor(x, dtype=torch.float64)).item()


def real_float(value) -> float:
    """An mpmath value as a float; ValueError (as math raises) where it has no real value."""
    value = mpmath.mpmathify(value)
    if isinstance(value, mpmath.mpc):
        if value.imag != 0:
            raise ValueError("no real value")
        value = value.real
    return float(value)


# The functions torch differentiates itself, on Python floats (math has lgamma; mpmath the others):
# for constant folding (expr.py) and the domain check (domain.py), by their printed names.
FLOAT_VALUES = {
    "polygamma": lambda n, x: real_float(mpmath.polygamma(int(n), x)),
    "erfinv": lambda x: real_float(mpmath.erfinv(x)),
    "xlogy": lambda x, y: 0.0 if x == 0 else x * math.log(y),
}


def torch_float_values() -> dict:
    """FLOAT_VALUES by torch's own ops on single floats, for the domain check's grid of thousands
    of points: mpmath's polygamma costs a quarter of a millisecond a call, torch's 9 us. NaN or inf
    where mpmath has no finite value (erfinv(2), digamma(0)), as the check needs; at the poles
    (0, -1, -2, ...), where torch's polygamma(1, x) is finite, NaN whatever the order."""
    import torch  # imported by the build already (memory.py), before any spec's time limit

    def polygamma(n, x: float) -> float:
        if x <= 0 and float(x).is_integer():
            return math.nan
        return torch.special.polygamma(int(n), torch.tensor(x, dtype=torch.float64)).item()

    def erfinv(x: float) -> float:
        return torch.special.erfinv(torch.tensor(x, dtype=torch.float64)).item()

    return {**FLOAT_VALUES, "polygamma": polygamma, "erfinv": erfinv}


def torch_error(expr: sympy.Expr) -> float:
    """The largest float64 error of torch's special functions ``expr`` calls (0 if none)."""
    return max((type(node).torch_error for node in expr.atoms(SpecialFunctionBase)), default=0.0)


def in_order(classes) -> list[type]:
    """``classes`` in a fixed order, for byte-identical output."""
    return [cls for cls in ALL if cls in classes]
