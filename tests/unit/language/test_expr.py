"""The expression language (docs/guide/specs.md): what parses, to which SymPy object; what is refused,
with a message that says what to do; bounded work; and spec text never evaluated."""

from __future__ import annotations

import ast
import builtins
import math
import random
import sys
import time
import warnings

import pytest
import sympy
import sympy.parsing.sympy_parser
from sympy.codegen.cfunctions import expm1

from codegen.errors import close_match, edit_distance
from codegen.language import NOT_YET
from codegen.language import expr as expr_module
from codegen.language.expr import ExprError, parse_expr
from codegen.language.functions import erfc, log1p, sigmoid, softplus

LIMIT_S = 2.0
x, y, a = (sympy.Symbol(name, real=True) for name in ("x", "y", "a"))

CONTRACT_FUNCTIONS = ["exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "sigmoid", "softplus", "abs"]
EXPECTED = {
    "exp": sympy.exp(x), "log": sympy.log(x), "log1p": log1p(x), "expm1": expm1(x), "sqrt": sympy.sqrt(x),
    "sin": sympy.sin(x), "cos": sympy.cos(x), "tan": sympy.tan(x), "asin": sympy.asin(x), "acos": sympy.acos(x),
    "atan": sympy.atan(x), "atan2": sympy.atan2(y, x), "sinh": sympy.sinh(x), "cosh": sympy.cosh(x),
    "tanh": sympy.tanh(x), "asinh": sympy.asinh(x), "acosh": sympy.acosh(x), "atanh": sympy.atanh(x),
    "erf": sympy.erf(x), "erfc": erfc(x), "sigmoid": sigmoid(x), "softplus": softplus(x), "abs": sympy.Abs(x),
}


def parse(text: str, inputs=("x", "y"), params=("a",)) -> sympy.Expr:
    start = time.perf_counter()
    try:
        return parse_expr(text, inputs, params)
    finally:
        assert time.perf_counter() - start < LIMIT_S, f"parsing {text[:60]!r} took too long"


def refused(text: str, inputs=("x", "y"), params=("a",)) -> str:
    with pytest.raises(ExprError) as raised:
        parse(text, inputs, params)
    return str(raised.value)


# What parses, and to what

PIECEWISE = ("where", "min", "max", "clamp", "relu")  # tested in test_branches.py
SPECIAL = ["lgamma", "digamma", "polygamma", "erfinv", "xlogy", "sinc", "i0", "i0e", "i1", "i1e", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0"]
SCIPY = ["jv", "yv", "iv", "kv", "ive", "kve", "expi", "expn", "gammainc", "gammaincc", "lambertw", "zeta", "fresnel_s", "fresnel_c", "airy_ai", "airy_ai_prime", "airy_bi", "airy_bi_prime", "struve", "ellipk", "ellipe"]


def test_the_language_has_exactly_the_contract_functions():
    assert sorted(expr_module.FUNCTIONS) == sorted([*CONTRACT_FUNCTIONS, *PIECEWISE, *SPECIAL, *SCIPY])
    assert sorted(CONTRACT_FUNCTIONS) == sorted(EXPECTED)


@pytest.mark.parametrize("name", CONTRACT_FUNCTIONS)
def test_each_function_parses_to_its_sympy_object(name):
    text = "atan2(y, x)" if name == "atan2" else f"{name}(x)"
    assert parse(text) == EXPECTED[name]


def test_sigmoid_means_one_over_one_plus_exp_minus_u():
    assert sympy.simplify(sigmoid(x).rewrite(sympy.exp) - 1 / (1 + sympy.exp(-x))) == 0
    assert float(sigmoid(sympy.Float(0.3)).evalf()) == pytest.approx(1 / (1 + math.exp(-0.3)))
    assert sigmoid(0) == sympy.Rational(1, 2)


def test_softplus_means_log_of_one_plus_exp_u():
    assert sympy.simplify(softplus(x).rewrite(sympy.exp) - sympy.log(1 + sympy.exp(x))) == 0
    assert float(softplus(sympy.Float(-1.5)).evalf()) == pytest.approx(math.log1p(math.exp(-1.5)))
    assert softplus(0) == sympy.log(2)


@pytest.mark.parametrize("function", [sigmoid, softplus])
def test_custom_function_derivative_matches_its_formula(function):
    formula = function(x).rewrite(sympy.exp)
    for point in (-2.0, 0.0, 0.7):
        exact = sympy.diff(formula, x).subs(x, point)
        assert float(sympy.diff(function(x), x).subs(x, point).evalf()) == pytest.approx(float(exact))


def test_pi_and_e_are_the_constants():
    assert parse("pi") == sympy.pi
    assert parse("E") == sympy.E
    assert parse("E**x") == sympy.exp(x)


@pytest.mark.parametrize("text, value", [("2", sympy.Integer(2)), ("0.5", sympy.Float(0.5)), ("1e-3", sympy.Float(0.001))])
def test_numbers(text, value):
    result = parse(text)
    assert result.is_Number and result == value


def test_unary_minus():
    assert parse("-x") == -x
    assert parse("--x") == x
    assert parse("-(x + y)") == -x - y


def test_params_are_real_symbols_like_inputs():
    result = parse("a * x", inputs=("x",), params=("a",))
    assert result == a * x
    assert all(symbol.is_real for symbol in result.free_symbols)


@pytest.mark.parametrize("text, expected", [
    ("-x**2", -(x**2)),
    ("-2**2", sympy.Integer(-4)),
    ("2**3**2", sympy.Integer(512)),
    ("8/2/2", sympy.Integer(2)),
    ("1 - 2 - 3", sympy.Integer(-4)),
    ("x - y + x", 2 * x - y),
    ("2 + 3*4", sympy.Integer(14)),
    ("(2 + 3)*4", sympy.Integer(20)),
    ("x/y*y", x),
    ("2*-x", -2 * x),
])
def test_operator_precedence_and_associativity(text, expected):
    assert parse(text) == expected


def test_minus_x_squared_is_not_minus_x_all_squared():
    assert parse("-x**2").subs(x, 3) == -9


def test_a_long_flat_sum_is_not_too_deep():
    assert parse(" + ".join(["x"] * 90)) == 90 * x
    assert parse(" - ".join(["x"] * 90)) == -88 * x
    assert parse(" * ".join(["x"] * 90)) == x**90


# What is refused, and what the message says to do

@pytest.mark.parametrize("text, fragment", [
    ("x^2", "write '**', as in x**2"),
    ("x ^^ 2", "write '**' for powers"),
    ("sinn(x)", "did you mean 'sin'"),
    ("tanhh(x)", "did you mean 'tanh'"),
    ("atan2(x)", "atan2() takes 2 arguments, got 1"),
    ("exp(x, y)", "exp() takes 1 argument, got 2"),
    ("exp(x=1)", "takes plain positional arguments only"),
    ("z + x", "undefined name 'z'; the inputs are: x, y; the params: a (add it to inputs or params)"),
    ("xx + 1", "undefined name 'xx' (did you mean 'x'?)"),
    ("exp + x", "'exp' is a function; call it, as in exp(x)"),
    ("x(2)", "'x' is an input or param, not a function"),
    ("a(x)", "'a' is an input or param, not a function"),
    ("torch.exp(x)", "call the language's functions by bare name"),
    ("x.real", "attribute access ('.real') is not allowed"),
    ("x // 2", "operator '//' is not in the language; use + - * / **"),
    ("x % 2", "operator '%' is not in the language"),
    ("1/0", "division by zero"),
    ("0**-1", "division by zero (0 to a negative power)"),
    ("log(0)", "undefined or infinite as written"),
    ("sqrt(-1)", "complex value"),
    ("asin(2) + x", "the constant part asin(2) has no real value; check the function's domain"),
    ("(-8)**(1/3) * x", "has no real value"),
    ("x / (tanh(20) - 1)", "the constant part 1/(-1 + tanh(20)) divides by a value that rounds to 0 in float64"),
    ("x * 1e-400", "the number 1e-400 is below float64's smallest number: it would be 0"),
    ("exp(1000) * x", "the constant part exp(1000) is too large for a float"),
    ("x * exp(-800)", "the constant part exp(-800) is 3.7e-348, below float64's normal range"),  # was 0 for every x
    ("x * exp(-720)", "the constant part exp(-720) is 2.0e-313, below float64's normal range"),  # a subnormal
    ("1j", "complex numbers are not allowed"),
    ("lambda: x", "a lambda is not allowed in an expression; the language has numbers"),
    ("x if y else 1", "a conditional expression (a if c else b) is not allowed"),
    ("x if x > 0 else y", "write where(c, a, b)"),
    ("'text'", "a string is not allowed"),
    ("2**10**10", "the exponent 10000000000 is too large; at most 1000 is allowed"),
    ("x**100000", "the exponent 100000 is too large"),
    ("1e999", "too large for a float"),
    ("(" * 500 + "x" + ")" * 500, "parentheses are nested 500 deep; at most 40 are allowed"),
    ("x +", "syntax error"),
    ("", "syntax error"),
])
def test_refusal_message_says_what_to_do(text, fragment):
    assert fragment in refused(text)


# Did-you-mean: a suggestion only for what is a typo (codegen.errors.close_match states the rule)

LANGUAGE_NAMES = [*CONTRACT_FUNCTIONS, "pi", "E"]


@pytest.mark.parametrize("word, choices, expected", [
    ("sinn", CONTRACT_FUNCTIONS, "sin"),  # a letter added
    ("tanhh", CONTRACT_FUNCTIONS, "tanh"),
    ("sigmod", CONTRACT_FUNCTIONS, "sigmoid"),  # a letter dropped
    ("softpuls", CONTRACT_FUNCTIONS, "softplus"),  # two neighbours swapped
    ("Sin", CONTRACT_FUNCTIONS, "sin"),  # case
    ("xx", ["x", "y", "a"], "x"),
    ("min", CONTRACT_FUNCTIONS, None),  # one letter from sin, but short and a different first letter
    ("max", CONTRACT_FUNCTIONS, None),
    ("cot", CONTRACT_FUNCTIONS, "cos"),  # short, same first letter, one edit: a typo
    ("z", ["x", "y", "a"], None),
    ("relu", CONTRACT_FUNCTIONS, None),
    ("erfinv", CONTRACT_FUNCTIONS, None),  # three edits from erfc: more than one per three letters
    ("exponential", CONTRACT_FUNCTIONS, None),
    ("exponentail", ["exponential"], "exponential"),  # long words allow an edit per three letters
])
def test_close_match_suggests_typos_only(word, choices, expected):
    assert close_match(word, choices) == expected


@pytest.mark.parametrize("text, name", [("Min(x, 1)", "min"), ("MAX(x, y)", "max"), ("Where(x > 0, x, 0)", "where")])
def test_min_and_max_in_other_cases_suggest_the_function(text, name):
    assert f"did you mean '{name}'?" in refused(text)


@pytest.mark.parametrize("a, b, distance", [
    ("", "", 0), ("abc", "abc", 0), ("abc", "", 3), ("kitten", "sitting", 3), ("ca", "ac", 1), ("abcd", "acbd", 1),
    ("sinn", "sin", 1), ("min", "sin", 1), ("tahn", "tanh", 1),
])
def test_edit_distance(a, b, distance):
    assert edit_distance(a, b) == edit_distance(b, a) == distance


def test_close_match_on_a_huge_word_is_quick():
    start = time.perf_counter()
    assert close_match("x" * 60_000, [*CONTRACT_FUNCTIONS, "x" * 59_999]) is None
    assert close_match("x" * 100, ["x" * 99, *CONTRACT_FUNCTIONS * 50]) == "x" * 99
    assert time.perf_counter() - start < LIMIT_S


@pytest.mark.parametrize("name", sorted(NOT_YET))
def test_a_name_not_in_the_language_yet_says_so_and_suggests_nothing(name):
    message = refused(f"{name}(x)")
    assert message.startswith(f"'{name}' is {NOT_YET[name]}") and "did you mean" not in message
    assert name not in expr_module.FUNCTIONS


@pytest.mark.parametrize("text, fragment, reference", [
    ("gelu(x)", "write x*(1 + erf(x/sqrt(2)))/2", lambda u: u * (1 + math.erf(u / math.sqrt(2))) / 2),
    ("logit(x)", "write log(x) - log1p(-x)", lambda u: math.log(u / (1 - u))),
    ("logsigmoid(x)", "write -softplus(-x)", lambda u: -math.log1p(math.exp(-u))),
    ("ndtr(x)", "write (1 + erf(x/sqrt(2)))/2", lambda u: (1 + math.erf(u / math.sqrt(2))) / 2),
])
def test_the_formula_a_hint_gives_is_the_function(text, fragment, reference):
    """The formulas the messages give are exact: checked against the function at points."""
    assert fragment in refused(text)
    two = text.startswith(("min", "max"))
    names = ("a", "b") if two else ("x",)
    formula = parse_expr(fragment.split("write ", 1)[1], names, ())
    for point in [(0.3, 0.7), (0.9, 0.2), (0.5, 0.5), (0.01, 0.99)]:
        args = point if two else point[:1]
        value = formula.subs({sympy.Symbol(n, real=True): v for n, v in zip(names, args)})
        assert float(value.evalf()) == pytest.approx(reference(*args), rel=1e-12, abs=1e-15)


def test_a_param_with_a_not_yet_name_is_a_param():
    assert parse("gamma * x", params=("gamma",)) == sympy.Symbol("gamma", real=True) * x
    assert "'gamma' is an input or param, not a function" in refused("gamma(x)", params=("gamma",))


# Names unknown (the spec's inputs or params missing or invalid): every name is taken for a symbol,
# so that the rest of the expression is still checked

def test_with_names_unknown_any_name_parses():
    result = parse_expr("zz * sin(x) + k", None, None)
    assert {s.name for s in result.free_symbols} == {"zz", "x", "k"} and all(s.is_real for s in result.free_symbols)
    assert parse_expr("a * x", ("x",), None) == parse_expr("a * x", ("x",), ("a",))


@pytest.mark.parametrize("text, fragment", [
    ("sinn(x)", "'sinn' is not a function of the language (did you mean 'sin'?)"),
    ("x ^ 2", "write '**'"),
    ("exp(x", "syntax error"),
    ("exp + x", "'exp' is a function; call it"),
    ("maximum(x, k)", "'maximum' is not in the language; write max(a, b)"),
    ("k(x)", "'k' is not a function of the language"),
    ("log(0) * zz", "undefined or infinite as written"),
])
def test_with_names_unknown_the_other_problems_are_still_found(text, fragment):
    with pytest.raises(ExprError) as raised:
        parse_expr(text, None, None)
    assert fragment in str(raised.value)


def test_python_syntax_warnings_do_not_leak_to_the_user():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert "a conditional expression" in refused("1if x else 2")
    assert [str(w.message) for w in caught] == []


# Bounded work on hostile input

HOSTILE = [
    "__import__('os').system('touch PWNED')",
    "__import__('os')",
    "eval('1')",
    "exec('x = 1')",
    "open('PWNED', 'w')",
    "(lambda: x)()",
    "x[0]",
    "x[0:1]",
    "b'x'",
    "(z := x)",
    "f'{x}'",
    "[x for x in y]",
    "{x for x in y}",
    "{x: y}",
    "(x, y)",
    "[x]",
    "x and y",
    "not x",
    "~x",
    "x @ y",
    "x << 2",
    "...",
    "None",
    "True",
    "*x",
    "exp(*x)",
    "exp(x)(y)",
    "x.__class__.__bases__",
    "2**10**10",
    "9**9**9**9",
    "10**300 * 10**300",
    "2.0**1000 * 2**1000",
    "x**100000",
    "sin(x)**(10**300)",
    "(" * 500 + "x" + ")" * 500,
    "[" * 200 + "x" + "]" * 200,
    "-" * 1000 + "x",
    "exp(" * 100 + "x" + ")" * 100,
    "x" + " + x" * 3000,
    "x" + "+x" * 900,
    "1" * 5000,
    "9" * 1999,
    "x\0",
    "\x1b[2Jx",
    "1/(x - x)",
    "log(1 - 1)",
    "exp(exp(exp(exp(10))))",
    "acosh(0)",
    "atanh(1)",
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_expression_is_refused_quickly(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(text)
    assert not (tmp_path / "PWNED").exists()


_TOKENS = ["x", "y", "a", "2", "0", "0.5", "1e999", "pi", "(", ")", "**", "*", "+", "-", "/", "^", ",", ".",
           "[", "]", "exp", "atan2", "sqrt", "log", "'", "lambda", ":", "if", "j", "__import__", " "]


def test_random_token_soup_either_parses_or_is_refused_cleanly():
    generator = random.Random(1234)
    for _ in range(400):
        text = "".join(generator.choice(_TOKENS) for _ in range(generator.randint(1, 25)))
        try:
            result = parse(text)
        except ExprError:
            continue
        assert isinstance(result, sympy.Expr) and result.free_symbols <= {x, y, a}, text


# Spec text is parsed, never evaluated

@pytest.fixture
def no_evaluation(monkeypatch):
    """eval/exec/sympify/parse_expr refuse any call with text; compile only builds syntax trees."""
    import sympy.assumptions.wrapper
    calls = []

    def refuse(name):
        def refuse_call(*args, **kwargs):
            calls.append((name, args))
            raise AssertionError(f"{name} called with {args!r}")
        return refuse_call

    def text_refused(name, original):
        def guarded(value, *args, **kwargs):
            if isinstance(value, str):
                return refuse(name)(value)
            return original(value, *args, **kwargs)
        return guarded

    real_compile = builtins.compile

    def ast_only_compile(source, filename, mode, flags=0, *args, **kwargs):
        if not flags & ast.PyCF_ONLY_AST:
            return refuse("compile")(source)
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "eval", refuse("eval"))
    monkeypatch.setattr(builtins, "exec", refuse("exec"))
    monkeypatch.setattr(builtins, "compile", ast_only_compile)
    monkeypatch.setattr(sympy, "sympify", text_refused("sympify", sympy.sympify))
    sympify_module = sys.modules["sympy.core.sympify"]
    monkeypatch.setattr(sympify_module, "sympify", text_refused("sympify", sympify_module.sympify))
    monkeypatch.setattr(sympy, "parse_expr", refuse("parse_expr"))
    monkeypatch.setattr(sympy.parsing.sympy_parser, "parse_expr", refuse("parse_expr"))
    return calls


@pytest.mark.parametrize("text", ["x * tanh(softplus(x))", "atan2(y, x) + a * erf(x)**2", "-x**2 / (1 + exp(-y))"])
def test_valid_expressions_parse_without_evaluating_text(no_evaluation, text):
    assert isinstance(parse(text), sympy.Expr)
    assert no_evaluation == []


@pytest.mark.parametrize("text", ["__import__('os').system('touch PWNED')", "x^2", "sinn(x)", "eval('x')", "exp(1000)"])
def test_invalid_expressions_are_refused_without_evaluating_text(no_evaluation, tmp_path, monkeypatch, text):
    monkeypatch.chdir(tmp_path)
    refused(text)
    assert no_evaluation == []
    assert not (tmp_path / "PWNED").exists()


def test_the_guard_itself_catches_a_sympify_of_text(no_evaluation):
    with pytest.raises(AssertionError):
        sympy.sympify("x + 1")
    assert no_evaluation == [("sympify", ("x + 1",))]
