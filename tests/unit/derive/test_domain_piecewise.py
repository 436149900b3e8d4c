"""The build-time domain check (codegen/derive/domain.py) on every piecewise form of the
language: clamp, max, min, where, relu, abs (and sign, its derivative), comparisons as numbers,
and/or/not. It crashed (exit 3) on acos(clamp(x, -1, 1)) (it tried to evaluate a Piecewise's
(value, condition) pair while naming the failing part), on log(max(x, 0)) (a derivative's branch
is SymPy's complex infinity, which mpmath's printer does not know) and on where(y < 0, sqrt(x), x).
Now each spec is refused on its domain or expr line (exit 2) or builds."""

from __future__ import annotations

import math

import pytest
import sympy
from helpers import build_problems

from codegen.build import pipeline
from codegen.derive import domain
from codegen.derive.branches import guard
from codegen.errors import SpecErrors
from codegen.language.expr import parse_expr


def _spec(expr: str, domain_text: str | None = None, inputs: str = "[x]", order: int = 2,
          params: str | None = None) -> str:
    lines = ["name: f", f"expr: {expr}", f"inputs: {inputs}", f"order: {order}"]
    lines += [f"params: {params}"] * (params is not None) + [f"domain: {domain_text}"] * (domain_text is not None)
    return "\n".join(lines) + "\n"


# each form: refused where it is not finite (naming the part, where, and a domain that works) ---


def test_clamp_into_acos_is_refused_where_its_derivative_is_infinite(tmp_path):
    """acos(clamp(x, -1, 1)): finite, but its derivative is infinite at x = +-1 (clamp passes the
    gradient on its bounds, as torch.clamp does), and 0 * inf beyond them, as autograd computes it."""
    (problem,) = build_problems(tmp_path, _spec("acos(clamp(x, -1, 1))"))
    assert problem.startswith("f.yaml:2: domain: the 1st derivative of acos(where(x > 1, 1, where(x < -1, -1, x))) "
                              "is not finite for x in [-2, -1] and [1, 2]"), problem
    assert problem.endswith("set domain: {x: [-0.9, 0.9]}"), problem
    assert build_problems(tmp_path, _spec("acos(clamp(x, -1, 1))", "{x: [-0.5, 0.5]}")) == []


def test_clamp_with_param_bounds_is_checked_at_their_defaults(tmp_path):
    (problem,) = build_problems(tmp_path, _spec("acos(clamp(x, lo, hi))", params="{lo: -1, hi: 1}"))
    assert "the 1st derivative of acos(" in problem and "for x in [-2, -1] and [1, 2]" in problem, problem
    assert build_problems(tmp_path, _spec("log(clamp(x, lo, hi))", params="{lo: 0.5, hi: 1.5}", order=3)) == []


def test_max_into_log_is_refused_where_it_is_log_of_0(tmp_path):
    """log(max(x, 0)): the derivative's branch for x < 0 is 1/0, SymPy's complex infinity (zoo)."""
    assert build_problems(tmp_path, _spec("log(max(x, 0))", "{x: [-1, 1]}")) == [
        ("f.yaml:5: domain: log(where(x > 0, x, where(x < 0, 0, x/2))) is not finite for x in [-1, 0]; "
         "set domain: {x: [0.1, 1]}")]
    assert build_problems(tmp_path, _spec("log(max(x, 1))")) == []


def test_max_of_two_inputs_names_both_ranges(tmp_path):
    (problem,) = build_problems(tmp_path, _spec("log(max(x, y))", inputs="[x, y]"))
    assert "for x in [-2, 0], y in [-2, 0]" in problem and problem.endswith("set domain: {x: [0.1, 2], y: [-2, 2]}")


def test_min_into_log(tmp_path):
    (problem,) = build_problems(tmp_path, _spec("log(min(x, 1))"))
    assert problem.startswith("f.yaml:2: domain: log(where(x < 1, x, where(x > 1, 1, x/2 + 1/2))) is not finite "
                              "for x in [-2, 0]"), problem
    assert build_problems(tmp_path, _spec("log(min(x, 1))", "{x: [0.5, 2]}", order=3)) == []


