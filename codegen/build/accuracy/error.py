"""Error in bits against exact arithmetic: each order of a generated Function (and of autograd
through the composed formula) measured at the sample points, and the domain where the composed
formula is a reference good enough for the generated tests.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Sequence

import mpmath
import sympy

from ...language import external, special
from .exact import Partial, Truth, exact, partials
from .floats import _FORMATS, _LARGEST, _SMALLEST_NORMAL, _rounded, bits
from .points import sample, thresholds

BOUND_BITS = {"float64": 4.0, "float32": 4.0}  # excess bits allowed where the truth is a normal float


def counted(truth: Truth, dtype: str) -> bool:
    """Whether the excess at this point counts: the truth is a normal float of ``dtype``."""
    if truth.value is None:
        return False
    size = abs(float(truth.value))
    return _SMALLEST_NORMAL[dtype] <= size <= _LARGEST[dtype]


def excess(result: float, truth: Truth, dtype: str) -> float:
    """The bits lost beyond what the point's conditioning explains (0 where not counted)."""
    if not counted(truth, dtype):
        return 0.0
    lost = bits(result, truth.value, dtype)
    if not math.isfinite(result) or lost <= min(BOUND_BITS.values()):
        return lost  # within the bound whatever the conditioning: the condition number is not needed
    return max(0.0, lost - math.log2(max(1.0, truth.kappa)))


# -- running a Function ---------------------------------------------------------------------------


def autograd_values(fn: Callable, points: Sequence[tuple[float, ...]], dtype: str, order: int,
                    outputs: int, stacked: bool = False) -> dict[tuple[int, tuple[int, ...]], list[float]]:
    """(output, index) -> the values of every partial up to ``order``, by autograd through ``fn``
    (an elementwise function of tensors) on all ``points`` at once."""
    import torch

    torch_dtype = getattr(torch, dtype)
    columns = list(zip(*points))
    xs = [torch.tensor(column, dtype=torch_dtype).requires_grad_() for column in columns]
    found: dict[tuple[int, tuple[int, ...]], list[float]] = {}
    with torch.enable_grad():
        result = fn(*xs)
        values = result.unbind(-1) if stacked else (result if isinstance(result, tuple) else (result,))
        for output, value in enumerate(values[:outputs]):
            cache = {(): value}
            for degree in range(order + 1):
                for combo in itertools.combinations_with_replacement(range(len(xs)), degree):
                    if combo:
                        cache[combo] = _grad(cache[combo[:-1]], xs[combo[-1]], keep=degree < order)
                    found[(output, combo)] = cache[combo].detach().double().tolist()
    return found


def _grad(value, x, keep: bool):
    import torch

    if not value.requires_grad:
        return torch.zeros_like(x)
    (grad,) = torch.autograd.grad(value.sum(), x, create_graph=keep, retain_graph=True, allow_unused=True)
    return torch.zeros_like(x) if grad is None else grad


# -- the report -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Figures:
    """One order's error over the points, in one dtype, for one implementation."""

    order: int
    dtype: str
    mean_bits: float
    max_bits: float
    max_excess: float
    worst: tuple[float, ...] | None  # the point of the largest excess (None: no excess anywhere)
    worst_partial: str
    counted: int


def figures(partial_list: Sequence[Partial], truths, values, points, dtype: str, names) -> list[Figures]:
    """Per order: mean and max bits over the counted points of its partials, and the worst excess."""
    by_order: dict[int, list[tuple[float, float, tuple[float, ...], str]]] = {}
    for partial, row in zip(partial_list, truths):
        got = values[(partial.output, partial.index)]
        label = _label(partial, names)
        for point, truth, result in zip(points, row, got):
            if counted(truth, dtype):
                by_order.setdefault(partial.order, []).append(
                    (bits(result, truth.value, dtype), excess(result, truth, dtype), point, label))
    report = []
    for order in sorted({p.order for p in partial_list}):
        rows = by_order.get(order, [])
        if not rows:
            report.append(Figures(order, dtype, 0.0, 0.0, 0.0, None, "", 0))
            continue
        worst = max(rows, key=lambda row: (row[1], row[0]))
        report.append(Figures(order, dtype, sum(r[0] for r in rows) / len(rows), max(r[0] for r in rows),
                              worst[1], worst[2] if worst[1] > 0 else None, worst[3], len(rows)))
    return report


