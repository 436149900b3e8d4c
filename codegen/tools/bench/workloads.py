"""The training steps a bench run times: inputs, cotangents and the derivatives each workload takes.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...spec import Spec
from .config import SEED, WORKLOADS

# --------------------------------------------------------------------------------------------
# workloads


@dataclass(frozen=True)
class Inputs:
    """Inputs drawn from the spec's domain and fixed random cotangents for every derivative level."""

    tensors: tuple[torch.Tensor, ...]
    cotangents: tuple[tuple[torch.Tensor, ...], ...]  # level 0: the output's; level k: the order-k gradients'

    def storages(self) -> set[int]:
        every = [*self.tensors, *itertools.chain.from_iterable(self.cotangents)]
        return {t.untyped_storage().data_ptr() for t in every}


def make_inputs(spec: Spec, size: int, dtype: torch.dtype, seed: int = SEED) -> Inputs:
    generator = torch.Generator().manual_seed(seed)
    tensors = tuple(
        _uniform(*spec.bounds(name), size, dtype, generator).requires_grad_() for name in spec.inputs
    )
    cotangents = [_output_cotangents(spec, size, dtype, generator)]
    for _ in range(len(WORKLOADS) - 2):
        cotangents.append(tuple(torch.randn(size, generator=generator).to(dtype) for _ in tensors))
    return Inputs(tensors, tuple(cotangents))


def _output_cotangents(spec: Spec, size: int, dtype: torch.dtype, generator) -> tuple[torch.Tensor, ...]:
    """One random cotangent per output (a vector-valued spec's all of them: none goes unused), or
    one for the stacked outputs."""
    if spec.stack:
        return (torch.randn(size, len(spec.outputs), generator=generator).to(dtype),)
    return tuple(torch.randn(size, generator=generator).to(dtype) for _ in spec.formulas)


def _uniform(lo: float, hi: float, size: int, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    return (lo + (hi - lo) * torch.rand(size, generator=generator, dtype=torch.float64)).to(dtype)


def derivatives(fn: Callable, inputs: Inputs, order: int, create_graph_last: bool = False):
    """The value (order 0), or the gradients of order ``order`` contracted with the cotangents.

    Every level but the last is taken with ``create_graph=True`` (the last too with
    ``create_graph_last``). Order 0 runs under ``no_grad``: forward alone, as inference does.
    """
    if order == 0:
        with torch.no_grad():
            return _as_tuple(fn(*inputs.tensors))
    outputs = _as_tuple(fn(*inputs.tensors))
    for level in range(order):
        pairs = [(o, c) for o, c in zip(outputs, inputs.cotangents[level]) if o is not None and o.requires_grad]
        if not pairs:  # the derivatives vanish from here on
            return ()
        outputs = torch.autograd.grad(
            [o for o, _ in pairs], inputs.tensors, [c for _, c in pairs],
            create_graph=create_graph_last or level < order - 1, allow_unused=True,
        )
    return outputs


def _as_tuple(value) -> tuple[torch.Tensor, ...]:
    """A function's outputs: a vector-valued spec's tuple, else the one tensor."""
    return value if isinstance(value, tuple) else (value,)


def workload(fn: Callable, inputs: Inputs, order: int) -> Callable[[], object]:
    return functools.partial(derivatives, fn, inputs, order)
