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

from .errors import close_match

EXAMPLE = "torch.nn.functional.mish"


class NativeError(ValueError):
    """The name does not resolve to a torch callable; the message says what to write instead."""


def resolve_native(name: str) -> Callable:
    """``torch.nn.functional.mish`` -> the callable, or ``NativeError`` naming what is wrong."""
    from .write import HeldSignals

    with HeldSignals():  # torch's import, and the lazy submodules the lookup may import (write.import_torch)
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