def _label(partial: Partial, names) -> str:
    inputs, outputs = names
    head = outputs[partial.output] if len(outputs) > 1 else "f"
    if not partial.index:
        return head
    return f"d{len(partial.index)}{head}/" + "".join(f"d{inputs[i]}" for i in partial.index)


@dataclasses.dataclass(frozen=True)
class Report:
    """The oracle's figures for one spec: dbgen's Function and autograd through the composed
    formula (None where torch cannot run the formula), per dtype and order."""

    name: str
    path: str
    points: int
    dbgen: tuple[Figures, ...]
    autograd: tuple[Figures, ...] | None
    samples: tuple  # (dtype, point, partial label, dbgen bits, autograd bits or None) for a plot
    table: tuple = ()  # ExactRow: the generated tests' exact values
    limited_by: tuple[str, ...] = ()  # torch functions whose own error the figures include
    scipy_bits: float = 0.0  # SciPy's own float64 error in the functions called (``scipy_bits``)
    # float64 points where autograd through the composed expression is (True) or is not (False)
    # within a tenth of the generated tests' tolerance of the truth at every order (``_as_reference``)
    reference_points: tuple = ()

    def bound(self, dtype: str) -> float:
        """The excess allowed in ``dtype``: the bound, plus SciPy's own error in float64 (SciPy
        computes in float64; in float32 its error is rounded away)."""
        return BOUND_BITS[dtype] + (self.scipy_bits if dtype == "float64" else 0.0)

    def over_bound(self) -> list[Figures]:
        """The orders whose worst excess is over the bound of their dtype, unless torch's own
        functions (``limited_by``) account for it."""
        if self.limited_by:
            return []
        return [f for f in self.dbgen if f.max_excess > self.bound(f.dtype)]

    def warnings(self) -> list[str]:
        """One line for the build's output: the orders over the bound and the worst of them."""
        over = self.over_bound()
        if not over:
            return []
        f = max(over, key=lambda figures: figures.max_excess)
        orders = ", ".join(f"{o.order} ({o.dtype})" for o in over)
        return [(f"order(s) {orders} lose more bits than the bound ({self.bound(f.dtype):g}) beyond their "
                 f"conditioning; worst: order {f.order} loses {f.max_excess:.0f} bits in {f.dtype} "
                 f"({f.worst_partial} at {_point_text(f.worst)}); run dbgen accuracy {self.path} for the table")]


@dataclasses.dataclass(frozen=True)
class ExactRow:
    """One exact value the generated tests check: a partial of one output at one point, and the
    error allowed there in bits (the bound plus the point's conditioning, or what the build
    measured where that is more: the build warned of it)."""

    dtype: str
    point: tuple[float, ...]
    output: int
    index: tuple[int, ...]
    value: float
    bits: float


TABLE_POINTS = 6  # points per dtype in the generated tests' table (the special values first)
TABLE_ROWS = 96  # rows per dtype at most: fewer points where a spec has many partials

# torch functions whose own float64 error is larger than the bound, measured against mpmath:
# figures that include them say so, and are not counted against the bound.
TORCH_LIMITS = {
    "polygamma": "torch.polygamma(n >= 1, x): about 5e-10 relative in float64",
}


SCIPY_POINTS = 64  # points at which SciPy's own error is measured (each an mpmath call per function)


def scipy_bits(formulas: Sequence[sympy.Expr], inputs: Sequence[sympy.Symbol], points, spec) -> float:
    """The largest error, in float64 bits, of SciPy's own functions at the arguments the formulas
    call them with at ``points`` (params at their defaults): no formula built on them can be more
    exact. SciPy's kv, for one, is within 3 bits of mpmath at whole and half-whole orders and
    loses up to 10 at others (kv(0.4, x) on [1e-3, 60]); a fixed allowance would be too loose
    for the first and a false alarm for the second."""
    from ...derive.domain import at_defaults

    calls = {at_defaults(node.scipy_call(), spec)
             for formula in formulas for node in formula.atoms(external.ScipyFunctionBase)}
    worst = 0.0
    for node in calls:
        if not isinstance(node, external.ScipyFunctionBase):
            continue  # of numbers alone: SymPy has its value already
        arguments = sympy.lambdify(inputs, node.args, modules="math")
        for point in points[:SCIPY_POINTS]:
            worst = max(worst, _own_error(type(node), arguments, point))
    return round(worst, 1)


