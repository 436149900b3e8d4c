"""Accurate, not just consistent. Where the true derivative is a finite float, the generated
one is too, at every order up to 3 (the generated Function's own levels, then autograd through them).

A. MACE's polynomial envelope, 1 - (p + 1)(p + 2)/2 d**p + p(p + 2) d**(p + 1) - p(p + 1)/2 d**(p + 2)
   with d = x/r: SymPy differentiates (x/r)**p into p*(x/r)**p/x, NaN at x = 0 where every derivative
   up to order 3 is 0 (``symbolic.merge_powers`` takes the 1/x into the power: (x/r)**(p - 1)/r).
B. Norms, the safe distances of JAX-MD: the derivatives of sqrt(x**2 + y**2 + z**2) hold powers of
   the sum that underflow or overflow at norms of 1e-150 or 1e100, where the true values do not
   (``rewrite.hypot_opt`` and ``rewrite.in_ratios``: hypot, and (x/r)*(y/r)/r for x*y/r**3).

Each is compared with its SymPy derivatives evaluated by mpmath at 50 digits: per order and point, the
largest error within 1e-12 of the largest exact partial (a relative error that a partial which is 0
there, (3*x**2 - r**2)*y/r**5 at x = y = z, cannot make meaningless).
"""

from __future__ import annotations

import functools
import itertools

import mpmath
import pytest
import sympy
import torch
from helpers import build_spec

from codegen.derive import symbolic
from codegen.derive.rewrite import in_ratios, stabilize
from codegen.emit.printer import TorchPrinter

DIGITS = 50  # mpmath's, for the exact values
RTOL = 1e-12
FLOAT64 = torch.finfo(torch.float64)
ORDER = 3

