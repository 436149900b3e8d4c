"""Piecewise functions (docs/guide/specs.md): the language, derivatives branch by branch under
every strategy, NaN-free at every order, and the native ops' conventions at ties and boundaries.

The reference is independent of dbgen's guards: each point on its own (a 0-d tensor), the branch
chosen by a Python ``if``, differentiated by autograd, so that the branch not taken is never
evaluated there (``pointwise``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import assert_chains_close, derivative_chain, strategy_matrix

from codegen.language.expr import ExprError, parse_expr
from codegen.limits import Limits

STRATEGIES = ["save_inputs", "save_outputs", "intermediates", "nested", "auto"]
T = torch


def pointwise(fn):
    """``fn`` of 0-d tensors applied to each element of the broadcast inputs (autograd flows back)."""
    def apply(*inputs, **params):
        shape = torch.broadcast_shapes(*(x.shape for x in inputs))
        flat = [x.expand(shape).reshape(-1) for x in inputs]
        values = [fn(*(x[i] for x in flat), **params) for i in range(flat[0].numel())]
        return torch.stack([v if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=inputs[0].dtype)
                            + 0 * flat[0][i] for i, v in enumerate(values)]).reshape(shape)
    return apply


# name -> (spec, pointwise reference on 0-d tensors, points per input)
CASES = {
    # e3nn's soft_unit_step: exp(-1/x) overflows for small negative x; x = 0 exactly too
    "soft_unit_step": ({"expr": "where(x > 0, exp(-1/x), 0)", "inputs": ["x"], "order": 3},
                       lambda x: T.exp(-1 / x) if x > 0 else 0.0 * x,
                       [[-1000.0, -2.0, -1e-3, -0.0, 0.0, 1e-3, 0.5, 2.0, 50.0]]),
    # pytorch/pytorch#52248's reproduction: gradient 1 at a = 100 (and 1000: exp overflows)
    "exp_or_line": ({"expr": "where(a <= 0, exp(a), 1 + a)", "inputs": ["a"], "order": 3},
                    lambda a: T.exp(a) if a <= 0 else 1 + a,
                    [[-3.0, -0.5, 0.0, 0.5, 100.0, 1000.0]]),
    # sqrt of a negative number in the untaken branch: gradient 1 at x < 0
    "sqrt_or_line": ({"expr": "where(x > 0, sqrt(x), x)", "inputs": ["x"], "order": 3, "domain": {"x": [-2, 2]}},
                     lambda x: T.sqrt(x) if x > 0 else x,
                     [[-5.0, -1.0, -1e-6, 0.0, 1e-3, 1.0, 4.0]]),
    # the branch inside another function: its square appears at order 3 (0/0 = NaN until Masked
    # was commutative and SymPy cancelled M**2 / M)
    "soft_step_in_sin": ({"expr": "sin(where(x > 0.5, exp(-1/(x - 0.5)), 0))", "inputs": ["x"], "order": 3},
                         lambda x: T.sin(T.exp(-1 / (x - 0.5))) if x > 0.5 else 0.0 * x,
                         [[-1.0, 0.0, 0.5, 0.6, 1.0, 2.0]]),
    "log_or_zero": ({"expr": "where(x > 0, log(x), 0)", "inputs": ["x"], "order": 3},
                    lambda x: T.log(x) if x > 0 else 0.0 * x,
                    [[-3.0, -1.0, 0.0, 0.25, 1.0, 3.0]]),
    # NequIP/MACE's polynomial envelope times an indicator (p = 6), and a cosine cutoff at rc
    "poly_cutoff": ({"expr": "(1 - 28*x**6 + 48*x**7 - 21*x**8) * (x < 1)", "inputs": ["x"], "order": 3,
                         "domain": {"x": [0, 1.5]}},
                    lambda x: 1 - 28 * x**6 + 48 * x**7 - 21 * x**8 if x < 1 else 0.0 * x,
                    [[0.0, 0.3, 0.99, 1.0, 1.01, 1.4]]),
    "cosine_cutoff": ({"expr": "where(r < rc, (cos(pi*r/rc) + 1)/2, 0)", "inputs": ["r"], "params": {"rc": 1.5},
                           "order": 3, "domain": {"r": [0, 3]}},
                      lambda r, rc=1.5: (T.cos(math.pi * r / rc) + 1) / 2 if r < rc else 0.0 * r,
                      [[0.0, 0.7, 1.5, 2.0, 3.0]]),
    # two inputs, a chained comparison and 'and', a guarded division removable singularity
    "two_inputs": ({"expr": "where(0 < x < 1 and y > 0, log(x)*y, x*y) + sin(w*x)/where(x == 0, 1, x)",
                        "inputs": ["x", "y"], "params": {"w": 1.5}, "order": 3},
                   lambda x, y, w=1.5: ((T.log(x) * y if (0 < x < 1 and y > 0) else x * y)
                                        + (T.sin(w * x) / (1 if x == 0 else x))),
                   [[-1.0, 0.0, 0.5, 0.5, 1.5], [0.5, -1.0, 2.0, -0.5, 1.0]]),
    # a choice on a param alone (beta = 0 takes the other branch, which is then never evaluated)
    "param_choice": ({"expr": "where(beta != 0, log1p(exp(beta*x))/beta, x)", "inputs": ["x"], "params": {"beta": 2.0},
                          "order": 3},
                     lambda x, beta=2.0: T.log1p(T.exp(beta * x)) / beta if beta != 0 else x,
                     [[-2.0, 0.0, 1.5]]),
    "elu": ({"expr": "where(x > 0, x, alpha*(exp(x) - 1))", "inputs": ["x"], "params": {"alpha": 1.0}, "order": 3},
            lambda x, alpha=1.0: x if x > 0 else alpha * (T.exp(x) - 1),
            [[-3.0, -0.5, 0.0, 0.5, 3.0]]),
    "huber": ({"expr": "where(abs(x) <= delta, x**2/2, delta*(abs(x) - delta/2))", "inputs": ["x"],
                   "params": {"delta": 1.0}, "order": 3},
              lambda x, delta=1.0: x**2 / 2 if abs(x) <= delta else delta * (abs(x) - delta / 2),
              [[-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0]]),
}


def _points(values, dtype=torch.float64):
    return [torch.tensor(v, dtype=dtype, requires_grad=True) for v in values]


@pytest.mark.parametrize("name, strategy", strategy_matrix(sorted(CASES), STRATEGIES))
def test_every_order_matches_the_branch_taken_and_is_finite(build, name, strategy):
    spec, reference, points = CASES[name]
    module = build(name=name, strategy=strategy, **spec)
    params = spec.get("params", {})
    inputs = _points(points)
    order = spec["order"] + 1  # past ORDER too: the last level is differentiated by autograd
    actual = derivative_chain(getattr(module, name), inputs, order, seed=3, params=params)
    expected = derivative_chain(pointwise(reference), inputs, order, seed=3, params=params)
    for level in [actual[0], *(g for grads in actual[1:] for g in grads)]:
        assert torch.isfinite(level).all(), f"not finite: {level}"
    assert_chains_close(actual, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["soft_unit_step", "exp_or_line", "sqrt_or_line", "log_or_zero"])
def test_no_nan_from_an_untaken_branch_in_either_float_type(build, name, dtype):
    spec, _reference, points = CASES[name]
    module = build(name=name, strategy="auto", **spec)
    inputs = _points(points, dtype)
    chain = derivative_chain(getattr(module, name), inputs, spec["order"], seed=5)
    for level in [chain[0], *(g for grads in chain[1:] for g in grads)]:
        assert torch.isfinite(level).all(), f"{dtype}: {level}"
    naive = {"soft_unit_step": lambda x: T.where(x > 0, T.exp(-1 / x), 0.0),
             "exp_or_line": lambda a: T.where(a <= 0, T.exp(a), 1 + a),
             "sqrt_or_line": lambda x: T.where(x > 0, T.sqrt(x), x),
             "log_or_zero": lambda x: T.where(x > 0, T.log(x), 0.0)}[name]
    (grad,) = torch.autograd.grad(naive(*inputs).sum(), inputs)
    assert not torch.isfinite(grad).all(), "the control: autograd through torch.where gives NaN here"


# At ties and boundaries the native op's derivative: torch.minimum/maximum split a tie's gradient
# in halves, torch.clamp passes it at either bound, relu's is 0 at 0, abs's is 0 at 0.
NATIVE = {
    "min(x, y)": torch.minimum,
    "max(x, y)": torch.maximum,
    "clamp(x, -1, 1) + 0*y": lambda x, y: torch.clamp(x, -1, 1) + 0 * y,
    "relu(x) + 0*y": lambda x, y: torch.relu(x) + 0 * y,
    "abs(x) + 0*y": lambda x, y: torch.abs(x) + 0 * y,
    "min(x, 0.5) + max(y, -0.5)": lambda x, y: torch.clamp(x, max=0.5) + torch.clamp(y, min=-0.5),
}


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
@pytest.mark.parametrize("expr", sorted(NATIVE))
def test_ties_and_boundaries_follow_the_native_op(build, expr, strategy):
    module = build(name="tie", expr=expr, inputs=["x", "y"], order=2, strategy=strategy)
    x = torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 0.3, 2.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([-2.0, 0.0, -0.5, 0.0, 0.5, 1.0, -0.5, 1.0], dtype=torch.float64, requires_grad=True)
    native = NATIVE[expr]
    if expr.startswith("min(x, 0.5)"):
        native = lambda a, b: torch.minimum(a, torch.full_like(a, 0.5)) + torch.maximum(b, torch.full_like(b, -0.5))
    for seed in (0, 1):
        actual = derivative_chain(module.tie, [x, y], 2, seed=seed)
        expected = derivative_chain(native, [x, y], 2, seed=seed)
        assert_chains_close(actual, expected)


def test_clamp_with_tensor_bounds_follows_torch_but_where_they_meet_below_x(build):
    """clamp(x, lo, hi) with all three inputs: torch.clamp's gradients at every tie (x at a bound,
    lo > hi: hi wins), but for the one documented exception, lo == hi above x, where torch.clamp
    gives no argument a gradient and dbgen gives it to lo (the value moves with lo and hi)."""
    module = build(name="clamped", expr="clamp(x, lo, hi)", inputs=["x", "lo", "hi"], order=2)
    points = [(1.0, 1.0, 1.0), (2.0, 1.0, 1.0), (0.0, 2.0, 1.0), (1.0, 1.0, 2.0), (2.0, 1.0, 2.0),
              (0.5, 1.0, 2.0), (3.0, 1.0, 2.0), (1.5, 2.0, 1.0)]
    for point in [*points, (0.0, 1.0, 1.0)]:
        ours = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in point]
        theirs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in point]
        got = [g.item() for g in torch.autograd.grad(module.clamped(*ours), ours)]
        want = [g.item() for g in torch.autograd.grad(torch.clamp(*theirs), theirs)]
        assert got == (want if point in points else [0.0, 1.0, 0.0]), (point, got, want)
    assert want == [0.0, 0.0, 0.0]  # torch.clamp's own, at the exception


def test_the_language_reads_conditions_and_indicators():
    x, _y = (pytest.importorskip("sympy").Symbol(n, real=True) for n in "xy")
    assert str(parse_expr("x*(x < 1)", ("x",), ())) == "Piecewise((x, x < 1), (0, True))"
    assert str(parse_expr("x > 0", ("x",), ())) == "Piecewise((1, x > 0), (0, True))"
    chained = parse_expr("0 < x < 1", ("x",), ())
    assert chained.args[0].cond.free_symbols == {x}
    same = [parse_expr(text, ("x", "y"), ()) for text in ("where(x > 0 and y > 0, x, y)", "where((x > 0) & (y > 0), x, y)")]
    assert same[0] == same[1]
    assert parse_expr("where(not x > 0, 1, 2)", ("x",), ()) == parse_expr("where(~(x > 0), 1, 2)", ("x",), ())
    assert parse_expr("where(x > 0 or y > 0, x, y)", ("x", "y"), ()) == parse_expr("where((x > 0) | (y > 0), x, y)", ("x", "y"), ())


@pytest.mark.parametrize("text, message", [
    ("where(x > 0, 1)", "where() takes 3 arguments, got 2; write where(cond, a, b)"),
    ("where(x, 1, 2)", "where()'s first argument must be a condition such as x > 0"),
    ("min(x)", "min() takes 2 arguments, got 1; write min(a, b)"),
    ("x if x > 0 else 0", "write where(c, a, b)"),
    ("x & y", "must be a condition"),
    ("not x", "must be a condition"),
    ("x in y", "'in' is not a comparison"),
])
def test_misuse_is_an_error_that_says_what_to_write(text, message):
    with pytest.raises(ExprError) as raised:
        parse_expr(text, ("x", "y"), ())
    assert message in str(raised.value)


def test_a_branch_with_no_finite_point_is_refused_on_the_expr_line(tmp_path):
    from helpers import build_spec

    from codegen.errors import SpecErrors

    with pytest.raises(SpecErrors) as raised:
        build_spec(tmp_path, name="never", expr="where(x > 0, log(-x**2 - 1), x)", inputs=["x"], order=1)
    assert "is not finite" in str(raised.value) and "expr" in str(raised.value)


def test_generated_code_guards_the_branch_and_reads_as_written(tmp_path):
    from helpers import build_spec

    module = build_spec(tmp_path, name="sus", expr="where(x > 0, exp(-1/x), 0)", inputs=["x"], order=2)
    source = (tmp_path / "out" / "sus.py").read_text()
    assert "sus(x) = where(x > 0, exp(-1/x), 0)" in source  # the docstring shows the spec's formula
    # exp(-1/x) is 0 below x = 0.0005 (underflow.py): the branch starts there, and runs on a safe x
    # (the bound itself) where it is not taken; one mask, for the guard and for the choice
    assert "torch.clamp(x, min=0.0005)" in source
    assert "x_ge_bound = x >= 0.0005" in source
    assert "Guard" not in source
    assert module.sus(torch.tensor([-1.0, 1.0])).tolist() == pytest.approx([0.0, math.exp(-1)])


# Inputs far outside a guarded branch: infinite, or where the branch overflows in float32
FAR = {
    "soft_unit_step": [-math.inf, -1e30, -100.0],
    "exp_or_line": [-math.inf, 100.0, 1e30],
    "poly_cutoff": [1e6, 1e30, math.inf],
    "cosine_cutoff": [1e30, math.inf],
    "elu": [-math.inf, 100.0, 1e30],
}


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
@pytest.mark.parametrize("name", sorted(FAR))
def test_every_order_is_finite_far_from_the_branch_taken(build, name, strategy):
    """A guarded branch is evaluated on its safe point (a clamp keeps it at its bound), so neither an
    infinite input nor an overflow where it is not taken reaches a value or a derivative, in float32."""
    spec, _, _ = CASES[name]
    module = build(name=name, strategy=strategy, **spec)
    inputs = _points([FAR[name]], torch.float32)
    chain = derivative_chain(getattr(module, name), inputs, spec["order"] + 1, seed=7)
    for level in [chain[0], *(g for grads in chain[1:] for g in grads)]:
        assert torch.isfinite(level[inputs[0].abs() < math.inf]).all(), level
        assert not torch.isnan(level).any(), level


def _printed(tmp_path, **spec) -> str:
    from helpers import build_spec

    build_spec(tmp_path, name="f", inputs=["x"], order=3, strategy="nested", **spec)
    return (tmp_path / "out" / "f.py").read_text()


def test_a_choice_with_zero_is_a_product_with_its_mask(tmp_path):
    """torch.where costs 8.3 products on a random mask on CPU; the guarded value is finite where it
    is not taken, so ``value * (x > 0)`` is the same choice at a quarter of the cost."""
    source = _printed(tmp_path, expr="where(x > 0, log(x), 0)")
    assert "out = torch.log(safe_x) * x_gt_0" in source
    assert source.count("torch.where(") == source.count("torch.where(x_gt_0, x, 1.0)")  # the guards alone


def test_a_bound_on_the_one_input_guards_by_a_clamp(tmp_path):
    """x <= 0 holds at its bound: the bound is a safe point, and the guard a clamp (0.7 products)."""
    source = _printed(tmp_path, expr="where(x > 0, x, expm1(x))")
    assert "torch.clamp(x, max=0)" in source and "torch.where(x <= 0" not in source
    source = _printed(tmp_path, expr="where(x < c, (cos(pi*x/c) + 1)/2, 0)", params={"c": 5.0})
    assert "torch.clamp(x, max=c)" in source and "torch.where(" not in source


def test_a_branch_finite_wherever_its_inputs_are_is_not_guarded(tmp_path):
    """abs, sign, sin, tanh, ... and polynomials have no point where they or their derivatives are
    infinite: with another nonzero branch beside them, they need no guard (huber's linear part)."""
    source = _printed(tmp_path, expr="where(abs(x) <= d, x**2/2, d*(abs(x) - d/2))", params={"d": 1.0})
    assert "safe_x" not in source and "clamp" not in source


def test_a_choice_among_choices_of_polynomials_is_not_guarded_again():
    """min(max(x, 0), max(y, min(x, y))): each inner choice is finite wherever x and y are, so the
    outer one adds no guard holding its whole condition (guards within guards made 65,452
    operations of the formula's 140, and its build ran past the 60 s limit at order 1)."""
    import sympy

    from codegen.derive.branches import Guard, guard

    class Spec:
        inputs, order, params = ("x", "y"), 1, ()

    parsed = parse_expr("min(max(x, 0), max(y, min(x, y)))", ["x", "y"], [])
    guarded = guard(parsed, Spec())
    assert not guarded.has(Guard) and sympy.count_ops(guarded) == sympy.count_ops(parsed)


def test_mask_keeps_torch_where_for_a_value_that_reads_an_input_unguarded():
    import sympy

    from codegen.derive.branches import Guard, Masked, mask

    x = sympy.Symbol("x", real=True)
    polynomial = sympy.Piecewise((x**8, x < 1), (0, True))  # x**8 overflows where not taken: 0 * inf
    assert mask(polynomial, [x]) == polynomial
    guarded = sympy.Piecewise((sympy.exp(-1 / Guard(x, x > 0, 1.0)), x > 0), (0, True))
    assert mask(guarded, [x]) == Masked(guarded.args[0].expr, x > 0)
    other_guard = sympy.Piecewise((sympy.exp(-1 / Guard(x, x > 1, 2.0)), x > 0), (0, True))
    assert mask(other_guard, [x]) == other_guard  # its guard is safe only where x > 1 fails
    indicator = sympy.Piecewise((3, x > 0), (0, True))
    assert mask(indicator, [x]) == 3 * Masked(1, x > 0)


def test_a_masked_value_cancels_in_products_as_a_number_does():
    """SymPy's derivative of M**2 is M**2 * (2*M'/M): with M a Masked of unknown commutativity the
    product kept M**2 / M, 0/0 where the branch is not taken."""
    import sympy

    from codegen.derive.branches import Masked

    x = sympy.Symbol("x", real=True)
    value = Masked(sympy.exp(-1 / x) / x**2, x > 0)
    square_derivative = (value**2 * sympy.sin(value)).diff(x)
    divided = [p for p in sympy.preorder_traversal(square_derivative)
               if isinstance(p, sympy.Pow) and p.exp.is_negative and isinstance(p.base, Masked)]
    assert not divided


def test_a_safe_point_near_a_param_bound_follows_the_param(build):
    """exp(-1/(rc - r)) is singular at its bound rc, so the safe point is rc - 1, not a number: at
    rc = 1 the number 1.0 (safe at the default rc = 2) would be the singular point itself."""
    module = build(name="bump", expr="where(r < rc, exp(-1/(rc - r)), 0)", inputs=["r"], params={"rc": 2.0},
                   order=3, domain={"r": [0, 3]})
    source = Path(module.__file__).read_text()
    assert "torch.where(r_lt_rc, r, rc - 1)" in source
    r = torch.tensor([0.2, 0.9, 1.0, 1.5, 3.0], dtype=torch.float64, requires_grad=True)
    for rc in (1.0, 2.0, 0.5):
        chain = derivative_chain(module.bump, [r], 4, seed=1, params={"rc": rc})
        expected = derivative_chain(pointwise(lambda r, rc=rc: T.exp(-1 / (rc - r)) if r < rc else 0.0 * r),
                                    [r], 4, seed=1, params={"rc": rc})
        for level in [chain[0], *(g for grads in chain[1:] for g in grads)]:
            assert torch.isfinite(level).all(), (rc, level)
        assert_chains_close(chain, expected, rtol=1e-9, atol=1e-9)


def test_a_bound_that_rounds_to_a_finite_point_is_not_taken_for_a_safe_point(build):
    """1 - (r/rc)**2 at r = rc is 0, but 1 - 0.111...*r**2 at r = 3.0 (rc = 3 substituted first) is
    1e-16 and exp(-1e16) looks finite: the bound is checked exactly, and the guard is not a clamp
    (which gave NaN from r = rc on in a force-matching loop)."""
    module = build(name="bump", expr="where(r < rc, exp(-1/(1 - (r/rc)**2)), 0)", inputs=["r"], params={"rc": 3.0},
                   order=2, domain={"r": [0, 4]})
    assert "torch.clamp" not in Path(module.__file__).read_text()
    for dtype in (torch.float64, torch.float32):
        r = _points([[0.5, 2.9, 3.0, 3.5, 10.0]], dtype)
        chain = derivative_chain(module.bump, r, 3, seed=2)
        for level in [chain[0], *(g for grads in chain[1:] for g in grads)]:
            assert torch.isfinite(level).all(), (dtype, level)


# A choice made by params alone (random specs found each crashing the build): the branch
# taken is an input itself, a constant, or a clamp of a clamp on params; each at a param value on
# either side of its bound.
PARAM_CHOICES = {  # expr -> (reference on 0-d tensors, values of a, points away from ties)
    "clamp(a, 0, x)": (lambda x, a: min(max(a, 0.0) + 0 * x, x), [0.5, -1.0], [[-2.0, -0.5, 0.3, 0.8, 2.0]]),
    "where(a > 0, x, x**2)": (lambda x, a: x if a > 0 else x**2, [0.5, -1.0], [[-2.0, 0.0, 0.7, 3.0]]),
    "clamp(clamp(a, 2, 2), x, 1)": (lambda x, a: 1.0 + 0 * x, [0.5], [[-1.0, 0.5, 1.5, 3.0]]),
    "clamp(-relu(x), -1, min(2, a))": (lambda x, a: min(max(-max(x, 0 * x), -1 + 0 * x), min(2.0, a) + 0 * x),
                                       [0.5, -3.0], [[-2.0, -0.5, 0.5, 2.0]]),
}


@pytest.mark.parametrize("strategy", ["save_inputs", "auto"])
@pytest.mark.parametrize("expr", sorted(PARAM_CHOICES))
def test_a_choice_on_params_alone_takes_its_branch_at_every_order(build, expr, strategy):
    reference, param_values, points = PARAM_CHOICES[expr]
    module = build(name="f", expr=expr, inputs=["x"], params={"a": 0.5}, order=2, strategy=strategy)
    for a in param_values:
        inputs = _points(points)
        actual = derivative_chain(module.f, inputs, 3, seed=4, params={"a": a})
        expected = derivative_chain(pointwise(lambda x, a=a: reference(x, a)), inputs, 3, seed=4, params={"a": a})
        assert_chains_close(actual, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("expr, params, reference", [
    ("min(x, 1e300)", {}, lambda x: x),
    ("clamp(x, -1e300, 1e300) + where(x > 1e39, 0, x)", {}, lambda x: 2 * x),
    ("min(x, c)", {"c": 1e300}, lambda x: x),
    ("max(x, c)", {"c": 70000.0}, lambda x: torch.tensor(70000.0, dtype=torch.float64).expand(x.shape)),
])
def test_constants_beyond_a_dtypes_range_are_cast_not_refused(tmp_path, expr, params, reference):
    """A branch value or bound a float dtype cannot hold (1e300 in float32, 70000 in float16) is
    cast to inf as torch.minimum casts it; as a Python float torch.where raised on it (an internal
    error at build, and every float32 call of min(x, c) at c = 1e300)."""
    from helpers import build_spec

    module = build_spec(tmp_path, name="f", expr=expr, inputs=["x"], order=2, params=params)
    for dtype in (torch.float64, torch.float32, torch.float16):
        x = torch.tensor([0.5, 1.5], dtype=dtype)
        assert torch.equal(module.f(x), reference(x).to(dtype)), (dtype, module.f(x))


@pytest.mark.parametrize("expr, params", [("where(x > 0, 1e300, -1e300) * x", {}), ("where(x > 0, c, -c) * x", {"c": 1e300})])
def test_both_branches_beyond_a_dtypes_range(tmp_path, expr, params):
    """Both branches numbers a float dtype cannot hold: an internal error at build (1e300), and a
    RuntimeError on every float32 call (a param); inf now, as torch.where of inf tensors gives."""
    from helpers import build_spec

    module = build_spec(tmp_path, name="g", expr=expr, inputs=["x"], order=1, params=params)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert torch.equal(module.g(torch.tensor([1.0, -1.0], dtype=dtype)),
                           torch.full((2,), math.inf, dtype=dtype))


# A factor that is 0 where a condition holds, times one that overflows there: the truth is 0, and
# so is autograd's (its where sends 0); a product would be 0 * inf = NaN. Each value is checked in
# float32 at a point where exp overflows and the branch gives 0.
ZERO_TIMES_OVERFLOW = {
    "clamp(x, -1, 1) * exp(y)": (lambda x, y: torch.clamp(x, -1, 1) * torch.exp(y)),  # a mask
    "clamp(max(x, y), -1, 1) * exp(x)": (lambda x, y: torch.clamp(torch.maximum(x, y), -1, 1) * torch.exp(x)),
    "where(x > 0, log1p(x), 0) * cosh(y)": (lambda x, y: torch.where(x > 0, torch.log1p(x.clamp(min=0)), 0)
                                            * torch.cosh(y)),
}


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
@pytest.mark.parametrize("expr", sorted(ZERO_TIMES_OVERFLOW))
def test_a_zero_branch_times_an_overflowing_factor_is_zero_not_nan(build, expr, strategy):
    name = f"zero_times_overflow_{sorted(ZERO_TIMES_OVERFLOW).index(expr)}"
    module = build(name=name, expr=expr, inputs=["x", "y"], order=2, strategy=strategy)
    x = torch.tensor([2.0, -3.0, 0.5, 100.0], dtype=torch.float32, requires_grad=True)
    y = torch.tensor([100.0, 100.0, 1.0, -2.0], dtype=torch.float32, requires_grad=True)
    grad_x, grad_y = torch.autograd.grad(getattr(module, name)(x, y).sum(), (x, y), create_graph=True)
    want_x, want_y = torch.autograd.grad(ZERO_TIMES_OVERFLOW[expr](x, y).sum(), (x, y), create_graph=True)
    for got, want in [(grad_x, want_x), (grad_y, want_y)]:
        finite = torch.isfinite(want)
        assert not torch.isnan(got[finite]).any(), f"{got} where autograd gives {want}"
        torch.testing.assert_close(got[finite], want[finite])
    # the second order too: where autograd's is finite, so is the Function's
    seconds = [torch.autograd.grad(g.sum(), (x, y), retain_graph=True, allow_unused=True, materialize_grads=True)
               for g in (grad_x, grad_y, want_x, want_y)]
    for got, want in zip([*seconds[0], *seconds[1]], [*seconds[2], *seconds[3]]):
        assert not torch.isnan(got[torch.isfinite(want)]).any(), f"{got} where autograd gives {want}"


@pytest.mark.parametrize("expr", ["max(min(x, y), min(y, z)) * x", "max(max(max(x, y), z), min(x, min(y, z)))",
                                  "relu(min(x, y) - max(y, z))**2"])
def test_a_choice_on_choices_builds_at_order_three(build, expr):
    """SymPy joins equal neighbouring branches of a derivative and puts their condition in normal
    form, exponential in its alternations: these took over a minute before the first derivative
    (refused at the time limit). Every order matches autograd through torch.minimum/maximum.

    The four-way choice takes 56-84 s of CPU time, all of it SymPy's in the main thread (measured:
    process and thread CPU time agree): near the default 60 s limit, so it is built here with a
    limit of its own."""
    native = {"max": torch.maximum, "min": torch.minimum, "relu": torch.relu}
    name = "choice_on_choices"
    module = build(name=name, expr=expr, inputs=["x", "y", "z"], order=3, limits=Limits(seconds=300))
    values = [[-1.0, 0.3, 2.0, 0.7, -0.2], [0.5, -0.4, 1.0, 1.5, 0.1], [0.2, 0.9, -1.0, 0.6, -2.0]]
    inputs = _points(values)
    actual = derivative_chain(getattr(module, name), inputs, 3, seed=11)
    reference = eval(f"lambda x, y, z: {expr}", dict(native))
    expected = derivative_chain(reference, inputs, 3, seed=11)
    assert_chains_close(actual, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
def test_a_safe_point_inside_an_abs_bound_follows_the_param(build, strategy):
    """where(abs(x) < w, ...): the safe point is 0, inside the taken side for every w. The nice
    number 1.0 was safe at the default w = 1.5 and is the branch's singularity at w = 1, where the
    first derivative came out NaN for every |x| >= 1 (found by a held-out style probe)."""
    module = build(name="bump", expr="where(abs(x) < w, exp(-w**2 / (w**2 - x**2) + 1), 0)", inputs=["x"],
                   params={"w": 1.5}, order=3, strategy=strategy)
    x = torch.tensor([2.0, -1.0, 1.0, 0.5, 0.99], dtype=torch.float64, requires_grad=True)
    for w in (1.5, 1.0, 0.7):
        chain = derivative_chain(module.bump, [x], 4, seed=13, params={"w": w})
        for level in [chain[0], *(g for grads in chain[1:] for g in grads)]:
            assert torch.isfinite(level).all(), f"w = {w}: {level}"
        expected = derivative_chain(pointwise(lambda x, w: T.exp(-w**2 / (w**2 - x**2) + 1) if abs(x) < w else 0.0 * x),
                                    [x], 4, seed=13, params={"w": w})
        assert_chains_close(chain, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
def test_a_power_by_an_input_is_exact_where_the_exponent_is_zero(build, strategy):
    """torch's pow backward masks the base's gradient where the exponent is 0, and autograd's
    derivative of it loses the exponent's part there: (abs(x) + 1)**y's d2/dxdy at y = 0 was
    1/(abs(x) + 1) short under save_inputs (a held-out style probe). Checked against the same
    power written through exp and log, whose derivatives autograd takes exactly."""
    module = build(name="power_by_input", expr="(abs(x) + 1)**y + relu(y)", inputs=["x", "y"], order=3,
                   strategy=strategy)
    x = torch.tensor([1.09, -0.7, 2.5], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64, requires_grad=True)
    actual = derivative_chain(module.power_by_input, [x, y], 3, seed=17)
    expected = derivative_chain(lambda x, y: T.exp(y * T.log(T.abs(x) + 1)) + T.relu(y), [x, y], 3, seed=17)
    assert_chains_close(actual, expected, rtol=1e-12, atol=1e-12)
