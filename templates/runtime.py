"""The generated modules' runtime helpers, written once here and copied into each module that uses
them (render._runtime_source takes each top-level function, with the constants and comments just
above it): a generated module is one file a user can copy, with no dbgen or helper module to
install beside it, as TorchScript, torch.export and C++ deployment expect. Python, so that ruff
and the tests read it as such; FUSE is the generated module's own setting.
"""

from __future__ import annotations

import functools
import warnings

import torch

FUSE = True  # the generated module's own setting, which module.py.jinja writes: not copied


def _check_params(function, /, **params):
    """Refuse a param that is not a Python number (int or float; bool is refused).

    Params are constants: a tensor passed as one would be used as a constant and its
    gradient silently dropped, so it is refused, with the way to make it trainable.
    """
    for name, value in params.items():
        if isinstance(value, torch.Tensor):
            raise TypeError(
                f"{function}(): param {name!r} must be a Python number, "
                "not a Tensor: params are constants. "
                f"To train {name}, list it under 'inputs' in the spec, rebuild, "
                "and pass it as a tensor (shape () for a scalar)."
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(
                f"{function}(): param {name!r} must be a Python number, "
                f"not {type(value).__name__}"
            )


# integer and bool dtypes: converted to a floating dtype, as torch.sinh converts them
_INTEGRAL = frozenset({
    torch.bool, torch.uint8, torch.uint16, torch.uint32, torch.uint64,
    torch.int8, torch.int16, torch.int32, torch.int64,
})


def _tensor_inputs(function, /, **inputs):
    """The inputs as floating-point tensors, a Python number among them wrapped in a
    tensor as torch wraps one.

    An integer or bool tensor is converted to the floating dtype torch's float ops
    (torch.sinh, torch.atan2) compute it in: the other inputs' floating dtype, else
    the default dtype. A complex tensor is refused, as is any other dtype: the
    expression is real-valued, and its derivatives are not the complex ones. A
    number beside a tensor input becomes a constant (no gradient) of the tensor
    inputs' promoted dtype, on the first one's device. Numbers only, or anything
    else, are refused.
    """
    tensors = [value for value in inputs.values() if isinstance(value, torch.Tensor)]
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor):
            if not value.is_floating_point() and value.dtype not in _INTEGRAL:
                raise TypeError(_dtype_refusal(function, name, value.dtype))
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            accepted = "a tensor" if len(inputs) == 1 else "a tensor or a Python number"
            raise TypeError(
                f"{function}(): input {name!r} must be {accepted}, "
                f"not {type(value).__name__}"
            )
        if not tensors:
            problem = (
                f"input {name!r} must be a tensor, not {type(value).__name__}"
                if len(inputs) == 1
                else "at least one input must be a tensor, not only Python numbers"
            )
            raise TypeError(
                f"{function}(): {problem}: "
                f"pass a tensor, e.g. torch.tensor({float(value)!r})"
            )
    if not all(tensor.is_floating_point() for tensor in tensors):
        floating = _floating_dtype(tensors)
        inputs = {
            name: value.to(floating)
            if isinstance(value, torch.Tensor) and not value.is_floating_point()
            else value
            for name, value in inputs.items()
        }
        tensors = [value for value in inputs.values() if isinstance(value, torch.Tensor)]
    dtype = tensors[0].dtype
    for tensor in tensors[1:]:
        dtype = torch.promote_types(dtype, tensor.dtype)
    device = tensors[0].device
    return tuple(
        value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=dtype, device=device)
        for value in inputs.values()
    )


def _floating_dtype(tensors):
    """The dtype torch's float ops convert integer tensors among `tensors` to: the
    floating tensors' promoted dtype, those with dimensions first (as torch ranks a
    0-dim tensor below them), else the default dtype (Python numbers count for no
    more, as in torch)."""
    for zero_dim in (False, True):
        dtypes = [
            tensor.dtype
            for tensor in tensors
            if tensor.is_floating_point() and (tensor.dim() == 0) == zero_dim
        ]
        if dtypes:
            dtype = dtypes[0]
            for other in dtypes[1:]:
                dtype = torch.promote_types(dtype, other)
            return dtype
    return torch.get_default_dtype()