def _own_error(cls, arguments, point) -> float:
    """SciPy's error in bits for ``cls`` at the float64 arguments ``arguments(*point)``, beyond
    the function's conditioning in its last argument."""
    import scipy.special

    try:
        args = [float(value) for value in arguments(*point)]
    except (ArithmeticError, ValueError, TypeError):
        return 0.0
    value = eval(cls.call, {"special": scipy.special, **dict(zip(cls.params, args))})  # the table's own text, as the module runs it
    with mpmath.workprec(2 * 53 + 20):
        try:
            truth = cls.exact(*(mpmath.mpf(arg) for arg in args))
        except (ArithmeticError, ValueError):
            return 0.0
    if not isinstance(truth, mpmath.mpf) or not _SMALLEST_NORMAL["float64"] <= abs(truth) <= _LARGEST["float64"]:
        return 0.0
    # beyond the function's own conditioning, as the oracle counts: jv near a zero has few bits
    slope = cls.rule(*(sympy.Float(arg) for arg in args)).evalf(30)
    kappa = abs(args[-1] * float(slope) / float(truth)) if slope.is_Number else 1.0
    return max(0.0, bits(float(value), truth, "float64") - math.log2(max(1.0, kappa)))


def limited_by(exprs: Sequence[sympy.Expr]) -> tuple[str, ...]:
    """The torch functions with a known error of their own (special.py's torch_error, polygamma
    of order 1 and more) that the formulas call."""
    found = set()
    for expr in exprs:
        for node in expr.atoms(special.SpecialFunctionBase):
            if type(node).torch_error:
                found.add(f"torch.special.{type(node).__name__}: about {type(node).torch_error:g} absolute in float64")
        if any(isinstance(node, sympy.polygamma) for node in sympy.preorder_traversal(expr)):
            found.add(TORCH_LIMITS["polygamma"])
    return tuple(sorted(found))


def measure(plan, count: int = 256, dtypes: Sequence[str] = ("float64", "float32"), seed: int = 0,
            composed: bool = True, source: str | None = None) -> Report:
    """The oracle on ``plan``'s module (rendered and run eagerly) at ``count`` points of its spec's
    domain, params at their defaults.

    Args:
        plan: a ``plan.ModulePlan`` (what build renders).
        count: points sampled (special values included).
        dtypes: the dtypes the Function is run in; each has its own points (the float64 points
            rounded to it) and truth.
        seed: the sampling seed.
        composed: also measure autograd through the spec's formula written in torch ops.
        source: the module's text where the caller has rendered it already (else rendered here).

    Returns:
        A ``Report``.
    """
    return Oracle(plan.spec, count, dtypes, seed).measure(plan, composed, source)


