"""Measure the op weights of codegen/plan/cost.py: one kernel's time relative to a product of two tensors.

    python tools/op_weights.py [--size 1048576] [--fused]

CPU, one thread, float32; the best of five timings of 30 calls each. Compare the printed ratios
with the language's functions' ``weight`` (forward) in codegen/language/registry.py, and with
INTERNAL_WEIGHTS and the constants in codegen/plan/cost.py. With ``--fused``, each function is
compiled (torch.compile, inductor) into a kernel ``op(x) * 1.5`` and what it adds to the compiled
``x * 1.5`` is printed: compare with the registry's ``fused_weight`` and FUSED_INTERNAL_WEIGHTS.
"""

from __future__ import annotations

import argparse
import time

import torch

OPS = {
    "mul": lambda x, y: x * y, "add": lambda x, y: x + y, "scalar mul": lambda x, y: x * 3.0,
    "1 - x": lambda x, y: 1 - x, "x**2": lambda x, y: x**2, "x**3": lambda x, y: x**3, "1/x": lambda x, y: 1 / x,
    "x**6": lambda x, y: x**6, "x**-7": lambda x, y: x**-7, "sqrt": lambda x, y: torch.sqrt(x),
    "exp": lambda x, y: torch.exp(x), "log": lambda x, y: torch.log(x), "log1p": lambda x, y: torch.log1p(x),
    "expm1": lambda x, y: torch.expm1(x), "tanh": lambda x, y: torch.tanh(x), "sigmoid": lambda x, y: torch.sigmoid(x),
    "softplus": lambda x, y: torch.nn.functional.softplus(x), "erf": lambda x, y: torch.erf(x),
    "sin": lambda x, y: torch.sin(x), "sinh": lambda x, y: torch.sinh(x), "cosh": lambda x, y: torch.cosh(x),
    "atan": lambda x, y: torch.atan(x), "atan2": lambda x, y: torch.atan2(x, y), "asinh": lambda x, y: torch.asinh(x),
    "hypot": lambda x, y: torch.hypot(x, y), "logaddexp": lambda x, y: torch.logaddexp(x, y),
    # branches (branches.py), on a random mask (x > y holds for half the elements, in no order):
    # torch.where's CPU kernel branches per element, so it pays a misprediction on every other one
    "x > y": lambda x, y: x > y, "x > 1": lambda x, y: x > 1.0, "where": lambda x, y: torch.where(x > y, x, y),
    "x * mask": lambda x, y: x * _MASK, "mask.to": lambda x, y: _MASK.to(x.dtype), "clamp": lambda x, y: x.clamp(max=1.0),
    "mask & mask": lambda x, y: _MASK & _MASK,
}
_MASK = None  # x > y of the inputs, set in main


def best_seconds(op, x, y, calls: int = 30) -> float:
    op(x, y)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            op(x, y)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def compiled(op):
    torch._dynamo.reset()  # each op its own compilation: one code object, many ops
    return torch.compile(lambda x, y: op(x, y) * 1.5, dynamic=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2**20)
    parser.add_argument("--fused", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    x, y = torch.rand(args.size) + 0.5, torch.rand(args.size) + 0.5
    global _MASK
    _MASK = x > y
    unit = best_seconds(OPS["mul"], x, y)
    if args.fused:
        traffic = best_seconds(compiled(lambda x, y: x), x, y)
        for name, op in OPS.items():
            print(f"{name:12s} {(best_seconds(compiled(op), x, y) - traffic) / unit:5.2f}")
        return
    for name, op in OPS.items():
        print(f"{name:12s} {best_seconds(op, x, y) / unit:5.2f}")


if __name__ == "__main__":
    main()
