"""fuse: true — each level's formulas compiled into one kernel, with the same numbers as eager."""

from __future__ import annotations

import importlib
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
    assert torch._dynamo.utils.counters["aot_autograd"]["total"] >= 1, "nothing was compiled"


def _kernel(module):
    return next(getattr(module, name) for name in vars(module) if name.endswith("_forward") and name.startswith("_"))


def test_a_cpu_kernel_is_compiled_once_and_called_without_dynamo(fused):
    """runtime._thin_call: on CPU the level's kernel is inductor's, compiled once for flat tensors
    of any length and called directly (5 us a call at 256 elements, where torch.compile's guards
    took 15): no Dynamo graph, one compilation for every size and shape, eager's numbers."""
    module, _ = fused
    kernel = _kernel(module)
    torch._dynamo.utils.counters.clear()
    with torch.no_grad():
        for shape in ((256,), (4096,), (3, 5), (2, 3, 7)):
            args = [sample(shape, -2, 2, seed=i, dtype=torch.float32) for i in range(_arity(kernel))]
            for got, want in zip(_flat(kernel(*args)), _flat(kernel.__wrapped__(*args))):
                torch.testing.assert_close(got, want)
    counters = torch._dynamo.utils.counters
    assert counters["aot_autograd"]["total"] == 1 and counters["stats"]["unique_graphs"] == 0, dict(counters)


@pytest.mark.parametrize("case", ["expanded", "expanded 2-d", "one element", "no standalone_compile"])
def test_where_the_direct_kernel_does_not_apply_torch_compile_runs(fused, monkeypatch, case):
    """An expanded input (a cotangent of .sum(), stride 0) is copied into order and still takes
    the direct kernel; one element (a size the compiler specializes on) runs eagerly; a torch
    without standalone_compile takes torch.compile's path: the same numbers every way."""
    module, _ = fused
    kernel = max((getattr(module, name) for name in vars(module) if name.endswith("_forward") and name.startswith("_")),
                 key=_arity)  # the kernel of the most inputs: a level after the first
    if case == "no standalone_compile":
        monkeypatch.delattr(importlib.import_module("torch._inductor"), "standalone_compile")
    shape = {"one element": (1,), "expanded 2-d": (8, 8)}.get(case, (64,))
    args = [sample(shape, -2, 2, seed=i, dtype=torch.float32) for i in range(_arity(kernel))]
    if case.startswith("expanded"):
        args[0] = args[0].reshape(-1)[:1].reshape((1,) * len(shape)).expand(shape)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with torch.no_grad():
        for got, want in zip(_flat(kernel(*args)), _flat(kernel.__wrapped__(*args))):
            torch.testing.assert_close(got, want)
    dynamo_graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert dynamo_graphs >= 1 if case == "no standalone_compile" else dynamo_graphs == 0


def _arity(kernel) -> int:
    import inspect

    return len(inspect.signature(kernel.__wrapped__).parameters)


def _flat(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def test_a_failing_compiler_falls_back_to_eager_with_one_warning(fused, monkeypatch):
    module, _ = fused

    def broken_compile(function, **kwargs):
        def run(*args):
            raise RuntimeError("no C++ compiler")
        return run

    def broken_standalone(graph, example, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", broken_compile)
    monkeypatch.setattr(importlib.import_module("torch._inductor"), "standalone_compile", broken_standalone)
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


def test_a_kernel_of_one_or_two_ops_runs_eagerly_below_4096_elements(tmp_path):
    """functions._eager_below: silu's forward (sigmoid, a product) is not worth a kernel call at
    256 elements (7.1 us fused, 2.7 eager) and is at 65,536 (29 and 32): it runs eagerly below
    SMALL_KERNEL_SIZE elements and fused from there; a level of more ops is fused at every size."""
    from helpers import build_spec

    from codegen.emit.functions import SMALL_KERNEL_SIZE

    module = build_spec(tmp_path, name="silu_fused", expr="x*sigmoid(x)", inputs=["x"], order=2, strategy="nested",
                        fuse=True)
    source = (tmp_path / "out" / "silu_fused.py").read_text()
    assert f"@_fused(eager_below={SMALL_KERNEL_SIZE})\ndef _silu_fused_forward(" in source
    assert "@_fused\ndef _silu_fused_level1_forward(" in source
    counters = torch._dynamo.utils.counters
    with torch.no_grad():
        for size, compiled in ((SMALL_KERNEL_SIZE - 1, 0), (SMALL_KERNEL_SIZE, 1)):
            counters.clear()
            x = sample((size,), -2, 2, seed=5, dtype=torch.float32)
            out, _sigmoid_x = module._silu_fused_forward(x)
            torch.testing.assert_close(out, x * torch.sigmoid(x))
            assert counters["aot_autograd"]["total"] == compiled, (size, dict(counters))


def test_under_a_dispatch_mode_a_fused_level_runs_op_by_op(fused):
    """A dispatch mode must see the ops, which a compiled kernel runs unseen: an op counter counts
    them, and fake tensors (torch.export's tracing) pass through with their shapes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from codegen.tools.bench import OpCounter

    module, _ = fused
    kernel = _kernel(module)
    args = [sample((4096,), -2, 2, seed=i, dtype=torch.float32) for i in range(_arity(kernel))]
    with torch.no_grad():
        kernel(*args)  # compiled outside the mode
        with OpCounter() as counter:
            kernel(*args)
        assert counter.count > 0
        with FakeTensorMode() as fake:
            out = _flat(kernel(*(fake.from_tensor(arg) for arg in args)))
    assert all(tensor.shape == (4096,) for tensor in out)


def test_a_torch_without_the_dispatch_mode_query_takes_torch_compiles_path(fused, monkeypatch):
    """runtime._DISPATCH_MODES reads torch._C._len_torch_dispatch_stack through getattr; a torch
    without it counts as always under a mode: every level takes torch.compile's path, with the
    same numbers."""
    module, _ = fused
    monkeypatch.setattr(module, "_DISPATCH_MODES", lambda: 1)  # the getattr's default
    kernel = _kernel(module)
    args = [sample((4096,), -2, 2, seed=i, dtype=torch.float32) for i in range(_arity(kernel))]
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with torch.no_grad():
        for got, want in zip(_flat(kernel(*args)), _flat(kernel.__wrapped__(*args))):
            torch.testing.assert_close(got, want)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1
