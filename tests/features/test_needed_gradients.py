"""A generated backward computes only the gradients the running backward pass uses.

Force matching backpropagates a loss on forces (-dE/dpositions, taken with create_graph) to the
potential's parameters: the distances' gradient at that second pass is needed by nobody, and
autograd through the composed formula never computes it. The generated last-level backward asks
the engine (``_needed_gradients``) and skips it; the answers must stay those of autograd whatever subset of
inputs a pass asks for, with leaves, non-leaves and ``.backward()`` alike.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import build_spec

from codegen.tools.bench import count_ops

SPEC = {
    "name": "pair",
    "expr": "a * (b / r)**6 - exp(-a * r)",
    "inputs": ["r", "a", "b"],
    "order": 2,
    "domain": {"r": [0.9, 2.5], "a": [0.5, 2.0], "b": [0.8, 1.2]},
}
STRATEGIES = ["save_inputs", "save_outputs", "intermediates", "nested"]


def composed(r, a, b):
    return a * (b / r) ** 6 - torch.exp(-a * r)


def _system(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    positions = (torch.rand(12, 3, generator=generator, dtype=torch.float64) * 3).requires_grad_()
    i, j = torch.triu_indices(12, 12, 1)
    params = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (1.3, 0.9)]
    return positions, i, j, params


def _force_loss(fn, positions, i, j, params):
    r = (positions[i] - positions[j]).norm(dim=-1)
    energy = fn(r, *params).sum()
    (gradient,) = torch.autograd.grad(energy, positions, create_graph=True)
    return gradient.pow(2).sum() + energy


def _required(ctx, *names):
    """What ctx.needs_input_grad alone says, without the engine's refinement."""
    return frozenset(name for name, need in zip(names, ctx.needs_input_grad) if need)


@pytest.fixture(scope="module", params=STRATEGIES)
def module(request, tmp_path_factory):
    return build_spec(tmp_path_factory.mktemp(request.param), **SPEC, strategy=request.param)


@pytest.mark.parametrize("wanted", [(1,), (2,), (1, 2), (0,), (0, 1, 2)], ids=str)
def test_a_pass_that_asks_for_some_inputs_gets_autograds_gradients(module, wanted):
    positions, i, j, params = _system()
    targets = [(positions, *params)[k] for k in wanted]
    got = torch.autograd.grad(_force_loss(module.pair, positions, i, j, params), targets)
    expected = torch.autograd.grad(_force_loss(composed, positions, i, j, params), targets)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)


def test_backward_without_inputs_fills_every_leaf(module):
    positions, i, j, params = _system()
    _force_loss(module.pair, positions, i, j, params).backward()
    got = [t.grad for t in (positions, *params)]
    positions, i, j, params = _system()
    _force_loss(composed, positions, i, j, params).backward()
    for g, t in zip(got, (positions, *params)):
        torch.testing.assert_close(g, t.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
def test_the_parameters_pass_skips_the_distances_gradient(tmp_path, strategy, monkeypatch):
    module = build_spec(tmp_path, **SPEC, strategy=strategy)
    positions, i, j, params = _system()

    def ops_of_parameters_pass():
        loss = _force_loss(module.pair, positions, i, j, params)
        return count_ops(lambda: torch.autograd.grad(loss, params))

    pruned = ops_of_parameters_pass()
    monkeypatch.setattr(module, "_needed_gradients", _required)  # r requires grad: computed
    assert pruned < ops_of_parameters_pass()


def test_every_order_of_a_spec_with_unused_inputs_matches_autograd(tmp_path):
    """Every subset of inputs at the last order, at order 3 (a nested chain of three levels)."""
    module = build_spec(tmp_path, **{**SPEC, "order": 3}, strategy="nested")
    generator = torch.Generator().manual_seed(1)
    inputs = [(lo + (hi - lo) * torch.rand(5, generator=generator, dtype=torch.float64)).requires_grad_()
              for lo, hi in SPEC["domain"].values()]
    for subset in itertools.chain.from_iterable(itertools.combinations(range(3), k) for k in (1, 2)):
        results = []
        for fn in (module.pair, composed):
            first = torch.autograd.grad(fn(*inputs).sum(), inputs, create_graph=True)
            second = torch.autograd.grad(first[0].sum() + first[2].sum(), inputs, create_graph=True)
            results.append(torch.autograd.grad(second[1].sum(), [inputs[k] for k in subset], allow_unused=True,
                                               materialize_grads=True))
        for g, e in zip(*results):
            torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)


SUBSETS = [subset for k in (1, 2, 3) for subset in itertools.combinations(range(3), k)]


def _non_leaf_inputs(seed: int = 2):
    """Inputs computed from leaves (as a PINN's activations are): the engine can tell which it needs."""
    generator = torch.Generator().manual_seed(seed)
    leaves = [(lo + (hi - lo) * torch.rand(5, generator=generator, dtype=torch.float64)).requires_grad_()
              for lo, hi in SPEC["domain"].values()]
    return [leaf * 1.0 for leaf in leaves]


def _three_passes(fn, first_wrt, second_wrt):
    """Gradients in ``first_wrt`` with create_graph, of their sum in ``second_wrt`` likewise, then
    of that sum in every input: each nested level is applied with a different subset wanted."""
    inputs = _non_leaf_inputs()
    first = torch.autograd.grad(fn(*inputs).sum(), [inputs[k] for k in first_wrt], create_graph=True)
    second = torch.autograd.grad(sum(g.sum() for g in first), [inputs[k] for k in second_wrt], create_graph=True,
                                 allow_unused=True, materialize_grads=True)
    return (*first, *second, *torch.autograd.grad(sum(g.sum() for g in second), inputs, allow_unused=True,
                                                  materialize_grads=True))


@pytest.fixture(scope="module")
def order3(tmp_path_factory):
    """The spec at order 3 under nested: a chain of three levels."""
    return build_spec(tmp_path_factory.mktemp("order3"), **{**SPEC, "order": 3}, strategy="nested")


@pytest.mark.parametrize("first_wrt", SUBSETS, ids=str)
def test_nested_levels_compute_the_gradients_each_pass_wants(order3, first_wrt):
    """A nested level receives the names of the gradients its caller's pass uses and leaves out the
    rest: every pair of subsets at the first two orders, against autograd through the formula."""
    for second_wrt in SUBSETS:
        got = _three_passes(order3.pair, first_wrt, second_wrt)
        expected = _three_passes(composed, first_wrt, second_wrt)
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)


def test_a_nested_level_leaves_out_gradients_nobody_uses(order3, monkeypatch):
    """The first derivative in r alone (a force) does not compute the level's gradients in a, b."""

    def ops_of_forces():
        inputs = _non_leaf_inputs()
        energy = order3.pair(*inputs).sum()
        return count_ops(lambda: torch.autograd.grad(energy, inputs[0], create_graph=True))

    pruned = ops_of_forces()
    monkeypatch.setattr(order3, "_needed_gradients", _required)  # every input requires grad
    assert pruned < ops_of_forces()

