"""W3 of each function's eager and fused modules over autograd through its composed formula, by size.

    python tools/fused_calls.py [--functions silu,mish,gelu_tanh,tanh] [--sizes 256,4096,65536,1048576]

W3 is a gradient taken with create_graph=True, then its gradient (random cotangents), timed as the
best of five runs of repeated calls, float32, one thread: the per-call cost of a fused level
(``_fused``'s direct kernel call, docs/guide/fused.md) shows at the small sizes. Ratios only:
timings on a shared machine are noisy. Run from the repository root.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import functions


def w3_time(fn, size: int) -> float:
    """Microseconds of one W3 of ``fn`` on ``size`` elements: the best of five runs."""
    x = torch.randn(size, requires_grad=True)
    first, second = torch.randn(size), torch.randn(size)

    def w3():
        (gradient,) = torch.autograd.grad(fn(x), x, first, create_graph=True)
        torch.autograd.grad(gradient, x, second)

    w3()
    w3()  # the first calls compile
    repeats = max(5, 4000 * 256 // size)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            w3()
        best = min(best, (time.perf_counter() - start) / repeats * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", default="silu,mish,gelu_tanh,tanh")
    parser.add_argument("--sizes", default="256,4096,65536,1048576")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"{'function':10s} {'variant':8s} " + " ".join(f"{size:>9d}" for size in sizes))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.functions.split(","):
            family = functions.load_family(name, Path(tmp) / name,
                                           variants=(functions.COMPOSED, functions.DBGEN, functions.FUSE))
            times = {label: [w3_time(fn, size) for size in sizes] for label, fn in family.variants.items()}
            for label in (functions.DBGEN, functions.FUSE):
                ratios = [mine / base for mine, base in zip(times[label], times[functions.COMPOSED])]
                print(f"{name:10s} {label:8s} " + " ".join(f"{ratio:9.2f}" for ratio in ratios))


if __name__ == "__main__":
    main()
