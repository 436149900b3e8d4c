"""TorchPrinter's folded sums: as few kernels as eager torch has, the same numbers as plain sums."""

from __future__ import annotations

import math

import pytest
import sympy
import torch

from codegen.emit.printer import TorchPrinter
from codegen.tools.bench import count_ops

t, a, b, u, beta = sympy.symbols("t a b u beta", real=True)
TENSORS = ("t", "a", "b", "u")

CASES = [
    (t + a * b, "torch.addcmul(t, a, b)"),
    (t - 2 * a * b, "torch.addcmul(t, a, b, value=-2)"),
    (t + 3 * u, "torch.add(t, u, alpha=3)"),
    (1 - t, "1 - t"),
    (t + u, "t + u"),
    (a * b + 2.5, "a*b + 2.5"),
    (t + beta * a * b, "torch.addcmul(t, a, b, value=beta)"),
    (-2 * a * b * u + t * a, "torch.addcmul(a*t, a*b, u, value=-2)"),
    ((t + a * b) * u, "u*torch.addcmul(t, a, b)"),
    ((t + a * b + 1) * u, "u*(torch.addcmul(t, a, b) + 1)"),
    (t - a * b - u - beta, "torch.addcmul(t, a, b, value=-1) - u - beta"),
]


@pytest.mark.parametrize("expr, code", CASES, ids=[c for _, c in CASES])
def test_sums_fold_into_addcmul_and_add(expr, code):
    assert TorchPrinter(TENSORS).doprint(expr) == code


def _evaluate(code: str, seed: int = 0) -> tuple[torch.Tensor, int]:
    generator = torch.Generator().manual_seed(seed)
    scope = {name: torch.randn(16, generator=generator, dtype=torch.float64) for name in TENSORS}
    scope.update(torch=torch, math=math, beta=0.75)
    value = eval(code, scope)  # test code: the printer's own output for the expressions above
    return value, count_ops(lambda: eval(code, scope))


@pytest.mark.parametrize("expr", [e for e, _ in CASES], ids=[c for _, c in CASES])
def test_a_folded_sum_equals_the_plain_sum_in_no_more_kernels(expr):
    folded, folded_ops = _evaluate(TorchPrinter(TENSORS).doprint(expr))
    plain, plain_ops = _evaluate(TorchPrinter(TENSORS, fold_sums=False).doprint(expr))
    torch.testing.assert_close(folded, plain, rtol=1e-14, atol=1e-14)
    assert folded_ops <= plain_ops


def test_folding_saves_kernels_where_it_can():
    _, folded = _evaluate(TorchPrinter(TENSORS).doprint(t + 3 * a * b - 2 * u))
    _, plain = _evaluate(TorchPrinter(TENSORS, fold_sums=False).doprint(t + 3 * a * b - 2 * u))
    assert (folded, plain) == (2, 5)  # addcmul, add(alpha) against 3*a, *b, 2*u and two sums


LONG_SUM = t + a * b - 2 * a * u + 3 * b * u * t - a * t * u + 0.5 * b * b


def _hoisting_printer() -> tuple[TorchPrinter, list[sympy.Expr]]:
    named: list[sympy.Expr] = []

    def name_for(expr):
        named.append(expr)
        return f"part{len(named)}"

    return TorchPrinter(TENSORS, name_for=name_for), named


