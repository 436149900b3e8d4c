"""Every formula a plan prints, with its temporaries and the values it reads from earlier blocks
(the saved output, intermediates, values passed down nested levels) substituted back: what the
generated code computes, as one SymPy expression per result, for checks on their shape."""

from __future__ import annotations

import sympy

from codegen.plan import Block, ModulePlan


def _symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, real=True)


def _expanded(block: Block, known: dict) -> list[sympy.Expr]:
    """The block's temporaries and results with every temporary and ``known`` value written out."""
    names = dict(known)
    formulas = []
    for name, value in block.temporaries:
        names[_symbol(name)] = value.xreplace(names)
        formulas.append(names[_symbol(name)])
    return formulas + [r.expr.xreplace(names) for r in block.results]


def printed_formulas(plan: ModulePlan) -> list[sympy.Expr]:
    """Every formula of every block of every Function of ``plan``, written out in its inputs,
    params, cotangents and tangents."""
    known: dict = {}  # forward results later blocks read: the output, intermediates, passed values
    formulas = []
    for level, function in enumerate(plan.functions):
        forward = _expanded(function.forward, known)
        formulas += forward
        results = forward[len(forward) - len(function.forward.results):]
        readable = set(function.outputs) if level == 0 else set(function.values)
        for result, value in zip(function.forward.results, results):
            if result.name in readable:
                known[_symbol(result.name)] = value
        for block in (function.backward, function.jvp):
            if block is not None:
                formulas += _expanded(block, known)
    return formulas


def split_powers(expr: sympy.Expr) -> list[sympy.Expr]:
    """The products in ``expr`` that multiply by b**e (e not a number) and divide by b: p*x**p/x,
    0*inf = NaN at x = 0 where the merged x**(p - 1) is finite."""
    found = []
    for node in sympy.preorder_traversal(expr):
        if node.is_Mul:
            factors = sympy.Mul.make_args(node)
            symbolic = {f.base for f in factors if f.is_Pow and not f.exp.is_Number}
            if any(f.is_Pow and f.base in symbolic and f.exp.is_Number and f.exp < 0 for f in factors):
                found.append(node)
    return found
