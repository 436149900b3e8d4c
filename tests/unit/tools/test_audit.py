"""dbgen audit (docs/guide/audit.md) on its real clients, transcribed into tests/fixtures/audit:
the tutorial's five Functions, timm's memory-efficient activations and e3nn's _SoftUnitStep; a
corpus of the bugs it must find; the command line (report, JSON, exit codes, --expr and the spec
that replaces a Function, bad arguments)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from helpers import run_dbgen

from codegen import audit as auditing
from codegen.audit import dynamic, static
from codegen.audit.replacement import spec_name
from codegen.spec import load_spec

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "audit"
SEED, TIMM, E3NN, BUGGY = (FIXTURES / f"{name}.py" for name in ("seed_functions", "timm_activations_me",
                                                                  "e3nn_soft_unit_step", "buggy"))


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


@pytest.fixture(scope="module")
def audits() -> dict[str, auditing.Audit]:
    found = auditing.run([str(p) for p in (SEED, TIMM, E3NN, BUGGY)], auditing.Options())
    return {a.function.rsplit(":", 1)[-1]: a for a in found}


def _suspects(audit: auditing.Audit) -> list[static.Finding]:
    return [f for f in audit.findings if f.kind == static.SUSPECT]


def test_sinh_bad_is_flagged_on_its_lines_and_wrong_at_order_two(audits):
    bad = audits["SinhBad"]
    assert (bad.verdict, bad.wrong_at_order, bad.correct_to_order) == ("wrong", 2, 1)
    lines = sorted(f.line for f in _suspects(bad))
    assert lines == [_line_of(SEED, "ctx.expx = expx"), _line_of(SEED, "ctx.expnegx = expnegx")]
    assert all("held a tensor at run time" in f.message for f in _suspects(bad))
    assert {r.check: r.status for r in bad.results}["order 2"] == dynamic.WRONG


@pytest.mark.parametrize("name", ["Square", "Exp", "Sinh", "Cube", "CubeBackward", "SwishAutoFn", "MishAutoFn",
                                  "HardSigmoidAutoFn", "HardSwishAutoFn", "HardMishAutoFn", "SoftUnitStepMasked",
                                  "SoftUnitStepSafe"])
def test_correct_functions_pass_every_order_and_are_not_torch_func_ready(audits, name):
    audit = audits[name]
    assert (audit.verdict, audit.wrong_at_order, audit.correct_to_order) == ("limited", None, 3), audit.summary
    assert _suspects(audit) == []
    statuses = {r.check: r.status for r in audit.results}
    assert all(statuses[f"order {k}"] == dynamic.PASS for k in (1, 2, 3))
    assert statuses["gradcheck"] == statuses["gradgradcheck"] == dynamic.PASS
    assert statuses["vmap"] == statuses["jacrev"] == statuses["forward_ad"] == dynamic.FAIL
    assert "not torch.func-ready" in audit.summary


@pytest.mark.parametrize("name, line_text, fragment", [
    ("Expm1Stashed", "ctx.e = e", "ctx.e is set in forward and read in backward"),
    ("LogisticDetached", "torch.sigmoid(x.detach())", "backward calls `.detach()`"),
    ("CosineIntermediate", "ctx.save_for_backward(c)", "forward saves c, neither an input nor an output"),
    ("SquareOnce", "def backward(ctx, grad):", "backward is @once_differentiable"),
])
def test_each_kind_of_bug_is_found_on_its_line_and_shown_wrong(audits, name, line_text, fragment):
    audit = audits[name]
    assert audit.verdict == "wrong" and audit.wrong_at_order == 2, audit.summary
    finding = _suspects(audit)[0]
    assert fragment in finding.message
    assert finding.file.endswith("buggy.py")
    assert finding.line == next(i for i, line in enumerate(BUGGY.read_text().splitlines(), start=1)
                                if line_text in line and i > _line_of(BUGGY, f"class {name}"))


def test_an_output_kept_on_ctx_is_a_reference_cycle_not_a_wrong_derivative(audits):
    audit = audits["ExpOutputOnCtx"]
    assert (audit.verdict, audit.correct_to_order) == ("limited", 3)
    (finding,) = [f for f in audit.findings if "ctx.result" in f.message]
    assert finding.kind == static.LIMIT and "reference cycle" in finding.message


def test_a_correct_new_style_function_is_ok_under_every_transform(audits):
    audit = audits["SwishNewStyle"]
    assert (audit.verdict, audit.findings) == ("ok", ())
    assert all(r.status == dynamic.PASS for r in audit.results), audit.results


NOT_ELEMENTWISE = """
import torch


