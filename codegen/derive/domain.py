"""The build-time domain check: the function and its derivatives must be finite on the domain.

A spec whose domain holds points where the function is undefined (log(x) on [-1, 1], sqrt(x) on
the default [-2, 2]) or where a derivative is infinite (sqrt(x) at 0) would build, and its
generated tests would then fail with NaN and no word about the domain. So the build evaluates the
formula and every partial derivative up to the spec's order, in float64 at the params' defaults,
on a grid over the domain box (each input's ends and evenly spaced points between, so corners and
the middle, 0 of a symmetric domain, are on it), and refuses a spec with a point where one is not
finite: it names the smallest part of the expression that fails there, the inputs' sub-range
where it fails, and a domain where it does not, when one is found.

The grid is evaluated in pure Python (``math``, after CSE; no NumPy; special functions by torch's
ops on single floats, which cost microseconds where mpmath's K0 costs a millisecond): a value with no
real float (log(-1), 1/0, an overflow, a complex power) counts as not finite, as torch's NaN or inf
would. It is a grid, not a proof: a singular point between grid points is not found.

Piecewise forms (where, clamp, max, min, relu, comparisons as numbers) are evaluated as the
generated code computes them: a branch only where it is taken (Python's conditional expression,
and ``branches.Guard`` on the guarded formula the build checks), a derivative's branch that SymPy
writes as complex infinity (1/0) as not finite, and the failing part named among the branches'
values and the terms of their conditions, of a choice on params the branch their defaults take.
"""

from __future__ import annotations

import functools
import itertools
import math

import mpmath
import sympy

from .. import limits, signals
from ..errors import SpecErrors
from ..language import external, special
from ..language.formula import formula
from ..spec import DEFAULT_DOMAIN, Spec
from . import symbolic

MAX_POINTS = 8000  # grid points in all; per input the largest 2**k + 1 that keeps within it
MAX_POINTS_PER_INPUT = 257
MAX_PARTIALS = 200  # partial derivatives checked, lowest orders first (order 3 in 8 inputs: 164)


def _sigmoid(u: float) -> float:
    return 1 / (1 + math.exp(-u)) if u >= 0 else math.exp(u) / (1 + math.exp(u))


def _softplus(u: float) -> float:
    return max(u, 0.0) + math.log1p(math.exp(-abs(u)))


def _guard(x, taken, safe):
    return x if taken else safe  # branches.Guard, on one point


_GUARDS = {name: _guard for name in ("Guard", "ClampBelow", "ClampAbove")}  # branches.Guard and its clamps


@functools.cache
def _functions() -> dict:
    """The functions ``math`` lacks, by name, for lambdify: the special functions (special.py) by
    torch's ops on floats (torch is imported as the build imports it, signals held) and mpmath."""
    signals.import_torch()
    return {
        "sigmoid": _sigmoid, "softplus": _softplus, **_GUARDS,
        **{cls.__name__: special.in_floats(cls) for cls in special.ALL},
        **special.torch_float_values(),
        **{name: _external_floats(cls) for name, cls in external.evaluated().items()},
    }


def _in_floats(exact):
    """An mpmath function on floats (ValueError where it has no real value, as math's)."""
    return lambda *args: special.real_float(exact(*args))


def _external_floats(cls):
    """An external function on floats: SciPy's own, called as the generated code calls it (a few
    microseconds, where mpmath's Bessel K takes a millisecond: a Matern kernel's check made 32,590
    calls, 34-49 s of its build), with its inf and NaN the generated code would return; mpmath
    where SciPy is not installed or the function is dbgen's own (``kv_power``)."""
    try:
        import scipy.special
    except ImportError:
        return _in_floats(cls.exact)
    if external.SCIPY.get(cls.__name__) is not cls:
        return _in_floats(cls.exact)
    # the call is dbgen's own text (external.py), not a spec's; .real is applied below, where the
    # imaginary part is 0 (lambertw below -1/e has no real value)
    call = eval(f"lambda {', '.join(cls.params)}: {cls.call.removesuffix('.real')}",
                {"special": scipy.special})

    def value(*args):
        result = complex(call(*args))
        if result.imag != 0:
            raise ValueError("no real value")
        return result.real

    return value


