"""Removable singularities (codegen/derive/series.py): sin(x)/x and its kin are exact at
and near their point at every order up to the spec's, NaN-free at the point itself, and formulas
without such a point are left as they are.

The truth is the formula as written, differentiated by SymPy and evaluated by mpmath at enough
digits to cover its cancellation near the point (checked at a second precision); at the point
itself, the same at x = 1e-600, which mpmath represents and float64 cannot tell from 0.
"""

from __future__ import annotations

import math
import time
import types
from pathlib import Path

import mpmath
import pytest
import sympy
import torch
from helpers import build_spec

from codegen.build.pipeline import discover, load_specs
from codegen.derive import series
from codegen.language.expr import parse_expr, spec_formulas

ORDER = 3
X = sympy.Symbol("x", real=True)
R = sympy.Symbol("r", real=True)
N, C = sympy.Symbol("n", real=True), sympy.Symbol("c", real=True)

# output name -> (spec text, the same function written in SymPy for the truth)
EXAMPLES = {
    "sin_over_x": ("sin(x)/x", sympy.sin(X) / X),
    "one_minus_cos": ("(1 - cos(x))/x**2", (1 - sympy.cos(X)) / X**2),
    "x_over_sinh": ("x/sinh(x)", X / sympy.sinh(X)),
    "expm1_over_x": ("expm1(x)/x", (sympy.exp(X) - 1) / X),
    "spherical_j1": ("(sin(x) - x*cos(x))/x**2", (sympy.sin(X) - X * sympy.cos(X)) / X**2),
    "erf_over_x": ("erf(x)/x", sympy.erf(X) / X),  # a Coulomb potential of a Gaussian charge
    # not singular, but its terms cancel near 0 as a removable singularity's do (x**3/6 from x)
    "x_minus_sin": ("x - sin(x)", X - sympy.sin(X)),
    "tan_minus_sin": ("tan(x) - sin(x)", sympy.tan(X) - sympy.sin(X)),
}
DIMENET = sympy.sin(N * sympy.pi * R / C) / R
NEAR = (0.0, 1e-300, 1e-12, 1e-6, 1e-3, 0.1)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """One vector-valued spec holding every example in x (order 3, a domain through 0), and
    DimeNet's sin(n*pi*r/c)/r with its params."""
    folder = tmp_path_factory.mktemp("series")
    examples = build_spec(folder / "examples", name="removable", inputs=["x"], order=ORDER,
                          outputs={name: text for name, (text, _) in EXAMPLES.items()}, domain={"x": [-3, 3]})
    dimenet = build_spec(folder / "dimenet", name="dimenet_rbf", inputs=["r"], order=ORDER, expr="sin(n*pi*r/c)/r",
                         params={"n": 2, "c": 5.0}, domain={"r": [0, 6]})
    return examples, dimenet


def _spec(inputs, params=(), order=ORDER):
    return types.SimpleNamespace(inputs=tuple(inputs), params=tuple(params), order=order)


def _derivatives(function, points, dtype=torch.float64) -> list[list[float]]:
    """[values, 1st derivatives, ...] of an elementwise ``function`` at ``points``, by autograd
    through the generated Function (create_graph at every level, as a user's higher derivatives)."""
    t = torch.tensor(points, dtype=dtype, requires_grad=True)
    value = function(t)
    found = [value.detach().double().tolist()]
    for _ in range(ORDER):
        (value,) = torch.autograd.grad(value.sum(), t, create_graph=True)
        found.append(value.detach().double().tolist())
    return found