class {name}(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return {forward}

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return {backward}

    @staticmethod
    def jvp(ctx, tangent):
        (x,) = ctx.saved_tensors
        return {jvp}
"""


@pytest.mark.parametrize("name, forward, backward, jvp", [
    ("SumSquares", "(x * x).sum()", "grad * 2 * x", "(2 * x * tangent).sum()"),  # a loss: a 0-dim output
    ("Outer", "x[:, None] * x[None, :]", "(grad + grad.T) @ x", "tangent[:, None] * x + x[:, None] * tangent"),
])
def test_a_correct_function_whose_output_is_not_shaped_as_its_input_is_ok(tmp_path, name, forward, backward, jvp):
    """The Jacobians of jacrev and jacfwd are shaped (*output, *input): summed over the output's
    dimensions, however many (a loss has none), they are autograd's gradients. Summed over the first
    alone, a correct loss was 'silently wrong at order 1'."""
    path = tmp_path / "shaped.py"
    path.write_text(NOT_ELEMENTWISE.format(name=name, forward=forward, backward=backward, jvp=jvp))
    (audit,) = auditing.run([str(path)], auditing.Options(order=2))
    statuses = {r.check: r.status for r in audit.results}
    assert audit.verdict == "ok", (audit.summary, audit.results)
    assert statuses["jacrev"] == statuses["jacfwd"] == dynamic.PASS
    wrong = path.read_text().replace(f"return {backward}", f"return 3 * ({backward})")
    path.write_text(wrong)
    (audit,) = auditing.run([str(path)], auditing.Options(order=2))
    assert (audit.verdict, audit.wrong_at_order) == ("wrong", 1), audit.summary


def test_a_wrong_jvp_is_wrong_under_forward_mode(tmp_path):
    source = BUGGY.read_text().replace("return tangent * (s + x * s * (1 - s))", "return tangent * s")
    path = tmp_path / "wrong_jvp.py"
    path.write_text(source)
    audit = auditing.run([f"{path}:SwishNewStyle"], auditing.Options())[0]
    statuses = {r.check: r.status for r in audit.results}
    assert audit.verdict == "wrong" and statuses["jvp"] == statuses["forward_ad"] == dynamic.WRONG
    assert statuses["order 1"] == dynamic.PASS  # reverse mode is right


def test_expr_agreeing_gives_the_spec_that_replaces_the_function(tmp_path):
    options = auditing.Options(domains={"x": (-4.0, 4.0)}, expr="x * sigmoid(x)")
    audit = auditing.run([f"{TIMM}:SwishAutoFn"], options)[0]
    assert audit.verdict == "limited" and audit.spec is not None
    path = tmp_path / "swish.yaml"
    path.write_text(audit.spec)
    spec = load_spec(path, "swish.yaml")
    assert (spec.name, spec.expr, spec.inputs, spec.order, spec.domain) == ("swish", "x * sigmoid(x)", ("x",), 3,
                                                                           (("x", (-4.0, 4.0)),))


def test_expr_disagreeing_is_reported_from_the_order_it_differs(tmp_path):
    audit = auditing.run([f"{TIMM}:MishAutoFn"], auditing.Options(expr="x * tanh(softplus(x)) + 0.001 * x**3"))[0]
    assert (audit.verdict, audit.wrong_at_order, audit.spec) == ("wrong", 0, None)
    assert audit.summary == "differs from --expr from order 0"


def test_spec_names_read_as_snake_case():
    assert [spec_name(n) for n in ("SwishAutoFn", "SinhBad", "_SoftUnitStep", "Exp", "GELUFunction")] == [
        "swish", "sinh_bad", "soft_unit_step", "exp", "gelu"]


# --- the command line ----------------------------------------------------------------------------


def test_cli_report_names_each_function_and_exits_one_on_a_wrong_one(tmp_path):
    result = run_dbgen(["audit", str(SEED)], tmp_path)
    assert result.returncode == 1, result.stderr
    for name in ("Square", "Exp", "Sinh", "SinhBad", "Cube", "CubeBackward"):
        assert name in result.stdout
    assert f"seed_functions.py:{_line_of(SEED, 'ctx.expx = expx')}" in result.stdout
    assert "SinhBad: silently wrong at order 2" in result.stdout
    assert "6 Function(s) audited, 1 silently wrong" in result.stdout


def test_cli_exits_zero_when_nothing_is_wrong_and_json_has_the_contracts_keys(tmp_path):
    result = run_dbgen(["audit", str(TIMM), "--json", "--order", "2"], tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [item["function"].rsplit(":", 1)[-1] for item in data] == [
        "SwishAutoFn", "MishAutoFn", "HardSigmoidAutoFn", "HardSwishAutoFn", "HardMishAutoFn"]
    for item in data:
        assert item["verdict"] == "limited" and item["wrong_at_order"] is None
        assert all(set(f) >= {"file", "line", "message"} for f in item["findings"])


def test_cli_module_and_class_targets(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    env = {**__import__("os").environ, "PYTHONPATH": str(FIXTURES)}
    result = run_dbgen(["audit", "e3nn_soft_unit_step", "seed_functions:Square", "--json"], tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert [item["function"] for item in json.loads(result.stdout)] == [
        "e3nn_soft_unit_step.SoftUnitStepMasked", "e3nn_soft_unit_step.SoftUnitStepSafe", "seed_functions.Square"]


def test_cli_writes_the_replacing_spec_and_dbgen_builds_it(tmp_path):
    result = run_dbgen(["audit", f"{SEED}:Sinh", "--expr", "sinh(x)", "--write-spec", "specs"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "specs" / "sinh.yaml").is_file()
    assert "dbgen: wrote specs/sinh.yaml" in result.stdout
    built = run_dbgen(["build", "specs", "-o", "generated"], tmp_path)
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "generated" / "sinh.py").is_file()


@pytest.mark.parametrize("args, message", [
    (["audit", "no_such_module_xyz"], "no_such_module_xyz: cannot import it"),
    (["audit", "missing.py"], "missing.py: no such file"),
    (["audit", f"{SEED}:Nothing"], "has no 'Nothing'"),
    (["audit", f"{SEED}:cube_forward"], "cube_forward is not a torch.autograd.Function subclass"),
    (["audit", str(SEED), "--domain", "x=3"], "--domain 'x=3' must be NAME=LO,HI"),
    (["audit", str(SEED), "--domain", "x=3,1"], "LO must be below HI"),
    (["audit", str(SEED), "--shape", "0"], "every size must be at least 1"),
    (["audit", f"{SEED}:Square", "--expr", "x^2"], "--expr: '^' is not power"),
])
def test_cli_refuses_bad_arguments_with_exit_two(tmp_path, args, message):
    result = run_dbgen(args, tmp_path)
    assert result.returncode == 2 and message in result.stderr, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr


def test_auditing_runs_nothing_of_the_target_beyond_its_import(tmp_path):
    marker = tmp_path / "ran"
    auditing.run([str(BUGGY)], auditing.Options(order=1))
    assert not marker.exists()
    source = BUGGY.read_text() + f"\nside_effect({str(marker)!r})\n"
    (tmp_path / "imports.py").write_text(source)
    auditing.run([str(tmp_path / "imports.py")], auditing.Options(order=1))
    assert marker.exists()  # what importing it runs, it runs: the file calls it at import


@pytest.mark.slow  # every example audited: 6-19 s; the generated tests check each one's orders in make test
def test_dbgens_own_generated_functions_are_correct_to_their_order():
    """Every example's public generated Function (a file dbgen generated: level 0 only) audits
    correct to order 3, never wrong, on its spec's domain (where its generated tests draw inputs:
    on the default [-2, 2] bessel_kv and gamma_log_prob are not finite, and the audit says so);
    those with params are limited only by taking them as numbers (no gradient), and those
    calling SciPy by torch.compile's graph break."""
    root = Path(__file__).resolve().parents[3]
    generated = sorted((root / "generated").glob("[a-z]*.py"))
    found = []
    for path in generated:
        spec = load_spec(root / "specs" / f"{path.stem}.yaml", f"{path.stem}.yaml")
        found += auditing.run([str(path)], auditing.Options(domains=dict(spec.domain)))
    assert len(found) == len(generated)  # one public Function each
    for audit in found:  # beyond a spec's order autograd differentiates the last level: right too
        assert audit.verdict != "wrong" and audit.correct_to_order == 3, (audit.function, audit.summary)
        assert _suspects(audit) == [], audit.findings


