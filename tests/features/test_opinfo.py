"""Generated functions against PyTorch's native ops, on PyTorch's own OpInfo sample and reference inputs.

For every unary op the expression language can write, a spec (order 2, strategy auto) is built once
per session, and its value, first and second derivative are compared with the native op's at every
point of the op's OpInfo ``sample_inputs`` and ``reference_inputs`` (``op_db``, which needs the
``expecttest`` package).

- Points: the input tensor of every sample (a sample's extra args or kwargs, such as softplus's beta,
  are not used: both sides are the plain function), flattened into one 1-D tensor per dtype
  (float32, float64), deduplicated.
- Truth: the native op in float64 on the float64 version of the points; value, d1 = grad of
  ``out.sum()`` (``create_graph=True``), d2 = grad of ``d1.sum()`` (elementwise for an elementwise op).
- Ours: the generated function, differentiated the same way, in the dtype under test.
- Compared, for each order: every point whose input, true value and true derivative of that order are
  finite (for float32, that derivative also within ``finfo(float32).max``), with
  ``|ours - truth| <= rtol*|truth| + atol*max(1, |truth|)``; ours must be finite there. The true value
  must be finite for a derivative to be compared because autograd's formula can give a finite
  derivative outside the function's domain (acosh at x < -1, where acosh is NaN).

One test per (op, dtype, derivative order), so that a failure names exactly what is wrong and lists
the worst points. ``tools/opinfo_table.py`` runs the same comparison (the functions below) and prints
a markdown table.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy
import pytest
import torch
from helpers import budget, build_spec

# op -> (expression in dbgen's language, OpInfo name in op_db)
OPS: dict[str, tuple[str, str]] = {
    "sin": ("sin(x)", "sin"),
    "cos": ("cos(x)", "cos"),
    "tan": ("tan(x)", "tan"),
    "asin": ("asin(x)", "asin"),
    "acos": ("acos(x)", "acos"),
    "atan": ("atan(x)", "atan"),
    "sinh": ("sinh(x)", "sinh"),
    "cosh": ("cosh(x)", "cosh"),
    "tanh": ("tanh(x)", "tanh"),
    "asinh": ("asinh(x)", "asinh"),
    "acosh": ("acosh(x)", "acosh"),
    "atanh": ("atanh(x)", "atanh"),
    "exp": ("exp(x)", "exp"),
    "expm1": ("expm1(x)", "expm1"),
    "log": ("log(x)", "log"),
    "log1p": ("log1p(x)", "log1p"),
    "log2": ("log(x)/log(2)", "log2"),
    "exp2": ("2**x", "exp2"),
    "sqrt": ("sqrt(x)", "sqrt"),
    "rsqrt": ("1/sqrt(x)", "rsqrt"),
    "reciprocal": ("1/x", "reciprocal"),
    "square": ("x**2", "square"),
    "erf": ("erf(x)", "erf"),
    "erfc": ("erfc(x)", "erfc"),
    "sigmoid": ("sigmoid(x)", "sigmoid"),
    "softplus": ("softplus(x)", "nn.functional.softplus"),
    "logsigmoid": ("log(sigmoid(x))", "nn.functional.logsigmoid"),
    "silu": ("x*sigmoid(x)", "nn.functional.silu"),
    "mish": ("x*tanh(softplus(x))", "nn.functional.mish"),
    "tanhshrink": ("x - tanh(x)", "nn.functional.tanhshrink"),
}
DTYPES = {"float32": torch.float32, "float64": torch.float64}
ORDERS = (0, 1, 2)
ORDER_NAMES = ("value", "d1", "d2")
# dtype -> (rtol, atol): |ours - truth| <= rtol*|truth| + atol*max(1, |truth|)
TOLERANCES = {torch.float32: (1e-4, 1e-6), torch.float64: (1e-7, 1e-12)}
WORST_SHOWN = 10


def load_op_db():
    """PyTorch's OpInfo database; raises ImportError (e.g. without ``expecttest``)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def find_opinfo(op_db, name: str):
    """The OpInfo called ``name``; where several share it, the one with an empty variant_test_name."""
    matches = [op for op in op_db if op.name == name]
    plain = [op for op in matches if op.variant_test_name == ""]
    if len(plain) != 1:
        raise LookupError(f"op_db has {len(matches)} OpInfo(s) named {name!r}, {len(plain)} without a variant")
    return plain[0]