def test_where_on_another_input_names_the_branch_and_where_it_is_taken(tmp_path):
    """where(y < 0, sqrt(x), x): sqrt(x) is evaluated only where y < 0 (its guard), and fails there for x < 0."""
    (problem,) = build_problems(tmp_path, _spec("where(y < 0, sqrt(x), x)", inputs="[x, y]"))
    assert problem.startswith("f.yaml:2: domain: sqrt(x) is not finite for x in [-2, 0], y in [-2, -0.0625]"), problem
    assert problem.endswith("set domain: {x: [-2, 2], y: [0, 2]}"), problem
    assert build_problems(tmp_path, _spec("where(y < 0, sqrt(x), x)", "{x: [0.5, 2]}", inputs="[x, y]")) == []


def test_where_on_a_param_names_the_branch_taken_at_its_default(tmp_path):
    """A choice on params alone runs one branch: the part named is in it, not in the other."""
    (problem,) = build_problems(tmp_path, _spec("where(b > 0, log(x), exp(x)) * sqrt(x)", "{x: [-1, 1]}", params="{b: -1}"))
    assert "domain: sqrt(x) is not finite for x in [-1, 0]" in problem, problem
    (problem,) = build_problems(tmp_path, _spec("where(b > 0, log(x), exp(x))", "{x: [-1, 1]}", params="{b: 1}"))
    assert "domain: log(x) is not finite for x in [-1, 0]" in problem, problem


def test_relu_and_indicators(tmp_path):
    (problem,) = build_problems(tmp_path, _spec("log(relu(x))"))
    assert "domain: log(where(x > 0, x, 0)) is not finite for x in [-2, 0]" in problem, problem
    (problem,) = build_problems(tmp_path, _spec("acos(x * (x > 0))"))
    assert "domain: acos(where(x > 0, x, 0)) is not finite for x in [1, 2]" in problem, problem
    assert build_problems(tmp_path, _spec("log(relu(x) + 1)", order=3)) == []
    assert build_problems(tmp_path, _spec("log(x) * (x > 0)")) == []  # where(x > 0, log(x), 0): guarded


def test_abs_and_its_derivative_sign(tmp_path):
    """abs's derivatives are sign(x) and then 0 (as autograd takes them, no Dirac delta)."""
    (problem,) = build_problems(tmp_path, _spec("sqrt(abs(x))", order=3))
    assert "the 1st derivative of sqrt(" in problem and "is not finite at x = 0" in problem, problem
    (problem,) = build_problems(tmp_path, _spec("log(abs(x))"))
    assert "is not finite at x = 0" in problem and problem.endswith("set domain: {x: [-2, -0.1]}"), problem
    assert build_problems(tmp_path, _spec("x * abs(x)", order=3)) == []
    assert build_problems(tmp_path, _spec("abs(x)**3", order=3)) == []


def test_sign_is_not_in_the_language_and_says_what_to_write(tmp_path):
    (problem,) = build_problems(tmp_path, _spec("sign(x)"))
    assert problem.startswith("f.yaml:2: expr:") and "not in the language" in problem, problem


def test_and_or_not_conditions(tmp_path):
    assert build_problems(tmp_path, _spec("where(x > 0 and y > 0, log(x*y), 0)", inputs="[x, y]")) == []
    assert build_problems(tmp_path, _spec("where(not (x > 0), exp(x), 1/x)")) == []
    (problem,) = build_problems(tmp_path, _spec("where(x > 0 or y > 0, log(x), 0)", inputs="[x, y]"))
    assert "domain: log(x) is not finite for x in [-2, 0], y in [0.0625, 2]" in problem, problem


# every combination of a form with a singular function: refused or checked, never an exception --

SINGULAR = ("log({u})", "sqrt({u})", "acos({u})", "atanh({u})", "acosh({u})", "1/({u})", "({u})**1.5", "exp(-1/({u}))")
PIECEWISE = ("clamp(x, -1, 1)", "max(x, 0)", "min(x, 1)", "relu(x)", "abs(x)", "where(y < 0, x, -x)", "x*(x > 0)",
             "max(x, y)", "where(x > 0 or y < 0, x, y)")