def _dtype_refusal(function, name, dtype):
    """What a TypeError says of an input tensor of a dtype that is neither floating,
    integer nor bool."""
    shown = str(dtype).removeprefix("torch.")
    instead = (
        "pass a real floating-point tensor (float16, bfloat16, float32 or float64), "
        "or an integer or bool tensor (converted to float)"
    )
    if dtype.is_complex:
        return (
            f"{function}(): input {name!r} must be a real tensor, not {shown}: "
            f"{function} is real-valued (its derivatives at a complex input would "
            f"not be autograd's); {instead}"
        )
    return (
        f"{function}(): input {name!r} must be a floating-point tensor, "
        f"not {shown}: {instead}"
    )


# torch's own query for a running torch.func transform, a private API: where a torch
# has none, every caller takes the path that is right under a transform too
_FUNCTORCH_ACTIVE = getattr(torch._C, "_are_functorch_transforms_active", None)


def _transforms_active():
    """Whether a torch.func transform is running (True where torch cannot say)."""
    return _FUNCTORCH_ACTIVE is None or _FUNCTORCH_ACTIVE()


_BASE_APPLY = getattr(getattr(torch._C, "_FunctionBase", None), "__dict__", {}).get("apply")
_UNWRAP_IF_DEAD = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)


@classmethod
def _direct_apply(cls, *args):
    """Function.apply without binding the arguments to forward's signature again.

    Function.apply runs inspect.signature on every call (about half of a generated
    Function's overhead, torch 2.13). The Functions below take exactly the positional
    arguments they are given, with no defaults, so binding changes nothing. Under
    torch.func transforms, and on a torch without these internals, Function.apply runs.
    """
    if _BASE_APPLY is None or _UNWRAP_IF_DEAD is None or _transforms_active():
        return torch.autograd.Function.apply.__func__(cls, *args)
    # as Function.apply does: a tensor a finished transform left wrapped is unwrapped
    args = tuple(_UNWRAP_IF_DEAD(arg) if isinstance(arg, torch.Tensor) else arg for arg in args)
    return _BASE_APPLY.__get__(None, cls)(*args)


def _broadcast(*tensors):
    """The inputs expanded to their common shape (views, no copies), in the dtype torch
    gives the result: a 0-dim tensor counts below those with dimensions (float32 with a
    0-dim float64 is float32), which it would no longer be once expanded.

    Every tensor inside the Functions below then has one shape, and autograd's own
    expand-backward sums each gradient back to its input's shape, at every order.
    """
    dtype = _floating_dtype(tensors)
    tensors = [tensor if tensor.dtype == dtype else tensor.to(dtype) for tensor in tensors]
    shape = torch.broadcast_shapes(*(tensor.shape for tensor in tensors))
    return tuple(tensor if tensor.shape == shape else tensor.expand(shape) for tensor in tensors)


def _accumulate(total, term):
    """`total + term`, where a total of None (no gradient yet) counts as zero."""
    return term if total is None else total + term


def _horner(w, coefficients):
    """`coefficients[0] + w*(coefficients[1] + w*(...))`: the Taylor polynomial that
    replaces the formula near a removable singularity (dbgen's series branch)."""
    value = coefficients[-1]
    for coefficient in reversed(coefficients[:-1]):
        value = coefficient + w * value
    return value


def _norm(*components):
    """sqrt(a**2 + b**2 + ...), smooth for autograd wherever it is not 0.

    torch.hypot(torch.hypot(a, b), c) divides 0 by 0 in its backward where a = b = 0, so
    its second derivative is NaN on an axis. Here the components are scaled by the norm
    itself, held constant (the norm is the same at every scale, so are its derivatives):
    no square underflows or overflows, and nothing is divided by 0.
    """
    tensor = next(c for c in components if isinstance(c, torch.Tensor))
    components = [
        torch.as_tensor(c, dtype=tensor.dtype, device=tensor.device) for c in components
    ]
    scale = components[0]
    for component in components[1:]:
        scale = torch.hypot(scale, component)
    scale = scale.detach().clamp_min(torch.finfo(scale.dtype).tiny)
    inverse = 1 / scale
    squares = (components[0] * inverse) ** 2
    for component in components[1:]:
        squares = squares + (component * inverse) ** 2
    return scale * torch.sqrt(squares)


_WILL_RUN = getattr(torch._C, "_will_engine_execute_node", None)
_ACCUMULATE_GRAD = getattr(getattr(torch._C, "_functions", None), "AccumulateGrad", ())


