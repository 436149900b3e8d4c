"""Property-based tests: random expressions over the whole language, every strategy, orders 1 to 4.

Hypothesis draws an expression tree (numbers, inputs, params, pi, E, + - * / **, unary minus and
every function of the language), one to three inputs, params, an order and a strategy. dbgen builds
the spec; the generated function's derivatives of every order must match autograd through the same
tree evaluated directly in torch ops by this file (never through dbgen's parser or printer).

Every tree is valid by construction: each node carries an interval that bounds its value for inputs
in [-R, R], and an argument whose interval leaves a function's domain (with a margin, so derivatives
stay moderate) is wrapped into it: log(1 + u**2), asin(tanh(u)/2), acosh(1 + (2 + sin(u))), division
by -(2 + cos(u)), ... A subexpression that could grow past CAP is squashed (sin(u), atan(u), ...).

Budget: the `ci` profile (tests/conftest.py) runs a fixed, derandomized set of about 700 examples
in about 80 s on two cores; DBGEN_HYPOTHESIS_PROFILE=long runs 20x as many random ones. A shrunk
failure becomes a spec in tests/regressions/, which test_regression_spec builds under every
strategy on every run; KNOWN_BUGS marks those whose bug is still open (strict xfail)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import yaml
from helpers import budget, build_spec, run_shard, sample, strategy_matrix
from hypothesis import Phase, example, given, settings
from random_trees import (
    FUNCTION_ARITY,
    REGRESSIONS,
    STRATEGIES,
    Case,
    Node,
    R,
    _call_in_domain,
    _positive,
    assert_orders_match,
    binary,
    build_or_reject,
    call,
    cases,
    evaluate,
    from_text,
    num,
    scaled,
    text,
)

from codegen.build import pipeline, write

# The property's 400 examples in parts, each under its own seed, that pytest-xdist spreads over the
# workers: as one test they held one worker for minutes at the end of make test-all.
TREE_SHARDS = 8


@pytest.mark.parametrize("shard", range(TREE_SHARDS))
def test_every_order_matches_autograd_through_the_tree(shard):
    run_shard(_every_order_matches, shard, TREE_SHARDS, scaled(400), case=cases())


def _every_order_matches(case):
    with tempfile.TemporaryDirectory() as tmp:
        module = build_or_reject(Path(tmp), case)
    assert module.ORDER == case.order
    assert module.STRATEGY == case.strategy or (case.strategy == "auto" and module.STRATEGY in STRATEGIES[1:])
    assert_orders_match(module, case)


X, Y = (Node("name", value=name, lo=-R, hi=R) for name in ("x", "y"))


# make test: a quarter of the functions (the random trees draw the rest); make test-all: every one
@pytest.mark.parametrize("index, name", budget(enumerate(sorted(FUNCTION_ARITY)), ids=sorted(FUNCTION_ARITY), share=4))
def test_every_function_of_the_language_under_a_strategy(tmp_path, index, name):
    """Each function at least once per run whatever hypothesis draws: name(x*y - sin(x)) (wrapped
    into its domain the way the random trees are, a different wrapper per function) at order 3."""
    inner = binary("-", binary("*", X, Y), call("sin", X))
    tree = _call_in_domain(name, [inner, Y], choice=index)
    case = Case(tree, ("x", "y"), order=3, strategy=STRATEGIES[index % len(STRATEGIES)])
    module = build_spec(tmp_path, **case.spec())
    assert_orders_match(module, case)


# Controls: the property can fail, and the trees stay inside their bounds -------------------------

def test_the_property_fails_for_a_wrong_reference(tmp_path):
    """A tree 1e-5 (ten times RTOL) away from the spec's expression is caught: the check is not vacuous."""
    case = Case(call("sin", Node("name", value="x", lo=-R, hi=R)), ("x",), order=2, strategy="save_inputs")
    module = build_spec(tmp_path, **case.spec())
    assert_orders_match(module, case)
    shifted = Case(binary("*", num(1.00001), case.tree), ("x",), order=2)
    with pytest.raises(AssertionError):
        assert_orders_match(module, shifted)