def _truth(expr: sympy.Expr, symbol: sympy.Symbol, k: int, point: float, x0: float = 0.0) -> mpmath.mpf:
    """The k-th derivative of ``expr`` at ``point``, exactly, near a removable singularity at
    ``x0`` (the limit at 0)."""
    formula = sympy.lambdify([symbol], sympy.diff(expr, symbol, k), "mpmath")
    at = mpmath.mpf(point) if point else mpmath.mpf(10) ** -600
    scale = max(0, math.ceil(-mpmath.log10(abs(at - x0))))
    values = []
    for digits in (60 + (k + 3) * scale, 160 + (k + 3) * scale):
        with mpmath.workdps(digits):
            values.append(formula(at))
    assert abs(values[0] - values[1]) <= mpmath.mpf(10) ** -40 * abs(values[1]) + mpmath.mpf(10) ** -700
    return values[1]


def _assert_close(got: float, want: mpmath.mpf, what: str, rel: float = 1e-13) -> None:
    assert math.isfinite(got), f"{what}: {got}"
    if abs(want) < 1e-290:  # the truth is 0 or below float64's normal range: absolute
        assert abs(got - float(want)) <= 1e-300, f"{what}: {got!r}, want {float(want)!r}"
    else:
        assert abs(got - want) <= rel * abs(want), f"{what}: {got!r}, want {mpmath.nstr(want, 17)} ({float(abs(got - want) / abs(want)):.2e})"


def _threshold(text: str, symbol: str, params=(), order: int = ORDER) -> float:
    """eps of the formula's split, in the input (params at ``params``): where abs(S*x) < T, T/|S|."""
    expr = parse_expr(text, (symbol,), tuple(name for name, _ in params))
    (piecewise,) = series.removable(expr, _spec([symbol], params, order)).atoms(sympy.Piecewise)
    condition = piecewise.args[0].cond
    values = {sympy.Symbol(name, real=True): value for name, value in params}
    slope = float(condition.lhs.xreplace({sympy.Symbol(symbol, real=True): 1, **values}))
    return float(condition.rhs) / abs(slope)


def _around(eps: float) -> list[float]:
    """eps and 3 floats either side, on both sides of 0."""
    points = [eps]
    for direction in (math.inf, -math.inf):
        value = eps
        for _ in range(3):
            value = math.nextafter(value, direction)
            points.append(value)
    return points + [-p for p in points]


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_each_example_is_exact_at_and_near_its_point_at_every_order(generated, name):
    examples, _ = generated
    text, truth = EXAMPLES[name]
    points = sorted({sign * p for p in NEAR for sign in (1, -1)} | set(_around(_threshold(text, "x"))))
    function = lambda t: examples.removable(t)[list(EXAMPLES).index(name)]
    got = _derivatives(function, points)
    for k in range(ORDER + 1):
        for point, value in zip(points, got[k]):
            _assert_close(value, _truth(truth, X, k, point), f"{name}: order {k} at x = {point!r}")


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_each_example_is_finite_in_float32(generated, name):
    examples, _ = generated
    text, truth = EXAMPLES[name]
    eps = _threshold(text, "x")
    points = sorted({sign * p for p in (*NEAR, 1e-30, eps, 2.0) for sign in (1, -1)})
    function = lambda t: examples.removable(t)[list(EXAMPLES).index(name)]
    got = _derivatives(function, points, torch.float32)
    for k in range(ORDER + 1):
        for point, value in zip(points, got[k]):
            assert math.isfinite(value), (name, k, point)
            want = _truth(truth, X, k, float(torch.tensor(point, dtype=torch.float32)))
            assert abs(value - want) <= 1e-5 * abs(want) + 1e-6, (name, k, point, value, float(want))


@pytest.mark.parametrize("params", [{"n": 2, "c": 5.0}, {"n": 5, "c": 3.0}, {"n": 1, "c": 10.0}, {"n": 8, "c": 6.0}],
                         ids=["defaults", "n5-c3", "n1-c10", "n8-c6"])