@pytest.mark.parametrize("outer", SINGULAR)
def test_the_check_refuses_or_passes_every_piecewise_form_under_a_singular_function(tmp_path, outer):
    for inner in PIECEWISE:
        path = tmp_path / "f.yaml"
        path.write_text(_spec(outer.format(u=inner), inputs="[x, y]"))
        try:
            spec = pipeline.load_spec(path, "f.yaml")
            formula = guard(parse_expr(spec.expr, spec.inputs, spec.param_names), spec)
            domain.check(spec, formula)
        except SpecErrors as errors:
            (problem,) = errors.problems
            assert str(problem).startswith("f.yaml:2: "), problem


# the pieces ----------------------------------------------------------------------------------


def test_complex_infinity_counts_as_not_finite():
    """SymPy writes 1/0 in a branch as zoo: math's printer made it NaN, mpmath's raised KeyError."""
    x = sympy.Symbol("x", real=True)
    formulas = [sympy.Piecewise((1 / x, x > 0), (sympy.zoo, True)), sympy.Piecewise((x, x > 0), (sympy.zoo * x, True))]
    assert domain.not_finite(formulas, [x], [(1.0,), (-1.0,)]) == [[False, True], [False, True]]
    exact = domain._evaluators([x], formulas[0])[1]
    assert math.isnan(domain._exact_value(exact, (-1.0,)))


def test_the_parts_named_are_numbers_not_pairs_or_conditions():
    x, b = sympy.Symbol("x", real=True), sympy.Symbol("b", real=True)

    class Spec:
        inputs, params = ("x",), (("b", -1.0),)

    expr = sympy.Piecewise((sympy.log(x), x > 0), (x, True)) + sympy.Piecewise((sympy.sqrt(x), b > 0), (x**2, True))
    parts = set(domain._parts(expr, Spec()))
    assert all(isinstance(p, sympy.Expr) for p in parts)
    assert {sympy.log(x), x**2} <= parts and sympy.sqrt(x) not in parts  # b = -1: sqrt(x) never runs


# conditions on params, and a domain proposal of one grid value (found by test_no_internal_error.py) --


def test_a_condition_on_params_undefined_at_their_defaults_is_refused(tmp_path):
    """where(log1p(a) > 0, ...) is decided once, in Python's math, by the generated code: at a = -1
    SymPy could not compare log1p(-1) (TypeError, exit 3), and the code would raise on every call."""
    (problem,) = build_problems(tmp_path, _spec("where(log1p(a) > 0, sin(x), x**2)", params="{a: -1}"))
    assert problem == ("f.yaml:2: expr: the condition log1p(a) > 0 is undefined at the params' defaults (a = -1): "
                       "log1p(a) is not a finite real number there; write the condition so that it is defined, "
                       "or change the default")
    (problem,) = build_problems(tmp_path, _spec("where(acos(a) == 0, x, -x)", params="{a: 2}"))
    assert "the condition acos(a) == 0 is undefined at the params' defaults (a = 2)" in problem, problem
    (problem,) = build_problems(tmp_path, _spec("max(-y, acosh(a))", inputs="[x, y]", params="{a: 0.5}"))
    assert "the condition -acosh(a) < y is undefined at the params' defaults (a = 0.5)" in problem, problem
    assert build_problems(tmp_path, _spec("where(log1p(a) > 0, sin(x), x**2)", params="{a: 0.5}")) == []


def test_a_run_of_one_grid_value_is_not_proposed_as_a_domain(tmp_path):
    """The only finite grid value of x was one point: rounding it inward divided the step down to 0
    (OverflowError, exit 3). Now no such domain is proposed."""
    assert domain._rounded_inward(1.0, 1.0, 4.0) == (1.0, 1.0)
    (problem,) = build_problems(tmp_path, _spec("-((x) * (sqrt(y) != 0 + x < 2))", "{y: [-2, -0.5]}", inputs="[x, y]",
                                           order=1))
    assert problem.startswith("f.yaml:5: domain: sqrt(y) is not finite"), problem
