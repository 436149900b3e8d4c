"""The accuracy report: a table per spec as text or JSON, and a plot of bits lost across the domain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .error import BOUND_BITS, Report, _point_text

# -- what a person reads --------------------------------------------------------------------------


def report_text(report: Report) -> str:
    """The per-order table of one report: dbgen's bits against autograd's, the worst point."""
    lines = [(f"{report.name}: {report.path} ({report.points} points per dtype; error in bits against "
              f"mpmath, mean / max; excess: bits lost beyond the point's conditioning)")]
    header = f"  {'order':>5}  {'dtype':7}  {'dbgen mean/max':>14}  {'excess':>6}  {'autograd mean/max':>17}  {'excess':>6}  worst"
    lines.append(header)
    theirs = {(f.dtype, f.order): f for f in report.autograd or ()}
    for f in report.dbgen:
        other = theirs.get((f.dtype, f.order))
        other_text = f"{other.mean_bits:7.2f} / {other.max_bits:5.1f}  {other.max_excess:6.1f}" if other else f"{'n/a':>17}  {'':>6}"
        flag = "  OVER" if f.max_excess > report.bound(f.dtype) else ""
        worst = f"{f.worst_partial} at {_point_text(f.worst)}" if f.worst is not None else "-"
        lines.append(f"  {f.order:>5}  {f.dtype:7}  {f.mean_bits:6.2f} / {f.max_bits:5.1f}  {f.max_excess:6.1f}  "
                     f"{other_text}  {worst}{flag}")
    if report.limited_by:
        lines.append("  limited by torch's own error: " + "; ".join(report.limited_by))
    over = report.over_bound()
    bound = ", ".join(f"{report.bound(dtype):g} bits in {dtype}" for dtype in BOUND_BITS)
    if report.scipy_bits:
        bound += f" (float64's includes SciPy's own error, {report.scipy_bits:g} bits)"
    lines.append(f"  bound: {bound}: " + ("within it at every order" if not over else
                                          f"over it at order(s) {', '.join(sorted({str(f.order) for f in over}))}"))
    return "\n".join(lines) + "\n"


def report_json(reports: Sequence[Report]) -> list[dict]:
    """The reports as JSON-ready data (the figures only, not the samples)."""
    def rows(figs):
        return None if figs is None else [dataclasses.asdict(f) for f in figs]

    return [{"name": r.name, "path": r.path, "points": r.points, "bound_bits": {dtype: r.bound(dtype) for dtype in BOUND_BITS},
             "within_bound": not r.over_bound(), "dbgen": rows(r.dbgen), "autograd": rows(r.autograd)}
            for r in reports]


def write_plot(reports: Sequence[Report], path) -> str | None:
    """Error in bits against the (first) input, per order, dbgen and autograd, as Herbie draws it;
    one row of panels per spec, one column per dtype. Returns why it was skipped, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib)"
    dtypes = sorted({s[0] for r in reports for s in r.samples}, reverse=True) or ["float64"]
    fig, axes = plt.subplots(len(reports), len(dtypes), figsize=(6 * len(dtypes), 3.2 * len(reports)), squeeze=False)
    for row, report in zip(axes, reports):
        for ax, dtype in zip(row, dtypes):
            _panel(ax, report, dtype)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def _panel(ax, report: Report, dtype: str) -> None:
    samples = [s for s in report.samples if s[0] == dtype]
    orders = sorted({s[3] for s in samples})
    for order in orders:
        xs = [s[1][0] for s in samples if s[3] == order]
        ax.scatter(xs, [s[4] for s in samples if s[3] == order], s=6, label=f"dbgen order {order}")
        theirs = [(s[1][0], s[5]) for s in samples if s[3] == order and s[5] is not None]
        if theirs:
            ax.scatter(*zip(*theirs), s=6, marker="x", alpha=0.5, label=f"autograd order {order}")
    ax.axhline(BOUND_BITS[dtype], color="grey", linewidth=0.8, linestyle="--")
    ax.set_xscale("symlog", linthresh=1e-3)
    ax.set_title(f"{report.name} ({dtype})")
    ax.set_xlabel("input (first)")
    ax.set_ylabel("bits of error")
    ax.legend(fontsize=6, ncol=2)
