"""The elementwise functions the workloads differentiate, each in up to four variants.

- ``native``: PyTorch's own op (``torch.tanh``, ``F.mish``, ``F.gelu(approximate="tanh")``), or
  the library code users run (e3nn's spherical harmonics, transcribed);
- ``composed``: the formula in torch ops, differentiated by autograd (the generated tests'
  ``composed``);
- ``dbgen``: the module ``dbgen build`` writes for the spec in ``benchmarks/specs`` (``auto``);
- ``fuse``: the same spec built with ``fuse: true`` (each level one torch.compile kernel).

Every variant takes the spec's inputs positionally: ``act(x)``, ``adaptive_tanh(x, a)``,
``lj(r, epsilon, sigma)``, ``spherical_harmonics(x, y, z)`` (a tuple of nine).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from codegen.tools import bench

SPECS = Path(__file__).parent / "specs"
EXAMPLES = Path(__file__).parent.parent / "specs"  # the bundled examples the workloads also run
NATIVE, COMPOSED, DBGEN, FUSE = "native", "composed", "dbgen", "fuse"
VARIANTS = (NATIVE, COMPOSED, DBGEN, FUSE)

# PyTorch's own op where it has one (gelu_tanh's needs a keyword, which a spec's native cannot give)
def e3nn_spherical_harmonics(x, y, z):
    """e3nn.o3.spherical_harmonics([0, 1, 2], v, normalize=True, normalization="component") as e3nn
    0.6.0 evaluates it (e3nn/o3/_spherical_harmonics.py, commit 2aa7f58): the direction first, then
    polynomials in its components, differentiated by autograd."""
    x, y, z = torch.nn.functional.normalize(torch.stack([x, y, z], dim=-1), dim=-1).unbind(-1)
    y2, x2z2 = y.pow(2), x.pow(2) + z.pow(2)
    return (
        torch.ones_like(x),
        math.sqrt(3) * x, math.sqrt(3) * y, math.sqrt(3) * z,
        math.sqrt(15) * x * z, math.sqrt(15) * x * y, math.sqrt(5) * (y2 - 0.5 * x2z2),
        math.sqrt(15) * y * z, 0.5 * math.sqrt(15) * (z.pow(2) - x.pow(2)),
    )


NATIVES: dict[str, Callable] = {
    "tanh": torch.tanh,
    "sin": torch.sin,
    "mish": torch.nn.functional.mish,
    "silu": torch.nn.functional.silu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "spherical_harmonics": e3nn_spherical_harmonics,
}


@dataclass(frozen=True)
class Family:
    """One function and its variants, by label (``VARIANTS``, those that exist)."""

    name: str
    variants: dict[str, Callable]
    strategy: str  # what auto chose for the eager dbgen variant


@functools.cache
def spec_of(name: str):
    """``benchmarks/specs/NAME.yaml`` (else the example ``specs/NAME.yaml``), loaded and validated once."""
    folder = SPECS if (SPECS / f"{name}.yaml").exists() else EXAMPLES
    return bench.load_specs(folder / f"{name}.yaml")[0]


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
