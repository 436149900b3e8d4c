"""The accuracy oracle (codegen/build/accuracy/): bits against exact arithmetic, sampling, the
condition number, the build's warnings and the generated tests' exact values, and
``dbgen accuracy``."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import mpmath
import pytest
import sympy
import torch
import yaml
from helpers import build_spec, import_path, run_dbgen

from codegen.build import accuracy, pipeline

ROOT = Path(__file__).resolve().parents[3]
from codegen.build import planning
from codegen.build.pipeline import load_specs, plan_spec
from codegen.build.planning import CHEAPER_FORMULAS
from codegen.derive.rewrite import stabilize, stabilize_cheaply
from codegen.emit.render import render_module
from codegen.language.functions import sigmoid
from codegen.plan import estimated_cost, make_plan


def _spec_file(tmp_path, **spec):
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _plan(tmp_path, **spec):
    (loaded,) = load_specs([_spec_file(tmp_path, **spec)])
    return plan_spec(loaded)


def _next_float32(value: float) -> float:
    bits = struct.unpack("<i", struct.pack("<f", value))[0]
    return struct.unpack("<f", struct.pack("<i", bits + 1))[0]


def test_bits_count_floats_between_result_and_truth():
    one = mpmath.mpf(1)
    assert accuracy.bits(1.0, one, "float64") == 0
    assert accuracy.bits(math.nextafter(1.0, 2.0), one, "float64") == 1  # log2(1 + 1)
    assert accuracy.bits(1.0 + 3 * 2.0**-52, one, "float64") == 2  # three floats away
    assert accuracy.bits(_next_float32(1.0), one, "float32") == 1
    assert accuracy.bits(math.nan, one, "float64") == 64
    assert accuracy.bits(math.inf, one, "float32") == 32
    # across zero: -tiny and +tiny are two floats apart
    assert accuracy.bits(-5e-324, mpmath.mpf(5e-324), "float64") == pytest.approx(math.log2(3))


def test_ordered_places_are_monotonic_and_invertible():
    values = [-math.inf, -1e300, -1.0, -5e-324, 0.0, 5e-324, 1e-300, 1.0, 2.0, math.inf]
    places = [accuracy.floats._ordered(v) for v in values]
    assert places == sorted(places)
    assert [accuracy.floats._from_ordered(p) for p in places] == values


def test_sample_draws_bit_patterns_ends_zero_and_thresholds():
    points = accuracy.sample([(-3.0, 3.0)], 200, seed=1, thresholds=[[0.5]])
    xs = [p[0] for p in points]
    assert {-3.0, 3.0, 0.0, 0.5, math.nextafter(0.5, 0), math.nextafter(0.5, 1)} <= set(xs)
    assert len(points) == 200 and all(-3.0 <= x <= 3.0 for x in xs)
    # uniform over bit patterns: tiny magnitudes are drawn, as often as large ones
    assert sum(abs(x) < 1e-100 for x in xs) > 20
    assert accuracy.sample([(-3.0, 3.0)], 200, seed=1) == accuracy.sample([(-3.0, 3.0)], 200, seed=1)
    # and points approaching the threshold from both sides, where a cutoff's cancellation shows
    assert {0.5 - 0.5 * 2.0**-10, 0.5 + 0.5 * 2.0**-30} <= set(xs)


def test_a_cosine_cutoff_keeps_its_bits_near_the_cutoff(tmp_path):
    """(cos(pi*r/rc) + 1)/2 rounds cos to -1 near rc: 10 bits beyond its conditioning in r at
    rc - 5e-4, 14 at rc - 5e-6 (the oracle, which conditions on rc too, excuses them: rc is as
    sensitive there). 2*cos(u/2)**2 (the rewrite cos_half_angle) keeps them."""
    module = build_spec(tmp_path, name="cut", expr="where(r < rc, (cos(pi*r/rc) + 1)/2, 0)", inputs=["r"],
                        params={"rc": 5.0}, order=1, domain={"r": [0, 6]})
    points = torch.tensor([5 - 5e-4, 5 - 5e-6, 2.5], dtype=torch.float64)
    composed = (torch.cos(math.pi * points / 5) + 1) / 2
    for point, ours, theirs in zip(points.tolist(), module.cut(points).tolist(), composed.tolist()):
        with mpmath.workdps(40):
            r = mpmath.mpf(point)
            truth = (mpmath.cos(mpmath.pi * r / 5) + 1) / 2
            kappa = max(1.0, float(abs(r * mpmath.pi * mpmath.sin(mpmath.pi * r / 5) / 10 / truth)))
        assert abs(ours - truth) <= 16 * 2.0**-53 * kappa * abs(truth), point
        if point < 2.5:
            assert abs(theirs - truth) > 512 * 2.0**-53 * kappa * abs(truth), point


def test_condition_number_excuses_ill_conditioned_points_only():
    x = sympy.Symbol("x", real=True)
    (near_pi,) = accuracy.exact([sympy.sin(x)], [x], [(3.141592653589793,)])[0]
    assert near_pi.kappa > 1e15  # sin(x) at the float nearest pi: any rounding of x shows
    (at_one,) = accuracy.exact([sympy.exp(x)], [x], [(1.0,)])[0]
    assert at_one.kappa == pytest.approx(1.0, rel=1e-6)  # |x exp(x) / exp(x)|
    # 2 bits over the truth where kappa = 1 is 2 bits of excess; at pi it is none
    wrong = float(at_one.value) * (1 + 2**-50)
    assert accuracy.excess(wrong, at_one, "float64") > 0
    assert accuracy.excess(0.0, near_pi, "float64") < accuracy.bits(0.0, near_pi.value, "float64")


def test_two_precisions_must_agree():
    x = sympy.Symbol("x", real=True)
    (row,) = accuracy.exact([sympy.log(x)], [x], [(-1.0,), (2.0,)])
    assert row[0].value is None  # no real value
    assert float(row[1].value) == math.log(2.0)


def test_exact_values_and_condition_numbers_do_not_depend_on_mpmaths_backend():
    """mpmath computes in GMP's integers where gmpy2 is installed (a dependency) and in Python's
    otherwise: the oracle's truths, which the generated tests hold, and its condition numbers must
    be the same numbers either way, near 0 (thousands of digits) too."""
    import subprocess
    import sys

    program = (
        "import sympy, mpmath.libmp\n"
        "from codegen.build import accuracy\n"
        "x, a = sympy.symbols('x a', real=True)\n"
        "g = (1 - sympy.cos(a * x)) / x**2\n"
        "k = sympy.besselk(1, 2 + x)\n"
        "table = accuracy.exact([g, g.diff(x, 3), k, k.diff(x, 2)], [x, a], [(1e-150,), (0.5,), (-3.0,), (2.0**-30,)],"
        " [1.5])\n"
        "print(mpmath.libmp.BACKEND, [[(str(t.value), t.kappa) for t in row] for row in table])\n"
    )
    runs = {}
    for env in ({}, {"MPMATH_NOGMPY": "1"}):
        result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                                env={**os.environ, **env})
        backend, values = result.stdout.split(" ", 1)
        runs[backend] = values
    assert set(runs) == {"gmpy", "python"}
    assert runs["gmpy"] == runs["python"]


def test_slow_functions_remembered_per_point_give_each_precision_its_own_value():
    """The oracle remembers mpmath's Bessel values by precision and arguments: where one formula
    has no value (k1/x at 0) the others are evaluated one by one, and each truth is still mpmath's
    own at the higher precision, its kappa from values shifted at that precision."""
    x = sympy.Symbol("x", real=True)
    k1 = sympy.besselk(1, 2 + x)
    formulas = [k1, k1.diff(x), k1 / x, k1**2]
    points = [(0.0,), (0.5,), (1e-5,)]
    table = accuracy.exact(formulas, [x], points)
    with mpmath.workdps(accuracy.DIGITS[1]):
        for (value,), row in zip(points, zip(*table)):
            v = mpmath.mpf(value)
            want = [mpmath.besselk(1, 2 + v), -(mpmath.besselk(0, 2 + v) + mpmath.besselk(1, 2 + v) / (2 + v)),
                    mpmath.besselk(1, 2 + v) / v if v else None, mpmath.besselk(1, 2 + v) ** 2]
            for truth, expected in zip(row, want):
                if expected is None:
                    assert truth.value is None
                else:
                    assert abs(truth.value - expected) <= 1e-50 * abs(expected)  # not the 30-digit value
    assert table[3][1].kappa == pytest.approx(2 * table[0][1].kappa, rel=1e-9)  # kappa of k**2 is twice k's


def test_oracle_finds_the_cancellation_autograd_avoids(tmp_path):
    """The tutorial's exp form of sinh, with the gradients of expm1(x) and expm1(-x) added whole as
    dbgen did before it summed their constant parts apart, cancels near 0 at order 2; autograd
    through torch.sinh does not, nor does what dbgen prints."""
    plan = _plan(tmp_path, name="sinh", expr="sinh(x)", inputs=["x"], order=2, strategy="intermediates")
    (function,) = plan.functions
    (grad, contributions), = function.accumulations
    ((_, _, constants),) = function.constant_sums
    added_whole = dataclasses.replace(function, accumulations=((grad, contributions + constants),), constant_sums=())
    report = accuracy.measure(dataclasses.replace(plan, functions=(added_whole,)), 64, ("float64",))
    by_order = {f.order: f for f in report.dbgen}
    assert by_order[0].max_excess <= accuracy.BOUND_BITS["float64"]  # expm1: exact near 0
    assert by_order[2].max_excess > 40
    assert all(f.max_excess <= 1 for f in report.autograd)
    assert report.over_bound() and "worst: order 2 loses" in report.warnings()[0]
    assert not accuracy.measure(plan, 64, ("float64",)).over_bound()


def test_accurate_spec_is_within_the_bound_at_every_order(tmp_path):
    plan = _plan(tmp_path, name="gauss", expr="exp(-x**2 / (2 * s**2))", inputs=["x"], params={"s": 0.7},
                 order=3, domain={"x": [-5, 5]})
    report = accuracy.measure(plan, 96)
    assert not report.over_bound(), accuracy.report_text(report)
    assert {(f.dtype, f.order) for f in report.dbgen} == {(d, k) for d in ("float64", "float32") for k in range(4)}


@pytest.mark.parametrize("expr", ["sinh(x)", "cosh(x)", "sinh(2*x) + x", "3*sinh(a*x)"])
def test_the_tutorials_intermediates_are_exact_near_0_at_every_order(tmp_path, expr):
    """sinh and cosh as expm1(u) and expm1(-u), returned as extra outputs: autograd's second pass
    sends each a gradient, and d expm1(u)/du = expm1(u) + 1; the constant parts summed with the
    rest cancelled, (1 + x) - (1 - x) in float, every bit of sinh lost at x = 1e-17 (the bundled
    sinh warned at its own build). They are summed apart."""
    plan = _plan(tmp_path, name="tut", expr=expr, inputs=["x"], params={"a": 1.5}, order=3, strategy="intermediates")
    assert plan.functions[0].constant_sums, "no exp(u), exp(-u) intermediates: the test tests nothing"
    report = accuracy.measure(plan, 64, composed=False)
    assert not report.over_bound(), accuracy.report_text(report)


@pytest.mark.parametrize("expr", ["x * sigmoid(x)", "softplus(x) + x**2 / 4"])
def test_sigmoids_difference_is_exact_near_0(tmp_path, expr):
    """SiLU's and softplus's third derivatives hold sigmoid(-x) - sigmoid(x), 1/2 - 1/2 near 0 where
    the difference is -x/2: every bit was lost at x = 1e-17. Written tanh(x/2) (derive/rewrite/)."""
    plan = _plan(tmp_path, name="sig", expr=expr, inputs=["x"], order=3, strategy="nested")
    report = accuracy.measure(plan, 64, composed=False)
    assert not report.over_bound(), accuracy.report_text(report)


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
def test_log_cosh_is_exact_near_0_at_every_order(tmp_path, strategy):
    """log(cosh(x)) rounded cosh(x) to 1 and lost every bit below 1e-8 (the bundled log_cosh
    warned at its build); two regimes now (derive/rewrite/), the derivatives from log(cosh(x)) itself.
    On [-2, 2]: beyond about |x| = 3 the derivatives' sech(x)**2, written 1 - tanh(x)**2 as autograd
    computes it, loses what tanh(x) rounds away (not yet reached; the build warns)."""
    plan = _plan(tmp_path, name="lc", expr="log(cosh(x))", inputs=["x"], order=4, strategy=strategy)
    report = accuracy.measure(plan, 64)
    assert not report.over_bound(), accuracy.report_text(report)


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
@pytest.mark.parametrize("expr, domain", [("log(erfc(-x/sqrt(2))/2)", [-20, 6]), ("log(3*erfc(x))", [-6, 30])])
def test_log_erfc_is_exact_in_both_tails(tmp_path, strategy, expr, domain):
    """The probit's log-likelihood log(Phi(x)) as the language writes it: its value lost 20 bits
    at x = 5 (log of a number rounded to 1) and was -inf in float32 from x = -5.5 (erfc
    underflows), as its first derivative, exp(-x**2/2)/erfc(...), was 0/0 = NaN. Three regimes and
    erfcx now (the rewrite log_erfc and erfc_ratio). Orders 2 and up still lose up to 17 bits in
    the far tail (u - 1/(sqrt(pi)*erfcx(u)) cancels; not yet reached, the build warns): order 1 here."""
    plan = _plan(tmp_path, name="le", expr=expr, inputs=["x"], order=1, strategy=strategy, domain={"x": domain})
    report = accuracy.measure(plan, 64)
    assert not report.over_bound(), accuracy.report_text(report)


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
def test_a_norms_derivatives_are_exact_where_one_component_dominates(tmp_path, strategy):
    """e3nn's sh2_2 = sqrt(5)*(y**2 - (x**2 + z**2)/2)/r**2: its x-derivative was -sqrt(5)*x/r**2
    minus terms over r**4 whose difference is -3*sqrt(5)*x*y**2/r**4: every bit lost at
    (0.7, 1e-13, 1e-245). Reduced by r**2 = x**2 + y**2 + z**2 (the rewrite norm_squares)."""
    plan = _plan(tmp_path, name="sh", expr="sqrt(5) * (y**2 - (x**2 + z**2) / 2) / (x**2 + y**2 + z**2)",
                 inputs=["x", "y", "z"], order=1, strategy=strategy, domain={"x": [0.5, 2], "y": [-2, 2], "z": [-2, 2]})
    report = accuracy.measure(plan, 64, composed=False)
    assert not report.over_bound(), accuracy.report_text(report)


def test_each_outputs_derivative_keeps_its_own_reduction_in_a_vector_spec(tmp_path):
    """cartesian_to_spherical's nested level 2 sums r's, theta's and phi's second derivatives, one
    per cotangent: stabilised as one sum, theta's denominator expanded r's 1/r - x**2/r**3 and hid its
    reduction (every bit of d2r/dx2 at (0.68, 1e-13, 3e-245)). Each cotangent's coefficient is
    stabilised apart (plan.by_cotangents); auto takes nested, the one strategy within the bound."""
    spec = yaml.safe_load((ROOT / "specs" / "cartesian_to_spherical.yaml").read_text())
    nested = _plan(tmp_path, **{**spec, "strategy": "nested"})
    assert not accuracy.measure(nested, 64, composed=False).over_bound()
    assert _plan(tmp_path, **spec).strategy == "nested"


@pytest.mark.parametrize(("expr", "domain"), [
    ("sqrt(x + 1) - sqrt(x)", [0.01, 1e6]),  # FPBench 2sqrt: 20 bits lost at 1e6, and each derivative
    ("log(x + 1) - log(x)", [0.5, 1e6]),  # 2log: 22 bits
    ("exp(x) / (exp(x) - 1)", [0.01, 30]),  # expq2: its derivatives 19 bits at x = 17
    ("x * (1 + erf(x / sqrt(2))) / 2", [-10, 10]),  # GELU, exact form: 16 bits at x = -5.2
    # the Matern 5/2 kernel (l = 1.3): its first derivative's constant terms cancel, 60 bits near 0
    ("(1 + sqrt(5)*x/1.3 + 5*x**2/(3*1.3**2)) * exp(-sqrt(5)*x/1.3)", [0, 10]),
    ("log(x + sqrt(x**2 + 1))", [-1e6, 1e6]),  # asinh as written: 62 bits of the value at x = -4e5
])
def test_fpbench_classics_are_exact_at_every_order(tmp_path, expr, domain):
    """the rewrite power_difference, log_difference, common_denominator, erf_complement,
    polynomial_cancellation and inverse_hyperbolics; the same formulas through autograd lose as
    much as before (measured beside)."""
    plan = _plan(tmp_path, name="fp", expr=expr, inputs=["x"], order=2, domain={"x": domain})
    report = accuracy.measure(plan, 64)
    assert not report.over_bound(), accuracy.report_text(report)
    assert max(f.max_excess for f in report.autograd) > 10, accuracy.report_text(report)


@pytest.mark.parametrize(("expr", "domain", "order"), [
    ("sqrt(x**2 + 1) - x", {"x": [0, 1e6]}, 3),  # 17 bits of the value lost at x = 1524, 39 of the first derivative
    ("(-b + sqrt(b**2 - 4*a*c)) / (2*a)", {"a": [0.1, 1], "b": [10, 1e4], "c": [0.1, 1]}, 2),  # FPBench's quadp
])
def test_a_root_minus_its_square_root_is_exact_at_every_order_when_nested(tmp_path, expr, domain, order):
    """the rewrite root_difference: sqrt(u) - v as (u - v**2)/(sqrt(u) + v) where v is large, the
    cancelling terms of u - v**2 gone symbolically; nested differentiates that form. Measured with
    the digits the cancellation needs (the quadratic formula's truth disagrees between 30 and 60)."""
    plan = _plan(tmp_path, name="root", expr=expr, inputs=list(domain), order=order, strategy="nested", domain=domain)
    report = accuracy.measure(plan, 64)
    assert not report.over_bound(), accuracy.report_text(report)
    assert max(f.max_excess for f in report.autograd) > 20, accuracy.report_text(report)


def test_a_difference_of_cosines_of_close_arguments_is_exact_at_every_order(tmp_path):
    """the rewrite sum_to_product: cos(x + e) - cos(x) lost 56 bits at (1e-8, 1e-9) (FPBench's 2cos)."""
    plan = _plan(tmp_path, name="cd", expr="cos(x + e) - cos(x)", inputs=["x", "e"], order=2,
                 domain={"x": [-3, 3], "e": [-1e-3, 1e-3]})
    report = accuracy.measure(plan, 64)
    assert not report.over_bound(), accuracy.report_text(report)
    assert max(f.max_excess for f in report.autograd) > 20, accuracy.report_text(report)


def test_plancks_law_is_finite_and_exact_in_float32_where_exp_overflows(tmp_path):
    """the rewrite expm1_reflection: x**3/(exp(x) - 1)'s second derivative holds
    exp(2*x)/expm1(x)**2, inf/inf = NaN in float32 from x = 44; written 1/expm1(-x)**2."""
    plan = _plan(tmp_path, name="planck", expr="x**3 / (exp(x) - 1)", inputs=["x"], order=2,
                 domain={"x": [1e-3, 80]})
    report = accuracy.measure(plan, 64)
    assert not report.over_bound(), accuracy.report_text(report)
    assert max(f.max_excess for f in report.autograd if f.dtype == "float32") > 20, accuracy.report_text(report)


def test_gelus_tanh_form_is_exact_in_its_tails(tmp_path):
    """the rewrite tanh_complement: 0.5*x*(1 + tanh(u)) cancels where tanh(u) rounds to -1 (55 bits
    of the value lost at x = -7.2 in float64, 24 at -5.8 in float32); written x*sigmoid(2*u). Its
    derivatives then hold sigmoid(2*u)*sigmoid(-2*u), exact in both tails, where 1 - tanh(u)**2 is not."""
    plan = _plan(tmp_path, name="gelu_tanh", expr="0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))",
                 inputs=["x"], order=3, domain={"x": [-9, 9]})
    report = accuracy.measure(plan, 64)
    assert not report.over_bound(), accuracy.report_text(report)
    assert min(f.max_excess for f in report.autograd) > 20, accuracy.report_text(report)
    # autograd through save_inputs' backward differentiates sigmoid as s*(1 - s), 0 in the tail
    assert plan.strategy == "nested" and "save_inputs passed over: loses" in plan.reason, plan.reason


def test_log_cosh_is_exact_in_tanhs_tails_where_its_domain_reaches_them(tmp_path):
    """planning._with_exact_tails: on [-40, 40] 1 - tanh(x)**2 (autograd's own) loses every bit of
    log_cosh's derivatives from order 2; the build writes sech(x)**2 as sigmoids there, within the
    bound at every order, and keeps torch's one-kernel tanh_backward where the domain does not
    reach the tails (there auto takes save_inputs: autograd differentiates torch.tanh)."""
    plan = _plan(tmp_path, name="log_cosh", expr="log(cosh(x))", inputs=["x"], order=4, domain={"x": [-40, 40]})
    assert "tanh's derivative written with sigmoids" in plan.reason, plan.reason
    report = accuracy.measure(plan, 64)
    assert not report.over_bound(), accuracy.report_text(report)
    assert max(f.max_excess for f in report.autograd) > 40, accuracy.report_text(report)
    (tmp_path / "near").mkdir()
    near = _plan(tmp_path / "near", name="log_cosh", expr="log(cosh(x))", inputs=["x"], order=4,
                 domain={"x": [-2, 2]})
    values = [v for f in near.functions for b in (f.forward, f.backward, f.jvp) if b is not None for v in b.values]
    assert "sigmoids" not in near.reason and not any(v.has(sigmoid) for v in values), near.reason


def _holds(plan, value) -> bool:
    blocks = (b for f in plan.functions for b in (f.forward, f.backward, f.jvp) if b is not None)
    return any(v.has(value) for b in blocks for v in b.values)


def test_silus_sigmoid_complement_costs_another_sigmoid_only_where_the_domain_reaches_its_tail(tmp_path):
    """planning._cheaper_where_accurate, on x*sigmoid(x) to order 3. On [-40, 40] 1 - sigmoid(x)
    rounds to 0 where the derivatives are not: written as it stands it is over the bound, so the
    build keeps sigmoid(-x), a second sigmoid per level. On the default domain, [-2, 2], it stays
    1 - sigmoid(x) on the sigmoid the level already has: within the bound, and estimated cheaper
    (a PINN step with it: 345 kernel ops where the sigmoids took 380)."""
    x = sympy.Symbol("x", real=True)
    spec = {"name": "silu", "expr": "x * sigmoid(x)", "inputs": ["x"], "order": 3}
    wide = _plan(tmp_path, **spec, domain={"x": [-40, 40]})
    assert CHEAPER_FORMULAS not in wide.notes and _holds(wide, sigmoid(-x)), wide.reason
    assert not accuracy.measure(wide, 64).over_bound()
    assert accuracy.measure(_planned_with(stabilize_cheaply, wide), 64).over_bound()
    (tmp_path / "near").mkdir()
    near = _plan(tmp_path / "near", **spec)
    assert CHEAPER_FORMULAS in near.notes and not _holds(near, sigmoid(-x)), near.reason
    assert not accuracy.measure(near, 64).over_bound()
    assert estimated_cost(near) < estimated_cost(_planned_with(stabilize, near))


def _planned_with(stable, plan):
    """``plan``'s spec and strategy, its formulas rewritten by ``stable``."""
    spec = dataclasses.replace(plan.spec, strategy=plan.strategy)
    return make_plan(spec, tuple(f.planned for f in planning._guarded_formulas(spec)), stable)


def test_the_build_measures_enough_points_to_warn_of_a_loss_beside_a_series_branch(tmp_path):
    """log(1 + x)/x loses 8 bits of its third derivative at x = 0.29, just beyond its series
    branch (its radius of convergence is 1): the build's measurement at 32 points missed it, and
    the build said nothing; at pipeline.BUILD_POINTS it warns."""
    plan = _plan(tmp_path, name="log1p_ratio", expr="log(1 + x)/x", inputs=["x"], order=3,
                 domain={"x": [-0.9, 10]})
    report = pipeline.measured_accuracy(plan, render_module(plan, "0" * 64))
    assert any(f.order == 3 for f in report.over_bound()), accuracy.report_text(report)


def test_an_angle_from_one_minus_a_small_number_is_exact_over_its_whole_domain(tmp_path):
    """the rewrite acos_complement: acos(1 - x) lost 16 bits at x = 1e-6 (1 - x rounds x away); the
    form must also hold at x = 2, where 2*asin(sqrt(x/2)) was NaN (sqrt(2)*sqrt(2)/2 rounds above 1)."""
    plan = _plan(tmp_path, name="angle", expr="acos(1 - x)", inputs=["x"], order=2, domain={"x": [0, 2]})
    report = accuracy.measure(plan, 64)
    assert not report.over_bound(), accuracy.report_text(report)
    assert max(f.max_excess for f in report.autograd) > 10, accuracy.report_text(report)


def test_a_truth_that_needs_more_than_60_digits_is_counted_not_left_out():
    """The quadratic formula's root at b = 6550 cancels 21 digits, its second derivative in a 41:
    the 30- and 60-digit values disagree, and such points, the hardest, were left out."""
    a, b, c = sympy.symbols("a b c", real=True)
    root = (-b + sympy.sqrt(b**2 - 4 * a * c)) / (2 * a)
    point = (0.10348709494492948, 6549.729489469746, 0.22636629013211376)
    (value,), (second,) = (accuracy.exact([f], (a, b, c), [point])[0] for f in (root, root.diff(a, 2)))
    assert value.value is not None and second.value is not None
    assert float(second.value) == pytest.approx(-3.8492705355047788e-21, rel=1e-12)


def test_softplus_is_exact_from_20_on_and_auto_takes_the_exact_strategy(tmp_path):
    """torch's softplus returns u itself from its default threshold, 20, on: the log-sigmoid lost 18
    bits at -20.5 in every strategy, so auto took the cheapest, which loses every bit of the third
    derivative near 0. Printed with threshold=40, nested is within the bound and auto takes it."""
    plan = _plan(tmp_path, name="ls", expr="-log(1 + exp(-x))", inputs=["x"], order=3, domain={"x": [-40, 40]})
    assert plan.strategy == "nested", plan.reason
    assert not accuracy.measure(plan, 64, composed=False).over_bound()


def test_auto_passes_over_a_candidate_over_the_accuracy_bound(tmp_path):
    """softplus at order 3: save_inputs' and save_outputs' single-level backward is
    grad*sigmoid(x), whose second derivative autograd takes through torch.sigmoid's backward,
    1 - 2*sigmoid(x): every bit lost near 0. nested's own formulas keep them; auto takes it."""
    plan = _plan(tmp_path, name="sp", expr="log(1 + exp(beta*x))/beta", inputs=["x"], params={"beta": 1.0},
                 order=3)
    assert plan.strategy == "nested", plan.reason
    assert "save_inputs passed over: loses 60 bits beyond its conditioning at order 3 in float64" in plan.reason
    assert not accuracy.measure(plan, 64, composed=False).over_bound()


# MACE's envelope with its exponent a param: a triple root at 1, its terms of size 1 cancel to
# (1 - x)**3 there, and outside a choice it is not split at the root (series.py's _at_roots): 10
# bits of the value lost at x = 0.986, every strategy alike (acos(1 - x), the example before, is
# now 2*atan2(sqrt(x), sqrt(2 - x)): the rewrite acos_complement)
LOSES_AT_ORDER_0 = {"name": "envelope", "expr": "1 - (p + 1)*(p + 2)/2 * x**p + p*(p + 2) * x**(p + 1) - p*(p + 1)/2 * x**(p + 2)",
                        "inputs": ["x"], "params": {"p": 6}, "order": 1, "domain": {"x": [0.5, 1]}}


def test_auto_takes_the_cheapest_where_no_candidate_is_within_the_accuracy_bound(tmp_path):
    """The envelope loses its value near 1 in every strategy (LOSES_AT_ORDER_0): the cheapest, and one note."""
    plan = _plan(tmp_path, **{**LOSES_AT_ORDER_0, "order": 2})
    assert plan.reason.endswith("none keeps the accuracy bound, so the cheapest that keeps the memory bound: "
                                f"{plan.strategy}"), plan.reason
    assert "passed over: loses" not in plan.reason  # none passed over for accuracy (the memory bound may)


def test_ranked_choice_takes_the_first_that_passes_the_most_criteria():
    from codegen.plan.strategy import _ranked_choice

    def refuses(*names):
        return lambda plan: "too big" if plan in names else None

    memory, exact = ("the memory bound", refuses("a")), ("the accuracy bound", refuses("a", "b"))
    assert _ranked_choice(["a", "b", "c"], str, [memory, exact]) == (
        "c", ["a passed over: too big", "b passed over: too big", "so c, the next cheapest"])
    assert _ranked_choice(["a", "b"], str, [memory, exact]) == (
        "b", ["a passed over: too big", "none keeps the accuracy bound, so the cheapest that keeps the memory bound: b"])
    assert _ranked_choice(["a"], str, [memory, exact]) == (
        "a", ["a passed over: too big", "none keeps the memory bound, so the cheapest: a"])
    assert _ranked_choice(["b", "c"], str, [memory]) == ("b", [])


def test_torch_own_error_is_named_not_counted(tmp_path):
    plan = _plan(tmp_path, name="lg", expr="lgamma(a)", inputs=["a"], order=2, domain={"a": [0.5, 5]})
    report = accuracy.measure(plan, 48, ("float64",))
    assert any("polygamma" in reason for reason in report.limited_by)
    assert not report.over_bound()



def test_build_warns_and_strict_refuses(tmp_path):
    spec = _spec_file(tmp_path, **LOSES_AT_ORDER_0)
    warnings = []
    pipeline.generate(spec, root=tmp_path, on_spec=lambda s, t, notes=(), found=(): warnings.extend(found))
    assert any("order(s) 0 (float64)" in w and "worst: order 0 loses" in w for w in warnings), warnings
    result = run_dbgen(["build", str(spec), "-o", "out", "--strict"], cwd=tmp_path)
    assert result.returncode == 2 and "accuracy: order(s) 0 (float64)" in result.stderr
    assert not (tmp_path / "out").exists()


def test_generated_tests_hold_exact_values_that_catch_a_wrong_formula(tmp_path):
    spec = _spec_file(tmp_path, name="softsign", expr="x / (1 + abs(x))", inputs=["x"], order=2)
    files = pipeline.generate(spec, root=tmp_path)
    test_text = files["tests/test_softsign.py"]
    assert "exact=(" in test_text and '("float32"' in test_text
    out = tmp_path / "out"
    from codegen.build import write

    write.write_files(out, files)
    module = import_path(out / "tests" / "test_softsign.py")
    case = module.CASE
    assert not module.checks._exact_failures(case, "float64")
    assert not module.checks._exact_failures(case, "float32")
    # a module whose value is off by 1e-12 relative: autograd-consistent, but not exact
    function = case.module.softsign
    case.module.softsign = lambda x: function(x) * (1 + 1e-12)
    try:
        failures = module.checks._exact_failures(case, "float64")
    finally:
        case.module.softsign = function
    assert failures and "bits of error" in failures[0]


def test_cli_table_json_and_exit_code(tmp_path):
    good = _spec_file(tmp_path, name="soft", expr="softplus(x)", inputs=["x"], order=1)
    result = run_dbgen(["accuracy", str(good), "--points", "32", "--json"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (data,) = json.loads(result.stdout)
    assert data["within_bound"] and {row["order"] for row in data["dbgen"]} == {0, 1}
    bad = _spec_file(tmp_path, **LOSES_AT_ORDER_0)
    result = run_dbgen(["accuracy", str(bad), "--points", "32", "--dtype", "float64"], cwd=tmp_path)
    assert result.returncode == 1 and "OVER" in result.stdout and "dbgen mean/max" in result.stdout
    result = run_dbgen(["accuracy", str(good), "--dtype", "float16"], cwd=tmp_path)
    assert result.returncode == 2 and "--dtype" in result.stderr


def _reported(points) -> accuracy.Report:
    return accuracy.Report("f", "f.yaml", len(points), (), None, (), reference_points=tuple(points))


def test_the_reference_domain_is_spanned_by_points_measured_good():
    """Runs of good points between bad ones, never unmeasured space; none where all are good."""
    points = [((x,), abs(x) < 12 and x != 3.0) for x in (-50.0, -20.0, -11.0, -1.0, 0.0, 2.0, 3.0, 4.0, 5.0, 30.0)]
    domain = {"x": (-50.0, 50.0)}
    assert accuracy.reference_domain([_reported(points)], domain) == {"x": ((-11.0, 2.0), (4.0, 5.0))}
    assert accuracy.reference_domain([_reported([(p, True) for p, _ in points])], domain) is None
    # a point bad at the other params is bad
    other = _reported([((0.0,), False)])
    assert accuracy.reference_domain([_reported(points), other], domain) == {"x": ((-11.0, -1.0), (4.0, 5.0))}
    box = accuracy.reference_domain([_reported([((x, y), x < 5) for x in (0.0, 1.0, 4.0, 9.0) for y in (0.0, 1.0)])],
                                    {"x": (0.0, 10.0), "y": (0.0, 1.0)})
    assert box == {"x": ((0.0, 4.0),), "y": ((0.0, 1.0),)}


def test_generated_tests_compare_with_autograd_only_where_it_is_accurate(tmp_path):
    """softplus(10*x)/10 written log(1 + exp(10*x))/10: autograd through it is -100 at order 3 at
    x = 25 (the truth 3e-107), so the generated tests, comparing with it on [-50, 50], failed right
    after a build; they compare where the build measured it accurate, and pass."""
    build_spec(tmp_path, name="softplus_beta", expr="log(1 + exp(beta*x))/beta", inputs=["x"],
               params={"beta": 10.0}, order=3, domain={"x": [-50, 50]})
    test_file = (tmp_path / "out" / "tests" / "test_softplus_beta.py").read_text()
    bounds = [float(v) for v in re.findall(r"-?[0-9.]+(?:e-?[0-9]+)?", test_file.split("reference_domain=")[1].split("}")[0])]
    assert bounds and max(bounds) < 20 and min(bounds) == -50.0, bounds
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                            cwd=tmp_path / "out", capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:]


@pytest.mark.parametrize(("expr", "domain"), [
    ("x - tanh(x)", [-3, 3]),  # the value lost 8 bits at x = 0.066, past a split at 0.0625
    ("(x - sin(x))/x**3", [-4, 4]),  # the third derivative 5.5 bits at x = -3.54, past one at 3.5
])
def test_a_series_split_reaches_as_far_as_the_direct_formula_cancels(tmp_path, expr, domain):
    """taylor._choice measures each point with neighbours (a cancellation's error is the luck of
    its roundings) and ranks eps by the direct formula within the polynomial's reach only (tanh's
    tails lose bits at orders 2 and 3 whatever eps is): within the bound at every order, at 256
    points, where a held-out probe found the splits too short."""
    plan = _plan(tmp_path, name="split", expr=expr, inputs=["x"], order=3, domain={"x": domain})
    report = accuracy.measure(plan, 256)
    assert not report.over_bound(), accuracy.report_text(report)


def test_the_build_warns_of_what_dbgen_accuracy_finds(tmp_path):
    """x*sigmoid(1.702*x) (QuickGELU) in float32 loses 19 bits at x = -52, where sigmoid underflows
    and the product does not: dbgen accuracy (256 points) found it, the build at 64 said nothing.
    Both measure the same points now."""
    plan = _plan(tmp_path, name="quick_gelu", expr="x*sigmoid(1.702*x)", inputs=["x"], order=1,
                 domain={"x": [-60, 60]})
    report = pipeline.measured_accuracy(plan, render_module(plan, "0" * 64))
    assert pipeline.BUILD_POINTS == 256 and report.points == accuracy.measure(plan, 256).points
    assert any(f.dtype == "float32" for f in report.over_bound()), accuracy.report_text(report)
