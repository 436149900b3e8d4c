"""External functions (docs/guide/externals.md): SciPy's special functions, and a spec's own
(``extern:``), as SymPy functions whose derivatives are formulas of the table or the spec.

Autograd cannot trace either: SciPy runs in NumPy on the CPU, and a team's kernel is opaque. So
a spec that calls one is generated ``nested``: every level's formulas call the implementation on
detached tensors (the generated module's ``_External``), and a level's backward is the next
level, each written from the derivatives below. Differentiating past the spec's order raises
(the module's ``_OrderLimit`` on the last level's gradients, and ``_External``'s own backward and
jvp): a number autograd could only get wrong.

An argument that selects the function (the order ``nu`` of ``jv(nu, x)``, a user extern's
argument whose derivative is ``null``) must be a number or a param: dbgen does not differentiate
in it (``constant``). ``parse_expr`` refuses an input-dependent expression there, in the formula
and in a user extern's derivatives, so every derivative to every order is a formula of the table.
"""

from __future__ import annotations

import mpmath
import sympy

from .special import evalf_by


class ExternalFunctionBase(sympy.Function):  # "Base": SymPy printers dispatch on it (Printer._print)
    """A function of the language the generated module computes outside autograd.

    ``language``: its name in specs; ``runtime``: the generated module's function that calls
    it (``_NAME``); ``constant``: the indices of the arguments that must be numbers or params.
    """

    language = ""
    arity = 1
    constant: tuple[int, ...] = ()

    @property
    def runtime(self) -> str:
        return f"_{self.language}"

    def fdiff(self, argindex=1):
        index = argindex - 1
        if index in self.constant:
            raise sympy.ArgumentIndexError(self, argindex)
        return self.derivative(index, *self.args)

    def derivative(self, index: int, *args) -> sympy.Expr:
        raise NotImplementedError

    def _eval_is_real(self):
        return True if all(arg.is_real for arg in self.args) else None


# --- SciPy -----------------------------------------------------------------------------------


class ScipyFunctionBase(ExternalFunctionBase):
    """A function of ``scipy.special``: ``call`` is the generated code's value of it (``special``
    the module), ``exact`` its mpmath value (the build's domain check, constant folding)."""

    call = ""
    params: tuple[str, ...] = ("x",)  # the generated code's names of its arguments
    usage = ""
    summary = ""  # the generated function's first docstring line, where not SciPy's function itself

    @staticmethod
    def rule(*args) -> sympy.Expr:
        """The derivative in the last argument (each function sets its own)."""
        raise NotImplementedError

    @staticmethod
    def exact(*args):
        """The value in mpmath (each function sets its own)."""
        raise NotImplementedError

    def derivative(self, index: int, *args) -> sympy.Expr:
        return type(self).rule(*args)

    def scipy_call(self) -> sympy.Expr:
        """The call of SciPy's own function that computes this one (whose error is SciPy's)."""
        return self

    def _eval_evalf(self, prec):
        return evalf_by(type(self).exact, self.args, prec)


SCIPY: dict[str, type] = {}  # name in specs -> class (and INTERNAL, below: the ones rewrites write)


def _scipy(name: str, arity: int, rule, exact, usage: str, call: str | None = None) -> type:
    """A ``ScipyFunctionBase`` class for ``scipy.special.NAME``, differentiated in its last
    argument by ``rule`` (the others, if any, are numbers or params)."""
    params = ("nu", "x")[-arity:]
    exact = _real_valued(_whole_order(exact) if arity == 2 else exact)
    cls = type(name, (ScipyFunctionBase,), {
        "nargs": arity,
        "arity": arity,
        "params": params,
        "language": name,
        "constant": tuple(range(arity - 1)),
        "call": call or f"special.{name}({', '.join(params)})",
        "usage": usage,
        "rule": staticmethod(rule),
        "exact": staticmethod(exact),
        "__module__": __name__,
    })
    SCIPY[name] = cls
    return cls


def _real_valued(exact):
    """``exact`` with an imaginary part of rounding dropped (mpmath's besseli(-1, -2) has one of
    1e-25); a complex value stays complex (no real value: ive(1.5, -2))."""
    def value(*args):
        result = exact(*args)
        if isinstance(result, mpmath.mpc) and abs(result.imag) <= abs(result) * mpmath.mpf(2) ** (20 - mpmath.mp.prec):
            return result.real
        return result
    return value


def _whole_order(exact):
    """``exact`` with a whole-numbered first argument passed as an int: mpmath computes
    besseli(1.0, -2) through a complex power, with an imaginary part of rounding."""
    def value(order, x):
        return exact(int(order) if order == int(order) else order, x)
    return value


