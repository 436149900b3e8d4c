"""The ``native`` key: a PyTorch callable named by a dotted path of public names.

It is resolved exactly as the generated tests and ``dbgen bench`` resolve it, by attribute lookup
from ``torch`` (never imported from elsewhere), and must be something torch defines: ``torch.os.system``
is reachable by attribute lookup too. Checking it at build time turns a typo (``torch.squre``) into
a build error with a suggestion instead of a failing generated test. Importing torch takes about a
second, so this module imports it only when a name is resolved.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ..errors import close_match

EXAMPLE = "torch.nn.functional.mish"


class NativeError(ValueError):
    """The name does not resolve to a torch callable; the message says what to write instead."""


def resolve_native(name: str) -> Callable:
    """``torch.nn.functional.mish`` -> the callable, or ``NativeError`` naming what is wrong."""
    from ..signals import HeldSignals

    with HeldSignals():  # torch's import, and the lazy submodules the lookup may import (signals.import_torch)
        return _resolve(name)


def _resolve(name: str) -> Callable:
    import torch

    version = torch.__version__.split("+")[0]
    parts = name.split(".")
    found = torch
    for index, part in enumerate(parts[1:], start=1):
        try:
            found = getattr(found, part)
        except Exception:  # noqa: BLE001 - AttributeError, or a lazy torch submodule failing to import
            raise NativeError(_undefined(name, parts, index, version)) from None
    if isinstance(found, type):
        raise NativeError(f"native: {name} is a class, not a function; name the function form, e.g. {EXAMPLE}")
    if not callable(found):
        raise NativeError(f"native: {name} is not a function (it is a {type(found).__name__}); name one, e.g. {EXAMPLE}")
    if parts[-1].endswith("_") and not parts[-1].startswith("_"):
        parent, plain = functools.reduce(getattr, parts[1:-1], torch), parts[-1].rstrip("_")
        instead = f", {'.'.join([*parts[:-1], plain])}" if callable(getattr(parent, plain, None)) else ""
        raise NativeError(f"native: {name} works in place (it overwrites its input, which the tests and bench "
                          f"reuse, and autograd refuses on a leaf); name the out-of-place op{instead}")
    module = getattr(found, "__module__", None) or ""
    if not module.startswith("torch"):
        raise NativeError(f"native: {name} is not a torch function; name one torch defines, e.g. torch.exp")
    return found


PROBE_POINTS = 7  # per input, evenly over its domain: what a probe call passes native


def elementwise(native: Callable) -> Callable:
    """``native`` as the generated tests call it: a loss (huber_loss, ...) with reduction="none"."""
    import inspect

    try:
        keywords = inspect.signature(native).parameters
    except (TypeError, ValueError):  # a builtin without a signature takes no reduction
        return native
    return functools.partial(native, reduction="none") if "reduction" in keywords else native


def probe(name: str, native: Callable, domains: list[tuple[float, float]], params: dict[str, float]) -> None:
    """Call ``native`` as the generated tests will (float64 tensors over each input's domain, the
    params by keyword) and raise ``NativeError`` where it fails, returns anything but one floating
    value per element, draws random numbers or changes torch's global state (default dtype, grad
    mode, threads), or gives another value when called again: a test against it could only fail,
    or pass by chance (torch.bernoulli, torch.nn.functional.dropout)."""
    import torch

    from ..signals import HeldSignals

    points = [torch.linspace(lo, hi, PROBE_POINTS, dtype=torch.float64).roll(i) for i, (lo, hi) in enumerate(domains)]
    with HeldSignals():
        before = _global_state()
        try:
            results = [elementwise(native)(*points, **params) for _ in range(2)]
        except Exception as exc:  # noqa: BLE001 - the named op's own error is the finding
            _restore(before)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            first = first.split("  (Could this error message be improved?")[0][:200]  # torch's own plea
            raise NativeError(f"native: {name} fails on float64 tensors of the spec's inputs"
                              f"{' and params' if params else ''}: {first}") from None
        changed = [what for what, value in _global_state().items() if not _same(value, before[what])]
        _restore(before)
        if changed:
            raise NativeError(f"native: {name} changes {' and '.join(changed)}; name a deterministic function "
                              f"of the inputs, e.g. {EXAMPLE}")
    first, second = results
    if not (isinstance(first, torch.Tensor) and first.is_floating_point() and first.shape == points[0].shape):
        got = (f"a {first.dtype} tensor of shape {tuple(first.shape)}" if isinstance(first, torch.Tensor)
               else f"a {type(first).__name__}")
        raise NativeError(f"native: {name} returns {got}, not one floating value per element of the inputs")
    if not torch.equal(first.nan_to_num(), second.nan_to_num()):
        raise NativeError(f"native: {name} gives other values when called again; name a deterministic function")


def _same(a, b) -> bool:
    import torch

    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def _global_state() -> dict:
    import torch

    return {"the random number generator's state": torch.random.get_rng_state(),
            "the default dtype": torch.get_default_dtype(), "the grad mode": torch.is_grad_enabled(),
            "the number of threads": torch.get_num_threads(),
            "the deterministic-algorithms flag": torch.are_deterministic_algorithms_enabled()}


def _restore(state: dict) -> None:
    """Undo what a refused native changed, so that the build goes on as it began."""
    import torch

    torch.random.set_rng_state(state["the random number generator's state"])
    torch.set_default_dtype(state["the default dtype"])
    torch.set_grad_enabled(state["the grad mode"])
    torch.set_num_threads(state["the number of threads"])
    torch.use_deterministic_algorithms(state["the deterministic-algorithms flag"])


def _undefined(name: str, parts: list[str], index: int, version: str) -> str:
    """The message for ``parts[index]`` missing from the object ``parts[:index]`` names."""
    import torch

    parent_name = ".".join(parts[:index])
    parent = functools.reduce(getattr, parts[1:index], torch)
    where = "" if index == len(parts) - 1 else f" ({parent_name} has no '{parts[index]}')"
    suggestion = _suggestion(parent, parts, index)
    hint = f"did you mean {suggestion}?" if suggestion else "name a function torch defines, e.g. torch.exp"
    return f"native: {name} is not defined by torch {version}{where}; {hint}"


def _suggestion(parent, parts: list[str], index: int) -> str | None:
    """A public name of ``parent`` close to ``parts[index]`` with which the whole name resolves."""
    public = [n for n in dir(parent) if not n.startswith("_")]
    word = close_match(parts[index], public)
    if word is None:
        return None
    corrected = [*parts[:index], word, *parts[index + 1:]]
    try:
        functools.reduce(getattr, corrected[index:], parent)
    except Exception:  # noqa: BLE001 - as in resolve_native
        return None
    return ".".join(corrected)
