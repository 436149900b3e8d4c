"""Per-call overhead: microseconds per call on a one-element float32 tensor, forward alone and
forward + backward, for each generated example, its composed expression and its native op.

Usage: python tools/overhead.py [generated] [repeats]
Interleaved repeats in one process, median of each; run with one thread for stable figures.
"""

from __future__ import annotations

import functools
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"overhead_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_call_us(work, calls: int = 200) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        work()
    return (time.perf_counter() - start) / calls * 1e6


def workloads(fn, inputs):
    def forward():
        fn(*inputs)

    def forward_backward():
        fn(*inputs).backward()

    return forward, forward_backward


def main(out_dir: str = "generated", repeats: str = "15") -> None:
    torch.set_num_threads(1)
    out = Path(out_dir)
    print("| example | strategy | forward µs: generated / composed / native | forward+backward µs: generated / composed / native |")
    print("|---|---|---|---|")
    for path in sorted(out.glob("*.py")):
        if path.name == "__init__.py":
            continue
        module = load(path)
        tests = load(out / "tests" / f"test_{path.stem}.py")
        inputs = [torch.tensor(0.5, requires_grad=True) for _ in tests.DOMAIN]
        candidates = {"generated": getattr(module, path.stem), "composed": tests.composed}
        if getattr(tests, "NATIVE", None):
            candidates["native"] = functools.reduce(getattr, tests.NATIVE.split(".")[1:], torch)
        samples = {(name, kind): [] for name in candidates for kind in (0, 1)}
        for _ in range(int(repeats)):
            for name, fn in candidates.items():
                for kind, work in enumerate(workloads(functools.partial(fn, **tests.PARAMS), inputs)):
                    samples[(name, kind)].append(per_call_us(work))
        cells = []
        for kind in (0, 1):
            cells.append(" / ".join(
                f"{statistics.median(samples[(name, kind)]):.1f}" if name in candidates else "-"
                for name in ("generated", "composed", "native")))
        print(f"| {path.stem} | {module.STRATEGY} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
