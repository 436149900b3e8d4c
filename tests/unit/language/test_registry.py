"""The registry of the language's functions (codegen/language/registry.py) against every stage that
reads it: one harness, parametrized over every entry (as PyTorch's OpInfo tests are), so that a
function added, renamed or changed in one place and not the others fails here, by name."""

from __future__ import annotations

import functools
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sympy
import torch

from codegen import language
from codegen.derive import branches
from codegen.emit.printer import TorchPrinter
from codegen.language import functions
from codegen.language.expr import parse_expr
from codegen.language.formula import formula
from codegen.language.registry import FUNCTIONS, KINDS, REGISTRY
from codegen.plan import cost

ROOT = Path(__file__).resolve().parents[3]
IDS = [function.name for function in FUNCTIONS]
ELEMENTARY = [function for function in FUNCTIONS if function.kind == "elementary"]

# The arguments of a call of each function that takes other than one plain argument (an order,
# polygamma's n or jv's nu, is the literal 2, which every one of them takes: expn's must be one)
ARGUMENTS = {"atan2": "y, x", "xlogy": "x, y", "where": "x > 0, x, y", "min": "x, y", "max": "x, y",
             "clamp": "x, 0, 1"}


def call(function) -> str:
    """A call of ``function`` as a spec writes it, of the inputs x and y."""
    if function.name in ARGUMENTS:
        return f"{function.name}({ARGUMENTS[function.name]})"
    return f"{function.name}({'2, x' if function.arity == 2 else 'x'})"


@functools.cache
def parsed(name: str) -> sympy.Expr:
    return parse_expr(call(REGISTRY[name]), ("x", "y"), ())


@pytest.mark.parametrize("function", FUNCTIONS, ids=IDS)
def test_each_entry_is_complete_for_its_kind(function):
    assert function.kind in KINDS
    assert function.arity >= 1 and function.sympy.isidentifier()
    assert call(function).count(",") == function.arity - 1, "a call of it in ARGUMENTS, with its arity"
    if function.torch is not None:  # a torch callable that exists
        assert function.torch.startswith("torch.")
        assert functools.reduce(getattr, function.torch.split(".")[1:], torch)
    if function.math is not None:
        assert function.math.startswith("math.") and hasattr(math, function.math.removeprefix("math."))
    assert (function.weight is None) == (function.fused_weight is None)
    if function.kind == "elementary":  # every one is a torch op with measured weights
        assert function.torch and function.weight and all(w >= 0 for w in function.weight)
    elif function.kind == "piecewise":
        assert (function.sympy, function.torch, function.math, function.weight) == ("Piecewise", None, None, None)
    elif function.kind == "scipy":  # computed outside autograd, unmeasured
        assert (function.sympy, function.torch, function.math, function.weight) == (function.name, None, None, None)
        assert not function.entire
    if function.alias_of is not None:
        original = REGISTRY[function.alias_of]
        assert original.alias_of is None and (original.sympy, original.arity) == (function.sympy, function.arity)


@pytest.mark.parametrize("function", FUNCTIONS, ids=IDS)
def test_a_call_parses_to_the_entrys_sympy_class(function):
    expr = parsed(function.name)
    assert type(expr).__name__ == function.sympy


@pytest.mark.parametrize("function", FUNCTIONS, ids=IDS)
def test_formula_writes_the_call_back_by_its_name(function):
    written = formula(parsed(function.name))
    if function.kind == "piecewise":  # a choice, in the language's own words (nested, as written)
        assert written.startswith("where(")
        return
    assert written == call(REGISTRY[function.alias_of] if function.alias_of else function)
    assert parse_expr(written, ("x", "y"), ()) == parsed(function.name)


@pytest.mark.parametrize("function", FUNCTIONS, ids=IDS)
def test_the_printer_writes_the_entrys_torch_call_of_a_tensor(function):
    code = TorchPrinter(("x", "y")).doprint(parsed(function.name))
    if function.torch is not None:
        expected = function.torch
    elif function.kind == "piecewise":
        expected = "torch.where"
    else:  # the generated module's own function: special.py's _Special, external.py's _External
        expected = f"_{function.sympy}"
    assert code.startswith(f"{expected}(")


@pytest.mark.parametrize("function", [f for f in FUNCTIONS if f.math], ids=[f.name for f in FUNCTIONS if f.math])
def test_the_printer_writes_the_entrys_math_call_of_a_float(function):
    printer = TorchPrinter(())  # x and y are floats: functions of params alone
    assert printer.doprint(parsed(function.name)).startswith(f"{function.math}(") and printer.uses_math


POINTS = (0.3, 0.7, 1.5, 2.5)  # x; y is 0.6
COMPUTED = [f for f in FUNCTIONS if f.torch or f.kind == "piecewise"]  # by torch and math alone