def test_float32_checks_every_order_against_float64(tmp_path):
    # x + 1e5 - 1e5 is x in float64 and x to 0.008 in float32
    lossy = BUGGY.read_text().replace("return x * torch.sigmoid(x)", "return (x + 1e5 - 1e5) * torch.sigmoid(x)")
    path = tmp_path / "lossy.py"
    path.write_text(lossy)
    fine, coarse = (auditing.run([f"{p}:SwishNewStyle"], auditing.Options(dtype="float32"))[0] for p in (BUGGY, path))
    assert {r.check: r.status for r in fine.results}["float32"] == dynamic.PASS and fine.verdict == "ok"
    checks = {r.check: r for r in coarse.results}
    assert checks["float32"].status == dynamic.FAIL and "order 0 in float32 is off" in checks["float32"].reason


def test_a_sign_error_in_float32_only_is_wrong_not_imprecise(tmp_path):
    """A backward whose float32 branch has the wrong sign: float32's rounding never explains half
    the largest value, so the audit says wrong (exit 1), where it said 'imprecise in float32'."""
    path = tmp_path / "sign.py"
    path.write_text(BUGGY.read_text() + """

class SinF32(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.cos(x) * (-1 if x.dtype == torch.float32 else 1)
""")
    audit = auditing.run([f"{path}:SinF32"], auditing.Options(dtype="float32", order=2))[0]
    assert audit.verdict == "wrong" and audit.wrong_at_order == 1, audit.summary



