"""End-to-end workloads: dbgen's Functions in the training steps users run.

    python -m benchmarks [--workloads pinn,force,wgan,sweep] [--functions mish,silu] [--dtypes float32]
                         [--threads 1] [--repeats 7] [--no-fuse] [--quick]
                         [--report docs/workloads.md] [--plot docs/workloads.png]

Each configuration (workload, function, size, dtype, threads) is built once and stepped with every
variant of its function (benchmarks/functions.py): PyTorch's native op, the composed formula,
dbgen's eager module and its fused one. Per variant: the median time of interleaved steps, the
bytes autograd saves for backward during a step, the step's peak memory; and a check that every
variant gives the composed formula's loss and gradients. The report compares dbgen with the
better of native and composed and says which of the targets (TARGETS) hold.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from codegen.tools import bench

from . import functions, measure, workloads
from .functions import COMPOSED, DBGEN, FUSE, NATIVE

FULL = {
    "pinn": (("tanh", "sin", "mish", "silu", "gelu_tanh", "adaptive_tanh"), (1000, 10000)),
    "force": (("lj", "morse"), (512, 1728)),
    "wgan": (("silu", "mish", "tanh"), (256, 2048)),
    "sh": (("spherical_harmonics",), (1000, 10000, 100000)),
    "sweep": (("mish", "silu", "tanh", "spherical_harmonics"), tuple(2**k for k in range(8, 23, 2))),
}
QUICK = {
    "pinn": (("tanh", "mish"), (200,)),
    "force": (("lj", "morse"), (64,)),
    "wgan": (("silu",), (64,)),
    "sh": (("spherical_harmonics",), (64,)),
    "sweep": (("mish",), (2**8, 2**12)),
}


@dataclass
class Row:
    case: str
    workload: str
    function: str
    size: int
    dtype: str
    threads: int
    strategy: str
    measured: dict[str, measure.Measured]
    disagreement: float

    def ratio(self, variant: str, field: str = "seconds") -> float:
        """The variant's figure over the better of native and composed."""
        rivals = [getattr(self.measured[v], field) for v in (NATIVE, COMPOSED) if v in self.measured]
        best = min(rivals)
        return getattr(self.measured[variant], field) / best if best else float("nan")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    matrix = QUICK if args.quick else FULL
    chosen = [w for w in args.workloads.split(",") if w]
    variants = tuple(v for v in functions.VARIANTS if v != FUSE or args.fuse)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        families = {}
        for threads in _ints(args.threads):
            torch.set_num_threads(threads or _default_threads())
            for dtype in args.dtypes.split(","):
                for workload in chosen:
                    names, sizes = matrix[workload]
                    for name in [n for n in names if not args.functions or n in args.functions.split(",")]:
                        if name not in families:
                            families[name] = functions.load_family(name, Path(tmp) / name, variants)
                        for size in sizes:
                            rows.append(run_case(workload, families[name], size, getattr(torch, dtype),
                                                 torch.get_num_threads(), args.repeats))
                            print(_line(rows[-1]), flush=True)
    command = " ".join(["python -m benchmarks", *(argv if argv is not None else sys.argv[1:])])
    report = render_report(rows, command, Path(args.plot).name if args.plot else "")
    if args.report:
        Path(args.report).write_text(report, encoding="utf-8")
    if args.plot:
        plot(rows, Path(args.plot))
    bad = [r for r in rows if r.disagreement > measure.tolerance(getattr(torch, r.dtype))]
    for r in bad:
        print(f"DISAGREE {r.case} {r.dtype}: {r.disagreement:.2e}", file=sys.stderr)
    return 1 if bad else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="pinn,force,wgan,sh,sweep")
    parser.add_argument("--functions", default="", help="only these functions (comma-separated)")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--threads", default="1", help="comma-separated; 0 = torch's default")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--fuse", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--quick", action="store_true", help="a few small configurations (the tests')")
    parser.add_argument("--report", default="")
    parser.add_argument("--plot", default="")
    return parser


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t]


def _default_threads() -> int:
    import os

    return len(os.sched_getaffinity(0))


def run_case(workload: str, family: functions.Family, size: int, dtype: torch.dtype, threads: int,
             repeats: int) -> Row:
    case = workloads.WORKLOADS[workload](family.name, size, dtype)
    steps = {label: (lambda fn=fn: case.step(fn)) for label, fn in family.variants.items()}
    reference = steps[COMPOSED]()
    disagreement = max(measure.disagreement(step(), reference) for step in steps.values())
    seconds = bench.median_times(steps, repeats)  # dbgen bench's clock: interleaved, after a warm-up
    measured = {
        label: measure.Measured(seconds[label], measure.saved_bytes(step, case.tensors), measure.peak_bytes(step))
        for label, step in steps.items()
    }
    return Row(case.label, workload, family.name, size, str(dtype).removeprefix("torch."), threads, family.strategy,
               measured, disagreement)


def _line(row: Row) -> str:
    cells = [f"{v} {m.seconds * 1e3:8.2f} ms" for v, m in row.measured.items()]
    return f"{row.case:28s} {row.dtype} t={row.threads}  " + "  ".join(cells) + (
        f"  dbgen x{row.ratio(DBGEN):.2f}  diff {row.disagreement:.1e}")


# --------------------------------------------------------------------------------------------
# report