_NO_REAL_VALUE = (ArithmeticError, ValueError)  # 1/0, an overflow, log(-1), sqrt(-1)
# What not_finite raises on a form math cannot evaluate (NotImplementedError: one lambdify cannot print)
UNEVALUATED = (NameError, TypeError, AttributeError, NotImplementedError)
# mpmath's numbers have no float exponent range: where math overflows on the way to a finite value
# (the 2nd derivative of tanh(x) at x = 1e300 holds 1/cosh(x)**2, which is 0), it gives that value.
_EXACT_FUNCTIONS = {"sigmoid": lambda u: 1 / (1 + mpmath.exp(-u)), "softplus": lambda u: mpmath.log(1 + mpmath.exp(u)),
                    **_GUARDS, **{cls.__name__: cls.exact for cls in special.ALL},
                    **{name: cls.exact for name, cls in external.evaluated().items()},
                    "xlogy": lambda x, y: 0 if x == 0 else x * mpmath.log(y)}


def check(spec: Spec, expr: sympy.Expr, key: str = "expr") -> None:
    """Raise SpecErrors (one problem, on the ``domain`` line, else ``expr``) when the function or a
    derivative up to ``spec.order`` is not finite somewhere on the spec's domain grid."""
    undefined = _undefined_condition(expr, spec)
    if undefined:
        raise SpecErrors([spec.problem(key, f"{key}: {undefined}")])
    inputs = [sympy.Symbol(name, real=True) for name in spec.inputs]
    formulas = formulas_at_defaults(expr, spec, inputs)
    points = grid([spec.bounds(name) for name in spec.inputs])
    try:
        failing = _failing(formulas, inputs, points)
    except UNEVALUATED:  # a SymPy form with no `math` meaning: not checked, not refused
        return
    if not any(failing):
        return
    key = "domain" if "domain" in dict(spec.lines) else key  # key: the formula's line (outputs.NAME)
    raise SpecErrors([spec.problem(key, _message(spec, expr, inputs, formulas, points, failing))])


def _undefined_condition(expr: sympy.Expr, spec: Spec) -> str | None:
    """A comparison with a term of params alone (or numbers) that has no finite real float value at
    the params' defaults (log1p(a) > 0 at a = -1, -y > acosh(a) at a = 0.5), in words; None if
    there is none. SymPy cannot even compare such a value (TypeError), and the generated code,
    which computes params' terms in Python's math, would raise ValueError on every call. Terms of
    inputs are the grid's to check."""
    relations = expr.atoms(sympy.core.relational.Relational)
    for relation in sorted(relations, key=sympy.default_sort_key):
        terms = {node for side in (relation.lhs, relation.rhs) for node in sympy.preorder_traversal(side)
                 if isinstance(node, sympy.Expr) and not _input_dependent(node, spec)}
        for term in sorted(terms, key=lambda node: (sympy.count_ops(node), sympy.default_sort_key(node))):
            try:
                value = at_defaults(term, spec)
            except TypeError:  # a comparison inside the term, itself undefined: found on its own
                continue
            if not _finite_float(value):
                used = {s.name for s in relation.free_symbols}
                defaults = ", ".join(f"{name} = {value:g}" for name, value in spec.params if name in used)
                where = f" at the params' defaults ({defaults})" if defaults else ""
                return (f"the condition {formula(relation)} is undefined{where}: "
                        f"{formula(term)} is not a finite real number there; write the condition so that it "
                        "is defined, or change the default")
    return None


def _finite_float(value: sympy.Expr) -> bool:
    """Whether a number (SymPy's, of params at their defaults) is a finite real float64."""
    try:
        number = complex(value)
    except (TypeError, ValueError):  # not a number (a symbol left): not judged here
        return True
    return number.imag == 0 and math.isfinite(number.real)


def at_defaults(expr: sympy.Expr, spec: Spec) -> sympy.Expr:
    values = dict(spec.params)
    return expr.xreplace({s: sympy.Float(values[s.name]) for s in expr.free_symbols if s.name in values})


def formulas_at_defaults(expr: sympy.Expr, spec: Spec, inputs) -> list[tuple[int, sympy.Expr]]:
    """(order, formula): ``expr`` and its partials in ``inputs`` up to the spec's order, params at their defaults."""
    return with_partials(at_defaults(expr, spec), inputs, spec.order)


