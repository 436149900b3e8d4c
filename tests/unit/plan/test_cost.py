"""The cost model behind auto, and the power ladders that keep torch.pow's slow path out of the code."""

from __future__ import annotations

import dataclasses
import re

import pytest
import sympy

from codegen.derive import symbolic
from codegen.language.expr import parse_expr
from codegen.plan import cost, make_plan
from codegen.spec import Spec

x, y, a = sympy.symbols("x y a", real=True)


def _spec(expr: str, inputs=("x",), params=(), strategy="auto", order=2) -> Spec:
    return Spec(path="f.yaml", name="f", expr=expr, inputs=tuple(inputs), order=order, params=tuple(params),
                strategy=strategy)


def _plan(expr: str, **kwargs):
    spec = _spec(expr, **kwargs)
    return make_plan(spec, parse_expr(spec.expr, spec.inputs, spec.param_names))


def test_general_powers_cost_more_than_squares_and_products():
    assert cost.block_cost([x**6], set())[0] > 5 * cost.block_cost([x**2], set())[0]
    assert cost.block_cost([x * y], set())[0] == cost.TENSOR_OP


def test_ops_on_params_alone_are_free_and_repeated_subexpressions_count_once():
    assert cost.block_cost([a**12 * sympy.exp(a)], {a}) == (0.0, 0.0)
    once = cost.block_cost([sympy.exp(x)], set())[0]
    assert cost.block_cost([sympy.exp(x), sympy.exp(x) + 1], set())[0] == once + cost.SCALAR_OP


def test_auto_saves_the_output_when_the_derivative_is_the_output():
    assert _plan("exp(2*x)").strategy == "save_outputs"


def test_auto_keeps_the_simpler_strategy_when_the_estimates_are_close():
    """gaussian_rbf: recomputing exp costs about what a second backward through the output does
    (measured W3: save_inputs 1.07, save_outputs 1.33 x composed)."""
    plan = _plan("exp(-a*(x - y)**2)", inputs=("x", "y"), params=(("a", 0.5),))
    assert plan.strategy == "save_inputs"


def test_auto_saves_inputs_when_the_output_would_cost_a_second_backward():
    plan = _plan("x*sigmoid(x)")  # d/dx = s + x*s*(1 - s): the output does not replace s
    assert plan.strategy == "save_inputs"
    assert "save_inputs" in plan.reason and "save_outputs" in plan.reason


def test_a_strategy_named_in_the_spec_is_kept():
    assert _plan("exp(x)", strategy="nested").strategy == "nested"


def test_power_ladders_share_products():
    steps = symbolic.power_ladders([x**-13 * y + x**-7 + x**-12], set())
    built = {power: step for power, _, step in steps}
    assert set(built) == {x**-1, x**-3, x**-6, x**-12, x**-13, x**-7}
    assert all(not (isinstance(s, sympy.Pow) and abs(s.exp) > 3) for s in built.values())


def test_powers_of_params_and_small_powers_are_left_alone():
    assert symbolic.power_ladders([a**12 * x + x**3 + x**-2], {a}) == []


def test_generated_code_raises_tensors_only_to_fast_powers():
    plan = _plan("4*((1/x)**12 - (1/x)**6)", order=3)
    from codegen.emit.render import render_module

    code = render_module(plan, "0" * 64)
    statements = [line for line in code.splitlines() if re.match(r"\s+\w+ = ", line)]  # not docstrings
    exponents = {int(e) for line in statements for e in re.findall(r"\*\*\(?(-?\d+)\)?", line)}
    assert exponents <= {2, 3}, code


def _fused_plan(expr: str, **kwargs):
    spec = dataclasses.replace(_spec(expr, **kwargs), fuse=True)
    return make_plan(spec, parse_expr(spec.expr, spec.inputs, spec.param_names))


def test_fused_auto_nests_when_every_level_can_be_one_kernel():
    """mish fused (measured W3, 2**20 float32: nested 0.44, save_inputs 1.12 x composed)."""
    plan = _fused_plan("x*tanh(softplus(x))", order=3)
    assert plan.strategy == "nested" and plan.reason.startswith("auto, fused:")
    assert "nested" in plan.reason


def test_fused_auto_keeps_a_cheap_eager_backward():
    """log_cosh fused (measured W3: save_inputs 0.37, nested 0.46 x composed): its single-level
    backward is one tanh, while nested's levels each pay SLEEF's dear tanh and softplus."""
    assert _fused_plan("log(cosh(x))", order=4).strategy == "save_inputs"


