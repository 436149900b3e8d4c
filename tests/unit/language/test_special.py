"""Special functions (codegen/language/special.py): derivative tables, the generated
module's ``_Special`` at and near 0 to every order, against mpmath, and misuse errors.

Random trees with special functions are in test_properties.py; every function under a strategy in
its test_every_function_of_the_language_under_a_strategy.
"""

from __future__ import annotations

import math

import mpmath
import pytest
import sympy
import torch
from helpers import budget, build_spec

from codegen.derive import symbolic
from codegen.language import special
from codegen.language.expr import ExprError, parse_expr

x = special.ARGUMENT
MPMATH = {  # the language functions by mpmath, written independently of special.py's exact values
    "bessel_j0": lambda t: mpmath.besselj(0, t), "bessel_j1": lambda t: mpmath.besselj(1, t),
    "bessel_y0": lambda t: mpmath.bessely(0, t), "bessel_y1": lambda t: mpmath.bessely(1, t),
    "i0": lambda t: mpmath.besseli(0, t), "i1": lambda t: mpmath.besseli(1, t),
    "i0e": lambda t: mpmath.besseli(0, t) * mpmath.exp(-abs(t)), "i1e": lambda t: mpmath.besseli(1, t) * mpmath.exp(-abs(t)),
    "modified_bessel_k0": lambda t: mpmath.besselk(0, t), "modified_bessel_k1": lambda t: mpmath.besselk(1, t),
    "scaled_modified_bessel_k0": lambda t: mpmath.besselk(0, t) * mpmath.exp(t),
    "scaled_modified_bessel_k1": lambda t: mpmath.besselk(1, t) * mpmath.exp(t),
    "spherical_bessel_j0": lambda t: mpmath.sin(t) / t if t else mpmath.mpf(1),
    "sinc": lambda t: mpmath.sin(mpmath.pi * t) / (mpmath.pi * t) if t else mpmath.mpf(1),
}
POSITIVE_ONLY = {"bessel_y0", "bessel_y1", "modified_bessel_k0", "modified_bessel_k1",
                 "scaled_modified_bessel_k0", "scaled_modified_bessel_k1"}


def _mp(expr: sympy.Expr, point: float) -> float:
    """``expr`` (in x) at ``point``, exactly, each special function by its own ``exact``."""
    modules = [{cls.__name__: cls.exact for cls in special.ALL}, "mpmath"]
    with mpmath.workdps(30):
        return float(sympy.lambdify([x], expr, modules=modules)(mpmath.mpf(point)))


@pytest.mark.parametrize("cls", special.LANGUAGE_CLASSES, ids=lambda c: c.language)
def test_each_derivative_table_entry_is_the_derivative(cls):
    """Two orders of the table (SymPy applies it) against mpmath's numerical derivative of the
    independent definition, where each function is smooth (i0e's kink at 0 is left out), at x < 0
    too where the function is defined there (the families' exact values took sqrt(pi/(2x)) there)."""
    negative = () if cls.language in POSITIVE_ONLY else (-0.7, -2.3, -5.5)
    for point in (0.7, 2.3, 5.5, *negative):
        for order in (1, 2):
            table = _mp(symbolic.clean(sympy.diff(cls(x), x, order)), point)
            with mpmath.workdps(30):
                want = float(mpmath.diff(MPMATH[cls.language], point, order))
            assert table == pytest.approx(want, rel=1e-12, abs=1e-14), (cls.language, point, order)


def test_the_families_are_finite_at_zero_and_their_derivatives_close_under_d_dx():
    for family in special.FAMILIES:
        n = 2
        assert _mp(family(n, x), 0.0) == pytest.approx(float(family.exact(n, mpmath.mpf(0))))
        assert sympy.diff(family(n, x), x).atoms(special.SpecialFunctionBase) <= {family(n, x), family(n + 1, x)}


class _EveryFunction(dict):
    """One generated module per special function, f(x) at order 4, built when a test first asks."""

    def __init__(self, folder):
        super().__init__()
        self.folder = folder

    def __missing__(self, name: str):
        lo = 0.05 if name in POSITIVE_ONLY else -3.0
        self[name] = build_spec(self.folder / name, name=name + "_of_x", expr=f"{name}(x)", inputs=["x"], order=4,
                                domain={"x": [lo, 3.0]})
        return self[name]


@pytest.fixture(scope="module")
def every_function(tmp_path_factory):
    """special function name -> its generated module (f(x) at order 4)."""
    return _EveryFunction(tmp_path_factory.mktemp("special"))


def _derivatives(function, points, order: int, dtype=torch.float64) -> list[list[float]]:
    t = torch.tensor(points, dtype=dtype, requires_grad=True)
    value, orders = function(t), []
    for _ in range(order):
        (value,) = torch.autograd.grad(value.sum(), t, create_graph=True)
        orders.append(value.detach().tolist())
    return orders


