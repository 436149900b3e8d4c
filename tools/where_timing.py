"""W3 of the piecewise examples against autograd through the plain torch.where composition.

    python tools/where_timing.py [--size 1048576] [--repeats 7] [--dtype float32]

The composition is the spec's expression exactly as written, in torch ops (``memory.written_function``:
``torch.where(x > 0, torch.exp(-1 / x), 0)``), which autograd differentiates into NaN where an
untaken branch is singular; the generated module (``auto``) guards those branches. W3 is the forward,
the first gradients with create_graph=True and the gradients of those (``dbgen bench``'s workload),
timed on one thread, interleaved, median of the repeats; the table also counts the NaN each gives.
Run from the repository root.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from codegen.build import memory
from codegen.tools import bench

PIECEWISE = ("soft_unit_step", "polynomial_cutoff", "cosine_cutoff", "elu", "huber")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2**20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--strategy", default=None,
                        help="the generated module's strategy (default: the spec's own, auto where it sets none)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    specs = {spec.name: spec for spec in bench.load_specs(Path("specs")) if spec.name in PIECEWISE}
    print(f"W3, {args.size} elements, {args.dtype}, 1 thread, median of {args.repeats}")
    print(f"{'spec':18s} {'generated ms':>13s} {'torch.where ms':>15s} {'ratio':>6s} {'NaN gen/where':>14s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in PIECEWISE:
            spec = specs[name]
            strategy = args.strategy or spec.strategy
            subject = bench.make_subject(spec, (strategy,), Path(tmp))
            generated = next(c.fn for c in subject.candidates if c.label == strategy)
            written = memory.written_function(spec)
            inputs = bench.make_inputs(spec, args.size, getattr(torch, args.dtype))
            times = {"generated": [], "where": []}
            for _ in range(args.repeats):
                for label, fn in (("generated", generated), ("where", written)):
                    start = time.perf_counter()
                    bench.derivatives(fn, inputs, 2)
                    times[label].append(time.perf_counter() - start)
            nans = [_nan_count(fn, inputs) for fn in (generated, written)]
            ours, theirs = (statistics.median(times[k]) * 1e3 for k in ("generated", "where"))
            print(f"{name:18s} {ours:13.2f} {theirs:15.2f} {ours / theirs:6.2f} {nans[0]:>6d}/{nans[1]:<7d}")


def _nan_count(fn, inputs) -> int:
    outputs = bench.derivatives(fn, inputs, 2)
    return sum(int(torch.isnan(t).sum()) for t in _tensors(outputs))


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


if __name__ == "__main__":
    sys.exit(main())