ENVELOPE = "1 - (p + 1)*(p + 2)/2*(x/r)**p + p*(p + 2)*(x/r)**(p + 1) - p*(p + 1)/2*(x/r)**(p + 2)"
ENVELOPES = {
    "param_p": {"expr": ENVELOPE, "inputs": ["x"], "params": {"p": 5.0, "r": 5.0}},
    "trainable_r": {"expr": ENVELOPE, "inputs": ["x", "r"], "params": {"p": 5.0}},
    "integer_p": {"expr": "1 - 21*(x/r)**5 + 35*(x/r)**6 - 15*(x/r)**7", "inputs": ["x"], "params": {"r": 5.0}},
}
NORM = "sqrt(x**2 + y**2 + z**2)"
NORMS = {
    "distance_order3": {"expr": NORM, "order": 3},
    "distance_order2": {"expr": NORM, "order": 2},  # order 3 is autograd through its backward
    "distance_nested": {"expr": NORM, "order": 3, "strategy": "nested"},
    "coulomb": {"expr": f"1/{NORM}", "order": 3},
    # a unit vector's component (e3nn's spherical harmonics of degree 1): its backward holds the norm
    "direction": {"expr": f"x/{NORM}", "order": 2},
    # JAX-MD's guard at 0: the sum of squares underflows, so it read 0 (and the branch for the origin)
    # at a norm of 1e-150 (``rewrite.zero_comparison_opt``)
    "safe_distance": {"expr": f"where(x**2 + y**2 + z**2 > 0, {NORM}, 0)", "order": 2},
}
NORM_SIZES = [1e-200, 1e-150, 1e-100, 1.0, 1e100]
# on an axis, autograd through torch.hypot(torch.hypot(x, y), z) divided 0 by 0 (``rewrite.Norm``)
DIRECTIONS = [(1.0, 1.0, 1.0), (0.3, -0.5, 0.8), (0.0, 0.0, 1.0), (0.0, -1.0, 0.0), (1.0, 0.0, 0.0)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each spec built once for the module, by key."""
    modules = {}

    def get(key: str, **spec):
        if key not in modules:
            modules[key] = build_spec(tmp_path_factory.mktemp(key), name=key, **spec)
        return getattr(modules[key], key)

    return get


def _partials(fn, inputs: list[torch.Tensor], order: int) -> dict[tuple[int, ...], torch.Tensor]:
    """Every partial derivative up to ``order`` of an elementwise ``fn``, by sorted multi-index, each
    taken by torch.autograd.grad(create_graph=True) of the one below it."""
    found = {(): fn(*inputs)}
    below = dict(found)
    for _ in range(order):
        above = {}
        for index, value in below.items():
            grads = torch.autograd.grad(value.sum(), inputs, create_graph=True, allow_unused=True,
                                        materialize_grads=True)
            for i, grad in enumerate(grads):
                above.setdefault(tuple(sorted((*index, i))), grad)
        found.update(above)
        below = above
    return found


@functools.cache
def _exact_function(formula: sympy.Expr, variables: tuple, index: tuple[int, ...]):
    derivative = sympy.diff(formula, *(variables[i] for i in index)) if index else formula
    return sympy.lambdify(variables, derivative, "mpmath")


def _exact(formula: sympy.Expr, variables, index: tuple[int, ...], point) -> mpmath.mpf:
    with mpmath.workdps(DIGITS):
        return _exact_function(formula, tuple(variables), index)(*(mpmath.mpf(v) for v in point))


def _named(variables, index) -> str:
    return "d" + "".join(str(variables[i]) for i in index) if index else "f"


def _assert_exact(fn, inputs: list[float], formula: sympy.Expr, variables, order: int = ORDER) -> None:
    """Every order's partials at ``inputs`` finite and within RTOL of the largest exact one, where
    that is a normal float64 (the Coulomb potential's 1/r**3 at r = 1e-150 is not)."""
    tensors = [torch.tensor([value], dtype=torch.float64, requires_grad=True) for value in inputs]
    partials = _partials(fn, tensors, order)
    for k in range(order + 1):
        got = {index: float(value.detach()) for index, value in partials.items() if len(index) == k}
        want = {index: _exact(formula, variables, index, inputs) for index in got}
        scale = max(abs(w) for w in want.values())
        if scale > FLOAT64.max or 0 < scale < FLOAT64.smallest_normal:
            continue
        bad = {_named(variables, i): g for i, g in got.items() if not mpmath.isfinite(g)}
        assert not bad, f"order {k} at {inputs}: not finite: {bad}"
        errors = {_named(variables, i): float(abs(got[i] - want[i])) for i in got}
        assert max(errors.values()) <= RTOL * scale, (
            f"order {k} at {inputs}: errors {errors}, exact {[mpmath.nstr(w, 17) for w in want.values()]}")


# --- A: the envelope at x = 0 ----------------------------------------------------------------


def _envelope(key: str, p: float, r: float):
    """The envelope as SymPy with exact p and r (or r a variable), over x >= 0 and r > 0."""
    x, rs = sympy.Symbol("x", positive=True), sympy.Symbol("r", positive=True)
    text = ENVELOPES[key]["expr"]
    formula = sympy.sympify(text, locals={"x": x, "r": rs, "p": sympy.Rational(str(p))})
    if key == "trainable_r":
        return formula, [x, rs]
    return formula.subs(rs, sympy.Rational(str(r))), [x]


@pytest.mark.parametrize("key", ENVELOPES)
@pytest.mark.parametrize("p, r", [(5.0, 5.0), (6.0, 3.0), (5.5, 4.0)])
@pytest.mark.parametrize("share", [0.0, 0.25])
def test_envelope_derivatives_are_exact_at_x_0_and_r_over_4(built, key, p, r, share):
    """Orders 1-3 were NaN at x = 0 (the backward divided the bracket by x); they are 0 there, and
    right at x = r/4. The literal-exponent form (SymPy expands (x/r)**5) is checked alike."""
    if key == "integer_p" and (p, r) != (5.0, 5.0):
        pytest.skip("its exponents are literals")
    spec = ENVELOPES[key]
    domain = {"x": [0, 4.95], "r": [3, 6]} if key == "trainable_r" else {"x": [0, 4.95]}
    fn = built(key, **spec, order=ORDER, domain=domain)
    params = {name: value for name, value in (("p", p), ("r", r)) if name in spec["params"]}
    formula, variables = _envelope(key, p, r)
    inputs = [share * r, r][: len(variables)]
    _assert_exact(lambda *xs: fn(*xs, **params), inputs, formula, variables)


def test_a_division_by_a_factor_of_a_power_base_is_taken_into_the_power():
    """(x/r)**p differentiated: no division by x, with r a param or an input, also in the mixed partial."""
    x, r, p = sympy.symbols("x r p", real=True)
    for variable in (x, r):
        derivative = symbolic.clean(sympy.diff((x / r) ** p * (1 + x), x, variable))
        assert x not in symbolic.denominators(derivative), derivative
    assert symbolic.merge_powers(p * (x / r) ** p / x) == p * (x / r) ** (p - 1) / r
    # B**e over x with B = x**2*c: one step takes x**2 in, leaving x in the numerator
    assert symbolic.merge_powers((x**2 / r) ** p / x) == x * (x**2 / r) ** (p - 1) / r
    # a numeric exponent below the step would divide by the base: left alone
    assert symbolic.merge_powers(sympy.sqrt(x * r) / x) == sympy.sqrt(x * r) / x


# --- B: norms at 1e-150 ... 1e100 ---------------------------------------------------------------


def _points():
    for size, direction in itertools.product(NORM_SIZES, DIRECTIONS):
        length = sum(c * c for c in direction) ** 0.5
        yield [size * c / length for c in direction]


@pytest.mark.parametrize("key", NORMS)
def test_norm_derivatives_are_exact_from_1e_minus_150_to_1e100(built, key):
    """At a norm of 1e-150, d2/dx2 of the distance is (y**2 + z**2)/r**3 ~ 1e150, and order 3 ~ 1e300:
    representable, where (x**2 + y**2 + z**2)**(3/2) underflows; autograd through the backward (order 3
    of an order-2 spec) too, and the Coulomb potential's derivatives (1/r**2 ... 1/r**4)."""
    fn = built(key, inputs=["x", "y", "z"], domain={v: [0.3, 2] for v in "xyz"}, **NORMS[key])
    variables = sympy.symbols("x y z", real=True)
    formula = sympy.sympify(NORM if key == "safe_distance" else NORMS[key]["expr"],
                            locals=dict(zip("xyz", variables)))  # no point is the origin
    for point in _points():
        _assert_exact(fn, point, formula, variables)


@pytest.mark.parametrize("power, size", [(sympy.Rational(-3, 2), 1e-150), (sympy.Rational(-5, 2), 1e-100)])
def test_a_norms_roots_over_its_powers_are_printed_as_ratios(power, size):
    """x*y*(x**2 + y**2 + z**2)**power, as printed, is right where r**3 (r**5) underflows to 0 on the
    way to a representable value: (x/r)*(y/r)*(1/r) ((x/r)*(y/r)*(1/r)**3)."""
    x, y, z = sympy.symbols("x y z", real=True)
    formula = x * y * (x**2 + y**2 + z**2) ** power
    printed = in_ratios(stabilize(formula))
    assert stabilize(printed) == printed  # the rules leave the ratios alone
    code = TorchPrinter(["x", "y", "z"]).doprint(printed)
    point = size / 3**0.5
    names = {v: torch.tensor(point, dtype=torch.float64) for v in "xyz"}
    value = eval(code, {"torch": torch, **names})  # test code, printed from the formula above
    exact = formula.subs({v: sympy.Float(point, 30) for v in (x, y, z)})
    assert float(value) == pytest.approx(float(exact), rel=1e-13), code


def test_a_sum_of_a_norms_squares_is_printed_as_the_norm_squared():
    """The reduced second derivative of a distance, (y**2 + z**2)/r**3 (``norm_squares``), printed
    as y**2/(x**2 + y**2 + z**2)/r: 0/0 at a norm of 1e-200, where the squares underflow; as
    (y/r)**2/r + (z/r)**2/r it is exact."""
    x, y, z = sympy.symbols("x y z", real=True)
    formula = sympy.diff(sympy.sqrt(x**2 + y**2 + z**2), x, 2)
    code = TorchPrinter(["x", "y", "z"]).doprint(in_ratios(stabilize(formula)))
    point = {"x": 1e-200, "y": 2e-200, "z": -3e-200}
    value = eval(code, {"torch": torch, **{k: torch.tensor(v, dtype=torch.float64) for k, v in point.items()}})
    exact = formula.subs({sympy.Symbol(k, real=True): sympy.Float(v, 30) for k, v in point.items()})
    assert float(value) == pytest.approx(float(exact), rel=1e-13), code
