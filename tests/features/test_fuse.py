"""fuse: true — each level's formulas compiled into one kernel, with the same numbers as eager."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import derivative_chain, import_path, sample

pytestmark = pytest.mark.compile
SPEC = {"name": "mish_fused", "expr": "x*tanh(softplus(x))", "inputs": ["x"], "order": 2, "fuse": True}


@pytest.fixture(params=["nested", "intermediates"])
def fused(request, tmp_path):
    from helpers import build_spec

    torch._dynamo.reset()
    module = build_spec(tmp_path, **dict(SPEC, strategy=request.param))
    return module, import_path(tmp_path / "out" / "tests" / "test_mish_fused.py")


def test_every_level_is_a_fused_kernel(fused):
    module, _ = fused
    kernels = [name for name in vars(module) if name.startswith("_") and name.endswith(("_forward", "_backward"))]
    assert kernels and all(getattr(module, k).__wrapped__ for k in kernels)
    assert module.FUSE is True


def test_fused_kernels_compile_and_match_eager(fused):
    _module, tests = fused
    torch._dynamo.utils.counters.clear()
    tests.test_fused_levels_give_eager_numbers_in_float32()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1, "nothing was compiled"


def test_a_failing_compiler_falls_back_to_eager_with_one_warning(fused, monkeypatch):
    module, _ = fused

    def broken_compile(function, **kwargs):
        def run(*args):
            raise RuntimeError("no C++ compiler")
        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    x = sample((5,), -2, 2, seed=1, dtype=torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = module.mish_fused(x)
        value = module.mish_fused(x)
    assert sum("runs eagerly" in str(w.message) for w in caught) == 1
    torch.testing.assert_close(value, x * torch.tanh(torch.nn.functional.softplus(x)))


def test_fused_module_keeps_every_order_and_transform(fused):
    module, _ = fused
    x = sample((3, 4), -2, 2, seed=2)
    def ref(x):
        return x * torch.tanh(torch.nn.functional.softplus(x))
    actual = derivative_chain(module.mish_fused, [x], 3, seed=3)
    expected = derivative_chain(ref, [x], 3, seed=3)
    for got, want in zip(actual[1:], expected[1:]):
        torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-10)
    torch.testing.assert_close(torch.func.vmap(module.mish_fused)(x.detach()), ref(x.detach()))
    hessian = torch.func.hessian(lambda v: module.mish_fused(v).sum())(x.detach()[0])
    torch.testing.assert_close(hessian, torch.func.hessian(lambda v: ref(v).sum())(x.detach()[0]))


def test_a_param_bound_of_a_guard_is_not_specialized_by_the_compiler(tmp_path):
    """torch.compile specializes a param passed as a keyword (clamp's max=rc) once it recompiles
    (measured: float64 at rc = 2 and 5, then float32 at rc = 5 held r at 2 where r < 5 is taken):
    a fused guard is a torch.where, right at every value of rc, not a clamp."""
    from helpers import build_spec

    torch._dynamo.reset()
    module = build_spec(tmp_path, name="cut", expr="where(r < rc, (1 - r/rc)**2 * exp(r), 0)", inputs=["r"],
                        params={"rc": 5.0}, order=2, strategy="nested", fuse=True, domain={"r": [0, 6]})
    for dtype in (torch.float64, torch.float32):
        r = torch.linspace(0.1, 5.9, 12, dtype=dtype, requires_grad=True)
        for rc in (2.0, 5.0):
            expected = derivative_chain(lambda r, rc=rc: torch.where(r < rc, (1 - r / rc) ** 2 * torch.exp(r), 0.0), [r],
                                        2, seed=4)
            actual = derivative_chain(lambda r, rc=rc: module.cut(r, rc=rc), [r], 2, seed=4)
            for a, e in zip([actual[0], *actual[1], *actual[2]], [expected[0], *expected[1], *expected[2]]):
                torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