class Oracle:
    """The truth for one spec: its partial derivatives, the sampled points and their exact values
    per dtype, computed once; ``measure`` compares any plan of the spec with them (auto measures
    each candidate it passes over with the same truth).

    Args:
        spec: the spec whose formulas are the truth's source (as parsed, before guards or rewrites).
        count, dtypes, seed: as ``measure``'s.
    """

    def __init__(self, spec, count: int = 256, dtypes: Sequence[str] = ("float64", "float32"), seed: int = 0):
        from ...derive.domain import at_defaults

        self.spec = spec
        self.inputs = [sympy.Symbol(name, real=True) for name in spec.inputs]
        params = [sympy.Symbol(name, real=True) for name in spec.param_names]
        self.exprs = _unguarded(spec)
        self.partials = partials(self.exprs, self.inputs, spec.order)
        marks = [thresholds([at_defaults(e, spec) for e in self.exprs], s) for s in self.inputs]
        base = sample([spec.bounds(name) for name in spec.inputs], count, seed, marks)
        self.sampled = len(base)
        self.dtypes = dtypes
        self._points = {dtype: [p for p in (tuple(_rounded(v, dtype) for v in point) for point in base)
                                if all(math.isfinite(v) for v in p)] for dtype in dtypes}
        self._variables = [*self.inputs, *params]
        self._truths: dict[str, list[list[Truth]]] = {}

    @functools.cached_property
    def scipy_bits(self) -> float:
        """SciPy's own error at this spec's points (``scipy_bits``): the spec's, whichever plan."""
        return scipy_bits([p.formula for p in self.partials], self.inputs, self._points["float64"], self.spec)

    def truths(self, dtype: str) -> list[list[Truth]]:
        """Per partial, per point of ``dtype``: the exact value, computed on first use."""
        if dtype not in self._truths:
            self._truths[dtype] = exact([p.formula for p in self.partials], self._variables, self._points[dtype],
                                        [value for _, value in self.spec.params])
        return self._truths[dtype]

    def _reference_points(self, plan, points) -> tuple:
        """``_as_reference`` of the generated tests' own reference (``memory.composed_function``:
        the formula as SymPy prints it, its branches guarded) at the float64 points; () where torch
        cannot differentiate it."""
        from ..memory import composed_function

        spec = self.spec
        try:
            values = autograd_values(composed_function(plan), points, "float64", spec.order, len(self.exprs), spec.stack)
        except Exception:  # noqa: BLE001 - torch cannot run it: the tests compare nowhere then
            return ()
        return tuple(_as_reference(self.partials, self.truths("float64"), values, points))

    def measure(self, plan, composed: bool = True, source: str | None = None) -> Report:
        """The ``Report`` on ``plan`` (a plan of this spec), as ``measure`` describes it."""
        from ..memory import module_function, written_function

        spec = self.spec
        subjects = {"dbgen": module_function(plan, source)}
        if composed:
            subjects["autograd"] = written_function(spec)
        names = (spec.inputs, [name for name, _ in spec.outputs] or [spec.name])
        results: dict[str, list[Figures]] = {name: [] for name in subjects}
        samples, table, reference = [], [], ()
        for dtype in self.dtypes:
            points = self._points[dtype]
            per_subject = {}
            for name, fn in list(subjects.items()):
                try:
                    values = autograd_values(fn, points, dtype, spec.order, len(self.exprs), spec.stack)
                except Exception:  # torch cannot run or differentiate the composed formula
                    if name == "dbgen":
                        if dtype == "float64" or not _refused_scalar(spec, dtype):
                            raise
                        continue
                    results.pop(name, None)
                    del subjects[name]  # in no dtype: a report has its figures in all or none
                    continue
                per_subject[name] = values
                results[name].extend(figures(self.partials, self.truths(dtype), values, points, dtype, names))
            if "dbgen" not in per_subject:
                continue  # a param that torch refuses as a scalar of this dtype (1e300 in float32)
            samples.extend(_samples(self.partials, self.truths(dtype), per_subject, points, dtype, names))
            table.extend(_table(self.partials, self.truths(dtype), per_subject["dbgen"], points, dtype))
            if dtype == "float64" and composed:
                reference = self._reference_points(plan, points)
        return Report(spec.name, spec.path, self.sampled, tuple(results["dbgen"]),
                      tuple(results["autograd"]) if "autograd" in results else None, tuple(samples), tuple(table),
                      limited_by([p.formula for p in self.partials]), self.scipy_bits,
                      reference)


# The generated tests compare with autograd through the composed expression at rtol 1e-7, atol 1e-9
# (float64): a point is a reference where autograd is within a tenth of that of the truth.
REFERENCE_RTOL, REFERENCE_ATOL = 1e-8, 1e-10


def _as_reference(partial_list, truths, values, points):
    """(point, whether autograd's values there are within REFERENCE_RTOL and REFERENCE_ATOL of the
    truth at every partial) per float64 point: NaN or inf where the truth is finite is not."""
    for p, point in enumerate(points):
        close = True
        for partial, row in zip(partial_list, truths):
            truth = row[p].value
            if truth is None:
                continue
            got = values[(partial.output, partial.index)][p]
            close = close and math.isfinite(got) and abs(got - float(truth)) <= (
                REFERENCE_RTOL * abs(float(truth)) + REFERENCE_ATOL)
        yield point, close


def _refused_scalar(spec, dtype: str) -> bool:
    """Whether a param's value overflows ``dtype``: torch refuses it as a scalar of a tensor of that
    dtype, in the generated Function as in any torch code."""
    return any(abs(value) > _LARGEST[dtype] for _, value in spec.params)