def test_fused_first_order_specs_have_no_nested_candidate():
    plan = _fused_plan("x*tanh(softplus(x))", order=1)
    assert "nested" not in plan.reason


def test_a_fused_kernel_costs_its_traffic_and_its_functions():
    from codegen.plan import Block, Result

    block = Block(temporaries=(("t", sympy.tanh(x)),), results=(Result("out", sympy.Symbol("t", real=True) * y),))
    expected = 3 * cost.PASS + cost.FUSED_FUNCTION_WEIGHTS["tanh"]  # reads x and y, writes out
    assert cost.fused_kernel_cost(block, frozenset()) == pytest.approx(expected)


def test_eager_auto_nests_where_levels_with_values_beat_a_traced_backward():
    """mish, eager (measured W3: nested 0.94, save_inputs 1.01 x composed): the values passed down
    and the folded sums beat autograd through a backward."""
    plan = _plan("x*tanh(softplus(x))", order=3)
    assert plan.strategy == "nested" and "nested" in plan.reason


def test_eager_auto_estimates_gelus_sigmoid_form_cheaper_in_one_level():
    """gelu_tanh written x*sigmoid(2*u) (the rewrite tanh_complement; measured W3, 2**18 float32:
    save_inputs 0.77, nested 0.86 x composed): the estimate ranks save_inputs first, as measured.
    A build takes nested all the same, for accuracy (test_accuracy's GELU test)."""
    plan = _plan("0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x**3)))", order=3)
    assert plan.strategy == "save_inputs"


def test_eager_auto_keeps_one_level_where_nested_pays_for_its_calls():
    """sinh and x**3 (measured W3: nested 1.42 and 1.26, save_inputs 1.05 and 0.89 x composed)."""
    assert _plan("sinh(x)").strategy == "save_inputs"
    assert _plan("x**3", order=3).strategy == "save_inputs"
    assert "nested" not in _plan("sinh(x)", order=1).reason  # one level: nothing to nest


def test_folded_sums_cost_less_by_the_products_they_absorb():
    plain, _ = cost.block_cost([x + 3 * a * y * x], {a})
    folded, _ = cost.block_cost([x + 3 * a * y * x], {a}, folded=True)
    assert plain - folded == pytest.approx(cost.TENSOR_OP + cost.SCALAR_OP)
    assert cost.block_cost([x + y], set(), folded=True) == cost.block_cost([x + y], set())


def _guarded_plan(expr: str, **kwargs):
    from codegen.build.pipeline import plan_spec

    return plan_spec(_spec(expr, **kwargs))


def test_branches_cost_what_torch_where_costs_on_a_random_mask():
    """torch.where's CPU kernel branches per element (8.3 products); a product with the mask, a
    clamp and a comparison cost a fraction of it (tools/op_weights.py)."""
    from codegen.derive.branches import ClampBelow, Guard, Masked

    choice = sympy.Piecewise((sympy.exp(x), x > 0), (y, True))
    assert cost.block_cost([choice], set())[0] == pytest.approx(cost.WHERE + cost.COMPARE + 0.8)
    masked = Masked(sympy.exp(Guard(x, x > 0, 1.0)), x > 0)
    clamp = ClampBelow(x, x <= 0, sympy.S.Zero)
    assert cost._node_cost(masked, set())[0] == cost.MASK_PRODUCT < cost.WHERE / 3
    assert cost._node_cost(clamp, set())[0] == cost.SCALAR_OP
    mask = sympy.Symbol("x_le_0", real=True)  # CSE made the condition a mask temporary: still a clamp
    assert cost._node_cost(ClampBelow(x, mask, sympy.S.Zero), set())[0] == cost.SCALAR_OP
    assert cost._node_cost(Guard(x, x > 0, 1.0), set())[0] == cost.WHERE
    assert cost._node_cost(sympy.Piecewise((x, a > 0), (y, True)), {a}) == (0.0, 0.0)  # chosen in Python


def test_auto_nests_a_guarded_piecewise_function():
    """elu, huber (measured W3: nested 0.83, 0.69; save_inputs 1.15, 0.95 x the torch.where
    composition): a single-level backward recomputes the guard's where and autograd adds a where
    per branch; nested levels multiply by masks. (soft_unit_step, since its underflow cut, is
    ranked save_inputs though measured 2.2 x nested: its spec sets nested; docs/performance.md.)"""
    assert _guarded_plan("where(x > 0, sqrt(x)*exp(-x), 0)", order=3).strategy == "nested"
    assert _guarded_plan("where(x > 0, x, a*expm1(x))", params=(("a", 1.0),), order=3).strategy == "nested"