@pytest.mark.parametrize("function", COMPUTED, ids=[f.name for f in COMPUTED])
def test_the_printed_code_computes_the_function(function):
    """What the printer writes, of a tensor and of a float, against SymPy's value of the parsed call
    (at 30 digits), where that is real: a spelling of another function (math.atan for tan) fails."""
    expr = parsed(function.name)
    tensor_code, float_code = TorchPrinter(("x", "y")).doprint(expr), TorchPrinter(()).doprint(expr)
    checked = 0
    for point in POINTS:
        try:
            exact = complex(expr.subs({sympy.Symbol("x", real=True): point, sympy.Symbol("y", real=True): 0.6}).evalf(30))
        except ValueError:  # mpmath's, outside the domain (erfinv(1.5))
            continue
        if exact.imag or not math.isfinite(exact.real):
            continue  # no real value there (acosh(0.3))
        tensors = {"x": torch.tensor([point], dtype=torch.float64), "y": torch.tensor([0.6], dtype=torch.float64)}
        from_tensors = eval(tensor_code, {"torch": torch, "math": math, **tensors})  # the printer's own code
        from_floats = eval(float_code, {"torch": torch, "math": math, "x": point, "y": 0.6})
        assert float(from_tensors) == pytest.approx(exact.real, rel=1e-12, abs=1e-300), tensor_code
        assert float(from_floats) == pytest.approx(exact.real, rel=1e-12, abs=1e-300), float_code
        checked += 1
    assert checked, f"no point of {POINTS} where {call(function)} is real"


@pytest.mark.parametrize("function", ELEMENTARY, ids=[f.name for f in ELEMENTARY])
def test_the_cost_model_weighs_every_elementary_function_as_measured(function):
    expr = parsed(function.name)
    if function.sympy == "Pow":  # sqrt: a power the model knows is fast
        assert expr.exp in cost.FAST_EXPONENTS
        return
    assert cost.FUNCTION_WEIGHTS[function.sympy] == function.weight
    assert cost.FUSED_FUNCTION_WEIGHTS[function.sympy] == function.fused_weight
    assert cost.block_cost([expr], set()) == function.weight


def test_the_cost_models_own_nodes_are_not_language_functions():
    names = {function.sympy for function in FUNCTIONS}
    assert not names & set(cost.INTERNAL_WEIGHTS) and not names & set(cost.FUSED_INTERNAL_WEIGHTS)


@pytest.mark.parametrize("function", [f for f in FUNCTIONS if f.entire], ids=[f.name for f in FUNCTIONS if f.entire])
def test_an_entire_function_is_finite_with_its_derivatives_wherever_its_argument_is(function):
    """The branches leave a branch of these unguarded: a wrong flag would let NaN through."""
    assert isinstance(parsed(function.name), branches._ENTIRE)
    op = functools.reduce(getattr, function.torch.split(".")[1:], torch)
    x = torch.tensor([-1e300, -1e10, -30.0, -1.0, 0.0, 1.0, 30.0, 1e10, 1e300], dtype=torch.float64,
                     requires_grad=True)
    value = op(x)
    first, = torch.autograd.grad(value.sum(), x, create_graph=True)
    second, = torch.autograd.grad(first.sum(), x)
    assert all(bool(torch.isfinite(v).all()) for v in (value, first, second))


def test_the_branches_finite_functions_are_the_registrys_and_sign():
    entire = {type(parsed(function.name)) for function in FUNCTIONS if function.entire}
    assert {cls.__name__ for cls in branches._ENTIRE} == {cls.__name__ for cls in entire} | {"sign"}


def test_the_language_tables_are_the_registrys():
    assert language.FUNCTION_ARITY == {f.name: f.arity for f in FUNCTIONS if f.kind != "scipy"}
    assert language.SCIPY_ARITY == {f.name: f.arity for f in FUNCTIONS if f.kind == "scipy"}
    assert language.PIECEWISE_FUNCTIONS == tuple(f.name for f in FUNCTIONS if f.kind == "piecewise")
    assert {name: arity for name, (_, arity) in functions.FUNCTIONS.items()} == {f.name: f.arity for f in FUNCTIONS}


def _words(path: Path) -> set[str]:
    return set(re.findall(r"\w+", path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("function", FUNCTIONS, ids=IDS)
def test_the_docs_name_every_function(function):
    guide = "externals.md" if function.kind == "scipy" else "specs.md"
    assert function.name in _words(ROOT / "docs" / "guide" / guide), f"docs/guide/{guide} does not name it"


def test_the_language_names_import_without_sympy():
    """A build whose outputs are up to date reads the names (spec validation) and never SymPy."""
    code = "import sys, codegen.language.registry, codegen.language; assert 'sympy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
