"""Stage 2: expression text -> SymPy, by walking Python's ``ast`` with an allow-list.

Spec text never reaches ``eval``, ``sympify`` or ``parse_expr`` (SymPy documents that those run
arbitrary code). ``ast.parse`` only parses; every node kind is checked against the language of
the contract, and SymPy objects are built directly. Sizes are bounded before SymPy sees anything,
so no spec can make the build hang on a huge number or a deep nest.
"""

from __future__ import annotations

import ast
import math

import sympy
from sympy.codegen.cfunctions import expm1, log1p


class ExprError(ValueError):
    """A problem in an ``expr`` string, with a message a user can act on."""


class sigmoid(sympy.Function):  # noqa: N801 - printed as the user wrote it
    """sigmoid(u) = 1/(1+exp(-u)); its derivative is a polynomial in its own value."""

    nargs = 1

    @classmethod
    def eval(cls, arg):
        if arg.is_zero:
            return sympy.S.Half

    def fdiff(self, argindex=1):
        value = sigmoid(self.args[0])
        return value * (1 - value)

    def _eval_rewrite_as_exp(self, arg, **kwargs):
        return 1 / (1 + sympy.exp(-arg))

    def _eval_evalf(self, prec):
        return self.rewrite(sympy.exp)._eval_evalf(prec)

    def _eval_is_real(self):
        return self.args[0].is_real


class softplus(sympy.Function):  # noqa: N801 - printed as the user wrote it
    """softplus(u) = log(1+exp(u)); its derivative is sigmoid(u)."""

    nargs = 1

    @classmethod
    def eval(cls, arg):
        if arg.is_zero:
            return sympy.log(2)

    def fdiff(self, argindex=1):
        return sigmoid(self.args[0])

    def _eval_rewrite_as_exp(self, arg, **kwargs):
        return sympy.log(1 + sympy.exp(arg))

    def _eval_evalf(self, prec):
        return self.rewrite(sympy.exp)._eval_evalf(prec)

    def _eval_is_real(self):
        return self.args[0].is_real


FUNCTIONS: dict[str, tuple[object, int]] = {
    "exp": (sympy.exp, 1),
    "log": (sympy.log, 1),
    "log1p": (log1p, 1),
    "expm1": (expm1, 1),
    "sqrt": (sympy.sqrt, 1),
    "sin": (sympy.sin, 1),
    "cos": (sympy.cos, 1),
    "tan": (sympy.tan, 1),
    "asin": (sympy.asin, 1),
    "acos": (sympy.acos, 1),
    "atan": (sympy.atan, 1),
    "atan2": (sympy.atan2, 2),
    "sinh": (sympy.sinh, 1),
    "cosh": (sympy.cosh, 1),
    "tanh": (sympy.tanh, 1),
    "asinh": (sympy.asinh, 1),
    "acosh": (sympy.acosh, 1),
    "atanh": (sympy.atanh, 1),
    "erf": (sympy.erf, 1),
    "erfc": (sympy.erfc, 1),
    "sigmoid": (sigmoid, 1),
    "softplus": (softplus, 1),
    "abs": (sympy.Abs, 1),
}
CONSTANTS = {"pi": sympy.pi, "E": sympy.E}

MAX_CHARS = 2000
MAX_NODES = 400
MAX_DEPTH = 40
MAX_EXPONENT = 1000  # |n| in u**n
MAX_CONSTANT_BITS = 1000  # size of a number folded from number**number
MAX_CONSTANT = 1e300

_BINARY = {ast.Add: sympy.Add, ast.Sub: None, ast.Mult: sympy.Mul, ast.Div: None, ast.Pow: None}
_OPERATOR_TEXT = {
    ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>",
    ast.BitOr: "|", ast.BitAnd: "&",
}
_NODE_TEXT = {
    ast.Attribute: "attribute access (a.b)", ast.Subscript: "subscripts (a[i])", ast.Lambda: "lambdas",
    ast.Compare: "comparisons", ast.BoolOp: "'and'/'or'", ast.IfExp: "conditional expressions",
    ast.List: "lists", ast.Tuple: "tuples", ast.Dict: "dicts", ast.Set: "sets",
    ast.ListComp: "comprehensions", ast.SetComp: "comprehensions", ast.DictComp: "comprehensions",
    ast.GeneratorExp: "generator expressions", ast.JoinedStr: "f-strings", ast.NamedExpr: "':='",
    ast.Starred: "'*' unpacking", ast.Await: "'await'", ast.Yield: "'yield'", ast.YieldFrom: "'yield'",
    ast.Slice: "slices",
}