def test_a_long_folded_sum_is_split_by_named_temporaries_two_calls_deep_at_most():
    """Five folds would nest five addcmul calls; each inner fold becomes a temporary (named from
    the partial sum it holds), and running the lines gives the plain sum in no more kernels."""
    printer, named = _hoisting_printer()
    code = printer.doprint(LONG_SUM)
    lines = [*printer.take_hoisted(), f"result = {code}"]
    assert len(lines) >= 3 and printer.take_hoisted() == []
    for line in lines:
        assert _depth(line.split(" = ", 1)[1]) <= 2, lines
    generator = torch.Generator().manual_seed(0)  # the inputs _evaluate uses
    scope = {name: torch.randn(16, generator=generator, dtype=torch.float64) for name in TENSORS}
    scope.update(torch=torch, math=math, beta=0.75)
    run = "\n".join(lines)

    def evaluate():
        local = dict(scope)
        exec(run, local)  # noqa: S102 - the printer's own output for LONG_SUM, run as the module runs it
        return local

    plain, plain_ops = _evaluate(TorchPrinter(TENSORS, fold_sums=False).doprint(LONG_SUM))
    values = evaluate()
    torch.testing.assert_close(values["result"], plain, rtol=1e-14, atol=1e-14)
    assert count_ops(evaluate) <= plain_ops
    for number, expr in enumerate(named, start=1):  # each temporary holds the partial sum it is named from
        want = eval(TorchPrinter(TENSORS, fold_sums=False).doprint(expr), dict(scope))
        torch.testing.assert_close(values[f"part{number}"], want, rtol=1e-14, atol=1e-14)


def test_without_name_for_a_sum_folds_as_before():
    printer = TorchPrinter(TENSORS)
    code = printer.doprint(LONG_SUM)
    assert printer.take_hoisted() == [] and _depth(code) > 2


def _depth(code: str) -> int:
    import ast

    def depth(node):
        return max((depth(child) for child in ast.iter_child_nodes(node)), default=0) + isinstance(node, ast.Call)

    return depth(ast.parse(code, mode="eval").body)


def test_sums_of_floats_print_as_python():
    assert TorchPrinter(TENSORS).doprint(beta + 2) == "beta + 2"
    assert TorchPrinter(TENSORS, fold_sums=False).doprint(t + a * b) == "a*b + t"


g = sympy.Symbol("g", real=True)


def test_a_cotangent_is_scaled_after_its_product_where_autograd_differentiates():
    printer = TorchPrinter((*TENSORS, "g"), fold_sums=False, scaled_last=("g",))
    assert printer.doprint(2 * g * t) == "g*t * 2"
    assert printer.doprint(beta * g * t / 2) == "g*t * (beta/2)"
    assert printer.doprint(g * t / 2) == "g*t / 2"
    assert printer.doprint(-g * t) == "-g*t"  # a sign: printed first, as SymPy does
    assert printer.doprint(2 * t * u) == "2*t*u"  # no cotangent: as SymPy prints it
    assert TorchPrinter((*TENSORS, "g"), fold_sums=False).doprint(2 * g * t) == "2*g*t"


def test_scaling_a_cotangent_last_saves_nothing_for_the_second_order_pass():
    x = torch.randn(8, dtype=torch.float64, requires_grad=True)
    grad_out = torch.randn(8, dtype=torch.float64)
    for code, kept in (("2*grad_out*x", 1), ("grad_out*x * 2", 0)):
        packed = []

        def pack(tensor, packed=packed):
            if tensor is not x and tensor is not grad_out:
                packed.append(tensor)
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            eval(code, {"x": x, "grad_out": grad_out})  # test code: the two printed forms above
        assert len(packed) == kept, code


@pytest.mark.parametrize("text, written", [
    ("abs(x - y)", "abs(x - y)"),
    ("where(abs(x) < 1, x, 2)", "where(abs(x) < 1, x, 2)"),
])
def test_docstring_formulas_are_written_in_the_spec_language(text, written):
    """SymPy's Abs and sign are the language's abs and a where (sign is not in the language), so
    a docstring formula can be pasted back into a spec and parses to the same function."""
    from codegen.language.expr import parse_expr
    from codegen.language.formula import formula

    expr = parse_expr(text, ("x", "y"), ())
    assert formula(expr) == written
    derivative = sympy.diff(parse_expr("abs(x)", ("x",), ()), sympy.Symbol("x", real=True))
    shown = formula(derivative)
    assert "sign" not in shown and "Abs" not in shown
    again = parse_expr(shown, ("x",), ())
    x = sympy.Symbol("x", real=True)
    assert [again.subs(x, v) for v in (-2, 0, 3)] == [-1, 0, 1]
