"""Flat exponentials (codegen/derive/underflow.py): exp(-1/x), exp(-1/x**2), exp(-1/(1 - x)) and the
switches built of them are NaN-free at every order down to the smallest inputs, where their true
derivatives are 0, and exact elsewhere; the docstrings write the user's formula."""

from __future__ import annotations

import mpmath
import pytest
import sympy
import torch
from helpers import build_spec, derivative_chain

from codegen.derive.underflow import CUT_EXPONENT, cut_underflows
from codegen.language.expr import parse_expr

X = sympy.Symbol("x", real=True)
TINY = [1e-300, 1e-200, 1e-160, 1e-110, 1e-100, 1e-50, 1e-20, 1e-14, 1e-12, 1e-6, 1e-3]

SPECS = {  # name: (expr, order, domain, points away from the cut, as mpmath sees the formula)
    "bump": ("where(x != 0, exp(-1/x**2), 0)", 3, [-2, 2], [0.05, 0.3, -0.7, 1.9]),
    "step": ("where(x > 0, exp(-1/x), 0)", 3, [-2, 2], [0.01, 0.3, 1.7]),
    "switch": ("where(x <= 0, 0, where(x >= 1, 1, exp(-1/x)/(exp(-1/x) + exp(-1/(1 - x)))))", 2,
               [-0.5, 1.5], [0.02, 0.3, 0.5, 0.93]),
}
TRUTH = {
    "bump": lambda t: mpmath.exp(-1 / t**2),
    "step": lambda t: mpmath.exp(-1 / t),
    "switch": lambda t: mpmath.exp(-1 / t) / (mpmath.exp(-1 / t) + mpmath.exp(-1 / (1 - t))),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flat")
    return {name: build_spec(folder, name=name, expr=expr, inputs=["x"], order=order, domain={"x": domain})
            for name, (expr, order, domain, _) in SPECS.items()}


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_every_order_is_finite_and_zero_where_the_exponential_underflows(built, name, dtype):
    """At x = 1e-300 ... 1e-3 (and 1 - those, for the switch) the true derivatives are 0 to far
    below the smallest float; exp(-1/x)/x**k there was 0/0 (NaN from x = 1e-160 in float64)."""
    _, order, _, _ = SPECS[name]
    near = [*TINY, *(-t for t in TINY)] + ([1 - t for t in TINY[6:]] if name == "switch" else [])
    x = torch.tensor(near, dtype=dtype, requires_grad=True)
    chain = derivative_chain(getattr(built[name], name), [x], order, seed=0)
    for level in [chain[0], *(g for grads in chain[1:] for g in grads)]:
        assert torch.isfinite(level).all(), (name, dtype, level)
    values = chain[0].detach()
    tiny = torch.tensor([abs(v) < 1e-3 for v in near])
    expected = torch.where(torch.tensor(near) > 1 - 1e-3, 1.0, 0.0).to(dtype)
    torch.testing.assert_close(values[tiny], expected[tiny], rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_order_matches_mpmath_away_from_the_cut(built, name):
    _, order, _, points = SPECS[name]
    fn = getattr(built[name], name)
    for point in points:
        x = torch.tensor([point], dtype=torch.float64, requires_grad=True)
        value, got = fn(x), []
        for _ in range(order):
            (value,) = torch.autograd.grad(value.sum(), x, create_graph=True)
            got.append(value.item())
        with mpmath.workdps(40):
            want = [float(mpmath.diff(TRUTH[name], point, k)) for k in range(1, order + 1)]
        assert got == pytest.approx(want, rel=1e-11, abs=1e-13), (name, point)


def test_the_docstring_writes_the_users_formula(built):
    doc = built["step"].__doc__
    assert "where(x > 0, exp(-1/x), 0)" in doc and "0.0005" not in doc


@pytest.mark.parametrize("text, x_of_b, t, sides", [
    ("exp(-1/x)", lambda b: b, 1 / CUT_EXPONENT, (1,)),  # k odd: flat from the right only
    ("exp(1/x)", lambda b: b, 1 / CUT_EXPONENT, (-1,)),  # and from the left where the sign is the other
    ("exp(-1/x**2)", lambda b: b, CUT_EXPONENT**-0.5, (1, -1)),
    ("exp(-3/(1 - x)) * x", lambda b: 1 - b, 3 / CUT_EXPONENT, (1,)),
    ("exp(-1/sqrt(x))", lambda b: b, CUT_EXPONENT**-2.0, (1,)),
    ("exp(-1/x + 2*x)", lambda b: b, 1 / CUT_EXPONENT, (1,)),  # the rest is finite at the point
])
def test_flat_exponentials_are_cut_where_exp_is_below_minus_the_cut_exponent(text, x_of_b, t, sides):
    """The cut holds half the threshold t from the point (b = t/2, where the exponent is below
    -CUT_EXPONENT), not twice as far, and on the flat side(s) only."""
    expr = parse_expr(text, ("x",), ())
    (piecewise,) = cut_underflows(expr, [X]).atoms(sympy.Piecewise)
    (zero, condition), (kept, _) = piecewise.args
    assert zero == 0 and kept.func == sympy.exp
    for side in (1, -1):
        inside, outside = x_of_b(side * t / 2), x_of_b(side * 2 * t)
        assert bool(condition.subs(X, inside)) == (side in sides), (side, condition)
        assert not condition.subs(X, outside)
        if side in sides:
            assert kept.args[0].subs(X, inside) < -CUT_EXPONENT


@pytest.mark.parametrize("text", ["exp(-a/x)", "exp(-x)", "exp(-1/(x*y))", "exp(-1/x + 1/x**2)",
                                  "exp(-1/(x - y))", "exp(x**2)"])
def test_other_exponentials_are_left_alone(text):
    """A param's sign is the caller's; no singular term; a base of two inputs; a rest that is
    itself singular at the point."""
    expr = parse_expr(text, ("x", "y"), ("a",))
    assert cut_underflows(expr, [X, sympy.Symbol("y", real=True)]) == expr
