"""A second-order step through each spec's C++ op against its Python Functions and the composed formula.

    python tools/cpp_calls.py [--specs lennard_jones,mish] [--sizes 64,4096,65536]

Each spec of specs/ is built with ``cpp: true`` into a temporary folder and its op compiled (about
20 s each, cached after). The step: the value's gradient with create_graph=True, then the gradient
of its squares (a force-matching loss's shape), float32, one thread, the median of nine samples,
the three interleaved (``dbgen bench``'s clock);
and the ATen ops that run a kernel in one step (``dbgen bench``'s deterministic count). Ratios only: timings on a shared
machine are noisy. Run from the repository root.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codegen.build import pipeline, write
from codegen.tools.bench.measure import count_ops, median_times


def step(fn: Callable, x: torch.Tensor) -> torch.Tensor:
    (grad,) = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(grad.pow(2).sum(), x)
    return second


def measure(variants: dict[str, Callable], x: torch.Tensor) -> tuple[dict[str, float], dict[str, int]]:
    """Each variant's step: microseconds (the median of nine samples, interleaved) and kernel ops."""
    steps = {label: functools.partial(step, fn, x) for label, fn in variants.items()}
    times = median_times(steps, repeats=9)
    return {label: seconds * 1e6 for label, seconds in times.items()}, {label: count_ops(s) for label, s in steps.items()}


def built(name: str, folder: Path):
    """specs/NAME.yaml built with cpp: true (one input, params at their defaults) and imported."""
    spec = yaml.safe_load((ROOT / "specs" / f"{name}.yaml").read_text())
    spec.update(name=f"{name}_cpp", cpp=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    write.write_files(folder / "out", pipeline.generate(path, root=folder))
    module_spec = importlib.util.spec_from_file_location(f"{name}_cpp", folder / "out" / f"{name}_cpp.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module, spec


def _python_functions(module, function: Callable) -> Callable:
    """``function`` with the module's op set aside for the call: its Python Functions."""

    def call(x):
        op, module._OP = module._OP, None
        try:
            return function(x)
        finally:
            module._OP = op

    return call


def _composed(test_file: Path) -> Callable:
    """The generated tests' ``composed``: the formula in torch ops, which autograd differentiates."""
    tree = ast.parse(test_file.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "composed")
    namespace = {"torch": torch, "math": math}
    exec(compile(ast.Module([node], []), str(test_file), "exec"), namespace)  # noqa: S102 - dbgen's own output
    return namespace["composed"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", default="lennard_jones,mish")
    parser.add_argument("--sizes", default="64,4096,65536")
    options = parser.parse_args()
    torch.set_num_threads(1)
    print("spec, size: C++ op / Python Functions / composed (us a step) | kernel ops a step (C++, Python, composed)")
    with tempfile.TemporaryDirectory() as folder:
        for name in options.specs.split(","):
            module, spec = built(name, Path(folder))
            (lo, hi) = spec.get("domain", {}).get(spec["inputs"][0], (-2.0, 2.0))
            function = getattr(module, spec["name"])
            python = _python_functions(module, function)
            composed = _composed(Path(folder) / "out" / "tests" / f"test_{spec['name']}.py")
            for size in map(int, options.sizes.split(",")):
                x = (lo + (hi - lo) * torch.rand(size)).requires_grad_()
                times, ops = measure({"cpp": function, "python": python, "composed": composed}, x)
                print(f"{name}, {size}: {times['cpp']:.0f} / {times['python']:.0f} / {times['composed']:.0f} "
                      f"(C++ {times['cpp'] / times['python']:.2f}x Python, {times['cpp'] / times['composed']:.2f}x "
                      f"composed) | {ops['cpp']}, {ops['python']}, {ops['composed']}")


if __name__ == "__main__":
    main()
