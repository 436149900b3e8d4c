"""Vector-valued specs (``outputs:``): several outputs from one spec, derivatives shared across them.

Each output's derivatives of every order, with random cotangents on all outputs and with some
outputs unused (their cotangents None), must be autograd's through the outputs' formulas evaluated
directly in torch ops, under every strategy; and the sharing must be real: a call two outputs use is
computed once, and an unused output's terms are not computed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
from helpers import build_spec, derivative_chain
from hypothesis import given, settings
from hypothesis import strategies as st
from random_trees import (
    STRATEGIES,
    R,
    _max_order,
    build_or_reject,
    evaluate,
    scaled,
    text,
    trees,
)

from codegen.tools.bench import OpCounter

SPEC = {
    "name": "polar_mix",
    "inputs": ["x", "y"],
    "outputs": {
        "radius": "sqrt(x**2 + y**2)",
        "angle": "atan2(y, x)",
        "damped": "exp(-x) * cos(y) * sqrt(x**2 + y**2)",
        "one": "1",
    },
    "order": 3,
    "domain": {"x": [0.5, 2.0], "y": [-1.5, 1.5]},
}
SINGLE_LEVEL = ["save_inputs", "save_outputs", "intermediates"]


def composed(x, y):
    radius = torch.sqrt(x**2 + y**2)
    return radius, torch.atan2(y, x), torch.exp(-x) * torch.cos(y) * radius, 1 + 0 * (x + y)


def _inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = 0.5 + 1.5 * torch.rand(4, 1, generator=generator, dtype=torch.float64)
    y = -1.5 + 3.0 * torch.rand(1, 3, generator=generator, dtype=torch.float64)
    return [x.requires_grad_(), y.requires_grad_()]


def _chain(fn, inputs, order: int, used):
    """Gradients of every order (``derivative_chain``, random cotangents) with only the outputs in
    ``used`` taking part: the others are not used at all."""
    return derivative_chain(lambda *xs: tuple(fn(*xs)[k] for k in used), inputs, order, seed=3)[1:]


@pytest.fixture(scope="module", params=[*SINGLE_LEVEL, "nested", "auto"])
def module(request, tmp_path_factory):
    return build_spec(tmp_path_factory.mktemp(request.param), **SPEC, strategy=request.param)


def test_the_outputs_come_back_as_a_tuple_in_the_specs_order(module):
    inputs = _inputs()
    actual = module.polar_mix(*inputs)
    assert isinstance(actual, tuple) and len(actual) == 4
    for got, want in zip(actual, composed(*inputs), strict=True):
        assert got.shape == (4, 3)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


USED = [(0, 1, 2, 3), (0,), (1,), (2,), (3,), (1, 2), (0, 3)]


@pytest.mark.parametrize("used", USED, ids=str)
def test_every_order_with_some_outputs_used_matches_autograd(module, used):
    inputs = _inputs(1)
    for got, want in zip(_chain(module.polar_mix, inputs, 3, used), _chain(composed, inputs, 3, used), strict=True):
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_a_stacked_spec_returns_one_tensor_with_a_last_dimension_per_output(tmp_path):
    module = build_spec(tmp_path, **{**SPEC, "stack": True, "order": 2})
    inputs = _inputs(2)
    stacked = module.polar_mix(*inputs)
    assert stacked.shape == (4, 3, 4)
    reference = torch.stack(composed(*inputs), dim=-1)
    torch.testing.assert_close(stacked, reference, rtol=1e-12, atol=1e-14)
    weights = torch.randn(stacked.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = torch.autograd.grad((stacked * weights).sum(), inputs, create_graph=True)
    want = torch.autograd.grad((reference * weights).sum(), inputs, create_graph=True)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    second = [torch.autograd.grad(sum(g.sum() for g in grads), inputs) for grads in (got, want)]
    for g, w in zip(*second):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def _kernel_ops(work) -> dict[str, int]:
    with OpCounter() as counter:
        work()
    return counter.ops


@pytest.mark.parametrize("strategy", [*SINGLE_LEVEL, "nested"])
def test_a_call_two_outputs_share_is_computed_once(tmp_path, strategy):
    spec = {"name": "pair", "inputs": ["x", "y"], "outputs": {"a": "exp(x) * y", "b": "exp(x) + y"}, "order": 2}
    module = build_spec(tmp_path, **spec, strategy=strategy)
    x, y = _inputs()
    assert _kernel_ops(lambda: module.pair(x, y))["exp"] == 1


@pytest.mark.parametrize("strategy", SINGLE_LEVEL)
def test_an_unused_outputs_terms_are_not_computed(tmp_path, strategy):
    """A single-level backward adds the terms of the cotangents that arrive (nested levels take a
    zero-filled cotangent for an unused output: docs/guide/specs.md)."""
    module = build_spec(tmp_path, **SPEC, strategy=strategy)
    inputs = _inputs()

    def gradient(used):
        outputs = module.polar_mix(*inputs)
        total = sum(outputs[k].sum() for k in used)
        return lambda: torch.autograd.grad(total, inputs, create_graph=True)

    alone = sum(_kernel_ops(gradient((0,))).values())
    assert alone < sum(_kernel_ops(gradient((0, 2))).values())


# Random vector-valued specs: the property over the whole language --------------------------------

@st.composite
def vector_cases(draw):
    inputs = tuple(draw(st.lists(st.sampled_from(("x", "y", "z")), min_size=1, max_size=2, unique=True)))
    names = {name: (-R, R) for name in inputs}
    formulas = draw(st.lists(trees(names, draw(st.integers(1, 2))), min_size=2, max_size=3))
    strategy = draw(st.sampled_from(STRATEGIES))
    order = draw(st.integers(1, min(3, _max_order(strategy, len(inputs)))))
    used = draw(st.lists(st.integers(0, len(formulas) - 1), min_size=1, unique=True))
    return inputs, formulas, strategy, order, tuple(sorted(used))


class _VectorCase:
    """What build_or_reject needs of a case: its spec."""

    def __init__(self, inputs, formulas, strategy, order):
        self.inputs, self.formulas, self.strategy, self.order = inputs, formulas, strategy, order

    def spec(self, name: str = "prop") -> dict:
        outputs = {f"out{k}": text(tree) for k, tree in enumerate(self.formulas)}
        return {"name": name, "inputs": list(self.inputs), "outputs": outputs, "order": self.order,
                "strategy": self.strategy, "domain": {n: [-R, R] for n in self.inputs}}


@settings(max_examples=scaled(40))
@given(case=vector_cases())
def test_random_vector_specs_match_autograd_through_their_trees(case):
    inputs, formulas, strategy, order, used = case
    with tempfile.TemporaryDirectory() as tmp:
        module = build_or_reject(Path(tmp), _VectorCase(inputs, formulas, strategy, order))

    def reference(*tensors):
        env = dict(zip(inputs, tensors))
        return tuple(evaluate(tree, env) + 0 * sum(tensors) for tree in formulas)

    generator = torch.Generator().manual_seed(0)
    tensors = [(-R + 2 * R * torch.rand(5, generator=generator, dtype=torch.float64)).requires_grad_()
               for _ in inputs]
    expected = _chain(reference, tensors, order, used)
    actual = _chain(module.prop, tensors, order, used)
    for level, (got, want) in enumerate(zip(actual, expected), start=1):
        scale = max(1.0, max(float(w.detach().abs().max()) for w in want))
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-8 * scale, msg=lambda m, o=level: f"order {o}: {m}")


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
def test_a_fused_vector_spec_compiles_and_gives_eager_numbers(tmp_path, strategy):
    """fuse: true: each level's outputs come out of one compiled kernel; its generated test
    compares them, every order, with eager float32 and float64."""
    from helpers import import_path

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    build_spec(tmp_path, **{**SPEC, "order": 2, "fuse": True}, strategy=strategy)
    tests = import_path(tmp_path / "out" / "tests" / "test_polar_mix.py")
    tests.test_fused_levels_give_eager_numbers_in_float32()
    assert torch._dynamo.utils.counters["aot_autograd"]["total"] >= 1, "nothing was compiled"
