"""The expression language's functions, one entry each: what every stage reads of a function.

A function of the language used to be spelled out in each stage that handles it (the parser's
arities, the printer's torch call, the cost model's weights, the written-back name, the branches'
finite functions), with nothing checking that they agree. Here each is one ``LanguageFunction``
(after PyTorch's OpInfo: a function as data, and one harness, ``tests/unit/language/test_registry.py``, that
checks every entry against every stage). The stages read it:

- ``codegen.language``: ``FUNCTION_ARITY``, ``SCIPY_ARITY``, ``PIECEWISE_FUNCTIONS``;
- ``functions.FUNCTIONS``: the parser's table, each name with its SymPy constructor;
- ``emit.printer``: the ``_print_X`` of each function written as one call (``torch``, ``math``);
- ``plan.cost``: the weights of the language's functions (``weight``, ``fused_weight``);
- ``formula``: the language's name of a SymPy class that has another (``Abs`` is ``abs``);
- ``derive.branches``: the functions a branch needs no guard for (``entire``).

Pure data, without SymPy: ``codegen.language`` reads it, and a build whose outputs are up to date
never imports SymPy. The SymPy side of each entry lives in ``functions.py`` (the constructors),
``special.py`` and ``external.py`` (the classes), keyed by the same names.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("elementary", "piecewise", "special", "scipy")


@dataclass(frozen=True)
class LanguageFunction:
    """One function of the expression language: everything each stage reads of it."""

    name: str  # as a spec writes it, and as docstrings and messages print it
    arity: int
    kind: str  # one of KINDS: docs/guide/specs.md's sections, and externals.md's for "scipy"
    # __name__ of the SymPy class a parsed call becomes, which printers and the cost model key on
    # ("Pow" for sqrt, x**(1/2); "Piecewise" for the piecewise ones)
    sympy: str
    # The torch callable the printer writes for a tensor argument. None where the generated code
    # calls no torch op of its own for it: the piecewise ones are composed (torch.where, the
    # printer's Piecewise), the Bessel functions and sinc are the generated module's ``_<sympy>``
    # (special.py's ``_Special``), SciPy's are its ``_<name>`` (external.py, outside autograd).
    torch: str | None = None
    # The math function the printer writes for a float argument (a function of params alone).
    # None where the printer composes the float itself: sigmoid through tanh, softplus through
    # log1p, xlogy in Python, erfinv and the polygammas as their torch op on a float64 tensor.
    math: str | None = None
    # Eager cost (forward, autograd's backward) relative to a*b, and the compute a fused kernel
    # adds (plan/cost.py, measured by tools/op_weights.py); None: unmeasured, cost.UNKNOWN_FUNCTION
    weight: tuple[float, float] | None = None
    fused_weight: float | None = None
    # Finite, with every derivative, wherever its argument is finite: a branch of such functions
    # of polynomials needs no guard (derive/branches.py)
    entire: bool = False
    # The name this one is another spelling of (modified_bessel_i0 is i0): it parses to the same
    # class and is written back by that name
    alias_of: str | None = None


def _elementary(name: str, weight: tuple[float, float], fused_weight: float, *, arity: int = 1,
                sympy: str | None = None, torch: str | None = "", math: str | None = "",
                entire: bool = False) -> LanguageFunction:
    """An elementary function: by default SymPy's class, torch's op and math's function of its name."""
    return LanguageFunction(name, arity, "elementary", sympy or name, f"torch.{name}" if torch == "" else torch,
                            f"math.{name}" if math == "" else math, weight, fused_weight, entire)


def _piecewise(name: str, arity: int) -> LanguageFunction:
    return LanguageFunction(name, arity, "piecewise", "Piecewise")


def _special(name: str, arity: int = 1, *, sympy: str | None = None, torch: str | None = None,
             math: str | None = None, alias_of: str | None = None) -> LanguageFunction:
    return LanguageFunction(name, arity, "special", sympy or name, torch, math, alias_of=alias_of)


def _scipy(name: str, arity: int) -> LanguageFunction:
    return LanguageFunction(name, arity, "scipy", name)