def _half_sum(cls, sign, nu, x):
    """(F(nu - 1, x) + sign F(nu + 1, x)) / 2: the Bessel functions' derivative recurrences."""
    return (cls(nu - 1, x) + sign * cls(nu + 1, x)) / 2


jv = _scipy("jv", 2, lambda nu, x: _half_sum(jv, -1, nu, x), mpmath.besselj,
            "jv(nu, x), the Bessel function of the first kind of real order nu")
yv = _scipy("yv", 2, lambda nu, x: _half_sum(yv, -1, nu, x), mpmath.bessely,
            "yv(nu, x), the Bessel function of the second kind, x > 0")
iv = _scipy("iv", 2, lambda nu, x: _half_sum(iv, 1, nu, x), mpmath.besseli,
            "iv(nu, x), the modified Bessel function of the first kind")
kv = _scipy("kv", 2, lambda nu, x: -_half_sum(kv, 1, nu, x), mpmath.besselk,
            "kv(nu, x), the modified Bessel function of the second kind, x > 0")
ive = _scipy("ive", 2, lambda nu, x: _half_sum(ive, 1, nu, x) - sympy.sign(x) * ive(nu, x),
             lambda nu, x: mpmath.besseli(nu, x) * mpmath.exp(-abs(x)),
             "ive(nu, x) = iv(nu, x) * exp(-|x|)")
kve = _scipy("kve", 2, lambda nu, x: kve(nu, x) - _half_sum(kve, 1, nu, x),
             lambda nu, x: mpmath.besselk(nu, x) * mpmath.exp(x), "kve(nu, x) = kv(nu, x) * exp(x), x > 0")
expi = _scipy("expi", 1, lambda x: sympy.exp(x) / x, mpmath.ei, "expi(x), the exponential integral Ei")
gammainc = _scipy("gammainc", 2, lambda a, x: x ** (a - 1) * sympy.exp(-x - sympy.loggamma(a)),
                  lambda a, x: mpmath.gammainc(a, 0, x, regularized=True),
                  "gammainc(a, x), the regularized lower incomplete gamma function, a > 0, x >= 0")
gammaincc = _scipy("gammaincc", 2, lambda a, x: -x ** (a - 1) * sympy.exp(-x - sympy.loggamma(a)),
                   lambda a, x: mpmath.gammainc(a, x, mpmath.inf, regularized=True),
                   "gammaincc(a, x) = 1 - gammainc(a, x), a > 0, x >= 0")
# W' = exp(-W)/(1 + W) rather than W/(x (1 + W)), which is 0/0 at x = 0
lambertw = _scipy("lambertw", 1, lambda x: sympy.exp(-lambertw(x)) / (1 + lambertw(x)), mpmath.lambertw,
                  "lambertw(x), the principal branch of Lambert's W, real for x >= -1/e",
                  call="special.lambertw(x).real")
zeta = _scipy("zeta", 2, lambda s, q: -s * zeta(s + 1, q), mpmath.zeta,
              "zeta(s, q), the Hurwitz zeta function, differentiated in q")
fresnel_s = _scipy("fresnel_s", 1, lambda x: sympy.sin(sympy.pi * x**2 / 2), mpmath.fresnels,
                   "fresnel_s(x), the Fresnel integral S (scipy.special.fresnel's first part)",
                   call="special.fresnel(x)[0]")
fresnel_c = _scipy("fresnel_c", 1, lambda x: sympy.cos(sympy.pi * x**2 / 2), mpmath.fresnelc,
                   "fresnel_c(x), the Fresnel integral C (scipy.special.fresnel's second part)",
                   call="special.fresnel(x)[1]")
airy_ai = _scipy("airy_ai", 1, lambda x: airy_ai_prime(x), mpmath.airyai, "airy_ai(x), the Airy function Ai",
                 call="special.airy(x)[0]")
airy_ai_prime = _scipy("airy_ai_prime", 1, lambda x: x * airy_ai(x), lambda x: mpmath.airyai(x, derivative=1),
                       "airy_ai_prime(x), Ai'(x)", call="special.airy(x)[1]")
airy_bi = _scipy("airy_bi", 1, lambda x: airy_bi_prime(x), mpmath.airybi, "airy_bi(x), the Airy function Bi",
                 call="special.airy(x)[2]")
