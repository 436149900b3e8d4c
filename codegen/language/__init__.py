"""The expression language's names (docs/guide/specs.md), without SymPy.

Spec validation needs only the names, read from the registry of the language's functions
(``registry.py``); ``functions.py`` maps them to SymPy objects. Keeping them apart lets a build whose
generated files are up to date finish without importing SymPy.
"""

from .registry import of_kind

# The language's functions by name, each with its arity: the elementary, piecewise and special ones,
# reserved (no input or param may take their names).
FUNCTION_ARITY = {function.name: function.arity for function in of_kind("elementary", "piecewise", "special")}
# SciPy's special functions (docs/guide/externals.md), computed outside autograd (external.py). Not
# reserved like FUNCTION_ARITY's: a param may be named zeta (a damping ratio); that spec then
# cannot call zeta().
SCIPY_ARITY = {function.name: function.arity for function in of_kind("scipy")}
# A branch of these is never evaluated where it is not taken (derive/branches.py)
PIECEWISE_FUNCTIONS = tuple(function.name for function in of_kind("piecewise"))
CONSTANT_NAMES = ("pi", "E")

# Names users reach for that the language does not have (yet): what the message says instead of
# a did-you-mean, which would be wrong (min is not sin). Where the language can already say it,
# the hint gives the formula; the formulas are exact.
_PIECEWISE = "not in the language; write it with where(cond, a, b), min, max, clamp or relu"
_NOT_SPECIAL = ("not in the language; its special functions are lgamma, digamma, polygamma, erfinv, xlogy, sinc, "
                "torch.special's Bessel functions and SciPy's " + ", ".join(SCIPY_ARITY)
                + "; declare your own under extern:")
NOT_YET = {
    "minimum": "not in the language; write min(a, b)",
    "maximum": "not in the language; write max(a, b)",
    "clip": "not in the language; write clamp(x, lo, hi)",
    "heaviside": "not in the language; write where(x > 0, 1, where(x == 0, h, 0)), or (x > 0) as a 0/1 number",
    "select": "not in the language; write where(cond, a, b)",
    "sign": _PIECEWISE, "floor": _PIECEWISE, "ceil": _PIECEWISE, "round": _PIECEWISE,
    "gammaln": "not in the language; write lgamma(x)",
    "gamma": "not in the language; write exp(lgamma(x)) for x > 0",
    "psi": "not in the language; write digamma(x)",
    "trigamma": "not in the language; write polygamma(1, x)",
    "erfcx": "not in the language; write exp(x**2)*erfc(x)",
    "ndtri": "not in the language; write sqrt(2)*erfinv(2*p - 1)",
    "log_ndtr": "not in the language; write log(erfc(-x/sqrt(2))/2)",
    "hankel1": _NOT_SPECIAL, "spherical_jn": _NOT_SPECIAL, "ellipkinc": _NOT_SPECIAL, "entr": "not in the language; write -xlogy(x, x)",
    "j0": "not in the language; write bessel_j0(x)", "j1": "not in the language; write bessel_j1(x)",
    "jn": "not in the language; write jv(n, x)", "yn": "not in the language; write yv(n, x)",
    "exp1": "not in the language; write expn(1, x)", "wrightomega": _NOT_SPECIAL, "fresnel": "not in the language; write fresnel_s(x) or fresnel_c(x)",
    "airy": "not in the language; write airy_ai(x), airy_ai_prime(x), airy_bi(x) or airy_bi_prime(x)",
    "gammaincinv": _NOT_SPECIAL, "besselj": "not in the language; write jv(nu, x)", "besselk": "not in the language; write kv(nu, x)",
    "y0": "not in the language; write bessel_y0(x)", "y1": "not in the language; write bessel_y1(x)",
    "k0": "not in the language; write modified_bessel_k0(x)", "k1": "not in the language; write modified_bessel_k1(x)",
    "k0e": "not in the language; write scaled_modified_bessel_k0(x)",
    "k1e": "not in the language; write scaled_modified_bessel_k1(x)",
    "ndtr": "not in the language; for the normal CDF write (1 + erf(x/sqrt(2)))/2",
    "gelu": "not in the language; write x*(1 + erf(x/sqrt(2)))/2",
    "silu": "not in the language; write x*sigmoid(x)",
    "swish": "not in the language; write x*sigmoid(x) (or x*sigmoid(beta*x) with a param beta)",
    "mish": "not in the language; write x*tanh(softplus(x))",
    "expit": "not in the language; write sigmoid(x)",
    "logit": "not in the language; write log(x) - log1p(-x)",
    "logsigmoid": "not in the language; write -softplus(-x)",
    "square": "not in the language; write x**2",
    "pow": "not in the language; write x**y",
    "rsqrt": "not in the language; write 1/sqrt(x)",
    "exp2": "not in the language; write 2**x",
    "log2": "not in the language; write log(x)/log(2)",
    "log10": "not in the language; write log(x)/log(10)",
    "ln": "not in the language; write log(x), the natural logarithm",
    **{f"arc{name}": f"not in the language; write a{name}(x)" for name in ("sin", "cos", "tan", "sinh", "cosh", "tanh")},
    "arctan2": "not in the language; write atan2(y, x)",
}