def test_dimenet_basis_is_exact_at_and_near_0_for_any_params(generated, params):
    """The split is in u = pi*n*r/c: its eps and degree hold for every n and c, not only the defaults."""
    _, dimenet = generated
    eps = _threshold("sin(n*pi*r/c)/r", "r", tuple(params.items()))
    points = sorted({p for p in NEAR} | {p for p in _around(eps) if p >= 0})
    got = _derivatives(lambda t: dimenet.dimenet_rbf(t, **params), points)
    expr = DIMENET.xreplace({N: sympy.Rational(params["n"]), C: sympy.Rational(params["c"])})
    for k in range(ORDER + 1):
        for point, value in zip(points, got[k]):
            _assert_close(value, _truth(expr, R, k, point), f"{params}: order {k} at r = {point!r}")
    assert all(math.isfinite(v) for row in _derivatives(lambda t: dimenet.dimenet_rbf(t, **params), points,
                                                        torch.float32) for v in row)


def _excess(got: float, want: mpmath.mpf, slope: mpmath.mpf, x: float) -> float:
    """Bits lost beyond the conditioning |x f'/f| (as the accuracy oracle counts them)."""
    if abs(want) < 1e-290:
        return 0.0
    ulps = float(abs(got - want) / abs(want)) / 2.0**-53
    return max(0.0, math.log2(1 + ulps) - math.log2(max(1.0, float(abs(x * slope / want)))))


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_each_order_is_within_the_bound_from_the_point_to_the_domain_end(generated, name):
    """At 48 log-spaced points of 1e-8 <= |x| <= 3 (both branches), every order loses at most 4
    bits beyond its conditioning; except x/sinh(x), whose direct formula loses up to 6 bits at
    orders 2 and 3 beyond the series' reach (its radius of convergence is pi)."""
    examples, _ = generated
    text, truth = EXAMPLES[name]
    points = [sign * 10 ** (-8 + 8.5 * i / 23) for i in range(24) for sign in (1, -1)]
    got = _derivatives(lambda t: examples.removable(t)[list(EXAMPLES).index(name)], points)
    eps = _threshold(text, "x")
    for k in range(ORDER + 1):
        for point, value in zip(points, got[k]):
            bound = 7.0 if name == "x_over_sinh" and k >= 2 and abs(point) >= eps else 4.0
            excess = _excess(value, _truth(truth, X, k, point), _truth(truth, X, k + 1, point), point)
            assert excess <= bound, f"{name}: order {k} at x = {point!r} loses {excess:.1f} bits"


@pytest.mark.parametrize("strategy", ["save_inputs", "save_outputs", "intermediates", "nested"])
def test_every_strategy_is_nan_free_at_the_point(tmp_path, strategy):
    module = build_spec(tmp_path, name="sinc_x", expr="sin(x)/x", inputs=["x"], order=ORDER,
                        domain={"x": [-3, 3]}, strategy=strategy)
    points = [0.0, -0.0, 1e-300, -1e-8, 0.5]
    got = _derivatives(module.sinc_x, points)
    for k in range(ORDER + 1):
        for point, value in zip(points, got[k]):
            _assert_close(value, _truth(EXAMPLES["sin_over_x"][1], X, k, point), f"{strategy}: order {k} at {point!r}")


def test_the_split_of_a_part_leaves_the_rest_of_the_formula_outside():
    """Only the 0/0 part is expanded: sqrt(2/rc) and the cutoff stay as written, and a removable
    part inside a call (exp(sin(x)/x)) or a sum of singular terms (the spherical j1 over x)."""
    r, rc = sympy.Symbol("r", real=True), sympy.Symbol("rc", real=True)
    text = "sqrt(2 / rc) * sin(3 * pi * r / rc) / r * where(r < rc, 1 - (r / rc)**6, 0)"
    split = series.removable(parse_expr(text, ("r",), ("rc",)), _spec(["r"], [("rc", 5.0)]))
    (piecewise,) = split.atoms(sympy.Piecewise) - {p for p in split.atoms(sympy.Piecewise) if p.has(r < rc)}
    assert piecewise.args[1].expr == sympy.sin(3 * sympy.pi * r / rc) / r
    assert split.has(sympy.sqrt(rc**-1)) and split.has(r < rc)
    assert series.removable(parse_expr("exp(sin(x)/x) + x", ("x",), ()), _spec(["x"])).has(sympy.exp)
    summed = series.removable(parse_expr("sin(x)/x**3 - cos(x)/x**2", ("x",), ()), _spec(["x"]))
    assert isinstance(summed, sympy.Piecewise)


