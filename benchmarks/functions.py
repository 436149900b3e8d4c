"""The elementwise functions the workloads differentiate, each in up to four variants.

- ``native``: PyTorch's own op (``torch.tanh``, ``F.mish``, ``F.gelu(approximate="tanh")``);
- ``composed``: the formula in torch ops, differentiated by autograd (the generated tests'
  ``composed``);
- ``dbgen``: the module ``dbgen build`` writes for the spec in ``benchmarks/specs`` (``auto``);
- ``fuse``: the same spec built with ``fuse: true`` (each level one torch.compile kernel).

Every variant takes the spec's inputs positionally: ``act(x)``, ``adaptive_tanh(x, a)``,
``lj(r, epsilon, sigma)``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from codegen import bench

SPECS = Path(__file__).parent / "specs"
NATIVE, COMPOSED, DBGEN, FUSE = "native", "composed", "dbgen", "fuse"
VARIANTS = (NATIVE, COMPOSED, DBGEN, FUSE)

# PyTorch's own op where it has one (gelu_tanh's needs a keyword, which a spec's native cannot give)
NATIVES: dict[str, Callable] = {
    "tanh": torch.tanh,
    "sin": torch.sin,
    "mish": torch.nn.functional.mish,
    "silu": torch.nn.functional.silu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
}


@dataclass(frozen=True)
class Family:
    """One function and its variants, by label (``VARIANTS``, those that exist)."""

    name: str
    variants: dict[str, Callable]
    strategy: str  # what auto chose for the eager dbgen variant


@functools.cache
def spec_of(name: str):
    """``benchmarks/specs/NAME.yaml``, loaded and validated once."""
    (spec,) = [s for s in bench.load_specs(SPECS) if s.name == name]
    return spec


def load_family(name: str, workdir: Path, variants=VARIANTS) -> Family:
    """Generate ``benchmarks/specs/NAME.yaml`` (eager, and fused when asked) into ``workdir``."""
    spec = spec_of(name)
    eager = bench.make_subject(spec, ["auto"], workdir / "eager")
    found = {c.label: c.fn for c in eager.candidates}
    chosen = {COMPOSED: found[bench.COMPOSED], DBGEN: found["auto"]}
    if name in NATIVES:
        chosen[NATIVE] = NATIVES[name]
    if FUSE in variants:
        fused = bench.make_subject(dataclasses.replace(spec, fuse=True), ["auto"], workdir / "fused")
        chosen[FUSE] = next(c.fn for c in fused.candidates if c.label == "auto")
    strategy = next(c.note for c in eager.candidates if c.label == "auto").removeprefix("= ")
    return Family(name, {v: chosen[v] for v in variants if v in chosen}, strategy)
