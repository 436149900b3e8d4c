"""Float32 stability far from the origin, on specs unlike the examples, under every strategy.

Each spec is built, its generated float32 test is run (no less accurate than plain torch in
float32), and the stricter promise of the stable rewrites is checked with the generated test's own
helpers: every derivative order up to min(order, 3) finite wherever the float64 composed expression
is finite (and within float32's range), and within 1e-4 relative (1e-6 absolute) of it, at +-20,
+-40, +-100 and the domain ends -- where plain torch in float32 overflows or cancels.
"""

from __future__ import annotations

import pytest
import torch
from helpers import import_path, strategy_matrix


def strictly_finite_and_close(tests, params) -> None:
    """Asserts the rewrites' promise on a generated test module: its float32 derivatives are finite
    and within 1e-4 of float64 wherever float64 is finite, whatever plain torch manages there."""
    case, derivatives = tests.CASE, tests.checks.elementwise_derivatives
    columns = case.stability_columns()
    order = min(case.order, 3)
    ours = derivatives(case.function, [c.clone().requires_grad_() for c in columns], order, params)
    truth = derivatives(case.composed, [c.double().requires_grad_() for c in columns], order, params)
    for level, (got_level, want_level) in enumerate(zip(ours, truth)):
        for index, (got, want) in enumerate(zip(got_level, want_level)):
            got, want = got.detach().double(), want.detach()
            where = torch.isfinite(want) & (want.abs() <= torch.finfo(torch.float32).max)
            bound = 1e-4 * want.abs() + 1e-6 * want.abs().clamp(min=1)
            bad = where & ~((got - want).abs() <= bound)
            points = [c[bad].tolist() for c in columns]
            assert not bad.any(), f"order {level}, derivative {index}: at {points} got {got[bad]}, want {want[bad]}"


STRATEGIES = ["auto", "save_inputs", "save_outputs", "intermediates", "nested"]
SPECS = {
    "log_sigmoid": {"expr": "log(sigmoid(x))", "inputs": ["x"]},
    "logistic_loss": {"expr": "log(1 + exp(-y*x))", "inputs": ["x", "y"]},
    "log_add_exp": {"expr": "log(exp(x) + exp(y))", "inputs": ["x", "y"]},
    "swish": {"expr": "x*sigmoid(beta*x)", "inputs": ["x"], "params": {"beta": 1.5}},
    "x_erf": {"expr": "x*erf(x)", "inputs": ["x"]},
    "isru": {"expr": "x/sqrt(1 + a*x**2)", "inputs": ["x"], "params": {"a": 0.5}},
    "softplus_written_out": {"expr": "log(1 + exp(x))", "inputs": ["x"]},
    "log_cosh": {"expr": "log(cosh(x - y))", "inputs": ["x", "y"]},
    "radius": {"expr": "sqrt(x**2 + y**2)", "inputs": ["x", "y"], "domain": {"x": [0.5, 100], "y": [0.5, 100]}},
    "tanh_ratio": {"expr": "sinh(x)/cosh(x) + exp(x)/(exp(x) + exp(y))", "inputs": ["x", "y"]},
}


@pytest.mark.parametrize("name, strategy", strategy_matrix(sorted(SPECS), STRATEGIES))
def test_float32_derivatives_are_finite_and_close_far_from_the_origin(tmp_path, name, strategy):
    from helpers import build_spec

    build_spec(tmp_path, **dict(SPECS[name], name=name, order=2, strategy=strategy))
    tests = import_path(tmp_path / "out" / "tests" / f"test_{name}.py")
    for params in tests.CASE.param_sets:
        tests.test_float32_is_finite_and_close_where_float64_is(params)
        strictly_finite_and_close(tests, params)


@pytest.mark.parametrize("name", ["logistic_loss", "log_add_exp", "softplus_written_out", "log_cosh", "tanh_ratio"])
def test_without_the_rewrites_the_same_check_fails(tmp_path, name):
    """The check has teeth: a --no-rewrite build of these specs is not finite in float32."""
    import yaml

    from codegen.build import pipeline, write

    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / f"{name}.yaml").write_text(yaml.safe_dump(dict(SPECS[name], name=name, order=2, strategy="save_inputs")))
    write.write_files(tmp_path / "out", pipeline.generate(specs, root=tmp_path, rewrite=False))
    tests = import_path(tmp_path / "out" / "tests" / f"test_{name}.py")
    with pytest.raises(AssertionError):
        strictly_finite_and_close(tests, tests.CASE.params)
