"""The build checks the domain. A spec whose function, or a derivative up to its
order, is not finite somewhere on its domain is refused at build time (exit 2, nothing written) with
`PATH:LINE: domain: ...` naming the failing part, where it fails, and a domain that works."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from helpers import build_problems
from hypothesis import given, settings
from random_trees import cases, scaled

from codegen.build import pipeline
from codegen.errors import SpecErrors

REPO = Path(__file__).resolve().parents[3]


def _spec(expr: str, domain: str | None = None, inputs: str = "[x]", order: int = 2, params: str | None = None) -> str:
    lines = ["name: f", f"expr: {expr}", f"inputs: {inputs}", f"order: {order}"]
    lines += [f"params: {params}"] * (params is not None) + [f"domain: {domain}"] * (domain is not None)
    return "\n".join(lines) + "\n"


def test_log_where_it_is_undefined_is_refused_on_the_domain_line(tmp_path):
    assert build_problems(tmp_path, _spec("log(x)", "{x: [-1, 1]}")) == [
        "f.yaml:5: domain: log(x) is not finite for x in [-1, 0]; set domain: {x: [0.1, 1]}"]


def test_sqrt_on_the_default_domain_is_refused_on_the_expr_line(tmp_path):
    (problem,) = build_problems(tmp_path, _spec("sqrt(x)"))
    assert problem.startswith("f.yaml:2: domain: sqrt(x) is not finite for x in [-2, 0]"), problem
    assert "the default is [-2, 2]" in problem and problem.endswith("set domain: {x: [0.1, 2]}")


def test_an_infinite_derivative_at_an_end_is_refused_and_the_fix_is_named(tmp_path):
    """sqrt(x) on [0, 2] is finite, its derivative is not at 0."""
    assert build_problems(tmp_path, _spec("sqrt(x)", "{x: [0, 2]}")) == [
        "f.yaml:5: domain: the 1st derivative of sqrt(x) is not finite at x = 0; set domain: {x: [0.1, 2]}"]


def test_the_smallest_failing_part_and_the_failing_input_are_named(tmp_path):
    text = _spec("exp(x) * log(x*y) + z", "{x: [0.5, 2], y: [-1, 1], z: [0, 1]}", "[x, y, z]", order=3)
    assert build_problems(tmp_path, text) == [
        "f.yaml:5: domain: log(x*y) is not finite for y in [-1, 0]; set domain: {x: [0.5, 2], y: [0.2, 1], z: [0, 1]}"]


def test_params_are_taken_at_their_defaults(tmp_path):
    """log(x - c) is fine on [0.5, 2] with c = 0.25, not with c = 1."""
    assert build_problems(tmp_path, _spec("log(x - c)", "{x: [0.5, 2]}", params="{c: 0.25}")) == []
    (problem,) = build_problems(tmp_path, _spec("log(x - c)", "{x: [0.5, 2]}", params="{c: 1}"))
    # 1 is not on the grid: the last failing grid point is named, then a domain that passes
    assert problem == "f.yaml:6: domain: log(-c + x) is not finite for x in [0.5, 0.998]; set domain: {x: [1.1, 2]}"


def test_a_derivative_beyond_the_order_is_not_checked(tmp_path):
    """x**2.5 at 0: finite up to the 2nd derivative, the 3rd is infinite."""
    assert build_problems(tmp_path, _spec("x**2.5", "{x: [0, 1]}", order=2)) == []
    (problem,) = build_problems(tmp_path, _spec("x**2.5", "{x: [0, 1]}", order=3))
    assert "the 3rd derivative of x**2.5 is not finite at x = 0" in problem, problem


def test_the_cli_exits_2_and_writes_nothing(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "f.yaml").write_text(_spec("log(x)", "{x: [-1, 1]}"))
    result = subprocess.run([sys.executable, "-m", "codegen", "build", "specs", "-o", "out"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, check=False,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2, result.stderr
    assert "specs/f.yaml:5: domain: log(x) is not finite for x in [-1, 0]" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("path", sorted((REPO / "specs").glob("*.yaml")) + sorted((REPO / "tests" / "regressions").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_example_and_regression_spec_passes_the_check(path):
    from codegen.derive import domain
    from codegen.language.expr import parse_expr

    spec = pipeline.load_spec(path, path.name)
    for _, text in spec.formulas:  # each output of a vector-valued spec
        domain.check(spec, parse_expr(text, spec.inputs, spec.param_names, spec.externs))


def test_the_check_of_an_order_3_spec_of_three_inputs_is_fast(tmp_path):
    """All 19 partial derivatives on a 17**3 grid: well under a second alone (measured 0.3 s)."""
    from codegen.derive import domain
    from codegen.language.expr import parse_expr

    path = tmp_path / "f.yaml"
    path.write_text(_spec("exp(-x**2 - y**2) * cos(x*y*z) / (1 + z**2) + softplus(x*z) * erf(y)",
                          "{x: [-1, 1], y: [-1, 1], z: [-1, 1]}", "[x, y, z]", order=3))
    spec = pipeline.load_spec(path, "f.yaml")
    expr = parse_expr(spec.expr, spec.inputs, ())
    start = time.perf_counter()
    domain.check(spec, expr)
    assert time.perf_counter() - start < 10  # generous: two cores shared with other work


def test_failing_values_on_both_sides_are_named_as_two_ranges(tmp_path):
    (problem,) = build_problems(tmp_path, _spec("asin(x)"))
    assert "asin(x) is not finite for x in [-2, -1] and [1, 2]" in problem, problem
    assert problem.endswith("set domain: {x: [-0.9, 0.9]}")


@settings(max_examples=scaled(80))
@given(case=cases(max_depth=3))
def test_the_property_tests_random_trees_pass_the_check(case):
    """The trees of test_properties.py are valid on their domain by construction (every function's
    argument is wrapped into its domain with a margin): the check must agree, at every order."""
    from codegen.derive import domain
    from codegen.language.expr import parse_expr

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prop.yaml"
        path.write_text(yaml.safe_dump(case.spec(), sort_keys=False))
        spec = pipeline.load_spec(path, "prop.yaml")
    domain.check(spec, parse_expr(spec.expr, spec.inputs, spec.param_names))


def test_a_spec_within_the_size_limit_is_not_refused_for_the_checks_own_derivatives(tmp_path):
    """The planner writes out 24 partials (for the docstring); the check needs all 34 of order <= 4
    in three inputs. Past --size-limit it checks the first derivatives instead of refusing."""
    from codegen import limits

    path = tmp_path / "f.yaml"
    path.write_text(_spec("exp(sin(x*y)*cos(y*z))", inputs="[x, y, z]", order=4) + "strategy: save_inputs\n")
    spec = pipeline.load_spec(path, "f.yaml")
    files = pipeline.generate_one(spec, limits=limits.Limits(seconds=0, size=1000))
    assert "f.py" in files


def test_a_float_overflow_on_the_way_to_a_finite_value_is_not_refused(tmp_path):
    """math.cosh(1000) overflows, but 1/cosh(x) and its derivatives there are 0, as torch computes
    them (1/inf); only a value that is itself past float64's range is refused."""
    assert build_problems(tmp_path, _spec("1/cosh(x)", "{x: [-1000, 1000]}")) == []
    assert build_problems(tmp_path, _spec("tanh(x*y)", "{x: [-1e300, 1e300]}", inputs="[x, y]")) == []
    (problem,) = build_problems(tmp_path, _spec("exp(x)", "{x: [0, 1000]}"))
    assert "domain: exp(x) is not finite for x in" in problem