def _needed_gradients(ctx, *names):
    """The names, among the inputs `names`, whose gradient this backward pass uses.

    ctx.needs_input_grad says which inputs require a gradient; the autograd engine
    knows which of those the running pass will use: torch.autograd.grad(loss, params)
    needs no gradient for the data. An input that is a leaf counts as used (torch
    cannot tell inside autograd.grad), and so does every input while torch.compile or
    a torch.func transform runs this backward, or on a torch without the engine query.
    A set, which a nested level also receives as an argument: torch.func would flatten
    a tuple of flags into separate arguments.
    """
    needs = ctx.needs_input_grad
    if _WILL_RUN is not None and not (
        torch.compiler.is_compiling() or _transforms_active()
    ):
        try:
            needs = [
                need and (isinstance(node, _ACCUMULATE_GRAD) or _WILL_RUN(node))
                for need, (node, _) in zip(needs, ctx.next_functions)
            ]
        except (AttributeError, RuntimeError):  # not a graph task's node (backward called by hand)
            needs = ctx.needs_input_grad
    return frozenset(name for name, need in zip(names, needs) if need)


def _zero_missing(tangents):
    """The tangents, None (an input that is not dual) replaced by zeros of the shape."""
    present = next(tangent for tangent in tangents if tangent is not None)
    return tuple(torch.zeros_like(present) if tangent is None else tangent for tangent in tangents)


def _zeros_if_none(grad, like):
    """`grad`, or zeros like `like` where autograd passed None (an unused output)."""
    return torch.zeros_like(like) if grad is None else grad


def _broadcast_all(value, *tensors):
    """`value` (a tensor or float) in a new tensor of `tensors`' shape and dtype."""
    dtype = tensors[0].dtype
    for tensor in tensors[1:]:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return torch.zeros_like(tensors[0], dtype=dtype) + value


# torch.compile's call path (Dynamo's guard checks) costs about 10 us a call on CPU,
# more than a level's kernel below about 2**14 elements; inductor's kernel compiled
# once (standalone_compile) and called directly costs about 5 (at 256 elements: 5.1 us,
# torch.compile 14.8, eager 14.2). A level keeps one such kernel per dtype and params'
# values, up to _THIN_KERNELS.
_THIN_KERNELS = 8
# A dispatch mode (FakeTensor under torch.export, an op counter) must see the ops, which
# a compiled kernel would run unseen; a torch without this query counts as having one.
_DISPATCH_MODES = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 1)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _fused(function=None, *, eager_below=0):
    """`function` fused into one kernel by inductor (dynamic shapes).

    On CPU, where its tensors have one shape, the kernel is compiled once per dtype and
    params' values and called directly; elsewhere through torch.compile. It runs eagerly
    when FUSE is False, while gradients are being recorded (a backward taken with
    create_graph=True must stay differentiable), inside an outer torch.compile or
    torch.func transform, on CPU below `eager_below` elements (a kernel of one or two
    ops: its call costs more than their dispatch there), and, after one warning, for
    good if compilation fails. `@_fused` or `@_fused(eager_below=N)`.
    """
    if function is None:
        return functools.partial(_fused, eager_below=eager_below)
    compiled = None
    kernels = {}

    @functools.wraps(function)
    def run(*args):
        nonlocal compiled
        if not FUSE or torch.is_grad_enabled() or torch.compiler.is_compiling():
            return function(*args)
        if _transforms_active():
            return function(*args)
        result = _thin_call(function, kernels, args, eager_below)
        if result is not None:
            return result
        if compiled is None:
            compiled = torch.compile(function, dynamic=True)
        try:
            return compiled(*args)
        # any compile failure falls back to eager
        except Exception as error:  # noqa: BLE001
            warnings.warn(
                f"dbgen: torch.compile failed ({type(error).__name__}); "
                f"{function.__name__} runs eagerly"
            )
            compiled = function
            return function(*args)

    return run


def _thin_call(function, kernels, args, eager_below):
    """`function(*args)` through its kernel compiled once for these args' dtype and
    numbers (`kernels`, by that key), on their elements as one flat tensor, or
    `function` itself below `eager_below` elements (and at 0 or 1, sizes the compiler
    specializes on); None where neither applies (not CPU, tensors of several shapes or
    dtypes, a tensor subclass, a dispatch mode, too many keys) or the compiler failed:
    torch.compile's path runs then.
    Written for speed: it runs on every call, where microseconds count.
    """
    tensors, numbers = [], []
    for arg in args:
        (tensors if isinstance(arg, torch.Tensor) else numbers).append(arg)
    shape, dtype = tensors[0].shape, tensors[0].dtype
    if not tensors[0].is_cpu or _DISPATCH_MODES():
        return None
    if tensors[0].numel() < max(eager_below, 2):
        return function(*args)
    flat = _flat_tensors(tensors, shape, dtype)
    if flat is None:
        return None
    key = (dtype, *numbers)
    kernel = kernels.get(key, False)
    if kernel is False:
        if len(kernels) >= _THIN_KERNELS:
            return None
        kernel = kernels[key] = _standalone_kernel(function, args, flat)
    if kernel is None:
        return None
    out = kernel(*flat)
    if len(shape) == 1:
        return out if isinstance(out, torch.Tensor) else tuple(out)
    if isinstance(out, torch.Tensor):
        return out.view(shape)
    return tuple([tensor.view(shape) for tensor in out])