def _table(partial_list, truths, values, points, dtype) -> list[ExactRow]:
    """The first points' exact values (special values come first), with the bits allowed."""
    count = max(1, min(TABLE_POINTS, TABLE_ROWS // max(1, len(partial_list))))
    rows = []
    for partial, row in zip(partial_list, truths):
        got = values[(partial.output, partial.index)]
        for point, truth, result in list(zip(points, row, got))[:count]:
            if not counted(truth, dtype):
                continue
            # decided by the truth alone, so that every machine writes the same tests; a row the
            # build measured over it (and warned of) checks only that the value is finite
            width = float(_FORMATS[dtype][2])
            allowed = min(width, round(BOUND_BITS[dtype] + math.log2(max(1.0, truth.kappa)) + 0.05, 1))
            lost = bits(result, truth.value, dtype) > allowed
            rows.append(ExactRow(dtype, point, partial.output, partial.index, _rounded(float(truth.value), dtype),
                                 width if lost else allowed))
    return rows


def _samples(partial_list, truths, per_subject, points, dtype, names):
    for partial, row in zip(partial_list, truths):
        ours = per_subject["dbgen"][(partial.output, partial.index)]
        theirs = per_subject.get("autograd", {}).get((partial.output, partial.index))
        for p, (point, truth) in enumerate(zip(points, row)):
            if counted(truth, dtype):
                yield (dtype, point, _label(partial, names), partial.order, bits(ours[p], truth.value, dtype),
                       None if theirs is None else bits(theirs[p], truth.value, dtype))


def _unguarded(spec) -> list[sympy.Expr]:
    """The spec's formulas as parsed, before guards or rewrites: the truth's source. A product of a
    power and kv of its base is one function (external.bessel_powers): its derivatives as SymPy
    writes them apart cancel near 0 beyond any precision the oracle tries (terms of 1e864 for a
    value of 1e-288), so the truth there would be missing, and the points not counted."""
    from ...language.expr import spec_formulas

    return [external.bessel_powers(formula) for _, formula in spec_formulas(spec)]


def reference_domain(reports: Sequence[Report], domain: dict) -> dict | None:
    """Where the generated tests compare with autograd through the composed expression: input ->
    the intervals inside its domain where that was a reference (``_as_reference``) at each of the
    reports' float64 points. None where it was at every point, or no report says.

    The intervals are spanned by points measured good, never by unmeasured space. One input: each
    run of consecutive good points (in x) with no bad one between them. Several: one box, shrunk
    from the face nearest each bad point, the points farthest from its centre first (bad tails are
    cut off, the middle kept), then to the good points left in it. Intervals that together span a
    thousandth of the domain or less are none (None: the tests compare on the whole domain, and a
    failure there is the reference's).
    """
    good, bad = set(), set()
    for report in reports:
        for point, close in report.reference_points:
            (good if close else bad).add(point)
    good -= bad
    if not bad or not good:
        return None
    names = list(domain)
    if len(names) == 1:
        found = {names[0]: _good_runs(good, bad)}
    else:
        box = _shrunk_box(good, bad, [domain[n] for n in names])
        found = {name: [interval] for name, interval in zip(names, box)} if box else {}
    if not found or any(sum(hi - lo for lo, hi in found[n]) <= 1e-3 * (domain[n][1] - domain[n][0]) for n in names):
        return None
    return {name: tuple(intervals) for name, intervals in found.items()}


def _good_runs(good, bad) -> list[tuple[float, float]]:
    """Each run of good points with no bad one between them, as (its first, its last), where it
    spans more than one point."""
    marked = sorted([(v, True) for (v,) in good] + [(v, False) for (v,) in bad])
    runs, current = [], []
    for value, is_good in [*marked, (math.inf, False)]:
        if is_good:
            current.append(value)
            continue
        if len(current) > 1:
            runs.append((current[0], current[-1]))
        current = []
    return runs


def _shrunk_box(good, bad, bounds) -> list[tuple[float, float]] | None:
    """The box ``bounds`` cut past each bad point in it, farthest from the centre first, on the
    side and axis that keep the most good points; then the good points' own box within it."""
    box = [list(b) for b in bounds]
    centre = [(lo + hi) / 2 for lo, hi in bounds]
    widths = [(hi - lo) or 1.0 for lo, hi in bounds]

    def inside(point, limits) -> bool:
        return all(lo <= v <= hi for v, (lo, hi) in zip(point, limits))

    for point in sorted(bad, key=lambda p: -max(abs(v - c) / w for v, c, w in zip(p, centre, widths))):
        if not inside(point, box):
            continue
        cuts = []
        for axis, v in enumerate(point):
            for side, limit in ((0, math.nextafter(v, math.inf)), (1, math.nextafter(v, -math.inf))):
                cut = [list(b) for b in box]
                cut[axis][side] = limit
                cuts.append((sum(inside(g, cut) for g in good), cut))
        box = max(cuts, key=lambda found: found[0])[1]
    kept = [p for p in good if inside(p, box)]
    if not kept:
        return None
    return [(min(p[k] for p in kept), max(p[k] for p in kept)) for k in range(len(box))]


def _point_text(point) -> str:
    return "(" + ", ".join(f"{v:.6g}" for v in point) + ")"
