"""``dbgen bench``: time, kernel ops, saved memory and graph size of the generated Functions.

For each spec, the module is generated under every strategy asked for, into a temporary folder,
and imported from there by path (a user's ``generated/`` folder is not needed). Each is compared
with the composed expression (the ``composed`` function of the generated test file, differentiated
by autograd) and with the spec's ``native`` op, on four workloads of inputs of N elements:

- W1: forward alone, under ``torch.no_grad()``;
- W2: the value and the first-order gradients for a random cotangent (``torch.autograd.grad``);
- W3: first-order gradients with ``create_graph=True``, then the gradients of those;
- W4: one level more (third order).

Times are medians of interleaved repeats in one process, after a warm-up. Kernel ops, the bytes
saved for backward and the autograd nodes are deterministic, so they are measured once.

Its parts: ``config`` (the options), ``subjects`` (what is compared, checked against each other),
``workloads`` (W1-W4), ``measure`` (the instruments), ``run`` (the loop) and ``report``.
"""

from .config import COMPOSED, BenchError, Config, make_config
from .measure import (
    OpCounter,
    Results,
    Row,
    count_kernels_profiled,
    count_ops,
    graph_measures,
    graph_nodes,
    median_times,
    saved_bytes,
)
from .report import geometric_mean, summarize, write_plot, write_report
from .run import run
from .subjects import check_native, load_specs, make_subject, resolve_native
from .workloads import derivatives, make_inputs, workload

__all__ = [
    "COMPOSED", "BenchError", "Config", "OpCounter", "Results", "Row", "check_native", "count_kernels_profiled",
    "count_ops", "derivatives", "geometric_mean", "graph_measures", "graph_nodes", "load_specs", "make_config",
    "make_inputs", "make_subject", "median_times", "resolve_native", "run", "saved_bytes", "summarize", "workload",
    "write_plot", "write_report",
]
