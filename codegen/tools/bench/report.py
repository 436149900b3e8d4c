"""The bench report: ratios summarised by geometric mean, as text, Markdown and a plot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ... import __version__
from .config import COMPOSED, NATIVE, SUMMARY_WORKLOAD, WORKLOADS
from .measure import Results, Row
from .subjects import Subject

# --------------------------------------------------------------------------------------------
# summaries


@dataclass(frozen=True)
class Summary:
    candidate: str
    specs: int
    time_ratio: float
    op_ratio: float
    native_specs: int = 0  # specs that name a native op, over which the next two are taken
    time_vs_native: float | None = None
    ops_vs_native: float | None = None


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(rows: Sequence[Row], workload_name: str = SUMMARY_WORKLOAD) -> list[Summary]:
    """Per candidate, geometric means over specs at one workload: time and kernel ops relative to the
    composed expression, and (over the specs that name one) relative to the native op."""
    at = [r for r in rows if r.workload == workload_name]
    by_spec: dict[str, dict[str, Row]] = {}
    for r in at:
        by_spec.setdefault(r.spec, {})[r.candidate] = r
    summaries = []
    for candidate in dict.fromkeys(r.candidate for r in at):
        mine = [(cells[candidate], cells) for cells in by_spec.values() if candidate in cells]
        with_native = [(r, cells[NATIVE]) for r, cells in mine if NATIVE in cells]
        summaries.append(Summary(
            candidate, len(mine),
            geometric_mean([r.ratio for r, _ in mine]),
            geometric_mean([_ratio(r.ops, cells[COMPOSED].ops) for r, cells in mine]),
            len(with_native),
            geometric_mean([r.seconds / n.seconds for r, n in with_native]) if with_native else None,
            geometric_mean([_ratio(r.ops, n.ops) for r, n in with_native]) if with_native else None,
        ))
    return summaries


def _ratio(a: int, b: int) -> float:
    return a / b if b else float("nan") if a else 1.0


# --------------------------------------------------------------------------------------------
# tables, report, plot

ROW_COLUMNS = ("spec", "workload", "candidate", "time ms", "passes", "× composed", "kernel ops", "saved MiB", "nodes")
SUMMARY_COLUMNS = ("candidate", "specs", "time × composed", "ops × composed", "specs with native",
                   "time × native", "ops × native")


def row_cells(row: Row) -> list[str]:
    workload_name = row.workload + ("*" if row.above_order else "")
    candidate = f"{row.candidate} ({row.note})" if row.note else row.candidate
    return [
        row.spec, workload_name, candidate, f"{row.seconds * 1e3:.3f}", f"{row.passes:.1f}", f"{row.ratio:.2f}",
        str(row.ops), _optional(row.saved_bytes, lambda b: f"{b / 2**20:.3g}"), _optional(row.nodes, str),
    ]


def summary_cells(s: Summary) -> list[str]:
    return [
        s.candidate, str(s.specs), f"{s.time_ratio:.2f}", f"{s.op_ratio:.2f}", str(s.native_specs),
        _optional(s.time_vs_native, lambda v: f"{v:.2f}"), _optional(s.ops_vs_native, lambda v: f"{v:.2f}"),
    ]


def _optional(value, fmt) -> str:
    return "-" if value is None else fmt(value)


def format_text_table(rows: Sequence[Row], header: bool = True) -> str:
    widths = (14, 8, 36, 10, 8, 10, 10, 9, 6)
    lines = [_text_line(ROW_COLUMNS, widths)] if header else []
    lines += [_text_line(row_cells(r), widths) for r in rows]
    return "\n".join(lines)


def format_text_summary(results: Results) -> str:
    summaries = summarize(results.rows)
    if not summaries:
        return f"(no geometric means: {SUMMARY_WORKLOAD} was not run)"
    widths = (14, 6, 16, 15, 18, 14, 13)
    lines = [f"geometric means over specs at {SUMMARY_WORKLOAD}:", _text_line(SUMMARY_COLUMNS, widths)]
    return "\n".join(lines + [_text_line(summary_cells(s), widths) for s in summaries])


def _text_line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()


def markdown_table(columns: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    return "\n".join(out + ["| " + " | ".join(cells) + " |" for cells in lines])


def report_markdown(results: Results) -> str:
    config = results.config
    parts = [
        "# dbgen bench",
        f"`{config.command(results.specs_path)}`",
        markdown_table(("setting", "value"), _settings(results)),
        _WORKLOAD_TEXT,
        f"## Geometric means over specs at {SUMMARY_WORKLOAD}",
        _summary_section(results.rows),
        f"## {SUMMARY_WORKLOAD} at a glance: time × composed (kernel ops × composed)",
        _glance_table(results),
        "## Per spec",
    ]
    for subject in results.subjects:
        spec = subject.spec
        native = f"; native `{spec.native}`" if spec.native else ""
        parts.append(f"### {spec.name} (order {spec.order}{native})")
        rows = [r for r in results.rows if r.spec == spec.name]
        parts.append(markdown_table(ROW_COLUMNS[1:], [row_cells(r)[1:] for r in rows]))
    return "\n\n".join(parts) + "\n"


def _settings(results: Results) -> list[tuple[str, str]]:
    config = results.config
    return [
        ("dbgen", __version__),
        ("torch", torch.__version__),
        ("threads", str(config.threads)),
        ("size", f"{config.size} elements per input"),
        ("dtype", config.dtype),
        ("repeats", f"{config.repeats} (median of interleaved repeats in one process, after a warm-up)"),
        ("memory pass", f"{results.pass_seconds * 1e3:.4f} ms: `torch.add(x, 1.0, out=buf)`, same size and dtype"),
        ("workloads", ", ".join(config.workloads)),
        ("strategies", ", ".join(config.strategies)),
        ("fused", "yes: every level compiled into kernels (build --fuse)" if config.fuse else "no (eager)"),
    ]


_WORKLOAD_TEXT = """\
Workloads, on inputs of `size` elements drawn from each spec's domain, params at their defaults:
W1 forward alone (`torch.no_grad()`); W2 the value and the first-order gradients for a random
cotangent (`torch.autograd.grad`); W3 first-order gradients with `create_graph=True`, then the
gradients of those for random cotangents (second order); W4 one level more (third order). A `*`
marks a workload above the spec's `order`: the generated code is still correct there (its last
level is written in differentiable torch ops), but not with explicit formulas.

