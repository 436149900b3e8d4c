"""The generated code itself: the tutorial's four patterns, no tensor ever stashed on ctx, and
the counter-example (the tutorial's SinhBad) caught by the same checks the generated tests use."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
import yaml

from helpers import derivative_chain, sample

ROOT = Path(__file__).resolve().parent.parent
GENERATED = sorted((ROOT / "generated").glob("*.py"))
MODULES = [p for p in GENERATED if p.name != "__init__.py"]


def _spec_of(path: Path) -> dict:
    return yaml.safe_load((ROOT / "specs" / f"{path.stem}.yaml").read_text())


def _functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            yield node, {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_only_params_are_kept_on_ctx(path):
    """Tensors reach backward only through save_for_backward; ctx attributes hold float params."""
    params = set((_spec_of(path).get("params") or {}))
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "ctx":
                    assert target.attr in params, f"{path.name}:{node.lineno}: ctx.{target.attr} is not a param"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_functions_use_setup_context_and_save_only_their_inputs_and_outputs(path):
    tree = ast.parse(path.read_text())
    classes = dict((cls.name, (cls, methods)) for cls, methods in _functions(tree))
    bases = [name for name in classes if name.endswith("ForCompile")]
    assert bases, "no autograd.Function generated"
    for name in bases:
        cls, methods = classes[name]
        assert set(methods) == {"forward", "setup_context", "backward"}, name
        assert methods["forward"].args.args[0].arg != "ctx", f"{name}.forward takes ctx"
        saves = [n for n in ast.walk(methods["setup_context"]) if isinstance(n, ast.Call)
                 and ast.unparse(n.func) in ("ctx.save_for_backward", "ctx.save_for_forward")]
        available = {a.arg for a in methods["forward"].args.args}
        returned = methods["forward"].body[-1]
        available |= {n.id for n in ast.walk(returned) if isinstance(n, ast.Name)}
        for call in saves:
            for arg in call.args:
                assert isinstance(arg, ast.Name) and arg.id in available, f"{name} saves {ast.unparse(arg)}"
        # its twin adds exactly the forward-mode derivative
        twin_cls, twin_methods = classes[name.removesuffix("ForCompile")]
        assert [ast.unparse(b) for b in twin_cls.bases] == [name]
        assert set(twin_methods) == {"jvp"}


def test_tutorial_patterns_are_what_the_examples_generate():
    import generated

    assert generated.square.__module__.endswith("square")
    src = {p.stem: p.read_text() for p in MODULES}
    assert "ctx.save_for_backward(x)" in src["square"]
    assert "ctx.save_for_backward(out)" in src["exp"]
    assert "return out, exp_x, exp_neg_x" in src["sinh"]
    assert "def backward(ctx, grad_out, grad_exp_x, grad_exp_neg_x):" in src["sinh"]
    assert "CubeBackwardForCompile if torch.compiler.is_compiling() else CubeBackward\n" in src["cube"]
    assert "return level.apply(grad_out, x)" in src["cube"]
    assert "class CubeBackward2(CubeBackward2ForCompile):" in src["cube"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_docstring_shows_formula_and_each_derivative(path):
    spec = _spec_of(path)
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc.startswith(f"{spec['name']}(")
    inputs = spec["inputs"]
    assert all(f"df/d{name} = " in doc for name in inputs)
    if len(inputs) == 1:
        for k in range(2, spec["order"] + 1):
            assert f"d{k}f/d{inputs[0]}{k} = " in doc


class SinhBad(torch.autograd.Function):
    """The tutorial's counter-example: intermediates stashed on ctx, not returned."""

    @staticmethod
    def forward(ctx, x):
        ctx.expx, ctx.expnegx = torch.exp(x), torch.exp(-x)
        return (ctx.expx - ctx.expnegx) / 2

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out * (ctx.expx + ctx.expnegx) / 2


def test_the_checks_catch_the_tutorials_counter_example_and_pass_dbgens_sinh():
    import generated

    x = sample((3, 4), -2, 2, seed=0)
    expected = derivative_chain(torch.sinh, [x], 2, seed=1)
    bad = derivative_chain(SinhBad.apply, [x], 2, seed=1)
    good = derivative_chain(generated.sinh, [x], 2, seed=1)
    torch.testing.assert_close(bad[1][0], expected[1][0])  # first order looks right...
    assert not torch.allclose(bad[2][0], expected[2][0])  # ...the second is silently wrong
    torch.testing.assert_close(good[2][0], expected[2][0], rtol=1e-7, atol=1e-10)
