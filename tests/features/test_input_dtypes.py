"""The generated public function's input dtypes, on torch-only and external (SciPy) functions.

The expression language means real numbers. Floating tensors (float16, bfloat16, float32, float64)
pass unchanged and keep their dtype. Integer and bool tensors are converted to float as torch's own
float ops convert them (``torch.sinh(int tensor)`` is float32, ``torch.atan2(int, float16)`` is
float16): before, an external function gave them back truncated (``expi(torch.arange(1, 5))`` was
``[1, 4, 9, 19]``). Complex tensors are refused with a TypeError naming the function, the input and
the dtype: before, a torch-only function gave derivatives that were not autograd's (no
conjugation) and SciPy silently dropped the imaginary part. Any other dtype torch cannot compute
sinh in (bits, sub-byte integers) is refused too. The usual call (floating tensors) never reaches
the helper that converts or refuses: its guard is a check of the dtype.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers import build_spec

ROOT = Path(__file__).resolve().parents[2]
FLOATING = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTEGRAL = [torch.int8, torch.int16, torch.int32, torch.int64,
            torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.bool]
COMPLEX = [torch.complex32, torch.complex64, torch.complex128]
NAMES = ["sinh", "atan2", "exponential_integral", "bessel_jv"]
ONE_INPUT = ["sinh", "exponential_integral", "bessel_jv"]
EXTERNAL = {"exponential_integral", "bessel_jv"}  # SciPy's expi and jv(2, x)

pytestmark = pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")


@pytest.fixture(scope="module")
def functions(tmp_path_factory):
    """The example specs built once (into a temporary folder): name -> public function."""
    built = {}
    for name in NAMES:
        spec = yaml.safe_load((ROOT / "specs" / f"{name}.yaml").read_text())
        module = build_spec(tmp_path_factory.mktemp(name), **spec)
        built[name] = (module, getattr(module, name))
    return built


def _values(dtype: torch.dtype, name: str) -> torch.Tensor:
    """Small whole numbers inside the spec's domain (bool: True and False), of `dtype`."""
    if dtype == torch.bool:
        return torch.tensor([True, False, True])
    return torch.tensor([1, 2, 3] if name in EXTERNAL else [0, 1, 3]).to(dtype)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _complex_refusal(function: str, name: str, dtype: torch.dtype) -> str:
    """The whole TypeError (a regex): the function, the input, the dtype and what to pass."""
    return (rf"^{function}\(\): input '{name}' must be a real tensor, not {_dtype_name(dtype)}: {function} is "
            r"real-valued \(its derivatives at a complex input would not be autograd's\); pass a real "
            r"floating-point tensor \(float16, bfloat16, float32 or float64\), or an integer or bool tensor "
            r"\(converted to float\)$")


def _call(name: str, fn, x: torch.Tensor, other=None):
    """`fn` of one tensor (atan2: as y, the other input a float32 tensor unless given)."""
    if name == "atan2":
        return fn(x, torch.ones((), dtype=torch.float32) if other is None else other)
    return fn(x)


# --- floating dtypes -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATING, ids=_dtype_name)
@pytest.mark.parametrize("name", ONE_INPUT)
def test_floating_inputs_keep_their_dtype(name, dtype, functions):
    _, fn = functions[name]
    x = torch.tensor([0.5, 1.25, 3.0], dtype=dtype, requires_grad=True)
    value = fn(x)
    assert value.dtype == dtype
    (grad,) = torch.autograd.grad(value.sum(), x)
    assert grad.dtype == dtype
    reference = fn(x.detach().double())
    tolerance = {"rtol": 1e-2, "atol": 1e-2} if dtype in (torch.float16, torch.bfloat16) else {}
    torch.testing.assert_close(value.double(), reference, **tolerance, check_dtype=False)
    if name == "sinh":
        torch.testing.assert_close(value, torch.sinh(x), **tolerance)


@pytest.mark.parametrize("dtype", FLOATING, ids=_dtype_name)
@pytest.mark.parametrize("name", NAMES)
def test_floating_inputs_never_reach_the_argument_helper(name, dtype, functions, monkeypatch):
    """The usual call's guard is a check of type and dtype: it does not call _tensor_inputs."""
    module, fn = functions[name]

    def refuse(*args, **kwargs):
        raise AssertionError("the fast path called _tensor_inputs")

    expected = _call(name, fn, _values(dtype, name).to(dtype), torch.ones((), dtype=dtype))
    monkeypatch.setattr(module, "_tensor_inputs", refuse)
    torch.testing.assert_close(_call(name, fn, _values(dtype, name).to(dtype), torch.ones((), dtype=dtype)),
                               expected)


