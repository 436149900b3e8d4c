"""`dbgen show SPEC`: formula, derivatives, strategy and reason, and each generated Function."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import sympy
from typer.testing import CliRunner

from codegen.cli import app
from codegen.tools import show

EXAMPLES = Path(__file__).resolve().parents[3] / "specs"
x, y = sympy.symbols("x y", real=True)


@pytest.fixture
def specs(tmp_path, monkeypatch):
    (tmp_path / "specs").mkdir()
    for name in ("sinh", "cube", "exp", "gaussian_rbf", "square"):
        shutil.copy(EXAMPLES / f"{name}.yaml", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "specs"


def run_show(*args: str):
    result = CliRunner().invoke(app, ["show", *args])
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_sinh_intermediates(specs):
    text = run_show("specs/sinh.yaml")
    assert text.startswith("sinh: specs/sinh.yaml\nHyperbolic sine")
    assert "  f(x) = sinh(x)\n" in text
    assert "  order 1  ∂f/∂x = cosh(x)\n" in text and "  order 2  ∂²f/∂x² = sinh(x)\n" in text
    assert "Strategy\n  intermediates: chosen in the spec\n" in text
    assert "    forward(x) -> out, expm1_x, expm1_neg_x    [" in text
    # the tutorial's two exps, through expm1 (no cancellation in their difference near 0)
    assert re.search(r"shared +expm1_neg_x = expm1\(-x\)\n +expm1_x = expm1\(x\)\n", text)
    assert "    saves for backward: expm1_x, expm1_neg_x\n" in text
    assert "    backward(grad_out, grad_expm1_x, grad_expm1_neg_x) -> grad_x    [" in text
    assert re.search(r"computes +grad_x = .*dout_dx·grad_out", text)
    assert re.search(r"^  Sinh\.forward: \d+$", text, re.MULTILINE) and re.search(r"^  Sinh\.backward: \d+$", text, re.MULTILINE)


def test_cube_nested_levels(specs):
    text = run_show("specs/cube.yaml")
    assert "  f(x) = x³\n" in text
    assert "∂f/∂x = 3·x²" in text and "∂²f/∂x² = 6·x" in text and "∂³f/∂x³ = 6" in text
    assert "Generated Functions (3)" in text
    assert "    backward: applies CubeLevel1, the next level\n" in text
    assert "    backward: applies CubeLevel2, the next level\n" in text
    assert "    forward(grad_out, x) -> grad_x    [3 ops]\n" in text
    assert "computes  grad_x = 3·grad_out·x²" in text
    assert "    forward(grad2_x, grad_out, x) -> grad_grad_out, grad_x" in text
    levels = re.findall(r"^  (Cube\w*\.(?:forward|backward)): (\d+)$", text, re.MULTILINE)
    assert [name for name, _ in levels] == [
        "Cube.forward", "CubeLevel1.forward", "CubeLevel2.forward", "CubeLevel2.backward",
    ]
    assert levels[0][1] == "1"  # x**3 is one power


def test_auto_says_what_it_chose_and_why(specs):
    (specs / "th.yaml").write_text("name: th\nexpr: tanh(x)\ninputs: [x]\norder: 2\n")
    text = run_show("specs/th.yaml")
    assert re.search(r"^Strategy\n  (save_inputs|save_outputs|intermediates|nested): auto: \w", text, re.MULTILINE), text


def test_saved_output(specs):
    text = run_show("specs/exp.yaml")
    assert "Strategy\n  save_outputs: chosen in the spec\n" in text
    assert "    saves for backward: out\n" in text


def test_two_inputs_show_mixed_partials(specs):
    text = run_show("specs/gaussian_rbf.yaml")
    assert "  f(x, y) = exp(-gamma·(x - y)²)\n" in text
    assert "∂²f/∂x∂y = " in text and "∂³f/∂x²∂y = " in text
    assert "backward(grad_out) -> grad_x, grad_y" in text


def test_ops_per_block(specs):
    text = run_show("specs/square.yaml")
    assert "    forward(x) -> out    [1 op]\n" in text  # x**2
    assert "    backward(grad_out) -> grad_x    [2 ops]\n" in text  # 2*grad_out*x
    assert "  Square.forward: 1\n  Square.backward: 2\n" in text


def test_latex(specs):
    text = run_show("specs/sinh.yaml", "--latex")
    assert r"  f(x) = \sinh{\left(x \right)}" in text
    assert r"\frac{\partial^{2} f}{\partial x^{2}} = \sinh{\left(x \right)}" in text
    assert r"\mathit{expm1\_x} = \operatorname{expm}_{1}{\left(x \right)}" in text
    assert "∂" not in text


def test_show_writes_nothing(specs):
    before = sorted(p.name for p in specs.parent.rglob("*"))
    run_show("specs/sinh.yaml")
    assert sorted(p.name for p in specs.parent.rglob("*")) == before


def test_bad_spec(specs):
    (specs / "bad.yaml").write_text("name: bad\nexpr: x ^ 2\ninputs: [x]\norder: 2\n")
    result = CliRunner().invoke(app, ["show", "specs/bad.yaml"])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0].startswith("specs/bad.yaml:2: expr: '^' is not power")


@pytest.mark.parametrize("path, hint", [
    ("specs", "is a folder; show takes one spec file, e.g. dbgen show specs/activation.yaml"),
    ("specs/activaton.yaml", "no such file; show takes one spec file, e.g. dbgen show specs/activation.yaml"),
    ("specs/rbf.yml", "no such file; show takes one spec file, e.g. dbgen show specs/rbf_kernel.yml"),
    ("nowhere.yaml", "no such file; show takes one spec file (a .yaml or .yml path)"),
])
def test_one_spec_file_only_with_a_hint_from_the_users_own_files(tmp_path, monkeypatch, path, hint):
    """The example names a spec of the user's project (in the folder given, or the closest name
    beside a mistyped one), never one of dbgen's own examples the project does not have."""
    (tmp_path / "specs").mkdir()
    for name in ("activation.yaml", "rbf_kernel.yml"):
        (tmp_path / "specs" / name).write_text((EXAMPLES / "sinh.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["show", path])
    assert result.exit_code == 2
    assert result.stderr == f"dbgen: {path}: {hint}\n"


def test_a_bad_spec_does_not_say_nothing_was_written(specs):
    """show writes nothing anyway: its summary line says how many problems, not what it did not write."""
    (specs / "bad.yaml").write_text("name: bad\nexpr: x ^ 2\ninputs: [x]\norder: 0\n")
    result = CliRunner().invoke(app, ["show", "specs/bad.yaml"])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == "dbgen: 2 problem(s); fix the spec(s) and rerun"
    assert "written" not in result.stderr


@pytest.mark.parametrize("expr, text", [
    (x**2 * y, "x²·y"),
    (x**-2, "x⁻²"),
    (x**12, "x¹²"),
    (x**sympy.Rational(3, 2), "x^(3/2)"),
    (x**(2 * y), "x^(2·y)"),
    (x**2.5, "x^2.5"),
    (sympy.sqrt(x), "√(x)"),
    (sympy.pi * x, "π·x"),
    (sympy.exp(-x) / 2, "exp(-x)/2"),
])
def test_unicode_form(expr, text):
    assert show._unicode(expr) == text


def test_a_huge_formula_is_summarised():
    big = sum(sympy.sin(x * k) ** k for k in range(1, 150))  # well over MAX_SHOWN_CHARS
    assert show._formula(big, show.UNICODE) == f"({sympy.count_ops(big)} operations; too long to show)"


@pytest.mark.parametrize("index, unicode, latex", [
    (("x",), "∂f/∂x", r"\frac{\partial f}{\partial x}"),
    (("x", "x", "y"), "∂³f/∂x²∂y", r"\frac{\partial^{3} f}{\partial x^{2} \partial y}"),
    (("beta", "beta"), "∂²f/∂beta²", r"\frac{\partial^{2} f}{\partial \mathit{beta}^{2}}"),
])
def test_labels(index, unicode, latex):
    assert show._label(index, latex=False) == unicode
    assert show._label(index, latex=True) == latex


def test_readme_sample_is_what_show_prints(monkeypatch):
    """The docs' sample output stays true (update it when the plan for sinh changes)."""
    readme = (EXAMPLES.parent / "docs" / "guide" / "commands.md").read_text()
    section = readme[readme.index("## `dbgen show SPEC`"):]
    sample = re.search(r"```text\n(.*?)```", section, re.DOTALL).group(1)
    monkeypatch.chdir(EXAMPLES.parent)
    assert show.show_text(Path("specs/sinh.yaml")) == sample


def test_symbolic_work_is_bounded_as_in_build(specs):
    (specs / "deep.yaml").write_text("name: deep\nexpr: exp(exp(x*y))\ninputs: [x, y]\norder: 4\nstrategy: nested\n")
    result = CliRunner().invoke(app, ["show", "specs/deep.yaml", "--size-limit", "50"])
    assert result.exit_code == 2
    assert result.stderr.startswith("specs/deep.yaml:2: expr: symbolic work exceeded the size limit of 50 nodes")
