"""What a bench run measures: the workloads, dtypes and sizes (``Config``), read from the options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ...spec import STRATEGIES

WORKLOADS = ("W1", "W2", "W3", "W4")  # W(k+1) takes derivatives of order k
SUMMARY_WORKLOAD = "W3"
COMPOSED, NATIVE = "composed", "native"
DTYPES = ("float32", "float64", "float16", "bfloat16")
MIN_SAMPLE_SECONDS = 0.002  # shorter calls are looped within one sample
SEED = 0


class BenchError(Exception):
    """A problem with bench's arguments or environment: the CLI reports it on one line, exit 2."""


# --------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class Config:
    size: int = 2**20
    orders: tuple[int, ...] = (0, 1, 2, 3)
    strategies: tuple[str, ...] = STRATEGIES
    threads: int = 1
    repeats: int = 10
    dtype: str = "float32"
    report: Path | None = None  # the CLI writes files only where asked (--report, --plot)
    plot: Path | None = None
    fuse: bool = False

    @property
    def workloads(self) -> tuple[str, ...]:
        return tuple(WORKLOADS[k] for k in self.orders)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def command(self, specs: Path | Sequence[Path]) -> str:
        paths = " ".join(Path(p).as_posix() for p in ([specs] if isinstance(specs, (str, Path)) else specs))
        return (
            f"dbgen bench {paths} --size {self.size} --orders {','.join(map(str, self.orders))} "
            f"--strategies {','.join(self.strategies)} --threads {self.threads} --repeats {self.repeats} "
            f"--dtype {self.dtype}" + (" --fuse" if self.fuse else "")
        )


def make_config(size: int, orders: str, strategies: str, threads: int, repeats: int, dtype: str,
                report: Path | None = None, plot: Path | None = None, fuse: bool = False) -> Config:
    """Validate the command-line values; a wrong one raises ``BenchError``."""
    for name, value in (("--size", size), ("--threads", threads), ("--repeats", repeats)):
        if value < 1:
            raise BenchError(f"{name} must be a positive whole number, not {value}")
    if dtype not in DTYPES:
        raise BenchError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return Config(size, _parse_orders(orders), _parse_strategies(strategies), threads, repeats, dtype, report, plot,
                  fuse)


def _parse_orders(text: str) -> tuple[int, ...]:
    try:
        orders = {int(item) for item in _items(text)}
    except ValueError:
        orders = set()
    if not orders or not orders <= set(range(len(WORKLOADS))):
        raise BenchError(f"--orders takes derivative orders 0 to 3 (0 = W1, ..., 3 = W4), comma-separated, not {text!r}")
    return tuple(sorted(orders))


def _parse_strategies(text: str) -> tuple[str, ...]:
    chosen = _items(text)
    unknown = [s for s in chosen if s not in STRATEGIES]
    if unknown or not chosen:
        raise BenchError(f"--strategies takes some of {','.join(STRATEGIES)}, not {text!r}")
    return tuple(s for s in STRATEGIES if s in chosen)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]