@dataclasses.dataclass(frozen=True)
class Points:
    values: torch.Tensor  # 1-D, the dtype under test, deduplicated
    samples_used: int
    samples_skipped: int  # samples whose input is not a tensor


def collect_points(opinfo, dtype: torch.dtype) -> Points:
    """Every element of every sample's and reference sample's input (its args and kwargs unused)."""
    samples = list(opinfo.sample_inputs("cpu", dtype, requires_grad=False))
    samples += list(opinfo.reference_inputs("cpu", dtype, requires_grad=False))
    chunks, skipped = [], 0
    for sample in samples:
        if not isinstance(sample.input, torch.Tensor):
            skipped += 1
            continue
        chunks.append(sample.input.detach().reshape(-1).to(dtype))
    # numpy's unique sorts several times faster than torch's on CPU
    values = torch.from_numpy(numpy.unique(torch.cat(chunks).numpy())) if chunks else torch.empty(0, dtype=dtype)
    return Points(values, len(chunks), skipped)


def value_and_derivatives(fn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fn(x) and its first and second derivative at every point of the 1-D tensor x, by autograd."""
    x = x.detach().clone().requires_grad_()
    out = fn(x)
    (d1,) = torch.autograd.grad(out.sum(), x, create_graph=True, materialize_grads=True)
    if d1.requires_grad:
        (d2,) = torch.autograd.grad(d1.sum(), x, materialize_grads=True)
    else:
        d2 = torch.zeros_like(x)
    return out.detach(), d1.detach(), d2.detach()


@dataclasses.dataclass(frozen=True)
class OrderResult:
    """One derivative order of one op in one dtype."""

    op: str
    dtype: torch.dtype
    order: int
    compared: int  # how many points are compared (module docstring)
    failures: int  # how many of those fail
    # max over compared points of |ours - truth| / (|truth| + (atol/rtol)*max(1, |truth|)) = err / (tol/rtol):
    # relative error with the absolute slack folded in, <= rtol exactly where the point passes; inf: ours not finite
    max_scaled_error: float
    # the worst failing points, worst first: (input, ours, truth, |ours - truth|, tolerance)
    worst: tuple[tuple[float, float, float, float, float], ...]

    @property
    def ok(self) -> bool:
        return self.failures == 0

    def describe(self) -> str:
        rtol, atol = TOLERANCES[self.dtype]
        head = (f"{self.op} {str(self.dtype).removeprefix('torch.')} {ORDER_NAMES[self.order]}: "
                f"{self.failures} of {self.compared} points outside "
                f"|ours - truth| <= {rtol:g}*|truth| + {atol:g}*max(1, |truth|) or not finite; worst:")
        digits = 9 if self.dtype == torch.float32 else 17
        rows = [f"  x={x:.{digits}g}  ours={o:.{digits}g}  truth={t:.17g}  |err|={e:.3g}  tol={tl:.3g}"
                for x, o, t, e, tl in self.worst]
        return "\n".join([head, *rows])


def compare(op: str, fn, native, points: torch.Tensor) -> list[OrderResult]:
    """Value, d1 and d2 of ``fn`` in the points' dtype against ``native``'s in float64 (module docstring)."""
    dtype = points.dtype
    rtol, atol = TOLERANCES[dtype]
    truths = value_and_derivatives(native, points.to(torch.float64))
    ours_all = value_and_derivatives(fn, points)
    # In the function's domain: the input and the true value are finite. (A native derivative can be
    # finite where the function is not defined, e.g. acosh'(x) = 1/sqrt(x**2 - 1) at x < -1.)
    in_domain = torch.isfinite(points) & torch.isfinite(truths[0])
    results = []
    for order, (ours, truth) in enumerate(zip(ours_all, truths)):
        compared = in_domain & torch.isfinite(truth)
        if dtype == torch.float32:
            compared &= truth.abs() <= torch.finfo(torch.float32).max
        ours64 = ours.to(torch.float64)
        err = torch.where(torch.isfinite(ours64), (ours64 - truth).abs(), torch.inf)
        tol = rtol * truth.abs() + atol * torch.clamp(truth.abs(), min=1.0)
        failing = compared & ~(err <= tol)
        scaled = torch.where(compared, err / (tol / rtol), 0.0)
        index = torch.nonzero(failing).flatten()
        index = index[torch.argsort(scaled[index], descending=True, stable=True)][:WORST_SHOWN].tolist()
        worst = tuple((float(points[i]), float(ours[i]), float(truth[i]), float(err[i]), float(tol[i])) for i in index)
        results.append(OrderResult(op, dtype, order, int(compared.sum()), int(failing.sum()),
                                   float(scaled.max()) if scaled.numel() else 0.0, worst))
    return results


# Domains that pass the build's domain check (the default [-2, 2] holds points where these ops or their
# derivatives are not finite); they only bound the generated tests: the comparison here runs on OpInfo's points.
DOMAINS = {"asin": [-0.9, 0.9], "acos": [-0.9, 0.9], "atanh": [-0.9, 0.9], "acosh": [1.1, 2], "log1p": [-0.9, 2],
           "log": [0.1, 2], "log2": [0.1, 2], "sqrt": [0.1, 2], "rsqrt": [0.1, 2], "reciprocal": [0.1, 2]}


def build_generated(directory: Path, op: str):
    """Build ``op``'s spec (order 2, strategy auto) into ``directory``; return the generated function."""
    expr, _ = OPS[op]
    name = f"opinfo_{op}"
    domain = {"domain": {"x": DOMAINS[op]}} if op in DOMAINS else {}
    module = build_spec(directory, name=name, expr=expr, inputs=["x"], order=2, strategy="auto", **domain)
    return getattr(module, name)


@dataclasses.dataclass(frozen=True)
class OpResult:
    """One op in one dtype: its points and the result of each order (none when there is no point)."""

    points: int  # distinct points
    samples_used: int
    samples_skipped: int  # samples whose input is not a tensor
    orders: tuple[OrderResult, ...]


class OpInfoComparisons:
    """Builds each op's spec once and runs each (op, dtype) comparison once, on first use."""

    def __init__(self, op_db, directory: Path):
        self.op_db = op_db
        self.directory = directory
        self._functions: dict[str, object] = {}
        self._results: dict[tuple[str, torch.dtype], OpResult] = {}

    def function(self, op: str):
        if op not in self._functions:
            self._functions[op] = build_generated(self.directory / op, op)
        return self._functions[op]

    def result(self, op: str, dtype: torch.dtype) -> OpResult:
        if (op, dtype) not in self._results:
            opinfo = find_opinfo(self.op_db, OPS[op][1])
            points = collect_points(opinfo, dtype)
            n = points.values.numel()
            orders = tuple(compare(op, self.function(op), opinfo.op, points.values)) if n else ()
            self._results[op, dtype] = OpResult(n, points.samples_used, points.samples_skipped, orders)
        return self._results[op, dtype]


@pytest.fixture(scope="session")
def op_db():
    try:
        return load_op_db()
    except ImportError as exc:
        pytest.skip(f"torch.testing._internal.common_methods_invocations.op_db cannot be imported "
                    f"({exc}); install the test extra (expecttest)")


@pytest.fixture(scope="module")
def comparisons(op_db, tmp_path_factory):
    return OpInfoComparisons(op_db, tmp_path_factory.mktemp("opinfo"))


@pytest.mark.parametrize("order", ORDERS, ids=ORDER_NAMES)
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("op", budget(OPS))
def test_matches_native_on_opinfo_inputs(comparisons, op, dtype, order):
    result = comparisons.result(op, dtype)
    if not result.orders:
        pytest.fail(f"{OPS[op][1]}: none of its {result.samples_skipped} OpInfo samples in {dtype} has a tensor input",
                    pytrace=False)
    outcome = result.orders[order]
    if outcome.compared == 0:
        pytest.fail(f"{op}: no point with a finite input and truth among {result.points}", pytrace=False)
    if not outcome.ok:
        pytest.fail(outcome.describe(), pytrace=False)
