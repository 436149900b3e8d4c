"""Expression text -> SymPy, by walking Python's ``ast`` with an allow-list.

Spec text never reaches ``eval``, ``sympify`` or ``parse_expr`` (SymPy documents that those run
arbitrary code). ``ast.parse`` only parses; ``builder`` checks every node kind against the
language (docs/guide/specs.md) and builds SymPy objects directly, from the table in
``functions``; ``zero`` checks the constants. Sizes are bounded before SymPy sees anything, so no
spec can make the build hang on a huge number or a deep nest.
"""

from __future__ import annotations

import ast
import functools
import re
import warnings

import sympy

from . import external
from .builder import (
    _COMPLEX_MESSAGE,
    _UNDEFINED,
    _UNDEFINED_MESSAGE,
    _Builder,
    _fits_float,
    number,
)
from .functions import FUNCTIONS, MAX_CHARS, MAX_DEPTH, MAX_NODES, ExprError
from .zero import _check_constants, _short


class DerivativeError(ExprError):
    """A problem in the derivative formula ``index`` of the spec's ``extern`` named ``extern``."""

    def __init__(self, message: str, extern: str, index: int):
        super().__init__(message)
        self.extern, self.index = extern, index


def parse_expr(text: str, inputs: tuple[str, ...] | None, params: tuple[str, ...] | None, externs=()) -> sympy.Expr:
    """An expression of the spec language as SymPy, through an ``ast`` allow-list: no code runs.

    Args:
        text: the expression, as the spec writes it.
        inputs: the input names; None where they are not known (missing or invalid in the spec):
            every name is then taken for a symbol, so that the rest of the expression is checked.
        params: the param names; None as for ``inputs``.
        externs: the spec's declared functions (``spec.Extern``), callable like the language's.

    Returns:
        A real SymPy expression in symbols named as the inputs and params.

    Raises:
        ExprError: what is wrong, in the words of the language (a name not defined, an arity, a
            size past the bounds).
    """
    return _parse(text, inputs, params, declared_functions(tuple(externs)) if externs else {})


def spec_formulas(spec) -> tuple[tuple[str, sympy.Expr], ...]:
    """A loaded spec's formulas as SymPy, each with the spec key it stands at.

    Args:
        spec: a ``spec.Spec`` (read for its inputs, params, externs and formula texts).

    Returns:
        (key, formula) per formula, in the spec's order: ``expr``, or ``outputs.NAME`` per output.

    Raises:
        SpecErrors: a formula that does not parse, reported on its line (a spec the loader
            accepted parses; this is for specs made in code).
    """
    from ..errors import SpecErrors

    keys = tuple(f"outputs.{name}" for name, _ in spec.outputs) or ("expr",)
    parsed = []
    for key, (_, text) in zip(keys, spec.formulas):
        try:
            parsed.append((key, parse_expr(text, spec.inputs, spec.param_names, spec.externs)))
        except ExprError as exc:
            raise SpecErrors([spec.problem(key, f"{key}: {exc}")]) from None
    return tuple(parsed)


@functools.lru_cache(maxsize=64)
def declared_functions(externs) -> dict[str, type]:
    """The spec's externs as SymPy classes with their derivatives parsed (``parse_derivative``
    raises ExprError naming the extern and argument). One set of classes per declaration, so that
    every formula of a spec calls the same ones."""
    classes = external.declared_classes(externs)
    for extern in externs:
        cls = classes[extern.name]
        cls.derivatives = tuple(
            None if text is None else parse_derivative(extern, index, text, classes)
            for index, text in enumerate(extern.derivatives)
        )
    return classes


def parse_derivative(extern, index: int, text: str, classes: dict[str, type]) -> sympy.Expr:
    """The derivative formula ``index`` of a declared extern, in its arguments: those with a
    derivative are differentiable, the others numbers or params; DerivativeError otherwise."""
    differentiable = tuple(arg for arg, d in zip(extern.args, extern.derivatives) if d is not None)
    constant = tuple(arg for arg, d in zip(extern.args, extern.derivatives) if d is None)
    try:
        return _parse(text, differentiable, constant, classes)
    except ExprError as exc:
        raise DerivativeError(str(exc), extern.name, index) from None


def _parse(text: str, inputs, params, declared: dict[str, type]) -> sympy.Expr:
    tree = _parse_bounded(text)
    _check_underflow(text, tree)
    names_known = inputs is not None and params is not None
    inputs, params = inputs or (), params or ()
    symbols = {name: sympy.Symbol(name, real=True) for name in (*inputs, *params)}
    functions = {**FUNCTIONS, **{name: (cls, cls.arity) for name, cls in declared.items()}}
    builder = _Builder(symbols, inputs, params, names_known, functions)
    result = _without_ite(number(builder.build(tree.body)))  # a bare condition: 0/1
    _check_result(result)
    _check_constants(result)
    return result


def _check_underflow(text: str, tree: ast.Expression) -> None:
    """Refuse a number written nonzero that float64 reads as 0 (1e-400): the spec's author meant
    something else, and the generated code would compute with 0."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, float) and node.value == 0:
            written = ast.get_source_segment(text, node) or ""
            if re.search(r"[1-9]", re.split(r"[eE]", written)[0]):
                raise ExprError(f"the number {written} is below float64's smallest number: it would be 0; write 0 "
                                "if you mean it, or a number of at least 5e-324 in size")


def _without_ite(result: sympy.Expr) -> sympy.Expr:
    """``result`` with each if-then-else of conditions written with and, or and not.

    SymPy writes the condition of a choice on a choice that way (clamp(clamp(relu(a), 2, 2), u, -2):
    ITE(a > 0, a > 2, False)); no printer writes an ITE of tensors and Python bools alike, and its
    rewrite for Python fails on a condition that is itself such a choice."""
    if not result.has(sympy.logic.boolalg.ITE):
        return result
    # (a & b) | (~a & c), not ITE.to_nnf(): its simplification took 16 s for the conditions of
    # max(max(max(x, y), z), min(x, min(y, z))), and the spec could not be built
    return result.replace(lambda e: isinstance(e, sympy.logic.boolalg.ITE),
                          lambda e: sympy.Or(sympy.And(e.args[0], e.args[1]), sympy.And(sympy.Not(e.args[0]), e.args[2])))


def _parse_bounded(text: str) -> ast.Expression:
    if len(text) > MAX_CHARS:
        raise ExprError(f"the expression is {len(text)} characters; at most {MAX_CHARS} are allowed")
    control = next((ch for ch in text if (ord(ch) < 32 and ch not in "\t\n\r") or ord(ch) == 127), None)
    if control is not None:
        raise ExprError(f"the expression contains the control character {control!r}; remove it")
    depth = deepest = 0
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        raise ExprError(f"parentheses are nested {deepest} deep; at most {MAX_DEPTH} are allowed")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a SyntaxWarning would reach the user's terminal
            tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        hint = "; write '**' for powers" if "^" in text else "; write one formula, such as x * exp(-x**2)"
        raise ExprError(f"syntax error{where}: {exc.msg}{hint}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ExprError(f"cannot parse the expression: {exc}") from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise ExprError(f"the expression has {count} syntax nodes; at most {MAX_NODES} are allowed")
    return tree


def _check_result(result: sympy.Expr) -> None:
    if result.has(*_UNDEFINED):
        raise ExprError(_UNDEFINED_MESSAGE)
    if result.has(sympy.I):
        raise ExprError(_COMPLEX_MESSAGE)
    for constant in result.atoms(sympy.Number):
        if not _fits_float(constant):
            raise ExprError(f"the constant {_short(constant)} is too large; constants must be at most 1e300 in size")
