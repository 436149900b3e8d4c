"""Numbers in specs: YAML 1.2 numbers, constants that are exactly 0, constants of any size.

- Spec numbers are read as YAML 1.2's core schema reads them (010 is 10, 1e3 is 1000.0, 0o17 and
  0x1F are 15 and 31); YAML 1.1's other number forms (1:30, 0b101, 0x_1F, 1_000) are refused at
  their line with the decimal to write, never read as text by dbgen and as a number by another tool.
- A constant SymPy leaves unfolded that is exactly 0 (log(2) + log(3) - log(6)) is folded to 0, and
  a division by it is refused at the expression's line (printed, it was a float of about 1e-16).
- An integer constant beyond int64 (2**64) is printed as a float torch accepts; one beyond 1e300 is
  refused at the line.
"""

from __future__ import annotations

import pytest
import sympy
import torch
from helpers import import_path, run_dbgen
from typer.testing import CliRunner

from codegen.build import pipeline, write
from codegen.cli import app
from codegen.emit.printer import TorchPrinter
from codegen.errors import SpecErrors
from codegen.language.expr import ExprError, parse_expr
from codegen.language.zero import _zero_kind
from codegen.spec import load_spec, load_text


def spec_text(params: str = "a: 1", expr: str = "x * a", order: str = "1", extra: str = "") -> str:
    """name 1, expr 2, inputs 3, order 4, params 5-6, then ``extra`` from line 7."""
    return f"name: f\nexpr: {expr}\ninputs: [x]\norder: {order}\nparams:\n  {params}\n{extra}"


def problems(text: str) -> list[tuple[str, int, str]]:
    with pytest.raises(SpecErrors) as caught:
        load_text(text, "specs/f.yaml")
    return [(p.path, p.line, p.message) for p in caught.value.problems]


# --- (a) YAML 1.2 numbers -------------------------------------------------------------------------

@pytest.mark.parametrize(("written", "value"), [
    ("010", 10.0),  # YAML 1.1: octal 8
    ("-010", -10.0),
    ("+5", 5.0),
    ("09", 9.0),  # YAML 1.1: text
    ("0o17", 15.0),  # YAML 1.2 octal; 1.1: text
    ("0x1F", 31.0),
    ("1e3", 1000.0),  # YAML 1.1: text (no dot)
    ("1E3", 1000.0),
    ("-1e-3", -0.001),
    ("1.5e+3", 1500.0),
    ("1.", 1.0),
    (".5", 0.5),
    ("-.5", -0.5),  # YAML 1.1: text
    ("!!float 1", 1.0),
])
def test_params_are_read_as_yaml_1_2_numbers(written, value):
    spec = load_text(spec_text(f"a: {written}"), "specs/f.yaml")
    assert spec.params == (("a", value),)


def test_domain_and_order_are_read_as_yaml_1_2_numbers():
    spec = load_text(spec_text(order="02", extra="domain: {x: [-010, 1e1]}\n"), "specs/f.yaml")
    assert spec.order == 2 and spec.bounds("x") == (-10.0, 10.0)
    # 010 is ten, which is more than the highest order (not octal 8, which would be accepted)
    assert problems(spec_text(order="010")) == [("specs/f.yaml", 4, "order must be a whole number from 1 to 8, not '010'")]


@pytest.mark.parametrize("written", [".inf", "-.Inf", ".NaN", "1e400", "1" + "0" * 400])
def test_infinite_or_huge_params_are_refused_as_before(written):
    ((path, line, message),) = problems(spec_text(f"a: {written}"))
    assert (path, line) == ("specs/f.yaml", 6)
    assert message.startswith("param 'a' must be a finite number no larger than 1e300")


@pytest.mark.parametrize("written", ["1e-400", "-2.5e-330", "0.000001e-320"])
def test_a_nonzero_param_that_underflows_to_zero_is_refused(written):
    """1e-400 was silently 0.0: a param the spec's author meant nonzero."""
    ((path, line, message),) = problems(spec_text(f"a: {written}"))
    assert (path, line) == ("specs/f.yaml", 6)
    assert message.startswith(f"param 'a' is '{written}', below float64's smallest number: it would be 0")


@pytest.mark.parametrize("written", ["0", "0.0", "-0.0", "0e5", "5e-324"])
def test_zero_and_the_smallest_subnormal_are_kept(written):
    spec = load_text(spec_text(f"a: {written}"), "specs/f.yaml")
    assert spec.params == (("a", float(written)),)


@pytest.mark.parametrize(("written", "form", "decimal"), [
    ("1:30", "sexagesimal, base 60", "90"),
    ("-1:30", "sexagesimal, base 60", "-90"),
    ("1:30.5", "sexagesimal, base 60", "90.5"),
    ("0b101", "binary", "5"),
    ("0x_1F", "hexadecimal", "31"),
    ("+0x1F", "hexadecimal", "31"),
    ("0_17", "octal", "15"),
    ("1_000", "with '_' separators", "1000"),
    ("1_000.5", "with '_' separators", "1000.5"),
    (".5_0", "with '_' separators", "0.5"),
])
def test_yaml_1_1_only_numbers_are_refused_with_the_decimal_to_write(written, form, decimal):
    ((path, line, message),) = problems(spec_text(f"a: {written}"))
    assert (path, line) == ("specs/f.yaml", 6)
    assert message == (f"param 'a': '{written}' is a number only in YAML 1.1 ({form}: {decimal}); dbgen reads specs "
                       f"as YAML 1.2, where it is text: write the number in decimal ({decimal}), or quote it if it "
                       "is text")