def test_a_point_other_than_0():
    """log(x)/(x - 1) at x = 1: finite and accurate there and near it (its series converges within
    1 of it only, so eps is small)."""
    split = series.removable(parse_expr("log(x)/(x - 1)", ("x",), ()), _spec(["x"]))
    assert isinstance(split, sympy.Piecewise)
    truth = sympy.log(X) / (X - 1)
    for k in range(ORDER + 1):
        derivative = sympy.lambdify([X], sympy.diff(split, X, k), "math")
        for point in (1.0, 1 + 2**-40, 1 - 2**-30, 1.001, 0.999, 1.5):
            want = _truth(truth, X, k, point, 1.0) if point != 1.0 else mpmath.mpf(sympy.diff(
                sympy.series(truth, X, 1, 6).removeO(), X, k).subs(X, 1))
            _assert_close(derivative(point), want, f"order {k} at x = {point!r}", rel=1e-12)


@pytest.mark.parametrize("text, inputs, params", [
    ("x*tanh(softplus(x))", ("x",), ()),
    ("4*e*((s/r)**12 - (s/r)**6)", ("r",), (("e", 1.0), ("s", 1.0))),  # a pole
    ("x*y/(x**2 + y**2)", ("x", "y"), ()),  # no limit at the origin
    ("where(x > 0, exp(-1/x), 0)", ("x",), ()),  # an essential singularity
    ("log(x)", ("x",), ()),
    ("1/x + x", ("x",), ()),
    ("x*log(x)/sin(x)", ("x",), ()),  # not analytic at 0
    ("sqrt(x)/x", ("x",), ()),
    ("sin(w*r) / where(r == 0, 1, r)", ("r",), (("w", 2.0),)),  # already guarded by hand
    ("sin(x*y)/x", ("x", "y"), ()),  # removable, but the part reads two inputs: left alone
])
def test_a_formula_without_a_removable_singularity_is_unchanged(text, inputs, params):
    expr = parse_expr(text, inputs, tuple(name for name, _ in params))
    assert series.removable(expr, _spec(inputs, params)) == expr


def test_a_split_is_left_out_where_it_would_miss_the_domain():
    """sin(x)/x splits at |x| < 2.5 (order 3): on [5, 10] the polynomial would never be taken."""
    expr = parse_expr("sin(x)/x", ("x",), ())
    for domain, split in (((-3.0, 3.0), True), ((1.5, 10.0), True), ((5.0, 10.0), False), ((-10.0, -3.0), False)):
        spec = types.SimpleNamespace(inputs=("x",), params=(), order=ORDER, bounds=lambda name, d=domain: d)
        assert (series.removable(expr, spec) != expr) == split, domain


def test_the_bundled_specs_are_unchanged_but_the_bessel_basis():
    """Only specs/bessel_basis.yaml divides by a denominator that vanishes where the formula's
    limit is finite (sin(n*pi*r/rc)/r at r = 0): its outputs are split, every other formula is
    returned as it is (so builds of them are byte-identical)."""
    for spec in load_specs(discover([Path(__file__).resolve().parents[3] / "specs"])):
        formulas = spec_formulas(spec)
        if spec.name == "bessel_basis":
            formulas = formulas[:1]  # one output is enough, and each costs half a second
        for key, expr in formulas:
            changed = series.removable(expr, spec) != expr
            assert changed == (spec.name == "bessel_basis"), (spec.name, key)


