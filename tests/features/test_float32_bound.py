"""The generated float32 test asks for what float32 can give, and respects an explicit domain.

It compares float32 with the float64 reference under a bound scaled by the error of autograd
through the composed expression in float32 at the same points: it fails where the generated code
is worse than plain torch (by more than FLOAT32_FACTOR), not where float32 itself cannot do better
(cancellation, saturation). Stricter checks of the stable rewrites are tests/features/test_stability.py's.
"""

from __future__ import annotations

import pytest
import torch
import yaml
from helpers import build_spec, import_path

from codegen.build import pipeline, write
from codegen.spec import load_spec

GELU_TANH = "0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))"
# Specs whose float32 derivatives lose accuracy to the formula itself, at the ends of their domain
HARD_IN_FLOAT32 = {
    # the issue's: 4.5e-4 relative error at order 3 at x = +-4, the same as autograd's
    "gelu_tanh_wide": {"expr": GELU_TANH, "order": 3, "domain": {"x": [-4, 4]}},
    # cancellation: 1 - cos(x) near 0 loses digits before the division
    "one_minus_cos": {"expr": "(1 - cos(x)) / x**2", "order": 2, "domain": {"x": [1e-2, 1]}},
    # saturation: 1 - tanh(x)**2 inside autograd's derivatives of log(cosh(x))
    "log_cosh_far": {"expr": "log(cosh(x))", "order": 4, "domain": {"x": [-20, 20]}},
    "sigmoid_saturated": {"expr": "x**3 * sigmoid(x)", "order": 3, "domain": {"x": [-12, 12]}},
    "lennard_jones_wide": {"expr": "4 * epsilon * ((sigma / r)**12 - (sigma / r)**6)", "inputs": ["r"],
                               "params": {"epsilon": 1.0, "sigma": 1.0}, "order": 4, "domain": {"r": [0.3, 12.0]}},
}


def _generated_tests(tmp_path, name, rewrite=True, **spec):
    spec = {"name": name, "inputs": ["x"], **spec}
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    (specs / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    write.write_files(tmp_path / "out", pipeline.generate(specs / f"{name}.yaml", root=tmp_path, rewrite=rewrite))
    return import_path(tmp_path / "out" / "tests" / f"test_{name}.py")


@pytest.mark.parametrize("name", sorted(HARD_IN_FLOAT32))
def test_float32_test_passes_where_float32_itself_loses_accuracy(tmp_path, name):
    tests = _generated_tests(tmp_path, name, **HARD_IN_FLOAT32[name])
    for params in tests.CASE.param_sets:
        tests.test_float32_is_finite_and_close_where_float64_is(params)


def test_gelu_tanh_wide_is_beyond_a_fixed_bound_for_autograd_too(tmp_path):
    """The case is real: autograd through the composed expression misses 1e-4 at order 3 too."""
    tests = _generated_tests(tmp_path, "gelu_tanh_wide", **HARD_IN_FLOAT32["gelu_tanh_wide"])
    x32 = torch.tensor([-4.0, 4.0], requires_grad=True)
    x64 = x32.detach().double().requires_grad_()
    plain = tests.checks.elementwise_derivatives(tests.composed, [x32], 3, {})[3][0].detach().double()
    truth = tests.checks.elementwise_derivatives(tests.composed, [x64], 3, {})[3][0].detach()
    assert ((plain - truth).abs() / truth.abs()).max() > 1e-4


def _spoiled(function, relative):
    """``function`` with a relative error of ``relative`` on every derivative, in float32 only."""

    def spoiled(*inputs, **params):
        value = function(*inputs, **params)
        return value * (1 + relative) if value.dtype == torch.float32 else value

    return spoiled


@pytest.mark.parametrize("name", ["silu", "gelu_tanh_wide"])
def test_float32_test_fails_where_the_generated_code_is_worse_than_plain_torch(tmp_path, monkeypatch, name):
    """A uniform 1e-3 relative error: far above plain torch's float32 error at most points."""
    spec = HARD_IN_FLOAT32.get(name, {"expr": "x * sigmoid(x)", "order": 3})
    tests = _generated_tests(tmp_path, name, **spec)
    monkeypatch.setattr(tests.generated, name, _spoiled(getattr(tests.generated, name), 1e-3))
    with pytest.raises(AssertionError, match="autograd through the composed expression in float32 gets"):
        tests.test_float32_is_finite_and_close_where_float64_is(tests.CASE.params)


def test_float32_test_fails_on_nan_where_plain_torch_is_finite(tmp_path, monkeypatch):
    tests = _generated_tests(tmp_path, "silu", expr="x * sigmoid(x)", order=2)
    function = tests.generated.silu

    def nan_far_out(x, **params):
        value = function(x, **params)
        return torch.where(x.detach() > 50, torch.nan, value) if x.dtype == torch.float32 else value

    monkeypatch.setattr(tests.generated, "silu", nan_far_out)
    with pytest.raises(AssertionError, match="at \\[\\[100.0\\]\\]"):
        tests.test_float32_is_finite_and_close_where_float64_is(tests.CASE.params)


def test_nothing_is_demanded_where_plain_torch_is_not_finite(tmp_path):
    """log(1 + exp(x)) without the stable rewrites overflows at x = 100 in float32, as autograd through
    the composed expression does: not worse than plain torch, so the generated test passes."""
    tests = _generated_tests(tmp_path, "softplus_written_out", rewrite=False, expr="log(1 + exp(x))", order=2)
    at_100 = torch.tensor([100.0], requires_grad=True)
    assert not torch.isfinite(tests.generated.softplus_written_out(at_100)).all()
    assert not torch.isfinite(tests.composed(at_100)).all()
    tests.test_float32_is_finite_and_close_where_float64_is(tests.CASE.params)


# An explicit domain, even one equal to the default, is where the tests probe ----------------------

def _load(tmp_path, text):
    path = tmp_path / "f.yaml"
    path.write_text(text)
    return load_spec(path, "f.yaml")


BASE = "name: f\nexpr: x * y\ninputs: [x, y]\norder: 1\n"


def test_spec_knows_which_inputs_have_an_explicit_domain(tmp_path):
    assert _load(tmp_path, BASE).explicit_domain == ()
    assert _load(tmp_path, BASE + "domain: {y: [-2, 2]}\n").explicit_domain == ("y",)
    assert _load(tmp_path, BASE + "domain: {y: [-2.0, 2.0], x: [0, 1]}\n").explicit_domain == ("x", "y")


def test_an_explicit_default_domain_changes_the_digest(tmp_path):
    """It determines the generated tests, so it is part of the staleness key."""
    implicit = _load(tmp_path, BASE)
    explicit = _load(tmp_path, BASE + "domain: {x: [-2, 2]}\n")
    assert implicit.domain == explicit.domain
    assert implicit.digest("0") != explicit.digest("0")


def _stability_points(tmp_path, **spec):
    build_spec(tmp_path, name="f", order=1, **spec)
    return import_path(tmp_path / "out" / "tests" / "test_f.py").CASE.stability_points


FAR = (-100.0, -40.0, -20.0, -2.0, 2.0, 20.0, 40.0, 100.0)


def test_an_explicit_domain_equal_to_the_default_gets_no_far_probes(tmp_path):
    points = _stability_points(tmp_path, expr="x * y", inputs=["x", "y"], domain={"x": [-2, 2]})
    assert points == {"x": (-2.0, 2.0), "y": FAR}


def test_without_a_domain_the_far_probes_stay(tmp_path):
    assert _stability_points(tmp_path, expr="sqrt(1 + x**2)", inputs=["x"]) == {"x": FAR}

