"""Generated tests run at the params' defaults and at other values, chosen at build time.

At a default of 1.0 a wrong power of a param (beta**2 for beta) is invisible: the other values
must be none of 0, 1, -1 or the default, keep the function finite on the domain, and be used by
the generated tests (tests/properties/test_generated_tests_catch_bugs.py corrupts a param in a backward).
"""

from __future__ import annotations

import inspect
import math
import subprocess
import sys

import pytest
import torch
from helpers import import_path
from hypothesis import given, settings
from hypothesis import strategies as st
from random_trees import R, evaluate, scaled, text, trees

from codegen.derive.param_values import other_param_values
from codegen.language.expr import parse_expr

DEFAULT = (-2.0, 2.0)


def _other(expr: str, params: dict, domain: dict) -> dict | None:
    inputs = tuple(domain)
    parsed = parse_expr(expr, inputs, tuple(params))
    return other_param_values(parsed, tuple(params.items()), inputs, tuple(domain.items()))


CASES = {
    # a fixed scaling that keeps the sign: softplus's beta stays positive
    "softplus": ("log(1 + exp(beta * x)) / beta", {"beta": 1.0}, {"x": DEFAULT}, {"beta": 1.25}),
    # two params with one default get different values, so that swapping them is seen
    "lennard_jones": ("4 * epsilon * ((sigma / r)**12 - (sigma / r)**6)", {"epsilon": 1.0, "sigma": 1.0},
                      {"r": (0.9, 2.5)}, {"epsilon": 1.25, "sigma": 1.5}),
    # x**7.5 is not real for x < 0: an integer exponent stays an integer
    "integer_power": ("x**p", {"p": 6.0}, {"x": DEFAULT}, {"p": 7.0}),
    # exp(375.625 * 2) overflows a float64: the value shrinks instead
    "overflow": ("exp(beta * x)", {"beta": 300.5}, {"x": DEFAULT}, {"beta": 300.5 / 1.25}),
    # -0.8 * 1.25 = -1 hides a wrong power as 1 does: moved on; 0 -> small and positive
    # 5e-324 * 1.25 rounds back to 5e-324: doubled instead
    "subnormal": ("a * x", {"a": 5e-324}, {"x": DEFAULT}, {"a": 1e-323}),
    "zero_and_minus_one": ("a + b * x", {"b": -0.8, "a": 0.0}, {"x": DEFAULT}, {"b": -2.0, "a": 0.5}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_other_values_keep_the_function_finite(name):
    expr, params, domain, expected = CASES[name]
    assert _other(expr, params, domain) == expected


def test_no_values_when_every_rule_leaves_the_domain_of_the_function():
    """acos(q**2 - 8) is real at q = 3 only (of the values the rules try): defaults only."""
    assert _other("acos(q**2 - 8) + x", {"q": 3.0}, {"x": DEFAULT}) is None


def test_a_singularity_only_at_the_defaults_does_not_block_other_values():
    """sqrt(c - x) on [-2, 2] with c = 2 has an infinite derivative at x = 2 already: the other
    values need be finite only where the defaults are."""
    assert _other("sqrt(c - x)", {"c": 2.0}, {"x": DEFAULT}) == {"c": 2.5}


def test_no_params_no_values():
    assert _other("x**2", {}, {"x": DEFAULT}) is None


@st.composite
def _param_cases(draw):
    """A random tree of x in [-R, R] and a param p, defined for every p between its default and
    1.75 times it (the largest factor of the scaling rule)."""
    default = draw(st.sampled_from([1.5, -0.5, 2.0, 0.25, -2.0, 1.0, 3.0]))
    span = sorted((default, default * 1.75))
    tree = draw(trees({"x": (-R, R), "p": tuple(span)}, draw(st.integers(1, 3))))
    return tree, default


@settings(max_examples=scaled(60))
@given(_param_cases())
def test_other_values_of_random_formulas_are_finite_where_torch_says_so(case):
    """Checked independently: the tree in torch float64 ops with autograd on a dense grid."""
    tree, default = case
    expr = text(tree)
    values = _other(expr, {"p": default}, {"x": (-R, R)})
    assert values is not None, expr
    other = values["p"]
    assert other not in (0.0, 1.0, -1.0, default) and math.copysign(1, other) == math.copysign(1, default)
    x = torch.linspace(-R, R, 257, dtype=torch.float64, requires_grad=True)
    value = evaluate(tree, {"x": x, "p": torch.tensor(other, dtype=torch.float64)}) + 0 * x
    (gradient,) = torch.autograd.grad(value.sum(), x, allow_unused=True, materialize_grads=True)
    assert torch.isfinite(value).all() and torch.isfinite(gradient).all(), (expr, other)


PARAMS_TESTS = ("test_value_matches_composed", "test_gradcheck", "test_gradgradcheck", "test_derivatives_match_composed",
                "test_forward_mode_dual_numbers_match_composed", "test_float32_is_finite_and_close_where_float64_is")


def test_generated_tests_take_both_param_sets(build, tmp_path):
    build(name="swish", expr="x * sigmoid(beta * x)", inputs=["x"], params={"beta": 1.0}, order=2)
    path = tmp_path / "out" / "tests" / "test_swish.py"
    assert 'other_params={"beta": 1.25}' in path.read_text()
    tests = import_path(path)
    assert tests.CASE.param_sets == [{"beta": 1.0}, {"beta": 1.25}]
    for test in PARAMS_TESTS:
        assert "params" in inspect.signature(getattr(tests, test)).parameters, test
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(path)],
                               capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False).stdout
    for test in PARAMS_TESTS:
        assert f"::{test}[default_params" in collected and f"::{test}[other_params" in collected, collected


def test_without_other_values_the_generated_tests_say_so(build, tmp_path):
    build(name="arc", expr="acos(q**2 - 8) + x", inputs=["x"], params={"q": 3.0}, order=1)
    path = tmp_path / "out" / "tests" / "test_arc.py"
    assert "other_params" not in path.read_text()
    assert "tested at the defaults only" in path.read_text()
    assert import_path(path).CASE.param_sets == [{"q": 3.0}]