def with_partials(expr, inputs, order: int) -> list[tuple[int, sympy.Expr]]:
    """(order, formula): the function and its partial derivatives, lowest orders first.

    The planner writes out only some partials symbolically (the first, for a single-level
    strategy); where all of them up to ``order`` pass the limits on symbolic work, the check stops
    at the first derivatives rather than refusing a spec that plans within them.
    """
    try:
        partials, _ = symbolic.partial_derivatives(expr, tuple(inputs), order, limit=MAX_PARTIALS)
    except limits.LimitExceeded as exceeded:
        if exceeded.kind != "size":
            raise
        partials, _ = symbolic.partial_derivatives(expr, tuple(inputs), 1, limit=MAX_PARTIALS)
    return [(0, expr)] + [(len(index), derivative) for index, derivative in partials]


def _per_input(count: int) -> int:
    n = MAX_POINTS_PER_INPUT
    while n > 3 and n**count > MAX_POINTS:
        n = (n - 1) // 2 + 1
    return n


def grid(bounds: list[tuple[float, float]]) -> list[tuple[float, ...]]:
    """Points covering the box: every combination of each input's evenly spaced values, ends included."""
    n = _per_input(len(bounds))
    axes = [[lo + (hi - lo) * k / (n - 1) for k in range(n - 1)] + [hi] for lo, hi in bounds]
    return list(itertools.product(*axes))


def _finite(value) -> bool:
    return not isinstance(value, complex) and math.isfinite(value)


def not_finite(formulas: list[sympy.Expr], inputs, points) -> list[list[bool]]:
    """Per formula, per point: True where its value is not a finite real float (float64, with the
    exact value deciding where floats overflow on the way). Not symbolic work: the spec's time
    limit does not count it (a build must not pass or fail by how busy the machine is)."""
    with limits.paused():
        return _not_finite(formulas, inputs, points)


def _not_finite(formulas: list[sympy.Expr], inputs, points) -> list[list[bool]]:
    formulas = [_printable(f) for f in formulas]
    together = sympy.lambdify(inputs, formulas, modules=[_functions(), "math"], cse=True)
    alone = None
    bad = [[False] * len(points) for _ in formulas]
    for index, point in enumerate(points):
        try:
            values = together(*point)
        except (*_NO_REAL_VALUE, TypeError) as exc:  # which formula failed: each on its own
            if not _complex_refused(exc):
                raise
            alone = alone or [_evaluators(inputs, f) for f in formulas]
            values = [_value(function, exact, point) for function, exact in alone]
        for row, value in zip(bad, values):
            row[index] = not _finite(value)
    return bad


def _printable(formula: sympy.Expr) -> sympy.Expr:
    """``formula`` with SymPy's complex infinity as NaN, which both printers know (a branch's
    derivative of log(0), 1/0: log(max(x, 0)) at x < 0)."""
    return formula.xreplace({sympy.zoo: sympy.nan}) if formula.has(sympy.zoo) else formula


def _evaluators(inputs, formula: sympy.Expr):
    """The formula in floats (math), and exactly (mpmath), for where floats overflow on the way."""
    formula = _printable(formula)
    return (sympy.lambdify(inputs, formula, modules=[_functions(), "math"]),
            sympy.lambdify(inputs, formula, modules=[_EXACT_FUNCTIONS, "mpmath"]))


def _value(function, exact, point):
    try:
        return function(*point)
    except OverflowError:
        return _exact_value(exact, point)
    except (*_NO_REAL_VALUE, TypeError) as exc:
        if not _complex_refused(exc):
            raise
        return math.nan


def _complex_refused(exc: Exception) -> bool:
    """Whether ``exc`` says there is no real value: an arithmetic or value error, or a math
    function given the complex number Python's ``**`` makes of a negative base (acos(x**x) at
    x = -0.5: "must be real number, not complex"), not a form math cannot evaluate."""
    return not isinstance(exc, TypeError) or "complex" in str(exc)


def _exact_value(exact, point) -> float:
    """The float64 the exact value rounds to (inf past float64's range), NaN where it has none."""
    try:
        value = exact(*(mpmath.mpf(x) for x in point))
    except (*_NO_REAL_VALUE, TypeError):
        return math.nan
    if isinstance(value, mpmath.mpc):
        return math.nan if value.imag != 0 else float(value.real)
    return float(value)


def _failing(formulas, inputs, points) -> list[bool]:
    bad = not_finite([f for _, f in formulas], inputs, points)
    return [any(column) for column in zip(*bad)] if bad else [False] * len(points)