# --- integer and bool dtypes ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INTEGRAL, ids=_dtype_name)
@pytest.mark.parametrize("name", NAMES)
def test_integer_and_bool_inputs_give_the_float_inputs_values(name, dtype, functions):
    """Converted to float32 (the default dtype), as torch.sinh converts them: the values of the same
    numbers as a float32 tensor, not truncated to the integer dtype."""
    _, fn = functions[name]
    x = _values(dtype, name)
    value = _call(name, fn, x)
    assert value.dtype == torch.float32 == torch.sinh(x).dtype
    torch.testing.assert_close(value, _call(name, fn, x.to(torch.float32)), rtol=0, atol=0)
    if name == "sinh":
        torch.testing.assert_close(value, torch.sinh(x))


def test_the_issues_example_is_not_truncated(functions):
    """expi(torch.arange(1, 5)) was [1, 4, 9, 19]: SciPy's values cast back to int64."""
    _, expi = functions["exponential_integral"]
    value = expi(torch.arange(1, 5))
    assert value.dtype == torch.float32
    from scipy import special

    torch.testing.assert_close(value, torch.tensor(special.expi(np.arange(1.0, 5.0)), dtype=torch.float32))


@pytest.mark.parametrize("name", ["sinh", "exponential_integral"])
def test_integer_inputs_follow_the_default_dtype(name, functions):
    _, fn = functions[name]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        value = fn(torch.arange(1, 4))
    finally:
        torch.set_default_dtype(previous)
    assert value.dtype == torch.float64
    torch.testing.assert_close(value, fn(torch.arange(1.0, 4.0, dtype=torch.float64)), rtol=0, atol=0)


@pytest.mark.parametrize("y, x, dtype", [
    (torch.arange(1, 4), torch.tensor([0.5, 1.5, 2.5], dtype=torch.float16), torch.float16),
    (torch.tensor([0.5, 1.5, 2.5], dtype=torch.bfloat16), torch.arange(1, 4, dtype=torch.int32), torch.bfloat16),
    (torch.arange(1, 4), torch.tensor(1.5, dtype=torch.float64), torch.float64),  # a 0-dim float outranks int
    (torch.tensor([0.5, 1.5, 2.5]), torch.tensor(2, dtype=torch.int64), torch.float32),
    (torch.arange(1, 4, dtype=torch.int32), torch.tensor([True, False, True]), torch.float32),
    (torch.arange(1, 4, dtype=torch.uint8), 0.5, torch.float32),
    (torch.arange(1, 4, dtype=torch.int16), 2, torch.float32),
    (3, torch.arange(1, 4, dtype=torch.int8), torch.float32),
], ids=["int64-float16", "bfloat16-int32", "int64-0dim_float64", "float32-0dim_int64", "int32-bool",
        "uint8-float_number", "int16-int_number", "int_number-int8"])
def test_mixed_inputs_take_torchs_dtype_and_values(y, x, dtype, functions):
    """atan2 of integer tensors beside floating ones, or beside numbers: torch.atan2's dtype, and
    its values in that dtype."""
    _, atan2 = functions["atan2"]
    if isinstance(y, torch.Tensor) and isinstance(x, torch.Tensor):
        assert torch.atan2(y, x).dtype == dtype
    value = atan2(y, x)
    assert value.dtype == dtype
    torch.testing.assert_close(value, torch.atan2(torch.as_tensor(y).to(dtype), torch.as_tensor(x).to(dtype)))


def test_an_integer_input_beside_one_that_requires_grad(functions):
    """The float input's gradient is torch.atan2's, at the first and second order; the integer one
    (which cannot require grad) is a constant."""
    _, atan2 = functions["atan2"]
    y = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    x = torch.tensor([1, 2, -3])
    for fn in (atan2, torch.atan2):
        value = fn(y, x)
        (grad,) = torch.autograd.grad(value.sum(), y, create_graph=True)
        (second,) = torch.autograd.grad(grad.sum(), y)
        if fn is atan2:
            ours = (value, grad, second)
        else:
            torch.testing.assert_close(ours, (value, grad, second))


@pytest.mark.parametrize("name", ["sinh", "exponential_integral"])
def test_integer_inputs_under_vmap(name, functions):
    _, fn = functions[name]
    x = torch.arange(1, 7).reshape(2, 3)
    torch.testing.assert_close(torch.func.vmap(fn)(x), fn(x.float()), rtol=0, atol=0)


@pytest.mark.compile
def test_integer_inputs_under_torch_compile_fullgraph(functions):
    _, sinh = functions["sinh"]
    torch._dynamo.reset()
    compiled = torch.compile(sinh, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(torch.arange(4)), torch.sinh(torch.arange(4.0)))
    torch.testing.assert_close(compiled(torch.arange(4.0)), torch.sinh(torch.arange(4.0)))


