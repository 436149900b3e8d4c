"""What the suite measures of one step beyond its time (``dbgen bench``'s clock): bytes saved for
backward, peak memory, agreement."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from codegen.tools import bench


@dataclass(frozen=True)
class Measured:
    seconds: float
    saved_bytes: int
    peak_bytes: int


def saved_bytes(step: Callable[[], object], own: list[torch.Tensor]) -> int:
    """Bytes of the unique storages autograd saves during the step, the case's own data and
    parameters left out (they exist whatever the function)."""
    return bench.saved_bytes(step, {t.untyped_storage().data_ptr() for t in own})[0]


class PeakMemory(TorchDispatchMode):
    """The most bytes held at once by the storages the ops it sees allocate (forward and backward:
    autograd runs them under the mode), each counted until it is freed."""

    def __init__(self):
        super().__init__()
        self.current = self.peak = 0
        self._live: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu":
                self._track(tensor.untyped_storage())
        return out

    def _track(self, storage) -> None:
        key = id(storage)  # a storage's Python object lives exactly as long as the storage (torch 2)
        if key in self._live or storage.nbytes() == 0:
            return
        self._live.add(key)
        self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, key, storage.nbytes())

    def _free(self, key: int, nbytes: int) -> None:
        self._live.discard(key)
        self.current -= nbytes


def peak_bytes(step: Callable[[], object]) -> int:
    """The step's peak memory beyond what existed before it (its result dropped at the end)."""
    with PeakMemory() as tracker:
        step()
    return tracker.peak


def disagreement(result, reference) -> float:
    """The largest relative difference between two steps' loss and gradients."""
    worst = 0.0
    for a, b in zip(_flat(result), _flat(reference)):
        scale = b.abs().max().item() or 1.0
        worst = max(worst, (a - b).abs().max().item() / scale)
    return worst


def _flat(result) -> list[torch.Tensor]:
    loss, grads = result
    return [loss.detach().reshape(1), *(g.detach().reshape(-1) for g in grads)]


def tolerance(dtype: torch.dtype) -> float:
    """Relative agreement asked of every variant: float32 rounding through a few hundred ops."""
    return 1e-3 if dtype == torch.float32 else 1e-9
