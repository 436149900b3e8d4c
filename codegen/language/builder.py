"""A parsed expression's syntax tree -> SymPy, node by node, through an allow-list: each node kind
the language has is built, anything else refused with a message that names it.
"""

from __future__ import annotations

import ast
import math
import time

import sympy
from sympy.logic.boolalg import Boolean, BooleanFalse, BooleanTrue

from . import NOT_YET, external, special
from .functions import (
    CONDITION_ARGUMENTS,
    CONSTANTS,
    FUNCTIONS,
    LITERAL_ARGUMENTS,
    MAX_CONSTANT,
    MAX_CONSTANT_BITS,
    MAX_DEPTH,
    MAX_EXPONENT,
    USAGE,
    ExprError,
)
from .zero import ZERO_DIGITS_MAX, ZERO_SECONDS, _check_constants, _short, _zero_kind

_BINARY = {ast.Add: sympy.Add, ast.Sub: None, ast.Mult: sympy.Mul, ast.Div: None, ast.Pow: None}
# Left-associative operators of one precedence: a chain of them (a + b - c + ...) is built as a
# loop, so that a long flat sum counts as one level of nesting, not one per term.
_CHAINS = ((ast.Add, ast.Sub), (ast.Mult, ast.Div))
_LANGUAGE = "the language has numbers, inputs, params, pi, E, + - * / **, and calls such as exp(x)"
_OPERATOR_TEXT = {
    ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>",
}
_COMPARISONS = {ast.Lt: sympy.Lt, ast.LtE: sympy.Le, ast.Gt: sympy.Gt, ast.GtE: sympy.Ge, ast.Eq: sympy.Eq,
                ast.NotEq: sympy.Ne}
_NODE_TEXT = {
    ast.Subscript: "a subscript (a[i])", ast.Lambda: "a lambda",
    ast.List: "a list", ast.Tuple: "a tuple", ast.Dict: "a dict", ast.Set: "a set",
    ast.ListComp: "a comprehension", ast.SetComp: "a comprehension", ast.DictComp: "a comprehension",
    ast.GeneratorExp: "a generator expression", ast.JoinedStr: "an f-string", ast.NamedExpr: "':='",
    ast.Starred: "'*' unpacking", ast.Await: "'await'", ast.Yield: "'yield'", ast.YieldFrom: "'yield'",
    ast.Slice: "a slice", ast.FormattedValue: "an f-string",
}


_UNDEFINED = (sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)
_UNDEFINED_MESSAGE = "the expression is undefined or infinite as written (a division by zero or log(0)?)"


def _real_parts(value: sympy.Expr) -> sympy.Expr:
    """``value`` without ``re``/``im``: SymPy writes abs(exp(u)) as exp(re(u)) and abs(2**u) as
    2**re(u) when it cannot prove u real (asin(x/2) is complex for |x| > 2), and the printer has no
    re or im. Every part of a spec's expression is real wherever it is defined, so re(u) is u and
    im(u) is 0."""
    if value.has(sympy.re, sympy.im):
        value = value.replace(sympy.re, lambda u: u).replace(sympy.im, lambda u: sympy.S.Zero)
    return value


_COMPLEX_MESSAGE = "the expression has a complex value as written (e.g. sqrt of a negative constant)"


def _defined(value: sympy.Expr) -> sympy.Expr:
    """``value``, checked as soon as it is built, before an enclosing call or power sees it: SymPy
    raises TypeError comparing an undefined part (atan2(0, 0) is NaN), and can take minutes to
    evaluate a function of complex constants (atan2(acos(pi), acos(pi)): 100 s)."""
    if value.has(*_UNDEFINED):
        raise ExprError(_UNDEFINED_MESSAGE)
    if value.has(sympy.I):
        raise ExprError(_COMPLEX_MESSAGE)
    if not value.free_symbols:
        _check_constants(value)
    return value


def is_condition(value) -> bool:
    """True for a comparison, and/or/not of comparisons, or a constant truth value (a SymPy Symbol
    is a Boolean too, for logic: an input or param is a number here)."""
    return isinstance(value, Boolean) and not isinstance(value, sympy.Expr)


def number(value) -> sympy.Expr:
    """``value`` where a number is wanted: a condition becomes its 0/1 indicator."""
    if isinstance(value, BooleanTrue):
        return sympy.S.One
    if isinstance(value, BooleanFalse):
        return sympy.S.Zero
    if is_condition(value):
        return sympy.Piecewise((1, value), (0, True))
    return value


