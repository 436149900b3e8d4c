"""``dbgen show SPEC``: what dbgen would generate for one spec, for a person to read.

The formula and its derivatives, the strategy and why, and per generated Function what it
computes (shared subexpressions first), saves and returns, with operation counts. Everything is
read from the same plan ``build`` renders. ``FunctionPlan``'s fields are read only in ``_levels``
(and ``_step``), so a change to them breaks one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import sympy

from ..derive.branches import unguarded
from ..language.formula import formula

MAX_SHOWN_CHARS = 1200  # a longer formula is summarised by its size: nobody reads it on a terminal
_SUPERSCRIPTS = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


@dataclass(frozen=True)
class Step:
    """One block of straight-line code: shared temporaries, then named results."""

    signature: str
    shared: tuple[tuple[str, sympy.Expr], ...]
    results: tuple[tuple[str, sympy.Expr], ...]
    ops: int


@dataclass(frozen=True)
class Level:
    """One generated torch.autograd.Function, as ``show`` tells it."""

    name: str
    summary: str
    forward: Step
    saves: tuple[str, ...]
    backward: Step | None
    next_level: str | None


def show_text(path: Path, latex: bool = False, bounds=None) -> str:
    """The report for the spec file at ``path``; raises SpecErrors for a bad spec.

    ``bounds`` (a ``limits.Limits``, default build's) bounds the symbolic work, as in build."""
    from ..build.pipeline import load_specs

    (spec,) = load_specs([path])
    plan = _bounded_plan(spec, bounds)
    fmt = LATEX if latex else UNICODE
    levels = _levels(plan)
    lines = [f"{spec.name}: {spec.path}"] + ([spec.doc] if spec.doc else [])
    lines += ["", "Formula", *_formula_lines(plan, fmt)]
    lines += ["", f"Derivatives (up to order {spec.order})", *_derivative_lines(plan, fmt)]
    lines += ["", "Strategy", f"  {plan.strategy}: {plan.reason}"]
    lines += ["", f"Generated Functions ({len(levels)})"]
    for level in levels:
        lines += _level_lines(level, fmt)
    lines += ["", "Operations per level (SymPy's count_ops of each block's formulas)"]
    lines += [f"  {name}: {ops}" for name, ops in _ops_per_level(levels)]
    return "\n".join(lines) + "\n"


def _formula_lines(plan, fmt) -> list[str]:
    """f(x) = ..., or one line per output of a vector-valued spec."""
    arguments = ", ".join(plan.spec.inputs)
    if not plan.spec.outputs:
        return [f"  f({arguments}) = {_formula(plan.expr, fmt)}"]
    shape = " (stacked along a new last dimension)" if plan.spec.stack else ""
    lines = [f"  {plan.spec.name}({arguments}) = ({', '.join(name for name, _ in plan.spec.outputs)}){shape}"]
    return lines + [f"  {name} = {_formula(expr, fmt)}" for (name, _), expr in zip(plan.spec.outputs, plan.exprs)]


def _bounded_plan(spec, bounds):
    """The plan build would make, under the same bounds on symbolic work (limits.py)."""
    from .. import limits
    from ..build import memory  # noqa: F401 - memory imports torch before the time limit starts
    from ..build.pipeline import plan_spec
    from ..errors import SpecErrors

    try:
        with limits.enforced(bounds or limits.DEFAULT):
            return plan_spec(spec)
    except limits.LimitExceeded as exceeded:
        raise SpecErrors([spec.problem("expr", f"expr: {exceeded.message()}")]) from None


# --- the plan, read in one place -------------------------------------------------------------------


def _levels(plan) -> list[Level]:
    """The plan's Functions as ``Level``s: the only code here that knows FunctionPlan's fields."""
    levels = []
    for fn in plan.functions:
        forward = _step(f"forward({', '.join(fn.inputs)}) -> {', '.join(fn.outputs)}", fn.forward)
        backward = None
        if fn.backward is not None:
            grads = [grad for grad, _ in fn.accumulations] or [r.name for r in fn.backward.results]
            signature = f"backward({', '.join(fn.cotangents)}) -> {', '.join(grads)}"
            backward = _step(signature, fn.backward, _accumulated(fn.accumulations, fn.constant_sums))
        levels.append(Level(fn.class_name, fn.summary, forward, tuple(fn.saved), backward, fn.next_level))
    return levels


def _step(signature: str, block, accumulated=()) -> Step:
    """A block as shared values and results; ``accumulated`` adds the sums of an intermediates backward."""
    shared = tuple(block.temporaries)
    results = tuple((r.name, r.expr) for r in block.results if r.expr != sympy.Symbol(r.name, real=True))
    ops = sum(sympy.count_ops(value) for _, value in (*shared, *results, *accumulated))
    if accumulated:  # the per-output terms are shared values of the summed gradients
        shared, results = shared + results, tuple(accumulated)
    return Step(signature, shared, results, ops)


def _accumulated(accumulations, constant_sums=()) -> tuple[tuple[str, sympy.Expr], ...]:
    """grad_x = sum of cotangent*term over the outputs that depend on x (intermediates), the terms'
    constant parts (summed apart in the code) among them."""
    constants = {grad: parts for grad, _, parts in constant_sums}
    sums = []
    for grad, contributions in accumulations:
        terms = [sympy.Symbol(c, real=True) * sympy.Symbol(t, real=True)
                 for c, t in (*contributions, *constants.get(grad, ()))]
        sums.append((grad, sympy.Add(*terms)))
    return tuple(sums)


# --- layout ------------------------------------------------------------------------------------


def _level_lines(level: Level, fmt) -> list[str]:
    lines = [f"  {level.name}: {level.summary}"]
    lines += _step_lines(level.forward, fmt)
    lines.append(f"    saves for backward: {', '.join(level.saves) or '(nothing)'}")
    if level.backward is not None:
        lines += _step_lines(level.backward, fmt)
    elif level.next_level is not None:
        lines.append(f"    backward: applies {level.next_level}, the next level")
    return lines


def _step_lines(step: Step, fmt) -> list[str]:
    lines = [f"    {step.signature}    [{_ops(step.ops)}]"]
    for label, pairs in (("shared", step.shared), ("computes", step.results)):
        for index, (name, value) in enumerate(pairs):
            lines.append(f"      {label if index == 0 else '':<9} {fmt.name(name)} = {_formula(value, fmt)}")
    return lines


def _ops(count: int) -> str:
    return "1 op" if count == 1 else f"{count} ops"


def _ops_per_level(levels: list[Level]) -> list[tuple[str, int]]:
    counts = []
    for level in levels:
        counts.append((f"{level.name}.forward", level.forward.ops))
        if level.backward is not None:
            counts.append((f"{level.name}.backward", level.backward.ops))
    return counts


def _derivative_lines(plan, fmt) -> list[str]:
    lines = []
    for function, index, derivative in plan.derivatives:
        lines.append(f"  order {len(index)}  {_label(index, fmt is LATEX, function)} = {_formula(derivative, fmt)}")
    if plan.more_derivatives:
        lines.append(f"  ... and {plan.more_derivatives} more partial derivatives")
    return lines


def _label(index: tuple[str, ...], latex: bool, function: str = "f") -> str:
    """∂²f/∂x∂y, or its LaTeX: the partial derivative of ``function`` by each variable in ``index``."""
    order = len(index)
    counts = {name: index.count(name) for name in dict.fromkeys(index)}
    if latex:
        top = f"\\partial^{{{order}}} {_latex_name(function)}" if order > 1 else f"\\partial {_latex_name(function)}"
        bottom = " ".join(f"\\partial {_latex_name(n)}" + (f"^{{{k}}}" if k > 1 else "") for n, k in counts.items())
        return f"\\frac{{{top}}}{{{bottom}}}"
    top = f"∂{_superscript(order)}{function}" if order > 1 else f"∂{function}"
    return top + "/" + "".join(f"∂{n}{_superscript(k) if k > 1 else ''}" for n, k in counts.items())


def _formula(expr: sympy.Expr, fmt) -> str:
    if len(_unicode(expr)) > MAX_SHOWN_CHARS:  # the same cut in either notation
        return f"({sympy.count_ops(expr)} operations; too long to show)"
    return fmt.expr(expr)


def _superscript(number: int) -> str:
    return str(number).translate(_SUPERSCRIPTS)


def _unicode(expr: sympy.Expr) -> str:
    """A compact one-line form: 3·x², exp(-x)/2, √(x), π. Names are ASCII, so '*' is always an operator."""
    text = formula(expr)
    text = re.sub(r"\*\*(?:(\d+)(?![\d.])|\((-\d+)\))", lambda m: _superscript(int(m.group(1) or m.group(2))), text)
    text = text.replace("**", "^").replace("*", "·")
    text = re.sub(r"\bsqrt\(", "√(", text)
    return re.sub(r"\bpi\b", "π", text)


def _latex(expr: sympy.Expr) -> str:
    expr = unguarded(expr)
    names = {s: _latex_name(s.name) for s in expr.free_symbols if isinstance(s, sympy.Symbol)}
    return sympy.latex(expr, symbol_names=names)


def _latex_name(name: str) -> str:
    """x stays x; grad_out becomes \\mathit{grad\\_out} (not grad with subscript out)."""
    return name if len(name) == 1 else "\\mathit{" + name.replace("_", "\\_") + "}"


@dataclass(frozen=True)
class Notation:
    """How formulas and the names they are assigned to are written."""

    expr: object
    name: object


UNICODE = Notation(expr=_unicode, name=str)
LATEX = Notation(expr=_latex, name=_latex_name)
