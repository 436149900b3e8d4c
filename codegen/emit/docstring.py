"""The generated module's docstring: its first line (the formula in the spec's language) and a
line per documented derivative.
"""

from __future__ import annotations

import sympy

from ..language.formula import formula
from ..plan import ModulePlan
from .text import MAX_DOC_FORMULA, fits


def _formula(expr: sympy.Expr) -> str:
    return formula(expr)


def _summary(plan: ModulePlan) -> str:
    """The module docstring's first line: ``name(inputs) = formula`` in the spec's language, or,
    where the formula is the call itself (a spec named sinh of sinh(x)), what the module adds."""
    spec = plan.spec
    call = f"{spec.name}({', '.join(spec.inputs)})"
    written = _formula(plan.expr) if not spec.outputs else f"({', '.join(name for name, _ in spec.outputs)})"
    if written == call:
        return f"{call} as an autograd Function with explicit formulas for its derivatives up to order {spec.order}."
    return f"{call} = {written}"


# where the module docstring writes a derivative: at 4 spaces, its continuation lines at 8
DERIVATIVE_INDENT, DERIVATIVE_HANGING = 4, 4


def _derivative_lines(plan: ModulePlan, width: int) -> list[str]:
    """``df/dx = formula`` per documented derivative; a formula too long to read (or to wrap at
    spaces within ``width``) is replaced by its operation count."""
    lines = []
    for function, index, derivative in plan.derivatives:
        text = formula(derivative)
        line = f"{_label(index, function)} = {text}"
        if len(text) > MAX_DOC_FORMULA or not fits(line, width, DERIVATIVE_INDENT, DERIVATIVE_HANGING):
            text = f"({sympy.count_ops(derivative)} operations; see the generated formulas below)"
        lines.append(f"{_label(index, function)} = {text}")
    return lines


def _label(index: tuple[str, ...], function: str = "f") -> str:
    """d2f/dx2, d3f/dx2dy: the partial derivative of ``function`` by each variable in ``index``."""
    order = len(index)
    parts = []
    for name in dict.fromkeys(index):
        count = index.count(name)
        parts.append(f"d{name}{count if count > 1 else ''}")
    top = f"d{order}{function}" if order > 1 else f"d{function}"
    return f"{top}/{''.join(parts)}"