airy_bi_prime = _scipy("airy_bi_prime", 1, lambda x: x * airy_bi(x), lambda x: mpmath.airybi(x, derivative=1),
                       "airy_bi_prime(x), Bi'(x)", call="special.airy(x)[3]")
struve = _scipy("struve", 2, lambda nu, x: struve(nu - 1, x) - nu * struve(nu, x) / x, mpmath.struveh,
                "struve(nu, x), the Struve function H")
ellipk = _scipy("ellipk", 1, lambda m: (ellipe(m) - (1 - m) * ellipk(m)) / (2 * m * (1 - m)), mpmath.ellipk,
                "ellipk(m), the complete elliptic integral of the first kind (parameter m < 1)")
ellipe = _scipy("ellipe", 1, lambda m: (ellipe(m) - ellipk(m)) / (2 * m), mpmath.ellipe,
                "ellipe(m), the complete elliptic integral of the second kind (parameter m <= 1)")


class kv_power(ScipyFunctionBase):
    """x**a * kv(nu, x): what ``bessel_powers`` writes for a product of a power and kv of one
    argument (the Matern kernel's (c*r)**nu * kv(nu, c*r)); not in the language.

    Apart, the factors are 0 and inf at x = 0 and their product's derivatives cancel near it:
    SymPy's third derivative of x**3.2 * kv(3.2, x) is a sum of terms of size x**-3 whose total is
    about x, and loses 60 bits at x = 1e-4. Together, the derivative is a difference of two terms
    of the family, (a - nu)*x**(a - 1)*kv(nu, x) - x**a*kv(nu - 1, x) (from kv's recurrence
    kv' = -kv(nu - 1) - nu/x*kv), and for a = nu the first is 0: d/dx x**nu*kv(nu, x) =
    -x**nu*kv(nu - 1, x), with no cancellation near 0 while the orders fall no lower than 0.
    Each term is computed whole (the module's ``_x_pow_kv``), so its limit at x = 0 is finite
    where the product's is: x**nu*kv(nu, x) -> gamma(nu)*2**(nu - 1) for nu > 0.
    """

    nargs, arity, params, language, constant = 3, 3, ("a", "nu", "x"), "kv_power", (0, 1)
    call = "_x_pow_kv(special, a, nu, x)"
    usage = "x**a * kv(nu, x), x > 0, its limit at x = 0"
    summary = "x**a * kv(nu, x) by scipy.special.kv, computed whole outside autograd."

    @staticmethod
    def rule(a, nu, x):
        return (a - nu) * kv_power(a - 1, nu, x) - kv_power(a, nu - 1, x)

    @staticmethod
    def exact(a, nu, x):
        return _power_times_kv(a, nu, x)

    def scipy_call(self) -> sympy.Expr:
        return kv(*self.args[1:])

    def written(self) -> sympy.Expr:
        """The product as a spec writes it."""
        a, nu, x = self.args
        return sympy.Pow(x, a, evaluate=False) * kv(nu, x)

    def _sympystr(self, printer) -> str:  # formula.LanguagePrinter, in the spec's language
        return printer._print(self.written())

    def _torchcode(self, printer, **kwargs):  # printer.TorchPrinter
        if printer.reference:  # the tests' composed formula: the product as written
            return printer._print(self.written())
        return printer._print_ExternalFunctionBase(self)


def _power_times_kv(a, nu, x):
    """x**a * K_nu(x) in mpmath, with its limit at x = 0 (K_nu is inf there): K_nu(x) is
    gamma(|nu|)*2**(|nu| - 1)*x**-|nu| to first order (-log(x) for nu = 0)."""
    if x != 0:
        return x**a * mpmath.besselk(nu, x)
    order = abs(nu)
    if a > order:
        return mpmath.mpf(0)
    if a < order or order == 0:
        return mpmath.inf
    return mpmath.gamma(order) * mpmath.mpf(2) ** (order - 1)


def _base_and_kv(mul):
    """(the power x**a, the kv(nu, x) call) among ``mul``'s factors, with one x, else None."""
    factors = sympy.Mul.make_args(mul)
    for call in factors:
        if isinstance(call, kv):
            for power in factors:
                if power is not call and call.args[1].free_symbols and power.as_base_exp()[0] == call.args[1]:
                    return power, call
    return None


def _as_kv_power(mul):
    power, call = _base_and_kv(mul)
    nu, x = call.args
    return mul / (power * call) * kv_power(power.as_base_exp()[1], nu, x)