# --- complex and other dtypes ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", COMPLEX, ids=_dtype_name)
@pytest.mark.parametrize("name", NAMES)
def test_complex_inputs_are_refused(name, dtype, functions):
    """Refused before anything runs: no SciPy ComplexWarning (the imaginary part dropped) first."""
    _, fn = functions[name]
    z = torch.tensor([0.449 + 0.860j, 1.5 + 0j]).to(dtype)
    if dtype != torch.complex32:
        z.requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match=_complex_refusal(name, "y" if name == "atan2" else "x", dtype)):
            _call(name, fn, z)
        if name == "atan2":
            with pytest.raises(TypeError, match=_complex_refusal(name, "x", dtype)):
                fn(torch.ones(2), z)
            with pytest.raises(TypeError, match=_complex_refusal(name, "x", dtype)):
                fn(1.5, z)


def test_the_issues_complex_gradient_is_refused(functions):
    """sinh at 0.449+0.860j gave a gradient other than autograd's (no conjugation): now refused."""
    _, sinh = functions["sinh"]
    z = torch.tensor([0.449 + 0.860j], requires_grad=True)
    with pytest.raises(TypeError, match=r"^sinh\(\): input 'x' must be a real tensor, not complex64"):
        sinh(z)


def _every_dtype() -> list[torch.dtype]:
    """Every dtype torch has that torch.zeros makes a CPU tensor of (not the quantized ones)."""
    found = set()
    for value in vars(torch).values():
        if isinstance(value, torch.dtype):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # ComplexHalf support is experimental
                    torch.zeros(2, dtype=value)
            except (RuntimeError, NotImplementedError, TypeError):
                continue
            found.add(value)
    return sorted(found, key=str)


@pytest.mark.parametrize("dtype", _every_dtype(), ids=_dtype_name)
def test_every_dtype_torch_has_is_taken_as_torch_sinh_takes_it(dtype, functions):
    """Floating, integer, bool: torch.sinh's dtype and values. Complex: refused with the message.
    Anything else: refused where torch.sinh refuses it (a TypeError naming the dtype, or torch's own
    error for a floating dtype torch cannot compute in, float8)."""
    _, sinh = functions["sinh"]
    x = torch.zeros(3, dtype=dtype)
    if dtype.is_complex:
        with pytest.raises(TypeError, match=_complex_refusal("sinh", "x", dtype)):
            sinh(x)
        return
    try:
        expected = torch.sinh(x)
    except (RuntimeError, NotImplementedError) as error:
        refused = TypeError if not dtype.is_floating_point else type(error)
        with pytest.raises(refused):
            sinh(x)
        return
    assert dtype in FLOATING + INTEGRAL, f"a new dtype torch computes sinh in: {dtype}; test it above"
    value = sinh(x)
    assert value.dtype == expected.dtype
    torch.testing.assert_close(value, expected)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
@pytest.mark.parametrize("name", NAMES)
def test_a_dtype_that_is_neither_floating_integer_nor_complex_is_refused(name, functions):
    _, fn = functions[name]
    quantized = torch.quantize_per_tensor(torch.ones(3), 0.5, 0, torch.quint8)
    for x in (torch.zeros(3, dtype=torch.bits8), quantized):
        shown = _dtype_name(x.dtype)
        with pytest.raises(TypeError, match=rf"^{name}\(\): input '{'y' if name == 'atan2' else 'x'}' must be a "
                                            rf"floating-point tensor, not {shown}: pass a real floating-point tensor "
                                            r"\(float16, bfloat16, float32 or float64\), or an integer or bool tensor "
                                            r"\(converted to float\)$"):
            _call(name, fn, x)


@pytest.mark.parametrize("dims, zero_dim", [(torch.float32, torch.float64), (torch.float16, torch.float32),
                                            (torch.float64, torch.float32), (torch.int64, torch.float64)])
def test_a_zero_dim_tensor_counts_below_tensors_with_dimensions_as_in_torch(dims, zero_dim):
    """The dtype of the result is torch's: float32 with a 0-dim float64 is float32 (it was float64:
    the 0-dim tensor was expanded before torch saw it), and each gradient has its input's dtype."""
    from generated.atan2 import atan2

    y = torch.tensor([1.0, 2.0]).to(dims)
    x = torch.tensor(2.0, dtype=zero_dim, requires_grad=True)
    value = atan2(y, x)
    assert value.dtype == torch.atan2(y, x).dtype, (value.dtype, torch.atan2(y, x).dtype)
    (grad,) = torch.autograd.grad(value.sum(), x)
    assert grad.dtype == x.dtype