@pytest.mark.parametrize(("written", "decimal"), [("!!int 1_000", "1000"), ("!!int 0b11", "3"), ("!!float 1:30.0", "90.0")])
def test_tagged_yaml_1_1_only_numbers_are_refused(written, decimal):
    ((_, line, message),) = problems(spec_text(f"a: {written}"))
    assert line == 6 and "only in YAML 1.1" in message and f"write the number in decimal ({decimal})" in message


def test_yaml_1_1_only_numbers_are_refused_wherever_they_stand():
    text = spec_text("a: 1", order="0b10", extra="domain: {x: [-1_0, 2]}\ndoc: 12:30\n")
    assert [(line, message.split(":")[0]) for _, line, message in problems(text)] == [
        (4, "order"), (7, "domain of 'x'"), (8, "doc")]
    # quoted, a text key takes it as the text it is; an expression is text as written
    spec = load_text(spec_text(expr="1_000 * x", extra="doc: '12:30'\n"), "specs/f.yaml")
    assert spec.doc == "12:30" and spec.expr == "1_000 * x"


def test_a_yaml_1_1_number_is_refused_by_the_cli_with_its_line_and_no_traceback(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "f.yaml").write_text(spec_text("a: 1:30"))
    result = run_dbgen(["build", "specs", "-o", "out"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("specs/f.yaml:6: param 'a': '1:30' is a number only in YAML 1.1")
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("option", "written", "value"), [("a=010", "10", 10.0), ("a=-007", "-7", -7.0),
                                                          ("a=+5", "5", 5.0), ("a=1e3", "1e3", 1000.0)])
def test_new_writes_params_that_mean_what_was_typed(tmp_path, monkeypatch, option, written, value):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["new", "f", "--expr", "x * a", "--inputs", "x", "--params", option])
    assert result.exit_code == 0, result.stderr
    path = tmp_path / "specs" / "f.yaml"
    assert f"  a: {written}\n" in path.read_text()  # read alike by YAML 1.1 tools: 10, not octal 8
    assert load_spec(path, "specs/f.yaml").params == (("a", value),)


# --- (b) constants that are exactly 0 -------------------------------------------------------------

def parsed(text: str) -> sympy.Expr:
    return parse_expr(text, ("x",), ())


def refused(text: str) -> str:
    with pytest.raises(ExprError) as caught:
        parsed(text)
    return str(caught.value)


@pytest.mark.parametrize(("text", "zero"), [
    ("x / (log(2) + log(3) - log(6))", "log(2) + log(3) - log(6) is exactly 0"),
    ("x / (2*(log(2) + log(3) - log(6)))", "2 * (log(2) + log(3) - log(6)) is 0 (log(2) + log(3) - log(6) is exactly 0)"),
    ("x / sin(pi*log(8)/log(2))", "sin(pi * log(8) / log(2)) is exactly 0"),
    ("x / erf(3 - log(8)/log(2))", "(3 - log(8) / log(2) is exactly 0)"),  # SymPy's is_zero says False
    ("x / (sin(1)**2 + cos(1)**2 - 1)", "sin(1) ** 2 + cos(1) ** 2 - 1 is exactly 0"),
    ("x / (cosh(1)**2 - sinh(1)**2 - 1)", "is exactly 0"),
    ("x / xlogy(log(2) + log(3) - log(6), 2)", "is exactly 0"),
])
def test_a_division_by_a_constant_that_is_exactly_zero_is_refused(text, zero):
    message = refused(text)
    assert message.startswith("division by zero: ") and zero in message


def test_a_negative_power_of_an_exact_zero_is_refused():
    assert refused("x * (log(2) + log(3) - log(6))**-2").startswith(
        "division by zero (0 to a negative power): log(2) + log(3) - log(6) is exactly 0")


def test_a_constant_zero_to_every_digit_sympy_tries_is_refused_as_a_denominator():
    message = refused("x / (atan(1/2) + atan(1/3) - pi/4)")  # 0; no rewrite SymPy has shows it
    assert message.startswith("division by zero: atan(1 / 2) + atan(1 / 3) - pi / 4 is 0 to 100 digits")


@pytest.mark.parametrize(("text", "folded"), [
    ("x * (log(2) + log(3) - log(6))", "0"),
    ("x + (log(2) + log(3) - log(6))", "x"),
    ("x + sqrt(log(2) + log(3) - log(6))", "x"),  # not sqrt(-4.4e-16): NaN
    ("where(x > log(2) + log(3) - log(6), x, -x)", "Piecewise((x, x > 0), (-x, True))"),
    ("x * (atan(1/2) + atan(1/3) - pi/4)", "0"),
    ("x * (1/(1 + sqrt(2)) - sqrt(2) + 1)", "0"),
])
def test_a_constant_that_is_zero_is_folded_elsewhere(text, folded):
    assert str(parsed(text)) == folded


