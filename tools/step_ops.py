"""ATen ops that run a kernel in one training step of the workload suite, per variant: a count, not a time.

    python tools/step_ops.py [--workloads force,pinn] [--functions lj,morse,...] [--dtype float32]

Below about 2**14 elements an op costs its dispatch (2-4 us on this machine's CPU) more than its
arithmetic, so a step's time follows this count: where dbgen runs more ops than autograd
through the composed formula, it is slower at those sizes whatever the op mix. Each configuration
runs the smallest size of ``python -m benchmarks``; counts do not depend on the size. The workload suite's
closing note quotes it. Run from the repository root.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import functions, workloads
from benchmarks.__main__ import FULL
from codegen.tools import bench


def step_ops(step) -> Counter:
    """The ops that run a kernel in one step, by name (``dbgen bench``'s ``OpCounter``), after a
    warm-up step: first calls may set up caches."""
    step()
    with bench.OpCounter() as counter:
        step()
    return counter.ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="force,pinn,wgan")
    parser.add_argument("--functions", default="", help="comma-separated; default: the suite's")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    wanted = {name for name in args.functions.split(",") if name}
    print(f"{'workload':10s} {'function':14s} {'auto':13s} " + " ".join(f"{v:>9s}" for v in functions.VARIANTS[:3])
          + "  top ops (dbgen)")
    with tempfile.TemporaryDirectory() as tmp:
        for workload in args.workloads.split(","):
            names, sizes = FULL[workload]
            for name in (n for n in names if not wanted or n in wanted):
                family = functions.load_family(name, Path(tmp) / name, variants=functions.VARIANTS[:3])
                case = workloads.WORKLOADS[workload](name, min(sizes), dtype)
                counts = {label: step_ops(lambda fn=fn, case=case: case.step(fn)) for label, fn in family.variants.items()}
                cells = " ".join(f"{sum(counts[v].values()) if v in counts else '-':>9}" for v in functions.VARIANTS[:3])
                top = ", ".join(f"{op} {n}" for op, n in counts[functions.DBGEN].most_common(4))
                print(f"{workload:10s} {name:14s} {family.strategy:13s} {cells}  {top}")


if __name__ == "__main__":
    main()
