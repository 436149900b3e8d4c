"""Stage 2: expression text -> SymPy, by walking Python's ``ast`` with an allow-list.

Spec text never reaches ``eval``, ``sympify`` or ``parse_expr`` (SymPy documents that those run
arbitrary code). ``ast.parse`` only parses; every node kind is checked against the language of
the language (docs/guide/specs.md), and SymPy objects are built directly. Sizes are bounded before SymPy sees anything,
so no spec can make the build hang on a huge number or a deep nest.
"""

from __future__ import annotations

import ast
import functools
import math
import re
import sys
import time
import warnings

import sympy
from mpmath.libmp import NoConvergence
from sympy.codegen import cfunctions
from sympy.codegen.cfunctions import expm1
from sympy.core.evalf import PrecisionExhausted
from sympy.logic.boolalg import Boolean, BooleanFalse, BooleanTrue

from . import NOT_YET, external, special


class ExprError(ValueError):
    """A problem in an ``expr`` string, with a message a user can act on."""


class DerivativeError(ExprError):
    """A problem in the derivative formula ``index`` of the spec's ``extern`` named ``extern``."""

    def __init__(self, message: str, extern: str, index: int):
        super().__init__(message)
        self.extern, self.index = extern, index


class sigmoid(sympy.Function):  # lowercase: printed as the user wrote it
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


class softplus(sympy.Function):  # lowercase: printed as the user wrote it
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


class erfc(sympy.erfc):  # lowercase: printed as the user wrote it
    """erfc(u) with u as written. SymPy's writes erfc(-u) as 2 - erfc(u), which cancels where
    erfc(-u) is small: 0 in float64 where it is below 1e-16 (erfc(-x/sqrt(2)) for x < -8.3), so
    that log(erfc(-x/sqrt(2))/2), finite there, is -inf."""

    @classmethod
    def eval(cls, arg):
        if not arg.could_extract_minus_sign():
            return super().eval(arg)


class log1p(cfunctions.log1p):  # lowercase: printed as the user wrote it
    """log1p(c) of a number c as written. SymPy's is log(1 + c), which the generated code computes
    as math.log(1 + c), which cancels: 1.0000889e-12 for c = 1e-12. A Float c folds by mpmath's
    log1p. c = 0 and c <= -1 stay SymPy's: 0, and log(0) or a complex log, which the parser refuses."""

    @classmethod
    def eval(cls, arg):
        if not (arg.is_Number and arg > -1 and not arg.is_zero):
            return super().eval(arg)


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
    "erfc": (erfc, 1),
    "sigmoid": (sigmoid, 1),
    "softplus": (softplus, 1),
    "abs": (sympy.Abs, 1),
    # piecewise (v2): Piecewise with each branch's condition; derivatives branch by branch, and at a
    # tie or boundary the native op's (torch.minimum splits the gradient of a tie in halves,
    # torch.clamp passes it at either bound, relu gives 0 at 0)
    "where": (lambda cond, a, b: sympy.Piecewise((a, cond), (b, True)), 3),
    "min": (lambda a, b: sympy.Piecewise((a, a < b), (b, b < a), ((a + b) / 2, True)), 2),
    "max": (lambda a, b: sympy.Piecewise((a, a > b), (b, b > a), ((a + b) / 2, True)), 2),
    "clamp": (lambda x, lo, hi: sympy.Piecewise((hi, sympy.Or(x > hi, lo > hi)), (lo, x < lo), (x, True)), 3),
    "relu": (lambda x: sympy.Piecewise((x, x > 0), (0, True)), 1),
    **special.FUNCTIONS,
    **{name: (cls, cls.arity) for name, cls in external.SCIPY.items()},
}
# Arguments that are conditions (comparisons, and/or/not of them); every other argument is a number,
# and a condition given where a number is wanted is its 0/1 indicator.
CONDITION_ARGUMENTS = {"where": (0,)}
# Arguments that must be a non-negative integer written as a literal: polygamma's order, expn's n.
LITERAL_ARGUMENTS = {"polygamma": 0, **external.LITERAL_ARGUMENTS}
USAGE = {"where": "where(cond, a, b): a where cond holds, else b", "min": "min(a, b)", "max": "max(a, b)",
         "clamp": "clamp(x, lo, hi)", "atan2": "atan2(y, x)",
         "polygamma": "polygamma(n, x), n a whole number such as 1", "xlogy": "xlogy(x, y), x*log(y) and 0 where x is 0",
         **{name: cls.usage for name, cls in external.SCIPY.items()}}
CONSTANTS = {"pi": sympy.pi, "E": sympy.E}

