"""Generated Functions under torch.func transforms, forward-mode AD and torch.compile.

Every strategy, on a spec with two broadcasting inputs and a param: each transform of the generated
function must equal the same transform of the composed expression in float64.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.func as tf
from helpers import budget, sample

T = torch
STRATEGIES = ["save_inputs", "save_outputs", "intermediates", "nested"]
SPEC = {"name": "blend", "expr": "a*x*y + sin(x)*exp(-y**2) + tanh(x*y)", "inputs": ["x", "y"], "params": {"a": 1.5}, "order": 2}


def composed(x, y, a=1.5):
    return a * x * y + T.sin(x) * T.exp(-(y**2)) + T.tanh(x * y)


@pytest.fixture(params=STRATEGIES + ["auto"])
def generated(request, build):
    module = build(**dict(SPEC, strategy=request.param))
    return functools.partial(module.blend, a=1.5)


@pytest.fixture
def point():
    x, y = sample((3, 4), -1, 1, seed=0).detach(), sample((4,), -1, 1, seed=1).detach()
    tx, ty = torch.randn_like(x), torch.randn_like(y)
    return x, y, tx, ty


def _sum_of(f):
    return lambda x, y: f(x, y).sum()


TRANSFORMS = {
    "vmap": lambda f, x, y, tx, ty: tf.vmap(f)(x, y.expand(3, 4)),
    "vmap_broadcast_in_dims": lambda f, x, y, tx, ty: tf.vmap(f, in_dims=(0, None))(x, y),
    "grad": lambda f, x, y, tx, ty: tf.grad(_sum_of(f), argnums=(0, 1))(x, y),
    "jacrev": lambda f, x, y, tx, ty: tf.jacrev(f, argnums=(0, 1))(x, y),
    "jacfwd": lambda f, x, y, tx, ty: tf.jacfwd(f, argnums=(0, 1))(x, y),
    "hessian": lambda f, x, y, tx, ty: tf.hessian(_sum_of(f), argnums=(0, 1))(x, y),
    "jvp": lambda f, x, y, tx, ty: tf.jvp(f, (x, y), (tx, ty)),
    "grad_of_grad": lambda f, x, y, tx, ty: tf.grad(
        lambda x, y: (tf.grad(_sum_of(f), argnums=(0, 1))(x, y)[0] * tx).sum(), argnums=(0, 1))(x, y),
    "jacfwd_of_jacrev": lambda f, x, y, tx, ty: tf.jacfwd(tf.jacrev(lambda x: f(x, y).sum()))(x),
    "vmap_of_grad": lambda f, x, y, tx, ty: tf.vmap(tf.grad(lambda x, y: f(x, y).sum(), argnums=(0, 1)))(x, y.expand(3, 4)),
}


@pytest.mark.parametrize("transform", budget(sorted(TRANSFORMS)))
def test_transform_matches_composed_expression(generated, point, transform):
    x, y, tx, ty = point
    actual = TRANSFORMS[transform](generated, x, y, tx, ty)
    expected = TRANSFORMS[transform](composed, x, y, tx, ty)
    torch.testing.assert_close(actual, expected, rtol=1e-7, atol=1e-10)


def test_forward_mode_dual_numbers(generated, point):
    x, y, tx, ty = point
    results = []
    for f in (generated, composed):
        with fwAD.dual_level():
            out = f(fwAD.make_dual(x, tx), fwAD.make_dual(y, ty))
            primal, tangent = fwAD.unpack_dual(out)
            results.append((primal.clone(), tangent.clone()))
    torch.testing.assert_close(results[0], results[1], rtol=1e-7, atol=1e-10)


def test_forward_over_reverse_with_autograd_create_graph(generated, point):
    """A Hessian-vector product the autograd way: forward-mode through the double backward graph."""
    x, y, tx, _ = point
    results = []
    for f in (generated, composed):
        with fwAD.dual_level():
            dual_x = fwAD.make_dual(x, tx)
            out = tf.grad(lambda x, f=f: f(x, y).sum())(dual_x)
            results.append(fwAD.unpack_dual(out).tangent.clone())
    torch.testing.assert_close(results[0], results[1], rtol=1e-7, atol=1e-10)


@pytest.mark.compile
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_compile_fullgraph_forward_and_first_order_backward(build, strategy):
    module = build(**dict(SPEC, strategy=strategy))
    torch._dynamo.reset()
    compiled = torch.compile(functools.partial(module.blend, a=1.5), fullgraph=True, backend="aot_eager")
    x, y = sample((3, 4), -1, 1, seed=0), sample((4,), -1, 1, seed=1)
    out = compiled(x, y)
    grads = torch.autograd.grad(out.sum(), (x, y))
    expected = composed(x, y)
    torch.testing.assert_close(out, expected, rtol=1e-7, atol=1e-10)
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), (x, y)), rtol=1e-7, atol=1e-10)


@pytest.mark.compile
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_compile_fullgraph_training_step(build, strategy):
    """A step whose loss goes through the generated function: compiled whole, then backpropagated."""
    module = build(**dict(SPEC, strategy=strategy))
    torch._dynamo.reset()
    weight = torch.nn.Parameter(torch.tensor([0.3, -0.2, 0.1, 0.5], dtype=torch.float64))
    x = sample((3, 4), -1, 1, seed=2).detach()

    def loss_fn(f):
        return (f(x, weight) - 0.5).square().mean()

    step = torch.compile(lambda: loss_fn(functools.partial(module.blend, a=1.5)), fullgraph=True, backend="aot_eager")
    loss = step()
    loss.backward()
    compiled_grad, weight.grad = weight.grad.clone(), None
    loss_fn(composed).backward()
    torch.testing.assert_close(compiled_grad, weight.grad, rtol=1e-7, atol=1e-10)


@pytest.mark.compile
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_compile_fullgraph_step_with_the_gradient_inside(build, strategy):
    """loss, gradient and SGD update in one graph (Dynamo traces autograd.grad when asked to)."""
    module = build(**dict(SPEC, strategy=strategy))
    torch._dynamo.reset()
    x = sample((3, 4), -1, 1, seed=5).detach()

    def step(f, weight):
        loss = (f(x, weight) - 0.5).square().mean()
        (grad,) = torch.autograd.grad(loss, weight)
        return loss.detach(), weight.detach() - 0.1 * grad

    generated = functools.partial(module.blend, a=1.5)
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled = torch.compile(lambda w: step(generated, w), fullgraph=True, backend="aot_eager")
        loss, updated = compiled(torch.tensor([0.3, -0.2, 0.1, 0.5], dtype=torch.float64, requires_grad=True))
    expected = step(composed, torch.tensor([0.3, -0.2, 0.1, 0.5], dtype=torch.float64, requires_grad=True))
    torch.testing.assert_close((loss, updated), expected, rtol=1e-7, atol=1e-10)


@pytest.mark.compile
def test_double_backward_through_a_compiled_graph_is_pytorchs_documented_refusal(build):
    """PyTorch refuses double backward through an aot_autograd graph; never a silent wrong answer."""
    module = build(**dict(SPEC, strategy="nested"))
    torch._dynamo.reset()
    compiled = torch.compile(functools.partial(module.blend, a=1.5), fullgraph=True, backend="aot_eager")
    x, y = sample((3, 4), -1, 1, seed=0), sample((4,), -1, 1, seed=1)
    (gx,) = torch.autograd.grad(compiled(x, y).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="does not currently support double backward"):
        torch.autograd.grad(gx.sum(), x)


@pytest.mark.compile
@pytest.mark.parametrize("strategy", ["intermediates", "nested"])
def test_compile_fullgraph_with_inductor(build, strategy):
    """The default backend generates and compiles a kernel (C++ on the CPU): same numbers as eager."""
    module = build(**dict(SPEC, strategy=strategy))
    torch._dynamo.reset()
    compiled = torch.compile(functools.partial(module.blend, a=1.5), fullgraph=True, backend="inductor")
    x, y = sample((3, 4), -1, 1, seed=3), sample((4,), -1, 1, seed=4)
    out = compiled(x, y)
    grads = torch.autograd.grad(out.sum(), (x, y))
    expected = composed(x, y)
    torch.testing.assert_close(out, expected, rtol=1e-7, atol=1e-10)
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), (x, y)), rtol=1e-7, atol=1e-10)


def test_forward_mode_with_only_some_inputs_dual(generated, point):
    """An input without a tangent is a zero tangent, whatever the strategy keeps."""
    x, y, tx, _ = point
    results = []
    for f in (generated, composed):
        with fwAD.dual_level():
            out = f(fwAD.make_dual(x, tx), y)
            results.append(fwAD.unpack_dual(out).tangent.clone())
    torch.testing.assert_close(results[0], results[1], rtol=1e-7, atol=1e-10)


# Found by a randomized sweep: a constant output and an output that is an input, under every strategy.
@pytest.mark.parametrize("strategy", STRATEGIES + ["auto"])
@pytest.mark.parametrize("expr, reference", [("0.5", lambda x, y: 0.5 + 0 * (x + y)), ("x", lambda x, y: x + 0 * y)])
def test_degenerate_outputs_under_transforms(build, strategy, expr, reference):
    module = build(name="degenerate", expr=expr, inputs=["x", "y"], order=3, strategy=strategy)
    x, y, tx, ty = (sample((3, 4), -1, 1, seed=0).detach(), sample((4,), -1, 1, seed=1).detach(),
                    torch.ones(3, 4, dtype=torch.float64), torch.ones(4, dtype=torch.float64))
    for transform in ("hessian", "jvp", "jacfwd_of_jacrev", "vmap"):
        actual = TRANSFORMS[transform](module.degenerate, x, y, tx, ty)
        expected = TRANSFORMS[transform](reference, x, y, tx, ty)
        torch.testing.assert_close(actual, expected, rtol=1e-7, atol=1e-10)
    results = []
    for f in (module.degenerate, reference):
        with fwAD.dual_level():
            out = f(fwAD.make_dual(x, tx), fwAD.make_dual(y, ty))
            results.append(fwAD.unpack_dual(out).tangent.clone())
    torch.testing.assert_close(results[0], results[1])


@pytest.mark.xfail(strict=True, reason="pytorch/pytorch#197867: nested jacfwd through an autograd.Function "
                   "with a jvp returns zeros (torch 2.13); strict, so that a fix in PyTorch is noticed")
def test_forward_over_forward_is_pytorchs_silent_zero(build):
    """jacfwd(jacfwd(f)) of any custom Function, dbgen's or hand-written, gives 0 for the second
    derivative (PyTorch's bug, reported upstream); the README warns against it and points to
    jacfwd(jacrev(f)) (torch.func.hessian), which is right."""
    module = build(name="cubic", expr="x**3", inputs=["x"], order=2, strategy="save_inputs")
    x = torch.tensor([0.5, 1.5], dtype=torch.float64)
    second = torch.einsum("iii->i", tf.jacfwd(tf.jacfwd(module.cubic))(x))
    torch.testing.assert_close(second, 6 * x)
