"""The measurements: time (median of repeats), aten ops dispatched, kernels, bytes saved for
backward and autograd nodes, per subject and workload.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .config import MIN_SAMPLE_SECONDS, Config
from .subjects import Subject
from .workloads import Inputs, _as_tuple, derivatives

# aten ops that run no kernel (views, detach, ...), left out of the op counts; `is_view` catches the rest
NO_KERNEL = frozenset({
    "view", "_unsafe_view", "expand", "detach", "alias", "t", "transpose", "permute", "unsqueeze", "squeeze",
    "as_strided", "reshape", "_reshape_alias", "slice", "select", "unbind", "lift_fresh",
})


# --------------------------------------------------------------------------------------------
# measures


class OpCounter(TorchDispatchMode):
    """Counts the aten ops that run a kernel: views, detach and other no-kernel ops are left out."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in NO_KERNEL and not func.is_view:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def count(self) -> int:
        return sum(self.ops.values())


def count_ops(work: Callable[[], object]) -> int:
    with OpCounter() as counter:
        work()
    return counter.count


COMPILED_GRAPH = "## Call CompiledFxGraph"


def count_kernels_profiled(work: Callable[[], object]) -> int:
    """Kernel ops of ``work`` where some of it runs compiled: each call of a compiled graph counts
    one (an elementwise graph is one fused loop), and each aten op outside them as ``OpCounter``
    counts it. A dispatch mode cannot count them: under one, torch.compile runs eagerly."""
    from torch.profiler import ProfilerActivity, profile

    with _stderr_silenced(), profile(activities=[ProfilerActivity.CPU]) as profiler:
        work()
    return sum(1 for event in profiler.events() if _counted_event(event))


@contextlib.contextmanager
def _stderr_silenced():
    """File descriptor 2 sent to /dev/null: the profiler's C++ side logs each start and stop there."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _counted_event(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(("aten::", COMPILED_GRAPH)):
            return False  # inside an op or a compiled graph already counted
        parent = parent.cpu_parent
    if event.name.startswith(COMPILED_GRAPH):
        return True
    if not event.name.startswith("aten::"):
        return False
    name = event.name.removeprefix("aten::")
    packet = getattr(torch.ops.aten, name, None)
    views = packet is not None and any(getattr(packet, o).is_view for o in packet.overloads())
    return name not in NO_KERNEL and not views


def saved_bytes(action: Callable[[], object], exclude: set[int] = frozenset()):
    """(bytes, result): the unique storages autograd saves while ``action`` runs, by data pointer,
    leaving out the storages in ``exclude`` (the inputs' and the cotangents')."""
    from ...build.memory import saved_storages

    storages, result = saved_storages(action)
    return sum(n for ptr, n in storages.items() if ptr and ptr not in exclude), result


def graph_nodes(tensors) -> int:
    """Unique autograd nodes reachable from the tensors' ``grad_fn`` (AccumulateGrad included)."""
    stack = [t.grad_fn for t in tensors if t is not None and t.grad_fn is not None]
    seen = set()
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(child for child, _ in node.next_functions if child is not None)
    return len(seen)


def graph_measures(fn: Callable, inputs: Inputs) -> dict[str, tuple[int, int]]:
    """Workload -> (bytes saved, autograd nodes): W2, the forward graph (what forward saves);
    W3, the graph of the first-order gradients taken with create_graph (forward and first backward)."""
    exclude = inputs.storages()
    forward_bytes, value = saved_bytes(lambda: _as_tuple(fn(*inputs.tensors)), exclude)
    first_bytes, grads = saved_bytes(lambda: derivatives(fn, inputs, 1, create_graph_last=True), exclude)
    return {"W2": (forward_bytes, graph_nodes(value)), "W3": (first_bytes, graph_nodes(grads))}


def clock(work: Callable[[], object], loops: int) -> float:
    start = time.perf_counter()
    for _ in range(loops):
        work()
    return (time.perf_counter() - start) / loops


def median_times(works: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Seconds per call of each work: the median of ``repeats`` samples, the works interleaved within
    each repeat (in a rotating order), after a warm-up call that also sets how many calls a sample
    takes (enough for ``MIN_SAMPLE_SECONDS``)."""
    loops = {label: _loops_for(work) for label, work in works.items()}
    labels = list(works)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    for repeat in range(repeats):
        shift = repeat % len(labels)
        for label in labels[shift:] + labels[:shift]:
            samples[label].append(clock(works[label], loops[label]))
    return {label: statistics.median(values) for label, values in samples.items()}


def _loops_for(work: Callable[[], object]) -> int:
    work()  # warm-up
    # the fastest of three calls: one call that another process preempted would set far too few loops
    fastest = math.inf
    for _ in range(3):
        fastest = min(fastest, clock(work, 1))
        if fastest >= MIN_SAMPLE_SECONDS:
            return 1
    return max(1, math.ceil(MIN_SAMPLE_SECONDS / max(fastest, 1e-9)))


def memory_pass_seconds(size: int, dtype: torch.dtype, repeats: int) -> float:
    """One pass over memory for scale: ``torch.add(x, 1.0, out=buf)`` on ``size`` elements."""
    x = torch.rand(size).to(dtype)
    buf = torch.empty_like(x)
    return median_times({"pass": lambda: torch.add(x, 1.0, out=buf)}, repeats)["pass"]


# --------------------------------------------------------------------------------------------
# running


@dataclass(frozen=True)
class Row:
    """One (spec, workload, candidate)."""

    spec: str
    workload: str
    candidate: str
    note: str
    above_order: bool
    seconds: float
    ratio: float  # to the composed expression
    passes: float  # seconds / one memory pass
    ops: int
    saved_bytes: int | None = None  # W2 and W3 rows only
    nodes: int | None = None  # W2 and W3 rows only


@dataclass
class Results:
    config: Config
    specs_path: Path
    pass_seconds: float
    subjects: list[Subject] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