# --- replacing a Function -----------------------------------------------------------------------

SCALED_SOFTPLUS = '''
import torch


class ScaledSoftplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        ctx.save_for_backward(x)
        ctx.beta = beta
        return torch.nn.functional.softplus(beta * x) / beta

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(ctx.beta * x), None


class Softplus2(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(2 * x) / 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(2 * x).detach()
'''


def test_a_wrong_function_whose_value_is_exprs_gets_its_replacement_and_it_is_right(tmp_path):
    """Replacing a wrong Function is the point: SinhBad's spec is written, says what was wrong, and
    builds a sinh whose second derivative is sinh's."""
    import torch

    result = run_dbgen(["audit", f"{SEED}:SinhBad", "--expr", "sinh(x)", "--write-spec", "specs"], tmp_path)
    assert result.returncode == 1 and "dbgen: wrote specs/sinh_bad.yaml" in result.stdout, result.stdout
    text = (tmp_path / "specs" / "sinh_bad.yaml").read_text()
    assert "its derivatives wrong from order 2; this spec's are exact" in text.splitlines()[0]
    assert run_dbgen(["build", "specs", "-o", "generated"], tmp_path).returncode == 0
    loader = importlib.util.spec_from_file_location("sinh_bad", tmp_path / "generated" / "sinh_bad.py")
    sinh_bad = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(sinh_bad)
    x = torch.tensor([0.3, -1.2], dtype=torch.float64, requires_grad=True)
    (first,) = torch.autograd.grad(sinh_bad.sinh_bad(x).sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), x)
    assert torch.allclose(second, torch.sinh(x.detach()), rtol=1e-12)


def test_params_name_a_function_argument_and_go_into_the_spec(tmp_path):
    path = tmp_path / "fns.py"
    path.write_text(SCALED_SOFTPLUS)
    options = auditing.Options(expr="softplus(beta*x)/beta", params={"beta": 2.0})
    audit = auditing.run([f"{path}:ScaledSoftplus"], options)[0]
    assert audit.verdict == "limited" and audit.correct_to_order == 3, audit.summary
    assert "params:\n  beta: 2.0\n" in audit.spec and "inputs: [x]" in audit.spec
    unset = auditing.run([f"{path}:ScaledSoftplus"], auditing.Options(expr="softplus(beta*x)/beta"))[0]
    assert unset.verdict == "limited", unset.summary  # an internal error (KeyError: 'beta') before
    assert "# beta: the value the audit passed the Function; set your default." in unset.spec


@pytest.mark.parametrize("beta, agrees", [(2.0, True), (3.0, False)])
def test_params_of_expr_alone_and_a_value_that_differs_says_why_no_spec(tmp_path, beta, agrees):
    path = tmp_path / "fns.py"
    path.write_text(SCALED_SOFTPLUS)
    options = auditing.Options(expr="softplus(beta*x)/beta", params={"beta": beta})
    audit = auditing.run([f"{path}:Softplus2"], options)[0]
    assert (audit.spec is not None) == agrees, audit.summary
    notes = [f.message for f in audit.findings if f.kind == static.NOTE]
    if agrees:
        assert audit.wrong_at_order == 2 and "params:\n  beta: 2.0\n" in audit.spec
    else:
        assert any(n.startswith("no replacing spec: its value is not --expr's") for n in notes), notes


def test_the_table_shows_what_the_json_says(tmp_path):
    """An order above a wrong one is shown as measured (dimmed), not as a dash."""
    from rich.console import Console

    from codegen.audit import report

    audit = auditing.run([f"{SEED}:SinhBad"], auditing.Options())[0]
    statuses = {r.check: r.status for r in audit.results}
    assert statuses["order 2"] == "wrong" and statuses["order 3"] == "pass"
    console = Console(width=200, record=True)
    console.print(report.table([audit], 3, False))
    row = next(line for line in console.export_text().splitlines() if "SinhBad" in line)
    assert [cell.strip() for cell in row.split("│")[3:8]] == ["ok", "WRONG", "ok", "WRONG", "ok"], row
