"""Generated functions against PyTorch's native ops on OpInfo inputs: print the per-op table (markdown).

Usage: python tools/opinfo_table.py   (from the repository root, with the test extra installed)

Runs exactly the comparison of tests/features/test_opinfo.py (it imports that module's functions): each op's
spec is built (order 2, strategy auto) into a temporary folder, and its value, first and second
derivative are compared in float32 and float64 with the native op's in float64, on the inputs of
the op's OpInfo sample_inputs and reference_inputs. After the table, each failing (op, dtype, order)
is listed with its worst point.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import test_opinfo as t


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _short(dtype) -> str:
    return {"float32": "f32", "float64": "f64"}[_dtype_name(dtype)]


def _error(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.1e}"


def main() -> int:
    try:
        op_db = t.load_op_db()
    except ImportError as exc:
        print(f"opinfo_table: op_db cannot be imported ({exc}); install the test extra (expecttest)", file=sys.stderr)
        return 2
    failures = []
    rows = []
    with tempfile.TemporaryDirectory(prefix="dbgen-opinfo-") as directory:
        comparisons = t.OpInfoComparisons(op_db, Path(directory))
        for op, (expr, _) in t.OPS.items():
            counts, errors, verdict = [], [], []
            for dtype in t.DTYPES.values():
                results = comparisons.result(op, dtype).orders
                if not results:
                    counts.append("0")
                    errors.append("—")
                    verdict.append(f"{_short(dtype)}: no sample without extra args/kwargs")
                    continue
                counts.append(str(results[0].compared))
                errors.append(" / ".join(_error(r.max_scaled_error) for r in results))
                for result in results:
                    if not result.ok:
                        verdict.append(f"{_short(dtype)} {t.ORDER_NAMES[result.order]}")
                        failures.append(result)
            skipped_only = all("no sample" in v for v in verdict) and verdict
            status = "skipped (" + "; ".join(verdict) + ")" if skipped_only else (
                "FAIL: " + ", ".join(verdict) if verdict else "pass")
            rows.append(f"| {op} | `{expr}` | {' / '.join(counts)} | {errors[0]} | {errors[1]} | {status} |")

    tolerances = "; ".join(f"{name}: rtol {rtol:g}, atol {atol:g}" for name, (rtol, atol) in
                           ((_dtype_name(d), t.TOLERANCES[d]) for d in t.DTYPES.values()))
    print("Generated functions (order 2, strategy auto) against PyTorch's native ops on OpInfo sample and")
    print("reference inputs. Truth: the native op and its autograd derivatives in float64. A point passes")
    print("when |ours - truth| <= rtol*|truth| + atol*max(1, |truth|) (" + tolerances + ").")
    print("Error columns: max over compared points of |ours - truth| / (|truth| + (atol/rtol)*max(1, |truth|)),")
    print("i.e. relative error with the absolute slack folded in; a point passes exactly when it is <= rtol;")
    print("inf: ours not finite where the truth is. Points: those compared for the value (derivatives: those")
    print("where the true derivative is finite too).")
    print()
    print("| op | expression | points compared (f32 / f64) | max rel. error value / d1 / d2, float32 "
          "| max rel. error value / d1 / d2, float64 | result |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    if failures:
        print(f"{len(failures)} failing (op, dtype, order), worst point of each:")
        print()
        for result in failures:
            x, ours, truth, err, tol = result.worst[0]
            digits = 9 if _dtype_name(result.dtype) == "float32" else 17
            print(f"- {result.op} {_dtype_name(result.dtype)} {t.ORDER_NAMES[result.order]}: "
                  f"{result.failures} of {result.compared} points; worst x={x:.{digits}g}: "
                  f"ours={ours:.{digits}g}, truth={truth:.17g} (|err| {err:.3g}, tolerance {tol:.3g})")
    else:
        print("Every comparison passes.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