@pytest.mark.parametrize("text", ["x * (1/(1 + sqrt(2)) - sqrt(2) + 1)", "x / (1/(1 + sqrt(2)) - sqrt(2) + 1)",
                                  "x / (sin(1)**2 + cos(1)**2 - 1)", "x / (atan(1/2) + atan(1/3) - pi/4)"])
def test_deciding_whether_a_constant_is_zero_runs_no_code(text):
    # SymPy's simplify, radsimp and minimal polynomials exec code they generate: kept out of loading
    from no_code_runs import nothing_runs

    _zero_kind.cache_clear()
    with nothing_runs():
        try:
            parsed(text)
        except ExprError:
            pass


def test_log_of_an_exact_zero_is_refused_as_undefined():
    assert refused("x + log(log(2) + log(3) - log(6))").startswith("the expression is undefined or infinite")


def test_a_constant_that_is_tiny_not_zero_is_refused_as_below_the_range_not_as_zero():
    """exp(-1000) + log(2) + log(3) - log(6) is 5e-435, not 0: not a division by zero, but no float64
    holds it (the generated code would divide by a rounding error)."""
    message = refused("x / (exp(-1000) + log(2) + log(3) - log(6))")
    assert "below float64's normal range" in message and "exactly 0" not in message, message


@pytest.mark.parametrize("text", [
    "x / (pi - 355/113)",
    "x / sqrt(2)",
    "x / polygamma(1, 2)",
    "x / (0.1 + 0.2 - 0.3)",  # floats as written: 5.6e-17, as Python computes it
])
def test_constants_that_are_not_zero_are_kept(text):
    assert parsed(text).free_symbols == {sympy.Symbol("x", real=True)}


def test_a_division_by_an_exact_zero_is_refused_at_the_expression_line():
    assert problems(spec_text(expr="x * a / (log(2) + log(3) - log(6))")) == [
        ("specs/f.yaml", 2, ("expr: division by zero: log(2) + log(3) - log(6) is exactly 0; remove the "
                             "division, or correct the constant"))]


# --- (c) constants of any size --------------------------------------------------------------------

@pytest.mark.parametrize(("value", "printed"), [
    (2**63 - 1, "9223372036854775807"),
    (-(2**63), "-9223372036854775808"),
    (2**64, "1.8446744073709552e+19"),  # exact: a power of two
    (-(2**64), "-1.8446744073709552e+19"),
    (3**41, repr(float(3**41))),
])
def test_integers_beyond_int64_print_as_floats(value, printed):
    assert TorchPrinter(["x"]).doprint(sympy.Integer(value)) == printed


def test_a_rational_with_a_denominator_beyond_int64_works_in_torch():
    x = sympy.Symbol("x", real=True)
    code = TorchPrinter(["x"], scaled_last=["x"]).doprint(x * 3 / 2**70)
    assert torch.equal(eval(code, {"x": torch.ones(2, dtype=torch.float64)}), torch.full((2,), 3 / 2**70, dtype=torch.float64))
    code = TorchPrinter(["x"], scaled_last=["x"]).doprint(x / 2**70)
    assert code == "x / 1.1805916207174113e+21"  # not x / 1180591620717411303424: int64 overflow


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
def test_a_constant_beyond_int64_builds_a_working_module(tmp_path, strategy):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "big.yaml").write_text(f"name: big\nexpr: x * 2**64 + a * 3**41 + sin(x) / 2**70\ninputs: [x]\n"
                                    f"params: {{a: 0.5}}\norder: 2\nstrategy: {strategy}\n")
    write.write_files(tmp_path / "out", pipeline.generate(specs / "big.yaml", root=tmp_path))
    module = import_path(tmp_path / "out" / "big.py")
    x = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True)
    value = module.big(x)
    (grad,) = torch.autograd.grad(value.sum(), x, create_graph=True)
    (grad2,) = torch.autograd.grad(grad.sum(), x)
    want = x.detach() * 2.0**64 + 0.5 * float(3**41) + torch.sin(x.detach()) / 2.0**70
    assert torch.allclose(value.detach(), want, rtol=1e-15, atol=0)
    assert torch.allclose(grad.detach(), 2.0**64 + torch.cos(x.detach()) / 2.0**70, rtol=1e-15, atol=0)
    assert torch.allclose(grad2, -torch.sin(x.detach()) / 2.0**70, rtol=1e-12, atol=0)


@pytest.mark.parametrize("expr", ["x * 10**400", "x * 10**200 * 10**200", "x * 1" + "0" * 400, "x * 1e400"])
def test_a_constant_beyond_float64_is_refused_at_the_line(expr):
    ((path, line, message),) = problems(spec_text(expr=expr))
    assert (path, line) == ("specs/f.yaml", 2) and "too large" in message
