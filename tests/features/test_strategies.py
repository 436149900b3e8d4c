"""Every strategy's derivatives of every order against autograd through the composed expression.

The specs here are unlike the examples: several inputs that broadcast, params, domains, derivatives
that vanish, constant outputs, orders up to 5. Each reference is written independently in torch ops.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import assert_chains_close, derivative_chain, sample, strategy_matrix

T = torch
STRATEGIES = ["auto", "save_inputs", "save_outputs", "intermediates", "nested"]
SHAPES = [(3, 4), (4,), (3, 1), (), (1, 4)]

CASES = {
    "two_inputs_mixed": {
        "expr": "x*y + sin(x)*exp(-y**2)", "inputs": ["x", "y"], "order": 3,
        "ref": lambda x, y: x * y + T.sin(x) * T.exp(-y**2)},
    "params_and_log1p": {
        "expr": "a*log1p(x**2) + b*cos(z*x)", "inputs": ["x", "z"], "params": {"a": 1.5, "b": -0.5}, "order": 3,
        "ref": lambda x, z, a, b: a * T.log1p(x**2) + b * T.cos(z * x)},
    "vanishing_derivatives": {
        "expr": "x**2 + y", "inputs": ["x", "y"], "order": 4, "ref": lambda x, y: x**2 + y},
    "unused_input": {
        "expr": "3*x", "inputs": ["x", "y"], "order": 2, "ref": lambda x, y: 3 * x + 0 * y},
    "tanh_order5": {"expr": "tanh(x)", "inputs": ["x"], "order": 5, "ref": T.tanh},
    "powers_domain": {
        "expr": "sqrt(x) + 1/x + x**(-3/2)", "inputs": ["x"], "order": 4, "domain": {"x": [0.5, 3]},
        "ref": lambda x: T.sqrt(x) + 1 / x + x ** (-1.5)},
    "atan2_erf_abs": {
        "expr": "atan2(y, x) * erf(x) + abs(y)", "inputs": ["x", "y"], "order": 3, "domain": {"x": [0.5, 2]},
        "ref": lambda x, y: T.atan2(y, x) * T.erf(x) + T.abs(y)},
    "three_input_sigmoid": {
        "expr": "sigmoid(w*x + c)", "inputs": ["x", "w", "c"], "order": 3, "ref": lambda x, w, c: T.sigmoid(w * x + c)},
    "polynomial_order5": {
        "expr": "k*x**3 - 2", "inputs": ["x"], "params": {"k": 2.0}, "order": 5, "ref": lambda x, k: k * x**3 - 2},
    "hyperbolic_two_inputs": {
        "expr": "exp(x)*cosh(y) + sinh(x*y)", "inputs": ["x", "y"], "order": 3,
        "ref": lambda x, y: T.exp(x) * T.cosh(y) + T.sinh(x * y)},
    "constant": {"expr": "2.5", "inputs": ["x"], "order": 2, "ref": lambda x: 2.5 + 0 * x},
    "inverse_functions": {
        "expr": "asinh(x) + acosh(y) + atanh(z/3) + asin(z/3) + acos(z/4) + atan(x)", "inputs": ["x", "y", "z"],
        "order": 2, "domain": {"y": [1.5, 3]},
        "ref": lambda x, y, z: T.asinh(x) + T.acosh(y) + T.atanh(z / 3) + T.asin(z / 3) + T.acos(z / 4) + T.atan(x)},
    "softplus_expm1_erfc_tan": {
        "expr": "softplus(x)*expm1(y/2) + erfc(x) + tan(y/3) + log(beta*x**2+1)", "inputs": ["x", "y"],
        "params": {"beta": 2.0}, "order": 3,
        "ref": lambda x, y, beta: T.log1p(T.exp(x)) * T.expm1(y / 2) + T.erfc(x) + T.tan(y / 3) + T.log(beta * x**2 + 1)},
    "param_only_subexpressions": {
        "expr": "exp(sqrt(beta)) * x + pi*E + sigmoid(beta)*x**2", "inputs": ["x"], "params": {"beta": 2.0}, "order": 2,
        "ref": lambda x, beta: math.exp(math.sqrt(beta)) * x + math.pi * math.e + x**2 / (1 + math.exp(-beta))},
    "three_inputs_order4": {
        "expr": "x*y*z + exp(x*y) + sin(z)*tanh(x)", "inputs": ["x", "y", "z"], "order": 4,
        "ref": lambda x, y, z: x * y * z + T.exp(x * y) + T.sin(z) * T.tanh(x)},
    "integer_powers": {
        "expr": "x**7 - 2*x**-5*y**4 + (1 + x**2)**-6 + y**-2", "inputs": ["x", "y"], "order": 3,
        "domain": {"x": [0.5, 2], "y": [0.5, 2]},
        "ref": lambda x, y: x**7 - 2 * x**-5 * y**4 + (1 + x**2) ** -6 + y**-2},
    "shared_exp_output": {
        "expr": "x*exp(x)", "inputs": ["x"], "order": 4, "ref": lambda x: x * T.exp(x)},
    "output_is_input": {"expr": "y", "inputs": ["x", "y"], "order": 3, "ref": lambda x, y: y + 0 * x},
}


def _inputs(case, seed=0, dtype=torch.float64):
    names = case["inputs"]
    domain = case.get("domain", {})
    shapes = SHAPES if len(names) > 1 else [(3, 4)]
    return [sample(shapes[i % len(shapes)], *domain.get(n, [-2, 2]), seed=seed + i, dtype=dtype)
            for i, n in enumerate(names)]


def _spec(name, case, strategy):
    spec = {k: v for k, v in case.items() if k != "ref"}
    return dict(spec, name=name, strategy=strategy)


@pytest.mark.parametrize("name, strategy", strategy_matrix(sorted(CASES), STRATEGIES))
def test_every_order_matches_composed_expression(build, name, strategy):
    case = CASES[name]
    module = build(**_spec(name, case, strategy))
    params = case.get("params", {})
    inputs = _inputs(case)
    actual = derivative_chain(getattr(module, name), inputs, case["order"], seed=7, params=params)
    expected = derivative_chain(lambda *xs, **p: case["ref"](*xs, *p.values()), inputs, case["order"], 7, params)
    assert_chains_close(actual, expected)
    assert module.ORDER == case["order"]
    assert module.STRATEGY == (strategy if strategy != "auto" else module.STRATEGY)
    assert module.STRATEGY in STRATEGIES[1:]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gradients_keep_each_inputs_shape_dtype_and_device(build, strategy):
    module = build(**_spec("two_inputs_mixed", CASES["two_inputs_mixed"], strategy))
    x = sample((3, 1), -1, 1, seed=1, dtype=torch.float32)
    y = sample((), -1, 1, seed=2, dtype=torch.float32)
    out = module.two_inputs_mixed(x, y)
    assert out.shape == (3, 1) and out.dtype == torch.float32
    gx, gy = torch.autograd.grad(out.sum(), (x, y), create_graph=True)
    assert (gx.shape, gx.dtype, gy.shape, gy.dtype) == ((3, 1), torch.float32, (), torch.float32)
    hx, hy = torch.autograd.grad((gx.sum() + gy), (x, y))
    assert (hx.shape, hy.shape) == ((3, 1), ())


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_zero_derivative_is_a_tensor_of_the_inputs_shape(build, strategy):
    module = build(**_spec("unused_input", CASES["unused_input"], strategy))
    x, y = sample((2, 3), -1, 1, seed=3), sample((3,), -1, 1, seed=4)
    out = module.unused_input(x, y)
    gx, gy = torch.autograd.grad(out.sum(), (x, y), create_graph=True, allow_unused=True)
    assert isinstance(gy, torch.Tensor) and gy.shape == (3,) and not gy.any()
    assert gx.shape == (2, 3) and torch.equal(gx, torch.full_like(x, 3.0))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_params_are_keyword_only_with_spec_defaults(build, strategy):
    case = CASES["params_and_log1p"]
    module = build(**_spec("params_and_log1p", case, strategy))
    x, z = _inputs(case)
    with pytest.raises(TypeError):
        module.params_and_log1p(x, z, 1.5)
    default = module.params_and_log1p(x, z)
    torch.testing.assert_close(default, case["ref"](x, z, 1.5, -0.5))
    changed = module.params_and_log1p(x, z, a=-1.0, b=2.0)
    torch.testing.assert_close(changed, case["ref"](x, z, -1.0, 2.0))
    (g_changed,) = torch.autograd.grad(changed.sum(), x)
    (g_ref,) = torch.autograd.grad(case["ref"](x, z, -1.0, 2.0).sum(), x)
    torch.testing.assert_close(g_changed, g_ref)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_orders_beyond_order_stay_correct(build, strategy):
    """The last level is written in differentiable torch ops, so order+1 and order+2 are right too."""
    case = dict(CASES["shared_exp_output"], order=1)
    module = build(**_spec("shared_exp_output", case, strategy))
    inputs = _inputs(case)
    actual = derivative_chain(module.shared_exp_output, inputs, 3, seed=5)
    expected = derivative_chain(case["ref"], inputs, 3, seed=5)
    assert_chains_close(actual, expected)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gradgradcheck_with_broadcasting(build, strategy):
    case = CASES["three_input_sigmoid"]
    module = build(**_spec("three_input_sigmoid", case, strategy))
    inputs = _inputs(case, seed=11)
    assert torch.autograd.gradcheck(module.three_input_sigmoid, inputs)
    assert torch.autograd.gradgradcheck(module.three_input_sigmoid, inputs)


# Names that the generated code uses itself (locals, classes, temporaries, cotangents): a spec may
# still use them for inputs and params, and the generated code must rename its own.
TRICKY_NAMES = ["output", "inputs", "function", "level", "A", "AForCompile", "grad_out", "out", "t0", "tangent_x",
                "exp_x", "grad2_x"]


@pytest.mark.parametrize("tricky, strategy", strategy_matrix(TRICKY_NAMES, STRATEGIES))
def test_inputs_may_use_the_generated_codes_own_names(build, strategy, tricky):
    module = build(name="a", expr=f"x*tanh(softplus({tricky})) + exp(x)*k", inputs=["x", tricky],
                   params={"k": 0.5}, order=2, strategy=strategy)
    inputs = [sample((3, 4), -1, 1, seed=1), sample((4,), -1, 1, seed=2)]
    def ref(x, other, k):
        return x * T.tanh(T.nn.functional.softplus(other)) + T.exp(x) * k
    actual = derivative_chain(module.a, inputs, 2, seed=3, params={"k": 0.5})
    expected = derivative_chain(ref, inputs, 2, seed=3, params={"k": 0.5})
    assert_chains_close(actual, expected)
