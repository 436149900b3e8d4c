"""Properties of every formula a plan prints, over the random trees of test_properties.py (
point 11), checked on the plan (no code is rendered or run, so many trees fit in a few seconds):

- no product both multiplies by b**e (e not a number) and divides by b: SymPy's p*x**p/x is
  0*inf = NaN at x = 0 where autograd, and the merged x**(p - 1), are finite;
- every printed formula (temporaries and the values it reads from earlier blocks and levels written
  out) is a fixed point of ``stabilize`` applied to each cotangent's coefficient apart
  (``plan.by_cotangents``): the stable rewrites reach every level of every strategy. A plan the
  build wrote without the accuracy-only rewrites (``planning.CHEAPER_FORMULAS``) is checked
  against ``stabilize_cheaply``: every other rewrite still reaches every level.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import yaml
from formulas import printed_formulas, split_powers
from hypothesis import example, given, settings
from random_trees import Case, Node, binary, call, cases, num, power, scaled

from codegen.build import pipeline
from codegen.build.planning import CHEAPER_FORMULAS
from codegen.derive.rewrite import stabilize, stabilize_cheaply
from codegen.errors import SpecErrors
from codegen.plan import by_cotangents

X = Node("name", value="x", lo=0.2, hi=1.5)
P = Node("name", value="k", lo=2.0, hi=2.0)
STRATEGIES = ("save_inputs", "save_outputs", "intermediates", "nested")


def _plans(case: Case):
    """The plan of ``case`` under every strategy (fewer orders for nested, as test_properties does)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prop.yaml"
        path.write_text(yaml.safe_dump(case.spec(), sort_keys=False))
        spec = pipeline.load_spec(path, "prop.yaml")
    for strategy in STRATEGIES:
        order = min(case.order, 2) if strategy == "nested" else case.order
        try:
            yield strategy, pipeline.plan_spec(dataclasses.replace(spec, strategy=strategy, order=order))
        except SpecErrors as errors:  # over the limit on symbolic work: a clean, documented refusal
            assert all("symbolic work exceeded" in p.message for p in errors.problems), errors.problems


def _check(case: Case) -> None:
    names = {*case.inputs, *case.params}
    for strategy, plan in _plans(case):
        stable = by_cotangents(stabilize_cheaply if CHEAPER_FORMULAS in plan.notes else stabilize, names)
        for formula in printed_formulas(plan):
            assert not split_powers(formula), f"{strategy}: {formula} divides by a base of a power: {case.spec()}"
            assert stable(formula) == formula, f"{strategy}: {formula} is not stable: {case.spec()}"


@settings(max_examples=scaled(12))
@example(case=Case(power(X, P), ("x",), {"k": 2.0}, order=3))
@example(case=Case(binary("*", power(binary("+", num(1), power(X, num(2))), P), call("exp", X)), ("x",),
                   {"k": 2.0}, order=2))
@example(case=Case(call("softplus", binary("*", P, X)), ("x",), {"k": 2.0}, order=3))
@given(case=cases(max_depth=3))
def test_printed_formulas_never_split_a_power_and_are_stable(case):
    _check(case)