MAX_CHARS = 2000
MAX_NODES = 400
MAX_DEPTH = 40
MAX_EXPONENT = 1000  # |n| in u**n
MAX_CONSTANT_BITS = 1000  # size of a number folded from number**number
MAX_CONSTANT = 1e300

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


def _check_result(result: sympy.Expr) -> None:
    if result.has(*_UNDEFINED):
        raise ExprError(_UNDEFINED_MESSAGE)
    if result.has(sympy.I):
        raise ExprError(_COMPLEX_MESSAGE)
    for number in result.atoms(sympy.Number):
        if not _fits_float(number):
            raise ExprError(f"the constant {_short(number)} is too large; constants must be at most 1e300 in size")


def _sigmoid(u: float) -> float:
    return 1 / (1 + math.exp(-u)) if u >= 0 else math.exp(u) / (1 + math.exp(u))


def _softplus(u: float) -> float:
    return max(u, 0.0) + math.log1p(math.exp(-abs(u)))


# The float meaning of each function, to check constant parts such as asin(2) or exp(1000).
_FLOAT_FUNCTIONS = {
    sympy.exp: math.exp, sympy.log: math.log, log1p: math.log1p, expm1: math.expm1, sympy.sin: math.sin,
    sympy.cos: math.cos, sympy.tan: math.tan, sympy.asin: math.asin, sympy.acos: math.acos,
    sympy.atan: math.atan, sympy.atan2: math.atan2, sympy.sinh: math.sinh, sympy.cosh: math.cosh,
    sympy.tanh: math.tanh, sympy.asinh: math.asinh, sympy.acosh: math.acosh, sympy.atanh: math.atanh,
    sympy.erf: math.erf, erfc: math.erfc, sigmoid: _sigmoid, softplus: _softplus, sympy.Abs: abs,
    sympy.loggamma: math.lgamma, sympy.polygamma: special.FLOAT_VALUES["polygamma"],
    sympy.erfinv: special.FLOAT_VALUES["erfinv"], special.xlogy: special.FLOAT_VALUES["xlogy"],
}


class _NoFloatMeaning(Exception):
    pass


def _check_constants(expr: sympy.Expr) -> None:
    """Every part without inputs or params must be a real float: asin(2) would be NaN and
    exp(1000) infinite in the generated code. Evaluated in floats, so the work is bounded."""
    if expr.free_symbols:
        for arg in expr.args:
            _check_constants(arg)
        return
    if expr.is_Number:
        return
    try:
        value = _float_value(expr)
    except _NoFloatMeaning:
        return  # a SymPy form this check does not know: left to SymPy's own checks above
    except ZeroDivisionError:
        raise ExprError(f"the constant part {_short(expr)} divides by a value that rounds to 0 in float64; "
                        "write it so that it does not cancel (expm1, log1p, ...)") from None
    except ValueError:
        raise ExprError(f"the constant part {_short(expr)} has no real value; check the function's domain") from None
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or abs(value) > MAX_CONSTANT:
        raise ExprError(f"the constant part {_short(expr)} is too large for a float")
    if abs(value) < sys.float_info.min:
        _check_not_below_range(expr)


def _check_not_below_range(expr: sympy.Expr) -> None:
    """Refuse a constant whose exact value is not 0 but below float64's normal range: exp(-800) is
    3.7e-348, which the generated code computes as 0 (x*exp(-800) would be 0 for every x), and
    exp(-720) a subnormal with 10 digits. A constant that is exactly 0 is left to ``_zero_kind``."""
    try:
        exact = expr.evalf(20, strict=True)
    except (*_SYMPY_ERRORS, PrecisionExhausted):
        return  # not shown to be nonzero
    if exact.is_Number and 0 < abs(exact) < sys.float_info.min:  # not tanh(20) - 1: that cancels, in range
        raise ExprError(
            f"the constant part {_short(expr)} is {sympy.sstr(exact.evalf(2))}, below float64's normal range "
            "(2.2e-308): the generated code would round it to 0 or to a few digits; write the formula so that "
            "no constant leaves the range (exp(x - 800), not x*exp(-800))")


ZERO_DIGITS = 30  # a constant SymPy evaluates to this many digits, with its error bounds, is not 0
ZERO_DIGITS_MAX = 100  # the most digits SymPy works to before giving up on a constant that cancels
ZERO_SECONDS = 2.0  # per expression, for rewrites that try to show a constant that cancels is exactly 0
_TRIGONOMETRIC = (sympy.sin, sympy.cos, sympy.tan, sympy.sinh, sympy.cosh, sympy.tanh)
# what SymPy's evalf and rewrites raise on a constant they cannot handle (then: not known to be 0)
_SYMPY_ERRORS = (ArithmeticError, ValueError, TypeError, NotImplementedError, AttributeError, RecursionError,
                 NoConvergence)