def render_report(rows: list[Row], command: str, plot_name: str = "") -> str:
    lines = [
        "# Workloads: dbgen in training steps",
        "",
        "The training steps users differentiate to second and third order, each run with PyTorch's",
        "native op, the composed formula, dbgen's eager module (`auto`) and its fused one (`fuse: true`):",
        "a PINN for Burgers' equation (MLP 2-64-64-64-1, residual with u_x, u_t, u_xx), force matching",
        "with a pair potential whose parameters train, a WGAN-GP critic step, and one W3 of the function",
        "alone at sizes from 2**8 to 2**22 (`benchmarks/workloads.py`). Every variant gives the",
        "composed formula's loss and gradients (max diff, relative).",
        "",
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d')}, torch {torch.__version__}. Times are",
        "medians of interleaved steps; 'x best' is a figure over the better of native and composed;",
        "saved is the bytes autograd keeps for backward during a step, peak the step's most memory held.",
        "",
    ]
    if plot_name:
        lines += [f"![W3 of each function over native, by size]({plot_name})", ""]
    for workload in dict.fromkeys(r.workload for r in rows):
        lines += _workload_table([r for r in rows if r.workload == workload])
    lines += _targets(rows)
    return "\n".join(lines) + "\n"


def _workload_table(rows: list[Row]) -> list[str]:
    header = ["config", "dtype", "threads", "auto", "native ms", "composed ms", "dbgen ms", "dbgen x best",
              "fuse x best", "saved x best", "peak x best", "max diff"]
    lines = [f"## {rows[0].workload}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [f"{r.function} {r.size}", r.dtype, str(r.threads), r.strategy,
                 _ms(r, NATIVE), _ms(r, COMPOSED), _ms(r, DBGEN), f"{r.ratio(DBGEN):.2f}",
                 f"{r.ratio(FUSE):.2f}" if FUSE in r.measured else "-",
                 f"{r.ratio(DBGEN, 'saved_bytes'):.2f}", f"{r.ratio(DBGEN, 'peak_bytes'):.2f}",
                 f"{r.disagreement:.0e}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _ms(row: Row, variant: str) -> str:
    return f"{row.measured[variant].seconds * 1e3:.2f}" if variant in row.measured else "-"


def _targets(rows: list[Row]) -> list[str]:
    """The targets, each with the configurations that miss it."""
    steps = [r for r in rows if r.workload in ("pinn", "force")]
    checks = [
        ("dbgen eager time <= 1.0 x composed and native, every configuration",
         [r for r in rows if r.workload != "sweep" and r.ratio(DBGEN) > 1.0]),
        ("bytes saved for backward <= composed and native, every configuration",
         [r for r in rows if r.ratio(DBGEN, "saved_bytes") > 1.0]),
        ("sweep: W3 at 2**8 elements <= 1.3 x native",
         [r for r in rows if r.workload == "sweep" and r.size <= 2**8 and _vs_native(r) > 1.3]),
        ("sweep: W3 at 2**16 elements and above <= 1.0 x native",
         [r for r in rows if r.workload == "sweep" and r.size >= 2**16 and _vs_native(r) > 1.0]),
        ("fuse never slower than eager",
         [r for r in rows if FUSE in r.measured and r.measured[FUSE].seconds > r.measured[DBGEN].seconds]),
    ]
    mean = bench.geometric_mean([r.ratio(DBGEN) for r in steps]) if steps else math.nan
    lines = ["## Targets", "", "| target | holds | misses |", "|---|---|---|"]
    for text, misses in checks:
        lines.append(f"| {text} | {'yes' if not misses else 'no'} | "
                     f"{', '.join(sorted({f'{r.case} ({r.dtype}, {r.threads} t)' for r in misses})) or '-'} |")
    lines.append(f"| geometric mean over PINN and force <= 0.8 x best | {'yes' if mean <= 0.8 else 'no'} | "
                 f"{mean:.2f} |")
    return lines + [""]


def _vs_native(row: Row) -> float:
    native = row.measured.get(NATIVE) or row.measured[COMPOSED]
    return row.measured[DBGEN].seconds / native.seconds


def plot(rows: list[Row], path: Path) -> None:
    """The sweep's time over native (composed where there is none) by size, one line per variant."""
    try:
        import matplotlib
    except ImportError:
        print("no plot: pip install matplotlib", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = [r for r in rows if r.workload == "sweep"]
    names = list(dict.fromkeys(r.function for r in sweep))
    figure, axes = plt.subplots(1, max(1, len(names)), figsize=(4 * max(1, len(names)), 3.2), squeeze=False)
    for axis, name in zip(axes[0], names):
        mine = [r for r in sweep if r.function == name and r.threads == sweep[0].threads and r.dtype == sweep[0].dtype]
        for variant in (COMPOSED, DBGEN, FUSE):
            if all(variant in r.measured for r in mine):
                base = [(r.measured.get(NATIVE) or r.measured[COMPOSED]).seconds for r in mine]
                axis.plot([r.size for r in mine], [r.measured[variant].seconds / b for r, b in zip(mine, base)],
                          marker="o", label=variant)
        axis.axhline(1.0, color="grey", linewidth=0.8)
        axis.set_xscale("log", base=2)
        axis.set_title(f"W3 of {name}")
        axis.set_xlabel("elements")
        axis.set_ylabel("time / native")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
