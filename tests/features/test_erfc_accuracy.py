"""Accurate, not just consistent. SymPy writes erfc(-u) as 2 - erfc(u) and log1p(c) of a
number as log(1 + c); both cancel in floats, so the parser keeps each as written (expr.py).

The probit log-likelihood log(erfc(-x/sqrt(2))/2) was 2 - erfc(x/sqrt(2)) inside: -inf below
x = -8.3, where it is finite, so its build on [-20, 6] was refused, and on [-8, 6] its second
derivative at -8 was +3.15 where it is -0.986.
"""

from __future__ import annotations

import math

import mpmath
import pytest
import sympy
import torch
from helpers import build_spec

from codegen.derive import domain
from codegen.emit.printer import TorchPrinter
from codegen.language.expr import parse_expr
from codegen.language.formula import formula
from codegen.language.functions import erfc

x = sympy.Symbol("x", real=True)
PROBIT = "log(erfc(-x/sqrt(2))/2)"
# The same function with log1p(-p) where p is near 0: also exact where the probability is near 1.
PROBIT_BOTH_TAILS = "where(x < 0, log(erfc(-x/sqrt(2))/2), log1p(-erfc(x/sqrt(2))/2))"
POINTS = (-20, -8, -6, -1, 0, 3, 6)
# Orders 2 and 3 are sums of terms up to |x|**2 and |x|**5 times their value in the left tail
# (f'' = -f'*(x + f'), with f' near -x), so torch.erfc's 1.5e-14 relative error grows by that
# much: 6e-12 and 5e-7 at x = -20. torch.special.log_ndtr's own derivatives lose as much.
RTOL = {0: 1e-14, 1: 1e-13, 2: 1e-10, 3: 1e-5}


def test_erfc_of_a_negative_argument_is_kept_as_written():
    parsed = parse_expr(PROBIT, ("x",), ())
    assert parsed.atoms(erfc) == {erfc(-sympy.sqrt(2) * x / 2)}
    assert formula(parsed) == "log(erfc(-sqrt(2)*x/2)/2)"
    assert parse_expr("erfc(-x)", ("x",), ()).args == (-x,)
    assert sympy.diff(parse_expr("erfc(-x)", ("x",), ()), x) == 2 * sympy.exp(-x**2) / sympy.sqrt(sympy.pi)


def test_erfc_of_numbers_folds_and_prints_exactly():
    assert float(parse_expr("erfc(-1.5)", ("x",), ())) == pytest.approx(math.erfc(-1.5), rel=1e-15)
    code = TorchPrinter(["x"]).doprint(parse_expr("x * erfc(-3)", ("x",), ()))
    assert "math.erfc(-3)" in code


@pytest.mark.parametrize("text, value", [("log1p(1/10**12)", math.log1p(1e-12)), ("log1p(1e-10)", math.log1p(1e-10))])
def test_log1p_of_a_small_number_is_not_log_of_one_plus_it(text, value):
    """SymPy's log(1000000000001/1000000000000) prints as math.log of a float, 1.0000889e-12."""
    code = TorchPrinter(["x"]).doprint(parse_expr(text, ("x",), ()))
    assert eval(code, {"math": math}) == pytest.approx(value, rel=1e-15, abs=0)


def test_the_domain_check_evaluates_the_left_tail_in_floats_and_exactly():
    parsed = parse_expr(PROBIT, ("x",), ())
    formulas = [f for _, f in domain.with_partials(parsed, [x], 3)]
    assert domain.not_finite(formulas, [x], [(-20.0,), (-8.0,), (6.0,)]) == [[False] * 3] * 4
    in_floats, exactly = domain._evaluators([x], parsed)
    assert in_floats(-20.0) == pytest.approx(float(_probit(-20, 0)), rel=1e-14)
    with mpmath.workdps(30):
        assert float(exactly(mpmath.mpf(-20))) == pytest.approx(float(_probit(-20, 0)), rel=1e-14)


@pytest.fixture(scope="module", params=[PROBIT, PROBIT_BOTH_TAILS], ids=["as_written", "both_tails"])
def probit(request, tmp_path_factory):
    """The probit spec built on [-20, 6] (refused before: not finite below -8.3), imported."""
    module = build_spec(tmp_path_factory.mktemp("probit"), name="probit", expr=request.param, inputs=["x"],
                        order=3, domain={"x": [-20, 6]})
    return request.param, module.probit


@pytest.mark.parametrize("point", POINTS)
def test_the_probit_module_matches_mpmath_to_order_3_in_float64(probit, point):
    """log(p) for p within 1e-9 of 1 (x = 6) is exact only to ulp(1) = 1.1e-16 as written; the
    both-tails form takes log1p there and is exact relatively."""
    text, function = probit
    values = _derivatives(function, torch.tensor(float(point), dtype=torch.float64, requires_grad=True), 3)
    for order, got in enumerate(values):
        want = _probit(point, order)
        atol = 2e-16 if order == 0 and text == PROBIT else 0.0
        assert abs(got - want) <= RTOL[order] * abs(want) + atol, (point, order, got, float(want))


def _derivatives(function, x: torch.Tensor, order: int) -> list[float]:
    value = function(x)
    values = [value]
    for _ in range(order):
        (value,) = torch.autograd.grad(value, x, create_graph=True)
        values.append(value)
    return [v.item() for v in values]


def _probit(point: float, order: int):
    """d^order/dx^order log(Phi(x)) at ``point``, by mpmath at 50 digits."""
    with mpmath.workdps(50):
        return mpmath.diff(_log_ncdf, mpmath.mpf(point), order) if order else _log_ncdf(mpmath.mpf(point))


def _log_ncdf(t):
    return mpmath.log(mpmath.ncdf(t))