def test_an_analysis_past_its_time_leaves_the_formula_as_written(monkeypatch):
    series._removed.cache_clear()
    monkeypatch.setattr(series, "SECONDS", 1e-3)
    expr = parse_expr("(1 - cos(x))/x**2", ("x",), ())
    start = time.perf_counter()
    try:
        assert series.removable(expr, _spec(["x"], order=2)) == expr
    finally:
        series._removed.cache_clear()
    assert time.perf_counter() - start < 1.0


ENVELOPE = "1 - 28*(r/rc)**6 + 48*(r/rc)**7 - 21*(r/rc)**8"  # DimeNet's and MACE's, p = 6: (1 - r/rc)**3 at rc


@pytest.fixture(scope="module")
def envelope(tmp_path_factory):
    return build_spec(tmp_path_factory.mktemp("envelope"), name="envelope", inputs=["r"], order=ORDER,
                      expr=f"where(r < rc, {ENVELOPE}, 0)", params={"rc": 5.0}, domain={"r": [0, 6]})


@pytest.mark.parametrize("rc", [5.0, 3.2, 12.0])
def test_a_polynomial_envelope_is_exact_near_its_cutoff_at_every_order(envelope, rc):
    """The envelope's terms of size 1 cancel to (1 - r/rc)**3 at the cutoff: as written, its value
    lost 11 bits at r/rc = 0.993 and every order lost more closer in (autograd through the
    composed formula the same). Split at its triple root (series._at_roots): each order within
    16 ulps beyond its conditioning, at rc's default and others (the polynomial about rc is exact
    for every rc)."""
    envelope_in_r = parse_expr(ENVELOPE, ("r",), ("rc",)).xreplace({sympy.Symbol("rc", real=True): sympy.Rational(rc)})
    points = [rc * (1 - 10.0**-k) for k in (1, 2, 3, 5, 7)] + [rc * 0.3]
    got = _derivatives(lambda r: envelope.envelope(r, rc=rc), points)
    for k in range(ORDER + 1):
        for point, value in zip(points, got[k]):
            want, slope = _truth(envelope_in_r, R, k, point), _truth(envelope_in_r, R, k + 1, point)
            kappa = max(1.0, float(abs(point * slope / want)))
            _assert_close(value, want, f"order {k} at r = {point!r}", rel=16 * 2.0**-53 * kappa)


def test_the_composed_envelope_loses_what_the_split_keeps():
    """The check above can fail: autograd through the formula as written is 2**-40 off at 1e-5
    from the cutoff, where the conditioning explains 2**-35 of 2**-53."""
    r = torch.tensor([5.0 * (1 - 1e-5)], dtype=torch.float64)
    value = (1 - 28 * (r / 5) ** 6 + 48 * (r / 5) ** 7 - 21 * (r / 5) ** 8).item()
    want = _truth(parse_expr(ENVELOPE, ("r",), ("rc",)).xreplace({sympy.Symbol("rc", real=True): 5}), R, 0,
                  r.item())
    assert abs(value - want) > 2.0**-30 * abs(want)


@pytest.mark.parametrize("text", [
    "where(x < 1, 1 - (p + 1)*(p + 2)/2*x**p + p*(p + 2)*x**(p + 1) - p*(p + 1)/2*x**(p + 2), 0)",  # x**p
    "where(x < 1, 1 - x, 0)",  # a simple root: its conditioning explains its loss
    "where(x < 2, (cos(pi*x/2) + 1)/2, 0)",  # a function of x: the rewrite half angle instead
    "where(x < 1, x**2 - 1, 0)",  # no root at the boundary
])
def test_other_branches_at_a_boundary_are_left_as_written(text):
    expr = parse_expr(text, ("x",), ("p",))
    spec = types.SimpleNamespace(inputs=("x",), params=(("p", 6.0),), order=ORDER, bounds=lambda name: (0.0, 2.0))
    assert series.removable(expr, spec) == expr