Columns: `time ms` is the median time of one call; `passes` is that time in memory passes (the
time of the memory pass above); `× composed` is the time relative to autograd through the composed
expression; `kernel ops` counts the aten ops dispatched that run a kernel (views and detach left
out); `saved MiB` is the memory autograd saves, unique storages other than the inputs' and the
cotangents' (W2: what forward saves; W3: what forward and the first backward with
`create_graph=True` save together); `nodes` counts the autograd nodes reachable from the outputs
(W2: the forward graph; W3: the graph of the first-order gradients). `auto (= X)` has the code of
strategy X and shares its measures."""


def _summary_section(rows: Sequence[Row]) -> str:
    summaries = summarize(rows)
    if not summaries:
        return f"({SUMMARY_WORKLOAD} was not run.)"
    return markdown_table(SUMMARY_COLUMNS, [summary_cells(s) for s in summaries])


def _glance_table(results: Results) -> str:
    at = [r for r in results.rows if r.workload == SUMMARY_WORKLOAD]
    if not at:
        return f"({SUMMARY_WORKLOAD} was not run.)"
    candidates = list(dict.fromkeys(r.candidate for r in at if r.candidate != COMPOSED))
    lines = []
    for subject in results.subjects:
        cells = {r.candidate: r for r in at if r.spec == subject.spec.name}
        composed_ops = cells[COMPOSED].ops
        lines.append([subject.spec.name, str(subject.spec.order)] + [
            f"{cells[c].ratio:.2f} ({_ratio(cells[c].ops, composed_ops):.2f})" if c in cells else "-"
            for c in candidates
        ])
    return markdown_table(("spec", "order", *candidates), lines)


def write_report(results: Results, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_markdown(results), encoding="utf-8")


def write_plot(results: Results, path: Path) -> str | None:
    """A panel per spec: time relative to composed by workload, a line per strategy and native.
    Returns why the plot was skipped, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib)"
    subjects = results.subjects
    columns = min(4, len(subjects))
    nrows = math.ceil(len(subjects) / columns)
    fig, axes = plt.subplots(nrows, columns, figsize=(4 * columns, 3.2 * nrows), squeeze=False)
    for ax, subject in zip(axes.flat, subjects):
        _plot_panel(ax, subject, results)
    for ax in list(axes.flat)[len(subjects):]:
        ax.set_visible(False)
    legend = {}
    for ax in axes.flat:
        legend.update(zip(*reversed(ax.get_legend_handles_labels())))
    fig.legend(legend.values(), legend.keys(), loc="center right", frameon=False)
    config = results.config
    fig.suptitle(f"time relative to the composed expression\n{config.size} elements, {config.dtype}, "
                 f"{config.threads} thread(s); grey: workloads above the spec's order", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1 - 1.6 / fig.get_figwidth(), 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


# one colour per strategy in every panel; auto is a wide grey band under the strategy it resolves to
_PLOT_STYLES = {
    "auto": {"color": "0.5", "linewidth": 7, "alpha": 0.3, "zorder": 1},
    "save_inputs": {"color": "C0"},
    "save_outputs": {"color": "C1"},
    "intermediates": {"color": "C2"},
    "nested": {"color": "C3"},
    NATIVE: {"color": "black", "linestyle": "--"},
}


_RATIO_TICKS = [m * 10.0**e for e in (-2, -1, 0, 1, 2) for m in (1, 1.5, 2, 3, 5, 7)]


def _plot_panel(ax, subject: Subject, results: Results) -> None:
    from matplotlib import ticker

    workloads = results.config.workloads
    rows = {(r.workload, r.candidate): r for r in results.rows if r.spec == subject.spec.name}
    ax.axhline(1.0, color="black", linewidth=1, label=COMPOSED)
    for candidate in subject.candidates:
        if candidate.label == COMPOSED:
            continue
        ratios = [rows[(w, candidate.label)].ratio for w in workloads]
        ax.plot(workloads, ratios, marker="o", label=candidate.label, **_PLOT_STYLES.get(candidate.label, {}))
    above = [w for w in workloads if WORKLOADS.index(w) > subject.spec.order]
    if above:
        ax.axvspan(workloads.index(above[0]) - 0.5, len(workloads) - 0.5, color="0.9", zorder=0)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(ticker.FixedLocator(_RATIO_TICKS))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_locator(ticker.NullLocator())
    ax.set_title(f"{subject.spec.name} (order {subject.spec.order})")
    ax.grid(True, which="both", alpha=0.3)
