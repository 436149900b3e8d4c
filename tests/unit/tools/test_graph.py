"""`dbgen graph SPEC -o FILE`: the autograd graph of generated Functions, drawn by torchviz + Graphviz.

Pictures need torchviz (the test and viz extras) and Graphviz's dot (`apt install graphviz`;
.ci/run installs it where it can): those tests skip, saying which is missing, only when it is.
The error paths need neither and always run.
"""

from __future__ import annotations

import builtins
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codegen.cli import app

EXAMPLES = Path(__file__).resolve().parents[3] / "specs"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _missing_tools() -> str | None:
    try:
        import torchviz  # noqa: F401
    except ImportError:
        return "torchviz is not installed (pip install 'dbgen[viz]')"
    if shutil.which("dot") is None:
        return "Graphviz's dot is not on PATH (apt install graphviz)"
    return None


needs_tools = pytest.mark.skipif(_missing_tools() is not None, reason=str(_missing_tools()))


@pytest.fixture
def specs(tmp_path, monkeypatch):
    (tmp_path / "specs").mkdir()
    for name in ("sinh", "cube", "gaussian_rbf", "square", "mish"):
        shutil.copy(EXAMPLES / f"{name}.yaml", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def graph(*args: str):
    return CliRunner().invoke(app, ["graph", *args])


def node_names(svg: str) -> set[str]:
    return set(re.findall(r">(\w+Backward\w*)<", svg))


# --- pictures --------------------------------------------------------------------------------------


@needs_tools
def test_sinh_second_order_svg(specs):
    result = graph("specs/sinh.yaml", "-o", "sinh.svg")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "dbgen: graph of sinh (order 2) written to sinh.svg"
    svg = (specs / "sinh.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "</svg>" in svg
    assert "SinhBackward" in node_names(svg)
    assert {">out<", ">grad_x<", ">x<"} <= set(re.findall(r">\w+<", svg))  # labelled tensors


@needs_tools
def test_cube_third_order_shows_every_nested_level(specs):
    result = graph("specs/cube.yaml", "-o", "cube.svg", "--order", "3")
    assert result.exit_code == 0, result.stderr
    names = node_names((specs / "cube.svg").read_text())
    assert {"CubeBackward", "CubeLevel1Backward", "CubeLevel2Backward"} <= names


def box_labels(svg: str) -> list[str]:
    """The first text line of every box: a tensor's name ('' when unlabelled) or a node's class."""
    boxes = re.findall(r'<g id="node\d+" class="node">(.*?)</g>', svg, re.DOTALL)
    return [next(iter(re.findall(r"<text[^>]*>([^<]*)</text>", box)), "").strip() for box in boxes]


@needs_tools
@pytest.mark.parametrize("spec, order, saved", [
    ("sinh", 2, {"expm1_x", "expm1_neg_x"}),        # save_outputs: extra outputs, new objects at each access
    ("mish", 3, {"tanh_softplus_x", "sigmoid_x"}),  # nested: values handed from level to level
])
def test_saved_tensors_are_labelled_with_their_names(specs, spec, order, saved):
    """Every tensor box has a name: none is only a size such as '(5)', as torchviz draws a custom
    Function's saved tensors; the names are those of the generated code's save_for_backward."""
    assert graph(f"specs/{spec}.yaml", "-o", "g.svg", "--order", str(order)).exit_code == 0
    labels = box_labels((specs / "g.svg").read_text())
    assert saved <= set(labels), labels
    assert not [label for label in labels if re.fullmatch(r"\(\d+(, \d+)*\)|", label)], labels


def test_saved_names_follow_the_generated_classes():
    from codegen.tools.graph import saved_names

    source = (
        "class FForCompile(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def setup_context(ctx, inputs, output):\n"
        "        ctx.save_for_backward(x, exp_x)\n"
        "class F(FForCompile):\n    pass\n"
        "class Other:\n    pass\n"
    )
    assert saved_names(source) == {"FForCompileBackward": ("x", "exp_x"), "FBackward": ("x", "exp_x")}


@needs_tools
def test_order_one_is_the_value_graph(specs):
    assert graph("specs/cube.yaml", "-o", "cube.svg", "--order", "1").exit_code == 0
    assert node_names((specs / "cube.svg").read_text()) == {"CubeBackward"}


@needs_tools
def test_png_and_two_inputs(specs):
    result = graph("specs/gaussian_rbf.yaml", "-o", "pictures/rbf.png")
    assert result.exit_code == 0, result.stderr
    assert (specs / "pictures" / "rbf.png").read_bytes().startswith(PNG_MAGIC)


@needs_tools
def test_a_constant_derivative_ends_the_graph(specs):
    """square's second derivative is constant: order 5 draws what exists and does not fail."""
    result = graph("specs/square.yaml", "-o", "square.svg", "--order", "5")
    assert result.exit_code == 0, result.stderr
    assert "SquareBackward" in node_names((specs / "square.svg").read_text())


@needs_tools
def test_graph_leaves_no_module_behind(specs):
    before = set(sys.modules)
    assert graph("specs/square.yaml", "-o", "square.svg").exit_code == 0
    assert not any(name.startswith("_dbgen_graph_") for name in set(sys.modules) - before)


# --- errors ----------------------------------------------------------------------------------------


def test_missing_dot_says_how_to_install_it(specs, monkeypatch):
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # python, but no dot
    if shutil.which("dot") is not None:
        pytest.skip("dot sits beside python here")
    result = graph("specs/sinh.yaml", "-o", "sinh.svg")
    assert result.exit_code == 2
    assert result.stderr.startswith("dbgen: graph needs Graphviz's 'dot' program, which is not on PATH")
    assert "apt install graphviz" in result.stderr and "brew install graphviz" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not (specs / "sinh.svg").exists()


def test_missing_torchviz_says_how_to_install_it(specs, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchviz", None)  # makes `import torchviz` fail
    result = graph("specs/sinh.yaml", "-o", "sinh.svg")
    assert result.exit_code == 2
    assert result.stderr.strip() == "dbgen: graph needs the torchviz package; install it with: pip install torchviz (or dbgen's viz extra)"


def test_torchviz_without_its_own_dependency(specs, monkeypatch):
    """torchviz 0.0.3 imports distutils, gone from Python 3.12: the message says what to install."""
    real_import = builtins.__import__

    def failing_import(name, *args, **kwargs):
        if name == "torchviz":
            raise ModuleNotFoundError("No module named 'distutils'", name="distutils")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", failing_import)
    result = graph("specs/sinh.yaml", "-o", "sinh.svg")
    assert result.exit_code == 2
    assert result.stderr.startswith("dbgen: torchviz cannot be imported: No module named 'distutils'")
    assert "pip install setuptools" in result.stderr


def test_missing_dot_from_a_real_process(specs):
    """The console script, not only the in-process CLI: one line, exit 2, no traceback."""
    import subprocess

    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    if shutil.which("dot", path=env["PATH"]) is not None:
        pytest.skip("dot sits beside python here")
    result = subprocess.run([sys.executable, "-m", "codegen", "graph", "specs/sinh.yaml", "-o", "sinh.svg"],
                            cwd=specs, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "apt install graphviz" in result.stderr


@pytest.mark.parametrize("args, message", [
    (("-o", "sinh.pdf"), "dbgen: sinh.pdf: the picture's file name must end in .svg or .png, e.g. -o sinh.svg"),
    (("-o", "out/my graph"), "dbgen: out/my graph: the picture's file name must end in .svg or .png, e.g. -o out/my graph.svg"),
    (("-o", "sinh.svg", "--order", "0"), "dbgen: --order must be from 1 to 8, not 0"),
    (("-o", "sinh.svg", "--order", "9"), "dbgen: --order must be from 1 to 8, not 9"),
])
def test_bad_arguments(specs, args, message):
    result = graph("specs/sinh.yaml", *args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message), result.stderr
    assert not list(specs.glob("sinh.*"))


def test_output_is_required(specs):
    result = graph("specs/sinh.yaml")
    assert result.exit_code == 2
    assert result.stderr == "dbgen: missing option '-o' / '--output'; see 'dbgen graph --help'\n"


@needs_tools  # the tools are checked first
def test_bad_spec_is_reported_with_its_line(specs):
    (specs / "specs" / "bad.yaml").write_text("name: bad\nexpr: x\ninputs: [x]\norder: 0\n")
    result = graph("specs/bad.yaml", "-o", "bad.svg")
    assert result.exit_code == 2
    assert result.stderr.startswith("specs/bad.yaml:4: order must be")


def test_a_folder_is_refused(specs):
    result = graph("specs", "-o", "all.svg")
    assert result.exit_code == 2
    assert result.stderr == "dbgen: specs: is a folder; graph takes one spec file, e.g. dbgen graph specs/cube.yaml\n"


def test_symbolic_work_is_bounded_as_in_build(specs):
    (specs / "specs" / "deep.yaml").write_text(
        "name: deep\nexpr: exp(exp(x*y))\ninputs: [x, y]\norder: 4\nstrategy: nested\n"
    )
    result = graph("specs/deep.yaml", "-o", "deep.svg", "--size-limit", "50")
    if _missing_tools() is not None:
        assert result.exit_code == 2  # the tools are checked first
        return
    assert result.exit_code == 2
    assert result.stderr.startswith("specs/deep.yaml:2: expr: symbolic work exceeded the size limit of 50 nodes")
    assert not (specs / "deep.svg").exists()
