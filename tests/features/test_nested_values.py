"""The nested strategy passes the function calls it computes down its chain of levels.

Level 0 of mish computes tanh(softplus(x)) and returns it as a non-differentiable extra output;
level 1 receives it as a constant and computes sigmoid(x) for level 2. No level computes a call
that an earlier level computed, the last level's backward (differentiated by autograd at higher
orders) reads none of them, and the memory saved for backward stays at or below autograd's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import sympy
import torch
from helpers import budget, build_spec, calls_externals, sample

from codegen.build import pipeline
from codegen.tools import bench

ROOT = Path(__file__).resolve().parents[2]
# a spec calling external functions has no formula in torch ops to measure against
EXAMPLES = [path for path in sorted((ROOT / "specs").glob("*.yaml")) if not calls_externals(path)]


def _nested_plan(name: str):
    spec = pipeline.load_spec(ROOT / "specs" / f"{name}.yaml", f"specs/{name}.yaml")
    return pipeline.plan_spec(dataclasses.replace(spec, strategy="nested"))


def _calls(block) -> set[sympy.Expr]:
    """The function calls a block computes; not those as cheap as a product (rewrite.Sech2, a
    mask), which a level recomputes from what it received rather than receive them too."""
    return {node for value in block.values for node in sympy.preorder_traversal(value)
            if isinstance(node, sympy.Function) and not getattr(node, "recomputed", False)}


def test_mish_levels_pass_tanh_softplus_and_sigmoid_down():
    first, second, third = _nested_plan("mish").functions
    assert (first.values, first.constants) == (("tanh_softplus_x",), ())
    assert (second.values, second.constants) == (("sigmoid_x",), ("tanh_softplus_x",))
    assert (third.values, third.constants) == ((), ("tanh_softplus_x", "sigmoid_x"))
    assert second.inputs == ("grad_out", "x", "tanh_softplus_x")
    # no level recomputes what it received
    assert {type(c).__name__ for c in _calls(second.forward)} == {"sigmoid"}
    assert {str(c) for c in _calls(third.forward)} == {"sigmoid(-x)"}
    # a level saves what the next one receives; the last saves only its differentiable inputs
    assert first.saved == ("x", "tanh_softplus_x")
    assert second.saved == ("grad_out", "x", "tanh_softplus_x", "sigmoid_x")
    assert third.saved == ("grad2_x", "grad_out", "x")


def test_the_last_backward_and_every_jvp_are_written_in_differentiable_inputs_alone():
    for name in ("mish", "gelu_tanh", "silu", "exp"):
        functions = _nested_plan(name).functions
        constants = {c for fn in functions for c in fn.constants}
        blocks = [(fn.class_name, fn.jvp) for fn in functions] + [("backward", functions[-1].backward)]
        for where, block in blocks:
            reads = {str(s) for s in block.reads} - {t for t, _ in block.temporaries}
            assert not reads & constants, (name, where, reads & constants)


def test_an_output_that_is_a_call_is_passed_down_as_it_is():
    first, second, third = _nested_plan("exp").functions
    assert first.values == () and "out" in first.saved
    assert second.constants == ("out",) and third.constants == ("out",)
    assert not _calls(second.forward) and not _calls(third.forward)


def test_a_chain_without_calls_is_the_tutorials_cube():
    for fn in _nested_plan("cube").functions:
        assert (fn.values, fn.constants) == ((), ())


@pytest.mark.parametrize("path", budget(EXAMPLES, ids=[p.stem for p in EXAMPLES]))
def test_nested_and_auto_save_no_more_than_autograd_through_the_composed_expression(path, tmp_path):
    """The memory target, at W2 and W3: the default build (auto) and nested, on every example
    (tests/unit/build/test_memory.py holds auto to it on random specs)."""
    spec = pipeline.load_spec(path, path.name)
    subject = bench.make_subject(spec, ["auto", "nested"], tmp_path)
    inputs = bench.make_inputs(spec, 256, torch.float32)
    over = []
    for workload in ("W2", "W3"):
        saved = {c.label: bench.graph_measures(c.fn, inputs)[workload][0] for c in subject.candidates}
        assert saved["auto"] <= saved[bench.COMPOSED], (workload, saved)
        if saved["nested"] > saved[bench.COMPOSED]:
            over.append((workload, saved))
    assert not over, over


def test_an_unused_gradient_of_a_level_with_values_counts_as_zero(tmp_path):
    """Levels with values do not materialize gradients: one arriving as None is taken as zero."""
    module = build_spec(tmp_path, name="pair", expr="exp(x*y) + tanh(x)*y", inputs=["x", "y"], order=3,
                        strategy="nested")
    x, y = sample((5,), -1, 1, seed=1), sample((5,), -1, 1, seed=2)

    def composed(a, b):
        return torch.exp(a * b) + torch.tanh(a) * b

    def second_by_x_only(fn):
        gx, _gy = torch.autograd.grad(fn(x, y).sum(), (x, y), create_graph=True)
        return torch.autograd.grad(gx.sum(), (x, y), create_graph=True)

    got, want = second_by_x_only(module.pair), second_by_x_only(composed)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    third = torch.autograd.grad(got[1].sum(), x)[0]
    torch.testing.assert_close(third, torch.autograd.grad(want[1].sum(), x)[0], rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(module.pair, (x, y), check_undefined_grad=True)
    assert torch.autograd.gradgradcheck(module.pair, (x, y))