NEAR_ZERO = [0.0, 1e-12, 1e-6, 1e-3, 0.3, -0.7, 1.9, 2.9]


@pytest.mark.parametrize("name", budget(sorted(set(MPMATH) - POSITIVE_ONLY)))
def test_every_order_to_four_at_and_near_zero_matches_mpmath(every_function, name):
    """sinc and spherical_bessel_j0 exact at and near 0 (no 0/0), and the J and I kinds through
    their families J_n(x)/x**n; i0e and i1e have a kink at 0, so they are checked beside it."""
    module = every_function[name]
    points = [p for p in NEAR_ZERO if p != 0 or name not in ("i0e", "i1e")]
    got = _derivatives(getattr(module, f"{name}_of_x"), points, 4)
    tolerance = special.CONSTRUCTORS[name].torch_error or 1e-13
    for order, values in enumerate(got, start=1):
        for point, value in zip(points, values):
            with mpmath.workdps(30):
                want = float(mpmath.diff(MPMATH[name], point, order))
            assert value == pytest.approx(want, rel=1e-10, abs=10 * tolerance), (name, order, point)


@pytest.mark.parametrize("name", budget(sorted(POSITIVE_ONLY)))
def test_the_functions_of_positive_x_match_mpmath_to_order_four(every_function, name):
    points = [0.05, 0.4, 1.7, 4.2, 12.0]
    got = _derivatives(getattr(every_function[name], f"{name}_of_x"), points, 4)
    for order, values in enumerate(got, start=1):
        for point, value in zip(points, values):
            with mpmath.workdps(30):
                want = float(mpmath.diff(MPMATH[name], point, order))
            assert value == pytest.approx(want, rel=1e-9 if "y" not in name else 1e-5, abs=1e-6), (name, order, point)


def test_autograd_through_torch_sinc_is_wrong_near_zero_and_dbgen_is_not(every_function):
    """The control: torch.sinc's own second derivative is NaN at 0 and -5.2 at 1e-8 (it is
    -pi**2/3 = -3.29); the generated sinc's is right at both."""
    want = -math.pi**2 / 3
    torch_second = _derivatives(torch.sinc, [0.0, 1e-8], 2)[1]
    assert math.isnan(torch_second[0]) and abs(torch_second[1] - want) > 1
    ours = _derivatives(every_function["sinc"].sinc_of_x, [0.0, 1e-8], 2)[1]
    assert ours == pytest.approx([want, want], rel=1e-12)


def test_bessel_j0_has_no_torch_derivative_and_the_generated_one_has_every_order(every_function):
    t = torch.tensor([1.0], requires_grad=True)
    assert not torch.special.bessel_j0(t).requires_grad  # torch 2.13: no derivative at all
    fourth = _derivatives(every_function["bessel_j0"].bessel_j0_of_x, [1.0], 4)[3][0]
    assert fourth == pytest.approx(float(mpmath.besselj(0, 1, derivative=4)), rel=1e-6)


@pytest.mark.parametrize("kind", ["bessel_j_over_power", "bessel_i_over_power", "scaled_bessel_i_over_power",
                                  "spherical_j_over_power"])
def test_the_family_helpers_match_mpmath_for_indices_one_to_eight(every_function, kind):
    """The generated helpers' power series below the switch point and recurrences above it."""
    modules = (every_function[cls.language] for cls in special.LANGUAGE_CLASSES)
    module = next(m for m in modules if hasattr(m, f"_{kind}_value"))
    helper = getattr(module, f"_{kind}_value")
    cls = getattr(special, kind)
    points = [0.0, 1e-5, 0.5, 1.99, 2.01, 4.5, 8.9, 9.1, 13.9, 14.1, 25.0, 60.0]
    for n in range(1, 9):
        got = helper(n, torch.tensor(points, dtype=torch.float64)).tolist()
        for point, value in zip(points, got):
            want = float(cls.exact(n, mpmath.mpf(point)))
            envelope = abs(float(cls.exact(n, mpmath.mpf(0)))) / (1 + point) ** (n + 1)  # J oscillates
            error = 1e-6 if kind == "bessel_j_over_power" else 1e-13  # torch's J0, J1 start its recurrence
            assert abs(value - want) <= error * max(abs(want), envelope), (kind, n, point, value, want)


def test_float32_inputs_keep_their_dtype(every_function):
    t = torch.tensor([0.0, 0.5, 2.0], dtype=torch.float32, requires_grad=True)
    value = every_function["bessel_j1"].bessel_j1_of_x(t)
    (grad,) = torch.autograd.grad(value.sum(), t, create_graph=True)
    (second,) = torch.autograd.grad(grad.sum(), t)
    assert value.dtype == grad.dtype == second.dtype == torch.float32
    assert torch.isfinite(second).all()