def _message(spec, expr, inputs, formulas, points, failing) -> str:
    where = [point for point, fails in zip(points, failing) if fails]
    bad = not_finite([f for _, f in formulas], inputs, where)
    order = min(k for (k, _), row in zip(formulas, bad) if any(row))
    culprit, part = _culprit(expr, spec, inputs, order, where)
    where = _where_part_fails(part, spec, inputs, spec.order, where)
    lo, hi = DEFAULT_DOMAIN
    defaulted = "" if "domain" in dict(spec.lines) else f" (no domain is set: the default is [{lo:g}, {hi:g}])"
    text = f"domain: {culprit} is not finite {_where(spec, where, points)}{defaulted}"
    suggestion = _suggestion(spec, inputs, formulas, points, failing)
    if suggestion:
        return f"{text}; set domain: {suggestion}"
    return f"{text}; set a domain where it and its derivatives up to order {spec.order} are finite"


_ORDINALS = {1: "1st", 2: "2nd", 3: "3rd"}


def _where_part_fails(part, spec: Spec, inputs, order: int, where) -> list:
    """The points of ``where`` at which ``part`` or a derivative of it up to ``order`` is not finite
    (log(x) of log(x) + sqrt(y): x <= 0, whatever y is), where it has some; else ``where``."""
    if part is None:
        return where
    formulas = [formula for _, formula in with_partials(at_defaults(part, spec), inputs, order)]
    try:
        bad = not_finite(formulas, inputs, where)
    except UNEVALUATED:
        return where
    own = [point for index, point in enumerate(where) if any(row[index] for row in bad)]
    return own or where


def _culprit(expr, spec: Spec, inputs, order: int, where) -> tuple[str, sympy.Expr | None]:
    """The smallest part of ``expr`` (named with its params) not finite at some of ``where``, or
    whose derivatives up to ``order`` are not there, and that part (None: the whole formula)."""
    parts = sorted({node for node in _parts(expr, spec) if node.free_symbols & set(inputs)},
                   key=lambda node: (sympy.count_ops(node), sympy.default_sort_key(node)))
    for part in parts:
        try:
            failing = _part_failing(at_defaults(part, spec), inputs, order, where)
        except UNEVALUATED:  # a part math cannot evaluate on its own (a complex power compared)
            continue
        if failing == 0:
            return formula(part), part
        if failing is not None:
            return f"the {_ORDINALS.get(failing, f'{failing}th')} derivative of {formula(part)}", part
    return formula(expr), None


def _part_failing(value, inputs, order: int, where) -> int | None:
    """The lowest order (0: the value) of ``value`` not finite at some of ``where``; None if none."""
    if any(not_finite([value], inputs, where)[0]):
        return 0
    derivatives = with_partials(value, inputs, order)[1:]
    for k in range(1, order + 1):
        partials = [d for degree, d in derivatives if degree == k]
        if partials and any(any(row) for row in not_finite(partials, inputs, where)):
            return k
    return None


def _parts(expr, spec: Spec):
    """The numbers among the nodes of ``expr`` that the function evaluates: a branch's value and the
    terms of its condition (abs(x) of abs(x) < d), not the pairs and conditions of a ``Piecewise``,
    which have no float value; of a choice on params alone, the branch taken at their defaults."""
    if isinstance(expr, sympy.Expr):
        yield expr
    if isinstance(expr, sympy.Piecewise) and not any(_input_dependent(arg.cond, spec) for arg in expr.args):
        chosen = [arg.expr for arg in expr.args if at_defaults(arg.cond, spec) == sympy.true]
        if chosen:
            yield from _parts(chosen[0], spec)
            return
    for arg in expr.args:
        yield from _parts(arg, spec)


def _input_dependent(condition, spec: Spec) -> bool:
    return any(s.name in spec.inputs for s in getattr(condition, "free_symbols", ()))


def _where(spec: Spec, where, points) -> str:
    """The failing points' values of each input, as runs of grid values (asin(x) on [-2, 2]: x in
    [-2, -1] and [1, 2]); only the inputs whose failing values are not their whole grid, unless none is."""
    described = []
    for i, name in enumerate(spec.inputs):
        axis = sorted({point[i] for point in points})
        failing = {point[i] for point in where}
        runs = _runs([value in failing for value in axis])
        spans = [(axis[start], axis[end]) for start, end in runs]
        described.append((spans != [(axis[0], axis[-1])], name, spans))
    chosen = [d for d in described if d[0]] or described
    if all(len(spans) == 1 and spans[0][0] == spans[0][1] for _, _, spans in chosen):
        return "at " + ", ".join(f"{name} = {_number(spans[0][0])}" for _, name, spans in chosen)
    return "for " + ", ".join(
        f"{name} in " + " and ".join(f"[{_number(lo)}, {_number(hi)}]" for lo, hi in spans[:3])
        + (" and elsewhere" if len(spans) > 3 else "") for _, name, spans in chosen)