# In the order docs/guide/specs.md lists them; weights from plan/cost.py's measurements (2**20
# float32 elements, one thread, torch 2.13).
FUNCTIONS: tuple[LanguageFunction, ...] = (
    _elementary("exp", (0.8, 1.0), 0.15),
    _elementary("log", (0.9, 1.0), 1.0),
    _elementary("log1p", (2.5, 1.7), 1.2),
    _elementary("expm1", (3.5, 1.0), 0.17),
    # x**(1/2) to SymPy, costed as a fast power (cost.FAST_EXPONENTS); the weights are torch.sqrt's
    _elementary("sqrt", (0.7, 1.0), 0.0, sympy="Pow"),
    _elementary("sin", (1.4, 2.4), 0.15, entire=True),
    _elementary("cos", (1.4, 2.4), 0.4, entire=True),
    _elementary("tan", (1.5, 2.0), 2.5),
    _elementary("asin", (1.5, 3.0), 2.0),
    _elementary("acos", (1.5, 3.0), 2.6),
    _elementary("atan", (1.3, 2.0), 1.8, entire=True),
    _elementary("atan2", (4.3, 6.0), 2.7, arity=2),
    _elementary("sinh", (3.9, 5.0), 2.9),
    _elementary("cosh", (4.0, 5.0), 3.6),
    _elementary("tanh", (1.1, 1.0), 3.3, entire=True),
    _elementary("asinh", (8.0, 3.0), 4.8),
    _elementary("acosh", (8.0, 3.0), 5.5),
    _elementary("atanh", (2.0, 2.0), 1.5),
    _elementary("erf", (1.9, 3.0), 0.8, entire=True),
    _elementary("erfc", (2.1, 3.0), 6.5, entire=True),
    _elementary("sigmoid", (1.4, 1.0), 0.4, math=None, entire=True),
    _elementary("softplus", (4.6, 1.0), 2.9, torch="torch.nn.functional.softplus", math=None),
    _elementary("abs", (0.7, 2.0), 0.0, sympy="Abs", math="math.fabs", entire=True),
    # piecewise (v2): a branch is never evaluated where it is not taken (derive/branches.py)
    _piecewise("where", 3),
    _piecewise("min", 2),
    _piecewise("max", 2),
    _piecewise("clamp", 3),
    _piecewise("relu", 1),
    # special functions (v2): derivatives written in the same set, to every order (special.py)
    _special("lgamma", sympy="loggamma", torch="torch.lgamma", math="math.lgamma"),
    _special("digamma", sympy="polygamma", torch="torch.digamma"),  # polygamma(0, x)
    _special("polygamma", 2, torch="torch.polygamma"),
    _special("erfinv", torch="torch.erfinv"),
    _special("xlogy", 2, torch="torch.xlogy"),
    _special("sinc"),
    _special("i0"),
    _special("i0e"),
    _special("i1"),
    _special("i1e"),
    _special("bessel_j0"),
    _special("bessel_j1"),
    _special("bessel_y0"),
    _special("bessel_y1"),
    # torch.special's modified_bessel_i0/i1 are i0/i1 by another name
    _special("modified_bessel_i0", sympy="i0", alias_of="i0"),
    _special("modified_bessel_i1", sympy="i1", alias_of="i1"),
    _special("modified_bessel_k0"),
    _special("modified_bessel_k1"),
    _special("scaled_modified_bessel_k0"),
    _special("scaled_modified_bessel_k1"),
    _special("spherical_bessel_j0"),
    # SciPy's special functions (docs/guide/externals.md): computed by scipy.special outside
    # autograd, so a spec that calls one is generated nested (external.py); the first of two
    # arguments is a number or a param
    _scipy("jv", 2), _scipy("yv", 2), _scipy("iv", 2), _scipy("kv", 2), _scipy("ive", 2), _scipy("kve", 2),
    _scipy("expi", 1), _scipy("expn", 2), _scipy("gammainc", 2), _scipy("gammaincc", 2), _scipy("lambertw", 1),
    _scipy("zeta", 2), _scipy("fresnel_s", 1), _scipy("fresnel_c", 1), _scipy("airy_ai", 1),
    _scipy("airy_ai_prime", 1), _scipy("airy_bi", 1), _scipy("airy_bi_prime", 1), _scipy("struve", 2),
    _scipy("ellipk", 1), _scipy("ellipe", 1),
)
REGISTRY: dict[str, LanguageFunction] = {function.name: function for function in FUNCTIONS}
if len(REGISTRY) != len(FUNCTIONS):
    raise ImportError("codegen.language.registry: a function is listed twice")


def of_kind(*kinds: str) -> tuple[LanguageFunction, ...]:
    """The registry's functions of ``kinds``, in its order."""
    return tuple(function for function in FUNCTIONS if function.kind in kinds)