def test_lgamma_digamma_polygamma_erfinv_xlogy_are_torch_ops(tmp_path):
    module = build_spec(tmp_path, name="tops", expr="lgamma(x) + digamma(x) * polygamma(2, x) + erfinv(x / 4) + xlogy(x, x)",
                        inputs=["x"], order=2, domain={"x": [0.3, 3.0]})
    source = (tmp_path / "out" / "tops.py").read_text()
    assert "torch.lgamma(" in source and "torch.polygamma(2, " in source and "_Special" not in source
    t = torch.tensor([0.5, 2.0], dtype=torch.float64, requires_grad=True)
    got = _derivatives(module.tops, [0.5, 2.0], 2)

    def exact(p):
        return mpmath.loggamma(p) + mpmath.digamma(p) * mpmath.polygamma(2, p) + mpmath.erfinv(p / 4) + p * mpmath.log(p)

    for order in (1, 2):
        assert got[order - 1] == pytest.approx([float(mpmath.diff(exact, p, order)) for p in (0.5, 2.0)], rel=1e-9)
    assert t.grad is None


@pytest.mark.parametrize("text, message", [
    ("polygamma(1.5, x)", ("polygamma()'s first argument must be a whole number from 0 to 50 written as it is, "
                          "such as polygamma(1, x), not the number 1.5")),
    ("polygamma(a, x)", "not the input or param a"),
    ("polygamma(x)", "polygamma() takes 2 arguments, got 1; write polygamma(n, x), n a whole number such as 1"),
    ("gammaln(x)", "'gammaln' is not in the language; write lgamma(x)"),
    ("bessel_y0(-1) * x", "the constant part bessel_y0(-1) has no real value"),
    ("hankel1(x)", "'hankel1' is not in the language; its special functions are"),
])
def test_misuse_is_refused_with_what_to_write(text, message):
    with pytest.raises(ExprError) as raised:
        parse_expr(text, ("x",), ("a",))
    assert message in str(raised.value)


def test_xlogy_is_zero_where_x_is_zero(tmp_path):
    module = build_spec(tmp_path, name="xl", expr="xlogy(x, y)", inputs=["x", "y"], order=1,
                        domain={"x": [0.0, 2.0], "y": [0.5, 2.0]})
    assert module.xl(torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)).item() == 0.0


def test_a_special_function_of_a_constant_that_sympy_cannot_make_a_float_stays_symbolic():
    """SymPy asks a special function of acos(tanh(1)/2) whether it is positive, by evalf; mpmath
    was given the unevaluated argument and raised (found by the memory property test)."""
    expr = parse_expr("abs(bessel_j0(acos(tanh(1)/2))) * x", ("x",), ())
    value = float(expr.subs(sympy.Symbol("x", real=True), 1).evalf(30))
    assert value == pytest.approx(float(mpmath.besselj(0, mpmath.acos(mpmath.tanh(1) / 2))), rel=1e-12)


def _mpmath_float(function, *args) -> float:
    try:
        return special.real_float(function(*args))
    except (ValueError, ZeroDivisionError):  # a pole, or no real value
        return math.nan


# At and beside the poles (0, -1, -2, ...), across zero, in the tails, and past erfinv's [-1, 1]
POLYGAMMA_POINTS = [-3.0, -2.0, -1.0, -0.0, 0.0, -2.5, -1.5, -0.5, -1 + 1e-12, -1e-300, 1e-300, 1e-9, 0.5, 1.0,
                    3.7, 50.0, 1e10, 1e300]
ERFINV_POINTS = [-2.0, -1.0, -1 + 1e-16, -0.5, -0.0, 0.0, 1e-300, 0.5, 1 - 1e-16, 1.0, 1.5, math.inf]


def test_the_domain_checks_torch_polygamma_and_erfinv_are_finite_where_mpmath_is_and_agree():
    """The domain check evaluates polygamma and erfinv by torch's ops (special.torch_float_values):
    they must be finite exactly where mpmath's values are (torch's own polygamma(1, x) is finite
    at the poles x = -1, -2, ...), and near them there: the check needs finiteness alone, and
    torch's digamma loses digits beside a pole (-1 + 1e-12: 3e-5 relative)."""
    values = special.torch_float_values()
    cases = [(values["polygamma"], mpmath.polygamma, (n, x)) for n in range(6) for x in POLYGAMMA_POINTS]
    cases += [(values["erfinv"], mpmath.erfinv, (x,)) for x in ERFINV_POINTS]
    for ours, exact, args in cases:
        got, want = ours(*args), _mpmath_float(exact, *args)
        assert math.isfinite(got) == math.isfinite(want), (exact.__name__, args, got, want)
        if math.isfinite(want):
            assert got == pytest.approx(want, rel=1e-4, abs=1e-300), (exact.__name__, args)
    # a pole mpmath never returns from (every float this large is an integer)
    assert math.isnan(values["polygamma"](1, -1e300))