def condition(value, where: str):
    """``value`` where a condition is wanted; a number there is an error that says what to write."""
    if is_condition(value):
        return value
    raise ExprError(f"{where} must be a condition such as x > 0 (a comparison, or and/or/not of them), "
                    f"not the number {_short(value)}")


class _Builder:
    """Builds SymPy objects from allowed ``ast`` nodes; refuses everything else by name."""

    def __init__(self, symbols: dict[str, sympy.Symbol], inputs, params, names_known: bool = True,
                 functions=None):
        self.functions = FUNCTIONS if functions is None else functions
        self.symbols = symbols
        self.inputs = inputs
        self.params = params
        self.names_known = names_known
        self.depth = 0
        self.zeros: dict[ast.AST, str] = {}  # a node whose constant value was folded to 0 -> _zero_kind's
        self.zero_seconds = 0.0  # spent deciding whether constants are 0 (ZERO_SECONDS at most, then no rewrites)

    def build(self, node: ast.AST) -> sympy.Expr:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(f"the expression is nested more than {MAX_DEPTH} deep")
        try:
            method = getattr(self, f"_build_{type(node).__name__}", None)
            if method is None:
                what = _NODE_TEXT.get(type(node), type(node).__name__)
                raise ExprError(f"{what} is not allowed in an expression; {_LANGUAGE}")
            return self._fold_zero(node, _defined(_real_parts(method(node))))
        finally:
            self.depth -= 1

    def _fold_zero(self, node: ast.AST, value):
        """``value``, or 0 where it is a constant (no inputs or params) that is 0 but not folded by
        SymPy (log(2) + log(3) - log(6)): printed as written, it would be a float of about 1e-16,
        and a division by it about 1e16."""
        if isinstance(value, sympy.Expr) and not value.is_Atom and not value.free_symbols:
            started = time.monotonic()
            kind = _zero_kind(value, self.zero_seconds < ZERO_SECONDS)
            self.zero_seconds += time.monotonic() - started
            if kind is not None:
                self.zeros[node] = kind
                return sympy.S.Zero
        return value

    def _zero_message(self, message: str, node: ast.AST | None) -> str:
        """``message`` naming the constant the user wrote that is 0, where one was folded to 0."""
        found = [(part, self.zeros[part]) for part in ast.walk(node) if part in self.zeros] if node else []
        if not found:
            return message
        part, kind = next(((part, kind) for part, kind in found if kind == "zero"), found[0])
        if kind == "zero":
            why = "is exactly 0" if part is node else f"is 0 ({_written(part)} is exactly 0)"
            return f"{message}: {_written(node)} {why}; remove the division, or correct the constant"
        return (f"{message}: {_written(part)} is 0 to {ZERO_DIGITS_MAX} digits, and dbgen cannot show that it is "
                "not 0; write the constant in a simpler form (a number, or fewer terms)")

    def _build_Constant(self, node: ast.Constant) -> sympy.Expr:
        value = node.value
        if isinstance(value, bool) or value is None or value is Ellipsis:
            raise ExprError(f"'{value}' is not a number; only numbers, names and calls are allowed")
        if isinstance(value, int):
            return sympy.Integer(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ExprError("a number in the expression is too large for a float")
            return sympy.Float(value)
        if isinstance(value, complex):
            raise ExprError("complex numbers are not allowed; dbgen differentiates real functions")
        raise ExprError(f"a string is not allowed in an expression; {_LANGUAGE}")

    def _build_IfExp(self, node: ast.IfExp) -> sympy.Expr:
        raise ExprError("a conditional expression (a if c else b) is not allowed; write where(c, a, b)")

    def _build_Attribute(self, node: ast.Attribute) -> sympy.Expr:
        raise ExprError(f"attribute access ('.{node.attr}') is not allowed; call the language's functions by bare name, as in exp(x)")

    def _build_Name(self, node: ast.Name) -> sympy.Expr:
        name = node.id
        if name in self.symbols:
            return self.symbols[name]
        if name in CONSTANTS:
            return CONSTANTS[name]
        if name in self.functions:
            raise ExprError(f"'{name}' is a function; call it, as in {name}(x)")
        if not self.names_known:
            return self.symbols.setdefault(name, sympy.Symbol(name, real=True))
        known = [*self.inputs, *self.params, *CONSTANTS]
        listing = f"the inputs are: {', '.join(self.inputs)}" + (f"; the params: {', '.join(self.params)}" if self.params else "")
        raise ExprError(f"undefined name '{name}'{_hint(name, known)}; {listing} (add it to inputs or params)")

    def _build_UnaryOp(self, node: ast.UnaryOp) -> sympy.Expr:
        operand = self.build(node.operand)
        if isinstance(node.op, ast.USub):
            return -number(operand)
        if isinstance(node.op, ast.UAdd):
            return number(operand)
        text = "'not'" if isinstance(node.op, ast.Not) else "'~'"
        return sympy.Not(condition(operand, f"the operand of {text}"))

    def _build_Compare(self, node: ast.Compare) -> sympy.Expr:
        """``a < b``, and chains: ``0 < x < 1`` is ``0 < x and x < 1`` (each part built once)."""
        values = [number(self.build(part)) for part in (node.left, *node.comparators)]
        tests = []
        for op, left, right in zip(node.ops, values, values[1:]):
            if type(op) not in _COMPARISONS:
                text = "'is'" if isinstance(op, (ast.Is, ast.IsNot)) else "'in'"
                raise ExprError(f"{text} is not a comparison of the language; use < <= > >= == !=")
            tests.append(_COMPARISONS[type(op)](left, right))
        return sympy.And(*tests)

    def _build_BoolOp(self, node: ast.BoolOp) -> sympy.Expr:
        word = "and" if isinstance(node.op, ast.And) else "or"
        operands = [condition(self.build(value), f"each operand of '{word}'") for value in node.values]
        return sympy.And(*operands) if word == "and" else sympy.Or(*operands)

    def _build_BinOp(self, node: ast.BinOp) -> sympy.Expr:
        group = next((ops for ops in _CHAINS if isinstance(node.op, ops)), None)
        chain = []
        while group and isinstance(node, ast.BinOp) and isinstance(node.op, group):
            chain.append(node)
            node = node.left
        if not chain:
            _check_operator(node.op)
            if isinstance(node.op, (ast.BitAnd, ast.BitOr)):
                return self._combine(node)
            return self._apply(node.op, self.build(node.left), self.build(node.right), node.left, node.right)
        result = self.build(node)
        for link in reversed(chain):
            result = self._apply(link.op, result, self.build(link.right), link.left, link.right)
        return result

    def _combine(self, node: ast.BinOp) -> sympy.Expr:
        """``(a) & (b)``, ``(a) | (b)``: conditions combined, as torch's masks are."""
        text = "&" if isinstance(node.op, ast.BitAnd) else "|"
        where = f"each operand of '{text}' (write ({'x > 0'}) {text} ({'y > 0'}), with parentheses)"
        left, right = (condition(self.build(side), where) for side in (node.left, node.right))
        return sympy.And(left, right) if text == "&" else sympy.Or(left, right)

    def _apply(self, op: ast.operator, left: sympy.Expr, right: sympy.Expr, left_node: ast.AST | None = None,
               right_node: ast.AST | None = None) -> sympy.Expr:
        left, right = number(left), number(right)
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return _indicator_product(left, right) or _indicator_product(right, left) or left * right
        if isinstance(op, ast.Div):
            if right.is_zero:
                raise ExprError(self._zero_message("division by zero", right_node))
            return left / right
        if right.is_Number and right.is_negative and left.is_zero:
            raise ExprError(self._zero_message("division by zero (0 to a negative power)", left_node))
        return _power(left, right)

    def _build_Call(self, node: ast.Call) -> sympy.Expr:
        if not isinstance(node.func, ast.Name):
            if isinstance(node.func, ast.Attribute):
                raise ExprError("attribute access (a.b) is not allowed; call the language's functions by bare name")
            raise ExprError("only the language's functions can be called, by name, as in exp(x)")
        name = node.func.id
        if name not in self.functions:
            if name in NOT_YET and name not in self.symbols:
                raise ExprError(f"'{name}' is {NOT_YET[name]}")
            what = "an input or param, not a function" if name in self.symbols else "not a function of the language"
            raise ExprError(f"'{name}' is {what}{_hint(name, self.functions)}; the functions are: "
                            f"{', '.join(self.functions)} (declare your own under extern:)")
        if name in self.symbols:
            raise ExprError(f"'{name}' is an input or param of this spec, so the function {name}() cannot be "
                            "called in it; rename the input or param")
        if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
            raise ExprError(f"{name}() takes plain positional arguments only")
        function, arity = self.functions[name]
        if len(node.args) != arity:
            plural = "s" if arity != 1 else ""
            usage = f"; write {USAGE[name]}" if name in USAGE else ""
            raise ExprError(f"{name}() takes {arity} argument{plural}, got {len(node.args)}{usage}")
        conditions = CONDITION_ARGUMENTS.get(name, ())
        args = [condition(self.build(arg), f"{name}()'s first argument") if index in conditions
                else _literal(name, arg) if LITERAL_ARGUMENTS.get(name) == index
                else number(self.build(arg)) for index, arg in enumerate(node.args)]
        if isinstance(function, type) and issubclass(function, external.ExternalFunctionBase):
            self._check_constant_arguments(name, function, args, node.args)
        return function(*args)

    def _check_constant_arguments(self, name: str, function: type, args, nodes) -> None:
        """An external function is not differentiated in its order or parameter argument (jv's
        nu, a declared argument whose derivative is null): it must not depend on an input."""
        if not self.names_known:
            return
        inputs = {self.symbols[x] for x in self.inputs}
        for index in function.constant:
            found = sorted(str(s) for s in args[index].free_symbols & inputs)
            if not found:
                continue
            if issubclass(function, external.UserExternBase):
                argument = f"argument {function.declaration.args[index]}"
                why = f"its derivative in extern.{name}.derivatives is null"
            else:
                argument = "first argument" if index == 0 else f"argument {index + 1}"
                why = f"dbgen does not differentiate {name} in it; write {function.usage}"
            raise ExprError(f"{name}()'s {argument} must be a number or a param, not {ast.unparse(nodes[index])}, "
                            f"which depends on {', '.join(found)} ({why})")


def _written(node: ast.AST) -> str:
    """A part of the expression as the user wrote it (normalized by ``ast``), cut to a readable length."""
    text = ast.unparse(node)
    return text if len(text) <= 40 else text[:37] + "..."


def _literal(name: str, node: ast.expr) -> sympy.Integer:
    """polygamma's and expn's n: a whole number written in the spec (torch.polygamma and
    scipy.special.expn take an integer)."""
    value = node.value if isinstance(node, ast.Constant) else None
    if type(value) is int and 0 <= value <= special.MAX_POLYGAMMA_ORDER:
        return sympy.Integer(value)
    written = ast.unparse(node)
    what = f"the {'input or param' if isinstance(node, ast.Name) else 'number'} {written}"
    raise ExprError(f"{name}()'s first argument must be a whole number from 0 to {special.MAX_POLYGAMMA_ORDER} "
                    f"written as it is, such as {name}(1, x), not {what}")


def _indicator_product(indicator: sympy.Expr, value: sympy.Expr) -> sympy.Expr | None:
    """``value * (x < 1)`` as ``where(x < 1, value, 0)``: a condition used as a 0/1 factor selects."""
    if not isinstance(indicator, sympy.Piecewise) or not all(arg.expr.is_Number for arg in indicator.args):
        return None
    return sympy.Piecewise(*((value * arg.expr, arg.cond) for arg in indicator.args))


def _check_operator(op: ast.operator) -> None:
    if isinstance(op, ast.BitXor):
        raise ExprError("'^' is not power in dbgen (it is XOR in Python); write '**', as in x**2")
    if type(op) not in _BINARY and not isinstance(op, (ast.BitAnd, ast.BitOr)):
        text = _OPERATOR_TEXT.get(type(op), type(op).__name__)
        raise ExprError(f"operator '{text}' is not in the language; use + - * / **")


def _power(base: sympy.Expr, exponent: sympy.Expr) -> sympy.Expr:
    """base**exponent, refusing sizes that would make SymPy compute huge numbers."""
    if exponent.is_Number and abs(exponent) > MAX_EXPONENT:
        raise ExprError(f"the exponent {sympy.sstr(exponent)[:20]} is too large; at most {MAX_EXPONENT} is allowed")
    if base.is_Number and exponent.is_Number and base != 0:
        if not (_fits_float(base) and _fits_float(exponent)):
            raise ExprError("a number in the expression is too large")
        bits = abs(float(exponent)) * abs(math.log2(abs(float(base))))
        if bits > MAX_CONSTANT_BITS:
            raise ExprError("a power of numbers in the expression is too large to compute")
    if base.is_zero and exponent.is_Number and exponent.is_negative:
        raise ExprError("division by zero (0 to a negative power)")
    return sympy.Pow(base, exponent)


def _fits_float(number: sympy.Number) -> bool:
    try:
        return abs(float(number)) <= MAX_CONSTANT
    except (OverflowError, TypeError, ValueError):
        return False


def _hint(name: str, choices) -> str:
    from ..errors import did_you_mean

    return did_you_mean(name, choices)