def _flat_tensors(tensors, shape, dtype):
    """`tensors` as contiguous 1-d tensors, or None where one differs from `shape` or
    `dtype` or is a subclass (its own dispatch, which a kernel would skip)."""
    flat = []
    for tensor in tensors:
        if tensor.shape != shape or tensor.dtype != dtype:
            return None
        if type(tensor) not in _PLAIN_TENSORS:
            return None
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()  # an expanded input: the kernel reads in order
        flat.append(tensor if len(shape) == 1 else tensor.view(-1))
    return flat


def _standalone_kernel(function, args, flat):
    """`function` compiled by inductor for flat tensors of any length (`flat`: `args`'
    tensors flattened), with `args`' numbers fixed; None where this torch has no
    standalone_compile or it fails."""
    try:
        from torch._inductor import standalone_compile
        from torch.fx.experimental.proxy_tensor import make_fx
    except ImportError:
        return None
    slots = [i for i, arg in enumerate(args) if isinstance(arg, torch.Tensor)]

    def with_numbers(*tensors):
        filled = list(args)
        for slot, tensor in zip(slots, tensors):
            filled[slot] = tensor
        return function(*filled)

    try:
        graph = make_fx(with_numbers, tracing_mode="symbolic")(*flat)
        return standalone_compile(graph, flat, dynamic_shapes="from_graph")
    # any compile failure leaves torch.compile's path
    except Exception:  # noqa: BLE001
        return None


# torch.autograd.forward_ad's level while dual numbers are in use (-1: none), a private global:
# where a torch has none, forward-mode AD is taken to be off
def _python_functions_needed():
    """Whether this call must run the Python Functions instead of the C++ op: the op has no
    forward-mode derivative (jvp), and torch.compile and torch.func trace the Python ones."""
    dual = getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0
    return dual or torch.compiler.is_compiling() or _transforms_active()


def _load_op(name, source):
    """(torch.ops.dbgen.<name>, the path of the library holding it), compiled from `source`
    (C++) on first use and cached by torch's extension builder under the source's hash;
    (None, None), after one warning, where it cannot be built or another build of it is
    loaded: the Python Functions then run (same formulas)."""
    import hashlib
    import os
    import shutil

    from torch.utils import cpp_extension

    library = f"dbgen_{name}_{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    loaded = {os.path.basename(path): path for path in torch.ops.loaded_libraries}
    if any(file.startswith(f"dbgen_{name}_") for file in loaded.keys() - {f"{library}.so"}):
        reason = f"another build of torch.ops.dbgen.{name} is loaded in this process"
    elif not shutil.which(os.environ.get("CXX", "c++")):
        reason = f"no C++ compiler ({os.environ.get('CXX', 'c++')}) on PATH: install g++ or clang++"
    elif not cpp_extension.is_ninja_available():
        reason = "ninja is not installed: pip install ninja"
    else:
        try:
            if f"{library}.so" not in loaded:
                cpp_extension.load_inline(
                    library,
                    [source],
                    extra_cflags=["-O2"],
                    is_python_module=False,
                    no_implicit_headers=True,
                )
            path = next(
                path
                for path in torch.ops.loaded_libraries
                if os.path.basename(path) == f"{library}.so"
            )
            return getattr(torch.ops.dbgen, name), path
        except Exception as error:  # noqa: BLE001 - any build failure falls back, saying why
            lines = str(error).strip().splitlines() or [type(error).__name__]
            first = next((line for line in lines if "error:" in line), lines[-1])
            reason = f"building it failed: {first.strip()}"
    warnings.warn(
        f"{name}: the C++ op torch.ops.dbgen.{name} is not available ({reason}); "
        "running the Python Functions, which compute the same formulas",
        stacklevel=3,
    )
    return None, None
