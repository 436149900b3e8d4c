"""No internal error (exit 3) on any spec the language accepts.

Hypothesis draws specs that load: expressions over the whole language with no care for domains
(log(x - 2), acos(clamp(x, -1, 1)), 1/(x - x), where(y < 0, sqrt(x), x)), the piecewise forms
(where with comparisons combined by and/or/not, clamp, max, min, relu, abs, comparisons used as
numbers) mixed in at every level, one or two inputs, a param, an order from 1 to 3, a strategy and
sometimes a domain. Each is built by the CLI (``run_dbgen``, in this process) into a temporary
folder: it builds (exit 0) or is refused with a message (exit 1 or 2), never "internal error"
(exit 3). tests/properties/test_fuzz.py's parser fuzzing covers text that does not load. Internal errors
found in code outside this issue's files are listed in KNOWN_BUGS (strict xfail) until fixed.

Budget: ``scaled(60)`` examples (tests/conftest.py profiles): 15 in ``make test`` (quick), 60 in
``make test-all`` (ci), 1200 with DBGEN_HYPOTHESIS_PROFILE=long, which is for bug hunting.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from unittest import mock

import helpers
import pytest
import torch
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from codegen.language import FUNCTION_ARITY, PIECEWISE_FUNCTIONS

TIME_LIMIT_S = 20  # --time-limit: symbolic work past it is a clean refusal (exit 2), not a hang
EXAMPLES = 60


def scaled(examples: int) -> int:
    """A test's own budget, scaled by the profile (ci: 100 -> as written; quick: a tenth)."""
    return max(1, examples * settings.default.max_examples // 100)


# Expressions ---------------------------------------------------------------------------------

UNARY = sorted(name for name, n in FUNCTION_ARITY.items() if n == 1 and name not in PIECEWISE_FUNCTIONS)
LEAVES = st.sampled_from(["x", "x", "y", "a", "0", "1", "2", "0.5", "-1", "pi"])
RELATIONS = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])


# Conditions compare small terms: leaves, a function of one, a sum or product of two
TERMS = (LEAVES | st.tuples(st.sampled_from(UNARY), LEAVES).map(lambda t: f"{t[0]}({t[1]})")
         | st.tuples(LEAVES, st.sampled_from(["+", "*"]), LEAVES).map(" ".join))
COMPARISONS = (st.tuples(TERMS, RELATIONS, TERMS).map(" ".join)
               | st.tuples(TERMS, RELATIONS, TERMS, RELATIONS, TERMS).map(" ".join))  # chained: 0 < x < 1
CONDITIONS = st.recursive(COMPARISONS, lambda inner: (
    st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})")
    | inner.map(lambda c: f"not ({c})")), max_leaves=3)


def _grammar(children):
    """One level of the language over ``children``: functions, operators and the piecewise forms."""
    return (st.tuples(st.sampled_from(UNARY), children).map(lambda t: f"{t[0]}({t[1]})")
            | st.tuples(children, st.sampled_from(["+", "-", "*", "/", "**"]), children).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})")
            | children.map(lambda e: f"-({e})")
            | st.tuples(CONDITIONS, children, children).map(lambda t: f"where({t[0]}, {t[1]}, {t[2]})")
            | st.tuples(children, children, children).map(lambda t: f"clamp({t[0]}, {t[1]}, {t[2]})")
            | st.tuples(children, LEAVES, LEAVES).map(lambda t: f"clamp({t[0]}, {t[1]}, {t[2]})")
            | st.tuples(st.sampled_from(["max", "min", "atan2"]), children, children).map(lambda t: f"{t[0]}({t[1]}, {t[2]})")
            | st.tuples(st.sampled_from(["relu", "abs"]), children).map(lambda t: f"{t[0]}({t[1]})")
            | st.tuples(children, CONDITIONS).map(lambda t: f"({t[0]}) * ({t[1]})"))


EXPRESSIONS = st.recursive(LEAVES, _grammar, max_leaves=6)
DOMAINS = st.sampled_from([None, [-1, 1], [0.5, 2], [-2, -0.5], [0, 3], [-10, 10]])


@st.composite
def specs(draw) -> dict:
    inputs = draw(st.sampled_from([["x"], ["x", "y"]]))
    expr = draw(EXPRESSIONS)
    if not any(name in expr.replace("exp", "").replace("max", "") for name in inputs):
        expr = f"x * ({expr})"  # an expression of no input is refused before the build
    spec = {"name": "f", "expr": expr, "inputs": inputs, "params": {"a": draw(st.sampled_from([0.5, -1.0, 2.0]))},
            "order": draw(st.integers(1, 3)),
            "strategy": draw(st.sampled_from(["auto", "save_inputs", "save_outputs", "intermediates", "nested"]))}
    domain = {name: bounds for name in inputs if (bounds := draw(DOMAINS)) is not None}
    if domain:
        spec["domain"] = domain
    return spec


# The property --------------------------------------------------------------------------------