def bessel_powers(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each product x**a * kv(nu, x) written ``kv_power(a, nu, x)``, whose
    derivatives do not cancel near x = 0 (its docstring says why). Before differentiation: the
    derivatives of the product as written are what loses the bits."""
    if not expr.has(kv):
        return expr
    return expr.replace(lambda e: e.is_Mul and _base_and_kv(e) is not None, _as_kv_power)


# Functions the generated code calls from SciPy that specs do not write (rewrites write them)
INTERNAL: dict[str, type] = {"kv_power": kv_power}


def evaluated() -> dict[str, type]:
    """Every SciPy function a formula may call, by name: the language's and the internal ones."""
    return {**SCIPY, **INTERNAL}


class expn(ScipyFunctionBase):
    """expn(n, x), the generalized exponential integral E_n; n a whole number written in the
    spec (E_n' = -E_(n-1), down to E_0(x) = exp(-x)/x)."""

    nargs, arity, params, language, constant = 2, 2, ("n", "x"), "expn", (0,)
    call = "special.expn(n, x)"
    usage = "expn(n, x), n a whole number such as 1"
    exact = staticmethod(lambda n, x: mpmath.expint(n, x))

    @classmethod
    def eval(cls, n, x):
        if n == 0:
            return sympy.exp(-x) / x
        return None

    @staticmethod
    def rule(n, x):
        return -expn(n - 1, x)


SCIPY["expn"] = expn
# Arguments written as literal whole numbers (scipy.special.expn takes an integer n).
LITERAL_ARGUMENTS = {"expn": 0}


# --- a spec's own (extern:) ------------------------------------------------------------------


class UserExternBase(ExternalFunctionBase):
    """A function a spec declares under ``extern:`` (``declaration``: its ``spec.Extern``);
    ``derivatives``: one formula per argument in the argument symbols, None where the
    argument must be a number or a param. Filled by ``expr.declared_functions``."""

    declaration = None
    symbols: tuple[sympy.Symbol, ...] = ()
    derivatives: tuple[sympy.Expr | None, ...] = ()

    def derivative(self, index: int, *args) -> sympy.Expr:
        return self.derivatives[index].xreplace(dict(zip(self.symbols, args)))


def declared_classes(externs) -> dict[str, type]:
    """A class per ``spec.Extern``, its derivatives not yet parsed (they may call any of them)."""
    classes = {}
    for extern in externs:
        classes[extern.name] = type(extern.name, (UserExternBase,), {
            "nargs": len(extern.args),
            "arity": len(extern.args),
            "language": extern.name,
            "declaration": extern,
            "constant": tuple(i for i, d in enumerate(extern.derivatives) if d is None),
            "symbols": tuple(sympy.Symbol(arg, real=True) for arg in extern.args),
            "__module__": __name__,
        })
    return classes


def calls(exprs) -> list[type]:
    """The external functions ``exprs`` call, in a fixed order (by name)."""
    found = set().union(*(expr.atoms(ExternalFunctionBase) for expr in exprs)) if exprs else set()
    return sorted({type(call) for call in found}, key=lambda cls: cls.language)


def conflicts(strategy: str, fuse: bool, called) -> list[tuple[str, str]]:
    """(spec key, message) for each setting a spec that calls ``called`` (external functions)
    cannot have: they are computed outside autograd, so only nested levels differentiate them."""
    if not called:
        return []
    names = ", ".join(cls.language for cls in called)
    found = []
    if strategy not in ("auto", "nested"):
        found.append(("strategy", (
            f"strategy: {strategy} cannot be used with {names}: it is computed outside autograd (SciPy or an "
            "extern's implementation), so its derivatives must be nested levels with explicit formulas; write "
            "strategy: nested, or remove the line (auto)")))
    if fuse:
        found.append(("fuse", (
            f"fuse: true cannot compile {names}: torch.compile cannot trace an external function's "
            "implementation into a kernel; remove fuse")))
    return found


def closure(classes) -> list[type]:
    """``classes`` and every external function their derivatives call, by name: the generated
    module must be able to call each, as any level may."""
    found = {cls.language: cls for cls in classes}
    pending = list(found.values())
    while pending:
        cls = pending.pop()
        for called in _derivative_calls(cls):
            if called.language not in found:
                found[called.language] = called
                pending.append(called)
    return [found[name] for name in sorted(found)]


def _derivative_calls(cls) -> set[type]:
    if issubclass(cls, UserExternBase):
        formulas = [d for d in cls.derivatives if d is not None]
    else:
        formulas = [cls.rule(*(sympy.Symbol(name, real=True) for name in cls.params))]
    return {type(call) for formula in formulas for call in formula.atoms(ExternalFunctionBase)}