@settings(max_examples=scaled(300))
@given(case=cases(max_depth=4))
def test_tree_values_lie_within_their_bounds_and_read_back_from_text(case):
    """The generator's interval bookkeeping (which keeps every function inside its domain) holds on
    random points, and the expression text reads back to the same values."""
    env = {n: sample((64,), -R, R, seed=i).detach() for i, n in enumerate(case.inputs)}
    env.update({name: torch.tensor(value, dtype=torch.float64) for name, value in case.params.items()})
    value = evaluate(case.tree, env)
    slack = 1e-9 * max(1.0, case.tree.size)
    assert bool(((value >= case.tree.lo - slack) & (value <= case.tree.hi + slack)).all()), text(case.tree)
    torch.testing.assert_close(evaluate(from_text(text(case.tree)), env), value, rtol=1e-12, atol=0)


# Regressions: shrunk failures, kept as specs ----------------------------------------------------

REGRESSION_SPECS = sorted(REGRESSIONS.glob("*.yaml"))
KNOWN_BUGS: dict[str, tuple[str, type]] = {}  # spec stem -> (reason, the error it raises)


def _regression_params():
    """(path, strategy) for every regression spec under every strategy; ``make test`` runs each
    spec under one strategy, in turn (``helpers.strategy_matrix``)."""
    paths = {path.stem: path for path in REGRESSION_SPECS}
    for param in strategy_matrix(paths, STRATEGIES):
        stem, strategy = param.values
        reason, error = KNOWN_BUGS.get(stem, (None, None))
        marks = [*param.marks, *([pytest.mark.xfail(strict=True, raises=error, reason=reason)] if reason else [])]
        yield pytest.param(paths[stem], strategy, id=param.id, marks=marks)


@pytest.mark.parametrize("path, strategy", list(_regression_params()))
def test_regression_spec(tmp_path, path, strategy):
    """Each spec in tests/regressions/ builds and matches autograd through its expression (read
    with this file's own parser) at every order, under ``strategy``."""
    raw = yaml.safe_load(path.read_text())
    spec = {**raw, "name": "prop", "strategy": strategy}
    case = Case(from_text(spec["expr"]), tuple(spec["inputs"]), spec.get("params", {}), spec["order"],
                strategy, {n: tuple(b) for n, b in spec.get("domain", {}).items()})
    module = build_spec(tmp_path, **spec)
    assert_orders_match(module, case)


# The generated module's own tests, for a few random specs ----------------------------------------

def _fixed_case() -> Case:
    """k * atan2(y, 2 + cos(x)) * softplus(x) + log(1 + x**2) / (2 + sin(y)), intermediates, order 3."""
    k = Node("name", value="k", lo=0.5, hi=0.5)
    left = binary("*", binary("*", k, call("atan2", Y, _positive(X, 1))), call("softplus", X))
    right = binary("/", call("log", _positive(X, 4)), _positive(Y, 0))
    return Case(binary("+", left, right), ("x", "y"), {"k": 0.5}, order=3, strategy="intermediates")


# About 10 s an example (a subprocess importing torch, then vmap, jacfwd, ... tests): the ci profile
# runs the fixed example only, the long one random cases too.
@pytest.mark.slow
@settings(max_examples=scaled(1),
          phases=[Phase.explicit] if settings.default.max_examples <= 100 else list(Phase))
@example(case=_fixed_case())
@given(case=cases(max_depth=2))
def test_generated_tests_pass(case):
    """The generated test file (without its torch.compile tests) passes: it checks what this file
    does not (gradcheck, vmap, jacfwd, forward-mode AD, float32)."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "prop.yaml"
        spec_path.write_text(yaml.safe_dump(case.spec(), sort_keys=False))
        write.write_files(Path(tmp) / "out", pipeline.generate(spec_path, root=Path(tmp)))
        test_file = Path(tmp) / "out" / "tests" / "test_prop.py"
        command = [sys.executable, "-m", "pytest", "-q", "-x", "-m", "not compile", "-p", "no:cacheprovider",
                   "--rootdir", tmp, str(test_file)]
        result = subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, f"{case.spec()}\n{result.stdout[-4000:]}{result.stderr[-2000:]}"


def test_regression_specs_say_what_they_caught():
    """Every regression spec starts with a comment saying what went wrong, and is named after its file."""
    assert REGRESSION_SPECS and set(KNOWN_BUGS) <= {path.stem for path in REGRESSION_SPECS}
    for path in REGRESSION_SPECS:
        assert path.read_text().startswith("#"), f"{path.name}: start with a comment saying what it caught"
        assert yaml.safe_load(path.read_text())["name"] == path.stem