def _number(value: float) -> str:
    return f"{value:.4g}"


def _suggestion(spec, inputs, formulas, points, failing) -> str | None:
    """A domain where the check passes, rounded inward to round numbers, or None.

    Input by input: one whose grid values fail at every point of them (x <= 0 for log(x) + sqrt(y),
    whatever y is) is narrowed to its longest run of others, keeping the most of its range, and
    the check runs again on the narrowed box, until it passes or no input is left to narrow (y
    next). Where no value fails everywhere (asin(x*y)), one input narrowed to its longest run of
    values that no failing point has, the first such box that passes."""
    bounds = {name: spec.bounds(name) for name in spec.inputs}
    proposal = dict(bounds)
    for _ in spec.inputs:
        narrowed = _narrowings(spec, proposal, points, failing, everywhere=True)
        if not narrowed:
            break
        proposal = narrowed[0]
        points = grid([proposal[n] for n in spec.inputs])
        try:
            failing = _failing(formulas, inputs, points)
        except UNEVALUATED:  # a point of the narrowed grid math cannot evaluate: not proposed
            return None
        if not any(failing):
            return _domain_text(spec, proposal)
    for candidate in _narrowings(spec, proposal, points, failing, everywhere=False):
        try:
            fails = any(_failing(formulas, inputs, grid([candidate[n] for n in spec.inputs])))
        except UNEVALUATED:
            continue
        if not fails:
            return _domain_text(spec, candidate)
    return None


def _narrowings(spec, proposal, points, failing, everywhere: bool) -> list[dict]:
    """``proposal`` with one input narrowed to its longest run of grid values that are not bad,
    for each input that has bad values and such a run, the ones keeping most of their range
    first. A value is bad where every point of it fails (``everywhere``), else where any does."""
    candidates = []
    for i, name in enumerate(spec.inputs):
        axis = sorted({point[i] for point in points})
        verdicts: dict[float, list[bool]] = {}
        for point, fails in zip(points, failing):
            verdicts.setdefault(point[i], []).append(fails)
        rule = all if everywhere else any
        bad_values = {value for value, seen in verdicts.items() if rule(seen)}
        run = _longest_run([v not in bad_values for v in axis])
        if not bad_values or run is None:
            continue
        width = proposal[name][1] - proposal[name][0]
        lo, hi = _rounded_inward(axis[run[0]], axis[run[1]], width)
        if lo < hi:
            candidates.append(((hi - lo) / width, {**proposal, name: (lo, hi)}))
    return [proposal for _, proposal in sorted(candidates, key=lambda c: -c[0])]


def _domain_text(spec, proposal) -> str:
    inner = ", ".join(f"{n}: [{_number(proposal[n][0])}, {_number(proposal[n][1])}]" for n in spec.inputs)
    return "{" + inner + "}"


def _runs(flags: list[bool]) -> list[tuple[int, int]]:
    """(first, last) index of each run of True in ``flags``."""
    runs, start = [], None
    for index, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = index
        elif not flag and start is not None:
            runs.append((start, index - 1))
            start = None
    return runs


def _longest_run(ok: list[bool]) -> tuple[int, int] | None:
    return max(_runs(ok), key=lambda run: run[1] - run[0], default=None)


def _rounded_inward(lo: float, hi: float, width: float) -> tuple[float, float]:
    """[lo, hi] shrunk to multiples of a twentieth of the domain's width, rounded to its power of
    ten ([0.0078, 2] in [-2, 2] -> [0.1, 2]); finer steps where that leaves nothing. A run of one
    grid value (lo == hi) is no domain: returned as it is (the steps would shrink to 0 first)."""
    if hi <= lo:
        return lo, hi
    step = 10.0 ** math.floor(math.log10(width)) / 10
    while step > (hi - lo) * 1e-6:
        rounded = round(math.ceil(lo / step - 1e-9) * step, 12), round(math.floor(hi / step + 1e-9) * step, 12)
        if rounded[0] < rounded[1]:
            return rounded
        step /= 10
    return lo, hi