def build_through_the_cli(spec: dict) -> tuple[int, str]:
    """``dbgen build specs -o out`` on ``spec`` in a temporary folder, in this process: (exit code, stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "specs").mkdir()
        (folder / "specs" / "f.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        env = {k: v for k, v in os.environ.items() if k != "DBGEN_DEBUG"}
        with mock.patch.object(helpers, "CLI_MODE", "inprocess"):
            result = helpers.run_dbgen(["build", "specs", "-o", "out", "--time-limit", str(TIME_LIMIT_S), "--quiet"],
                                       cwd=folder, env=env)
    return result.returncode, result.stderr


# Internal errors this test found in code outside the domain check and bench,
# still open: the spec that shows each, and its line on stderr. The property passes over an
# example that ends in one (a hypothesis event says so); test_known_internal_errors_are_still_open
# fails (strict xfail) once one is fixed, so that its entry is removed here.
KNOWN_BUGS: dict = {}  # none open

# Once KNOWN_BUGS, now fixed: each builds, and its value and first derivative are the formula's
FIXED = {
    # the other param values the generated tests try (param_values.py): at a = -2, acos(a) in a
    # comparison is not real, and SymPy raised comparing it; such values are passed over now
    "condition undefined at the tests' other param values": (
        {"name": "f", "expr": "where(x <= acos(a), x, 2*x)", "inputs": ["x"], "params": {"a": -1.0}, "order": 1},
        lambda x, a: torch.where(x <= math.acos(a), x, 2 * x)),
    # nested clamps on params: SymPy wrote a condition as an if-then-else of conditions, which no
    # printer wrote; expr.py writes it with and, or and not
    "condition an if-then-else of conditions": (
        {"name": "f", "expr": "clamp(clamp(relu(a), 2, 2), bessel_j1(x), -2)", "inputs": ["x"], "params": {"a": 0.5},
         "order": 1},
        lambda x, a: torch.clamp(torch.clamp(torch.relu(torch.tensor(a, dtype=x.dtype)), 2, 2),
                                 torch.special.bessel_j1(x), torch.tensor(-2.0, dtype=x.dtype))),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_once_known_internal_errors_build_and_compute_the_formula(tmp_path, name):
    spec, reference = FIXED[name]
    assert_no_internal_error(spec, known_bugs_pass=False)
    module = helpers.build_spec(tmp_path, **spec)
    x = torch.linspace(-3, 5, 17, dtype=torch.float64, requires_grad=True)
    (a,) = spec["params"].values()
    for value in (a, -0.5):
        ours, theirs = module.f(x, a=value), reference(x, value)
        torch.testing.assert_close(ours, theirs)
        # torch.clamp has no gradient for its bounds: where the bound is taken, 0
        expected = (torch.autograd.grad(theirs.sum(), x)[0] if theirs.requires_grad else torch.zeros_like(x))
        torch.testing.assert_close(torch.autograd.grad(ours.sum(), x)[0], expected)


def _known_bug(stderr: str) -> str | None:
    return next((name for name, (_, line) in KNOWN_BUGS.items() if line in stderr), None)


def assert_no_internal_error(spec: dict, known_bugs_pass: bool = True) -> None:
    code, stderr = build_through_the_cli(spec)
    shown = yaml.safe_dump(spec, sort_keys=False)
    if code == 3 and known_bugs_pass and _known_bug(stderr):
        event(f"known bug: {_known_bug(stderr)}")
        return
    assert code != 3, f"internal error on a spec the language accepts:\n{shown}\n{stderr}"
    assert code in (0, 1, 2), f"exit {code}:\n{shown}\n{stderr}"
    assert "Traceback" not in stderr, f"a traceback:\n{shown}\n{stderr}"
    if code:
        assert stderr.strip(), f"exit {code} without a message:\n{shown}"


# Found while writing this test: the domain check crashed on these.
@example(spec={"name": "f", "expr": "acos(clamp(x, -1, 1))", "inputs": ["x"], "order": 2})
@example(spec={"name": "f", "expr": "log(max(x, 0))", "inputs": ["x"], "order": 2})
@example(spec={"name": "f", "expr": "where(y < 0, sqrt(x), x)", "inputs": ["x", "y"], "order": 2})
# Found by the long profile and a held-out style probe: a math function given the complex number
# Python's ** makes of a negative base, and SymPy's Piecewise re-evaluating itself without end on a
# comparison with floats on both sides (a quantile loss at q = 0.9)
@example(spec={"name": "f", "expr": "(acos((x) ** (x))) * (x < a)", "inputs": ["x"], "params": {"a": -1.0},
               "order": 1})
@example(spec={"name": "f", "expr": "max(q * (y - x), (q - 1) * (y - x))", "inputs": ["x", "y"],
               "params": {"q": 0.9}, "order": 2})
@example(spec={"name": "f", "expr": "min(0.9 * x, -0.1 * x)", "inputs": ["x"], "order": 1})
@settings(max_examples=scaled(EXAMPLES), suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=specs())
def test_random_valid_specs_never_end_in_an_internal_error(spec):
    assert_no_internal_error(spec)


@pytest.mark.xfail(strict=True, reason="an open bug outside domain.py and the bench (KNOWN_BUGS)")
@pytest.mark.parametrize("name", sorted(KNOWN_BUGS) or [pytest.param("none", marks=pytest.mark.skip("none open"))])
def test_known_internal_errors_are_still_open(name):
    assert_no_internal_error(KNOWN_BUGS[name][0], known_bugs_pass=False)


def test_the_property_sees_an_internal_error():
    """The check above fails on exit 3: a pipeline that raises an unexpected exception is caught."""
    from codegen.build import pipeline

    spec = {"name": "f", "expr": "x", "inputs": ["x"], "order": 1}
    with mock.patch.object(pipeline, "generate", side_effect=RuntimeError("boom")), \
            pytest.raises(AssertionError, match="internal error"):
        assert_no_internal_error(spec)