@functools.lru_cache(maxsize=1024)
def _zero_kind(value: sympy.Expr, rewrite: bool = True) -> str | None:
    """Whether a constant SymPy leaves unfolded is 0: None when it is not (SymPy's evalf finds its
    value to ZERO_DIGITS digits, error bounds kept), "zero" when it is exactly 0 (evaluated exactly,
    as xlogy(0, 2), or shown by a rewrite, as log(2) + log(3) - log(6) by logcombine), "unproven"
    when it cancels to 0 at every precision SymPy tries (ZERO_DIGITS_MAX digits) and no rewrite
    decides. SymPy's ``is_zero`` alone is not enough: it is None for log(2) + log(3) - log(6), and
    even False for erf(3 - log(8)/log(2)), which is 0. A declared extern's value is not known here.

    ``rewrite=False``: no rewrites (the expression's time for them is spent). The rewrites are
    cheap ones that stay out of SymPy's polynomial code, and so is ``is_zero`` (for an algebraic
    number it computes a minimal polynomial): simplify, radsimp, cancel and minimal_polynomial
    compile and exec code of their own, which the guard that no code runs while a spec loads
    refuses (tests/test_fuzz.py). 1/(1 + sqrt(2)) - sqrt(2) + 1 is then "unproven"."""
    if any(isinstance(call, external.UserExternBase) for call in value.atoms(sympy.Function)):
        return None
    numeric = _numeric_zero(value)
    if numeric != "cancels":
        return numeric
    if not rewrite:
        return "unproven"
    rewrites = [lambda v: sympy.logcombine(v, force=True), lambda v: sympy.expand_log(v, force=True),
                lambda v: sympy.expand(v, force=True)]  # force=True: a constant has no symbols to assume things of
    if value.has(*_TRIGONOMETRIC):
        rewrites.append(sympy.trigsimp)
    for rewritten_by in rewrites:
        try:
            rewritten = rewritten_by(value)
        except _SYMPY_ERRORS:
            continue
        numeric = _numeric_zero(rewritten)
        if numeric != "cancels":
            return numeric  # 0, or a value too small for SymPy's precision as written (exp(-1000) + 0)
    return "unproven"


def _numeric_zero(value: sympy.Expr) -> str | None:
    """SymPy's evalf of a constant: None when it finds a value to ZERO_DIGITS digits that is not 0
    (or cannot evaluate it at all), "zero" when the value is exactly 0 (mpmath gives an exact 0
    from exact arguments), "cancels" when it is 0 to all the ZERO_DIGITS_MAX digits it tries."""
    from sympy.core.evalf import PrecisionExhausted

    if value.is_Number:
        return "zero" if value == 0 else None
    try:
        approx = value.evalf(ZERO_DIGITS, maxn=ZERO_DIGITS_MAX, strict=True)
    except PrecisionExhausted:
        try:
            approx = value.evalf(ZERO_DIGITS, maxn=ZERO_DIGITS_MAX)
        except _SYMPY_ERRORS:
            return "cancels"
        return "zero" if approx is sympy.S.Zero else "cancels"
    except _SYMPY_ERRORS:
        return None
    return "zero" if approx.is_Number and approx == 0 else None


def _float_value(expr: sympy.Expr) -> float:
    if expr.is_Number or expr in (sympy.pi, sympy.E):
        value = float(expr)
    elif expr.is_Add:
        value = math.fsum(_float_value(arg) for arg in expr.args)
    elif expr.is_Mul:
        value = math.prod(_float_value(arg) for arg in expr.args)
    elif expr.is_Pow:
        base, exponent = _float_value(expr.base), _float_value(expr.exp)
        if base == 0 and exponent < 0:
            raise ZeroDivisionError  # math.pow's ValueError would read as no real value
        value = math.pow(base, exponent)
    elif expr.func in _FLOAT_FUNCTIONS:
        value = _FLOAT_FUNCTIONS[expr.func](*(_float_value(arg) for arg in expr.args))
    elif isinstance(expr, (special.SpecialFunctionBase, external.ScipyFunctionBase)):
        value = special.real_float(expr.exact(*(_float_value(arg) for arg in expr.args)))
    else:
        raise _NoFloatMeaning(type(expr).__name__)
    if not math.isfinite(value):
        raise OverflowError
    return value


def _short(expr: sympy.Expr) -> str:
    text = sympy.sstr(expr)
    return text if len(text) <= 40 else text[:37] + "..."


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