def test_a_spec_with_no_finite_derivative_is_refused_before_auto_runs_its_candidates(tmp_path):
    """0**x has the derivative 0**x*log(0), NaN everywhere: the memory bound ran the candidates'
    code on the domain before the domain check and stopped with an internal error (a float NaN
    returned as a gradient). The fuzz test found it; now the domain line says what is wrong."""
    from helpers import build_spec


    with pytest.raises(SpecErrors) as raised:
        build_spec(tmp_path, name="zp", expr="0 ** x", inputs=["x"], order=2)
    assert "is not finite" in str(raised.value)


@pytest.mark.parametrize("expr, inputs", [
    ("log(x) + sqrt(y)", "[x, y]"),
    ("log(x) + acos(y) + x*z", "[x, y, z]"),
    ("asin(x*y)", "[x, y]"),
    ("log(x*y)", "[x, y]"),
    ("sqrt(x - y)", "[x, y]"),
    ("atanh(x) / y", "[x, y]"),
])
def test_a_suggested_domain_passes_the_check(tmp_path, expr, inputs):
    """Where the default domain fails, the message proposes a domain, also where two inputs each
    fail everywhere on part of their range (x <= 0 for log(x), y < 0 for sqrt(y)); built with
    it, the spec passes."""
    (problem,) = build_problems(tmp_path, _spec(expr, inputs=inputs))
    assert "; set domain: {" in problem, problem
    suggested = problem.rsplit("set domain: ", 1)[1]
    assert build_problems(tmp_path, _spec(expr, suggested, inputs=inputs)) == [], suggested


def test_scipy_functions_are_evaluated_by_scipy_as_the_generated_code_calls_them():
    """SciPy's own values on the grid (microseconds a call, where mpmath's Bessel K took a
    millisecond), and no real value where the function has none."""
    scipy_special = pytest.importorskip("scipy.special")
    from codegen.derive import domain

    functions = domain._functions()
    for nu, x in ((1.5, 2.0), (0.3, 0.7), (2.5, 11.0)):
        assert functions["kv"](nu, x) == float(scipy_special.kv(nu, x))
        assert functions["jv"](nu, x) == float(scipy_special.jv(nu, x))
    assert functions["lambertw"](1.0) == float(scipy_special.lambertw(1.0).real)
    with pytest.raises(ValueError, match="no real value"):
        functions["lambertw"](-1.0)  # below -1/e: complex


def test_evaluating_the_grid_is_not_counted_against_the_time_limit(tmp_path, monkeypatch):
    """Whether a spec builds must not depend on the machine's load: the grid's evaluation is not
    symbolic work."""
    from codegen import limits
    from codegen.derive import domain

    slow = domain._not_finite

    def slowly(*args):
        time.sleep(1.5)
        return slow(*args)

    monkeypatch.setattr(domain, "_not_finite", slowly)
    path = tmp_path / "f.yaml"
    path.write_text(_spec("log(x)", "{x: [0.5, 2]}", order=1))
    pipeline.generate(path, root=tmp_path, limits=limits.Limits(seconds=1.0))


def test_where_the_named_part_fails_is_said_not_where_the_whole_does(tmp_path):
    """log(x) + sqrt(y): every x fails somewhere (at y < 0), so the whole formula's failing set
    named x in [-2, 2]; log(x)'s own is x in [-2, 0]."""
    (problem,) = build_problems(tmp_path, _spec("log(x) + sqrt(y)", inputs="[x, y]"))
    assert "domain: log(x) is not finite for x in [-2, 0] (no domain is set" in problem, problem
