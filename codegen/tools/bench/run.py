"""A bench run: each subject measured on each workload, rows printed as they come.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from .config import COMPOSED, BenchError, Config
from .measure import (
    Results,
    Row,
    count_kernels_profiled,
    count_ops,
    graph_measures,
    median_times,
    memory_pass_seconds,
)
from .report import format_text_summary, format_text_table
from .subjects import Subject, load_specs, make_subject
from .workloads import make_inputs, workload


def run(specs_path: Path, config: Config, echo: Callable[[str], None] = print) -> Results:
    """Benchmark every spec under ``specs_path``, printing each spec's rows as they are measured."""
    from ...build.pipeline import external_calls

    specs = []
    for spec in load_specs(specs_path):
        called = external_calls(spec)
        if called:
            echo(f"dbgen: {spec.name} skipped: it calls {', '.join(called)}, computed outside autograd: there "
                 "is no formula in torch ops to time it against")
        else:
            specs.append(spec)
    if not specs:
        raise BenchError("no spec left to time: every one calls external functions")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        with tempfile.TemporaryDirectory(prefix="dbgen-bench-") as tmp:
            subjects = [make_subject(spec, config.strategies, Path(tmp), config.fuse, config.orders, config.torch_dtype)
                        for spec in specs]
            pass_seconds = memory_pass_seconds(config.size, config.torch_dtype, config.repeats)
            results = Results(config, specs_path, pass_seconds)
            echo(format_text_table([], header=True))
            for subject in subjects:
                rows = bench_subject(subject, config, results.pass_seconds)
                results.subjects.append(subject)
                results.rows.extend(rows)
                echo(format_text_table(rows, header=False))
    finally:
        torch.set_num_threads(previous_threads)
    echo("")
    echo(format_text_summary(results))
    return results


def bench_subject(subject: Subject, config: Config, pass_seconds: float) -> list[Row]:
    inputs = make_inputs(subject.spec, config.size, config.torch_dtype)
    measured = [c for c in subject.candidates if c.same_as is None]
    fns = {c.label: functools.partial(c.fn, **subject.params) for c in measured}
    works = {order: {label: workload(fn, inputs, order) for label, fn in fns.items()} for order in config.orders}
    # Timed first: a fused kernel compiled while a dispatch mode or saved-tensor hooks are active is
    # compiled for them and runs eagerly from then on (measured: 3.6 ms -> 15.6 ms for cube, W3).
    seconds = {order: median_times(works[order], config.repeats) for order in config.orders}
    graphs = {label: graph_measures(fn, inputs) for label, fn in fns.items()}
    counter = count_kernels_profiled if config.fuse else count_ops
    ops = {order: {label: counter(work) for label, work in works[order].items()} for order in config.orders}
    rows = []
    for order, name in zip(config.orders, config.workloads):
        for candidate in subject.candidates:
            label = candidate.same_as or candidate.label
            saved, nodes = graphs[label].get(name, (None, None))
            rows.append(Row(
                subject.spec.name, name, candidate.label, candidate.note, order > subject.spec.order,
                seconds[order][label], seconds[order][label] / seconds[order][COMPOSED],
                seconds[order][label] / pass_seconds, ops[order][label], saved, nodes,
            ))
    return rows