def parse_expr(text: str, inputs: tuple[str, ...], params: tuple[str, ...]) -> sympy.Expr:
    """Parse ``text`` into a real SymPy expression of the given input and param symbols."""
    tree = _parse_bounded(text)
    symbols = {name: sympy.Symbol(name, real=True) for name in (*inputs, *params)}
    result = _Builder(symbols, inputs, params).build(tree.body)
    _check_result(result)
    return result


def _parse_bounded(text: str) -> ast.Expression:
    if len(text) > MAX_CHARS:
        raise ExprError(f"the expression is {len(text)} characters; at most {MAX_CHARS} are allowed")
    depth = deepest = 0
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        raise ExprError(f"parentheses are nested {deepest} deep; at most {MAX_DEPTH} are allowed")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        hint = "; write '**' for powers" if "^" in text else ""
        raise ExprError(f"syntax error{where}: {exc.msg}{hint}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ExprError(f"cannot parse the expression: {exc}") from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise ExprError(f"the expression has {count} syntax nodes; at most {MAX_NODES} are allowed")
    return tree


def _check_result(result: sympy.Expr) -> None:
    if result.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise ExprError("the expression is undefined or infinite as written (a division by zero or log(0)?)")
    if result.has(sympy.I):
        raise ExprError("the expression has a complex value as written (e.g. sqrt of a negative constant)")
    for number in result.atoms(sympy.Number):
        if not _fits_float(number):
            raise ExprError(f"the constant {sympy.sstr(number)[:40]} is too large")


class _Builder:
    """Builds SymPy objects from allowed ``ast`` nodes; refuses everything else by name."""

    def __init__(self, symbols: dict[str, sympy.Symbol], inputs, params):
        self.symbols = symbols
        self.inputs = inputs
        self.params = params
        self.depth = 0

    def build(self, node: ast.AST) -> sympy.Expr:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(f"the expression is nested more than {MAX_DEPTH} deep")
        try:
            method = getattr(self, f"_build_{type(node).__name__}", None)
            if method is None:
                raise ExprError(f"{_NODE_TEXT.get(type(node), type(node).__name__)} are not allowed in expressions")
            return method(node)
        finally:
            self.depth -= 1

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
        raise ExprError("strings and bytes are not allowed in expressions")

    def _build_Name(self, node: ast.Name) -> sympy.Expr:
        name = node.id
        if name in self.symbols:
            return self.symbols[name]
        if name in CONSTANTS:
            return CONSTANTS[name]
        if name in FUNCTIONS:
            raise ExprError(f"'{name}' is a function; call it, as in {name}(x)")
        known = [*self.inputs, *self.params, *CONSTANTS]
        listing = f"inputs: {', '.join(self.inputs)}" + (f"; params: {', '.join(self.params)}" if self.params else "")
        raise ExprError(f"undefined name '{name}'{_hint(name, known)}; the {listing}")

    def _build_UnaryOp(self, node: ast.UnaryOp) -> sympy.Expr:
        operand = self.build(node.operand)
        if isinstance(node.op, ast.USub):
            return -operand
        if isinstance(node.op, ast.UAdd):
            return operand
        op = {ast.Not: "'not'", ast.Invert: "'~'"}.get(type(node.op), "this unary operator")
        raise ExprError(f"{op} is not allowed in expressions")

    def _build_BinOp(self, node: ast.BinOp) -> sympy.Expr:
        if isinstance(node.op, ast.BitXor):
            raise ExprError("'^' is not power in dbgen (it is XOR in Python); write '**', as in x**2")
        if type(node.op) not in _BINARY:
            text = _OPERATOR_TEXT.get(type(node.op), type(node.op).__name__)
            raise ExprError(f"operator '{text}' is not in the language; use + - * / **")
        left, right = self.build(node.left), self.build(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div):
            if right.is_zero:
                raise ExprError("division by zero")
            return left / right
        return _power(left, right)

    def _build_Call(self, node: ast.Call) -> sympy.Expr:
        if not isinstance(node.func, ast.Name):
            if isinstance(node.func, ast.Attribute):
                raise ExprError("attribute access (a.b) is not allowed; call the language's functions by bare name")
            raise ExprError("only the language's functions can be called, by name, as in exp(x)")
        name = node.func.id
        if name not in FUNCTIONS:
            what = "an input or param, not a function" if name in self.symbols else "not a function of the language"
            raise ExprError(f"'{name}' is {what}{_hint(name, FUNCTIONS)}; the functions are: {', '.join(FUNCTIONS)}")
        if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
            raise ExprError(f"{name}() takes plain positional arguments only")
        function, arity = FUNCTIONS[name]
        if len(node.args) != arity:
            plural = "s" if arity != 1 else ""
            raise ExprError(f"{name}() takes {arity} argument{plural}, got {len(node.args)}")
        return function(*(self.build(arg) for arg in node.args))


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
    from .errors import did_you_mean

    return did_you_mean(name, choices)
