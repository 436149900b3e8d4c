"""Generated code a person can check by eye: temporaries named from what they hold
(plan.naming._describe), short and deterministic, numbered only where nothing describes them; no call
nested more than two deep in the Functions (folded sums get named temporaries)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import sympy
from sympy.codegen.cfunctions import log1p

from codegen.build import pipeline
from codegen.language.expr import parse_expr
from codegen.language.formula import formula, oriented
from codegen.language.functions import sigmoid, softplus
from codegen.plan.naming import MAX_NAME, Namer, _describe

ROOT = Path(__file__).resolve().parents[3]
x, y, grad_out = (sympy.Symbol(name, real=True) for name in ("x", "y", "grad_out"))
LONG = sympy.tanh(sympy.sqrt(2) * x * (sympy.Float(0.044715) * x**2 + 1) / sympy.sqrt(sympy.pi))


@pytest.mark.parametrize("value, name", [
    (sympy.tanh(softplus(x)), "tanh_softplus_x"),
    (sigmoid(x), "sigmoid_x"),
    (sympy.exp(-x), "exp_neg_x"),
    (x**3, "x_pow3"),
    (1 / x, "inv_x"),
    (x + y, "sum_x_y"),
    (x - y, "diff_x_y"),  # a difference, not sum_x_neg_y
    (y - x, "diff_y_x"),
    (sympy.exp(x) - sympy.sin(y), "diff_exp_x_sin_y"),
    (x - y + 1, "sum_x_neg_y"),  # not a difference of two: diff_x_y would drop the 1
    (-x - y, "sum_neg_x_neg_y"),
    (x * y, "prod_x_y"),
    (grad_out * sigmoid(x), "prod_grad_out_sigmoid_x"),
    (2 * x, "scaled_x"),
    (x + 1, "x_plus_1"),
    (1 - sympy.tanh(softplus(x)), "one_minus_tanh"),
    (1 - x, "one_minus_x"),
    (9 - x**2, "neg_x_pow2_plus_9"),  # a name never starts with a digit
    (sympy.sqrt(2), "sqrt_2"),
    (LONG, "tanh_prod_x"),  # the outermost function and a short form of its argument
    (LONG + 1, "tanh_prod_x_plus_1"),
    (1 - LONG, "one_minus_tanh_prod_x"),
    (log1p(LONG), "log1p_tanh_prod_x"),
    ((1 - LONG) * (LONG + 1), "prod_sum_sum"),
])
def test_a_temporary_is_named_from_what_it_holds(value, name):
    assert _describe(value) == name


def _assigned(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)]


@pytest.fixture(scope="module")
def nested(tmp_path_factory) -> Path:
    """The examples whose nested levels have the most temporaries (t0...t12 before)."""
    out = tmp_path_factory.mktemp("names")
    specs = [ROOT / "specs" / f"{name}.yaml" for name in ("gelu_tanh", "mish", "silu", "gaussian_rbf", "cube")]
    for rel, text in pipeline.generate(specs, root=ROOT).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    return out


def test_no_temporary_is_numbered_and_every_name_is_short(nested):
    names = [name for path in sorted(nested.glob("*.py")) for name in _assigned(path)]
    assert names
    numbered = [name for name in names if re.fullmatch(r"t\d+", name)]
    assert not numbered
    too_long = [name for name in names if len(name) > MAX_NAME + 2]  # + a "_1" suffix
    assert not too_long


def _call_depth(node: ast.AST) -> int:
    inner = max((_call_depth(child) for child in ast.iter_child_nodes(node)), default=0)
    return inner + isinstance(node, ast.Call)


def test_no_call_nests_more_than_two_deep_in_the_functions(nested):
    """Folded sums were torch.addcmul(torch.addcmul(... five deep; now each inner fold is a
    named temporary. Every statement of every generated Function is checked."""
    deep = []
    for path in sorted(nested.glob("*.py")):
        for top in ast.parse(path.read_text()).body:
            if isinstance(top, ast.ClassDef):
                deep += [f"{path.name}: {ast.unparse(node)[:120]}" for node in ast.walk(top)
                         if isinstance(node, (ast.Assign, ast.Return)) and _call_depth(node) > 2]
    assert not deep


def _aliases(code: str) -> list[str]:
    """Statements ``a = b`` in a function where ``b`` is a value the function computed itself."""
    found = []
    for function in ast.walk(ast.parse(code)):
        if isinstance(function, ast.FunctionDef):
            computed: set[str] = set()
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in computed:
                    found.append(ast.unparse(node))
                computed |= {t.id for t in getattr(node, "targets", ()) if isinstance(t, ast.Name)}
    return found


def test_no_temporary_is_an_alias_of_another():
    """A temporary holding a power a ladder also builds (z**2 under z**4) is that ladder step, not
    ``z_pow2 = z_pow2_1`` beside a fresh z_pow2_1."""
    specs = [ROOT / "specs" / f"{name}.yaml" for name in ("cartesian_to_spherical", "lennard_jones", "soft_unit_step")]
    generated = pipeline.generate(specs, root=ROOT)
    modules = {rel: text for rel, text in generated.items() if rel.endswith(".py") and not rel.startswith("tests/")}
    assert not {rel: found for rel, text in modules.items() if (found := _aliases(text))}


def test_a_name_is_always_a_python_name():
    namer = Namer({"x"})
    assert [namer.fresh("9_minus_x"), namer.fresh("in"), namer.fresh("x")] == ["v_9_minus_x", "v_in", "x_1"]


def test_an_unused_value_is_not_renamed_onto_a_module_helper():
    """A saved value named ``horner`` (dbgen's series branch) unpacked unused was ``_horner``, which
    rebound the module's helper of that name: bessel_basis's jvp then called a tensor."""
    from codegen.emit import functions

    assert functions._unpack_used(["horner", "x"], {"x"}) == "_unused_horner, x"
    assert functions._unpack_used(["sinh_x", "x"], {"x"}) == "_sinh_x, x"
    assert {"_horner", "_norm", "_accumulate"} <= functions._module_private_names()


@pytest.mark.parametrize("written", [
    "where(abs(x - y) < delta, x, y)",
    "where(x < delta, x, y)",
    "where(delta < x, x, y)",  # as written: both sides as simple, SymPy's order (alphabetical) kept
    "where(x**2 + y**2 <= delta, 1, 0)",
])
def test_a_condition_is_written_back_with_its_larger_side_first(written):
    """SymPy keeps a condition in its canonical order, alphabetical among symbols: huber's
    abs(x - y) < delta came out as delta > abs(x - y) in the docstring and the backward, and as
    abs_diff_x_y < delta in the forward, where CSE had named the abs. One spelling now: the side
    with more operations first, in the docstrings, the code and the mask's name."""
    expr = parse_expr(written, ("x", "y"), ("delta",))
    (condition,) = [arg.cond for arg in expr.args if arg.cond is not sympy.true]
    lhs, op, rhs = oriented(condition)
    assert sympy.count_ops(lhs) >= sympy.count_ops(rhs)
    assert formula(expr).startswith(f"where({formula(lhs)} {op} {formula(rhs)},")
    if written.startswith("where(abs"):
        assert formula(expr) == written
    difference = sympy.Symbol("diff_x_y", real=True)  # as CSE names x - y
    assert _describe(sympy.Gt(sympy.Symbol("delta", real=True), sympy.Abs(difference))) == "abs_diff_x_y_lt_delta"


def test_huber_spells_its_condition_one_way():
    module = (ROOT / "generated" / "huber.py").read_text(encoding="utf-8")
    assert "delta >" not in module and "delta_gt" not in module
    assert "abs(x - y) < delta" in module and "abs_diff_x_y_lt_delta" in module
