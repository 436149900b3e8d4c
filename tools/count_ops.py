"""Count the aten ops each generated example dispatches: forward, first and second order.

Usage: python tools/count_ops.py [generated]   (prints a markdown table)

Counted with a TorchDispatchMode; views, detach and other no-kernel ops are left out, so the
figure is the number of kernels that run. The composed expression (autograd through the formula,
as in the generated tests) and the native op, where the spec names one, are measured alike.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

NO_KERNEL = {"view", "_unsafe_view", "expand", "detach", "alias", "t", "transpose", "permute", "unsqueeze",
             "squeeze", "as_strided", "reshape", "_reshape_alias", "slice", "select", "unbind", "lift_fresh"}


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in NO_KERNEL:
            self.count += 1
        return func(*args, **(kwargs or {}))


def workloads(fn, inputs):
    def forward():
        with torch.no_grad():
            fn(*inputs)

    def first():
        out = fn(*inputs)
        torch.autograd.grad(out, inputs, torch.ones_like(out))

    def second():
        out = fn(*inputs)
        grads = torch.autograd.grad(out, inputs, torch.ones_like(out), create_graph=True)
        torch.autograd.grad(grads, inputs, [torch.ones_like(g) for g in grads], allow_unused=True)

    return {"forward": forward, "first": first, "second": second}


def count(work) -> int:
    with OpCounter() as counter:
        work()
    return counter.count


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"count_ops_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(out_dir: str = "generated") -> None:
    out = Path(out_dir)
    print("| example | strategy | forward | first order | second order | composed (f/1/2) | native (f/1/2) |")
    print("|---|---|---|---|---|---|---|")
    for path in sorted(out.glob("*.py")):
        if path.name == "__init__.py":
            continue
        module = load(path)
        tests = load(out / "tests" / f"test_{path.stem}.py")
        params = tests.PARAMS
        inputs = [x.detach().float().requires_grad_() for x in tests.make_inputs(0)]
        ours = {k: count(w) for k, w in workloads(functools.partial(getattr(module, path.stem), **params), inputs).items()}
        composed = {k: count(w) for k, w in workloads(functools.partial(tests.composed, **params), inputs).items()}
        native = "-"
        if getattr(tests, "NATIVE", None):
            fn = functools.reduce(getattr, tests.NATIVE.split(".")[1:], torch)
            n = {k: count(w) for k, w in workloads(functools.partial(fn, **params), inputs).items()}
            native = "/".join(str(v) for v in n.values())
        print(f"| {path.stem} | {module.STRATEGY} | {ours['forward']} | {ours['first']} | {ours['second']} "
              f"| {'/'.join(str(v) for v in composed.values())} | {native} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
