"""The checks of the generated tests, written once per tests folder by dbgen.

Each test_*.py beside this file holds one spec's data (a `Case`: the order, params,
domain, shapes, the composed expression, ...) and makes its pytest tests with
`make_tests`. They check the generated function against an independent reference,
autograd through the composed expression. In float64, on inputs drawn from the domain:
the value, gradcheck, gradgradcheck, every derivative order up to the spec's order
(contracted with fixed random cotangents, so mixed partials count), `native`, the
torch.func transforms, vmap, forward-mode AD and torch.compile (marked `compile`). In
float32: every order up to 3, no less accurate than autograd through the composed
expression in float32. The tests that take `params` run at the params' defaults and at
other values: at a default of 1.0 a wrong power of a param (beta**2) is invisible.

The test files import this file by path, under a name of their folder's own, as they
import the module they test: it needs no package marker, no sys.path entry and no dbgen
installed, and two output folders in one pytest session do not share it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import inspect
import itertools
import math
import pathlib
import struct
import sys
from collections.abc import Callable

import mpmath
import pytest
import torch
import torch.func
from torch.autograd import forward_ad

RTOL, ATOL = 1e-7, 1e-9
# float32 may be this many times less accurate than autograd through the composed
# expression in float32 (plus Case.float32_rtol relative, 1e-6 absolute): room for a different but
# equally good order of roundings over three orders; a formula that cancels where
# autograd's does not loses far more
FLOAT32_FACTOR = 8


def load(path: pathlib.Path, prefix: str):
    """The Python file at `path`, imported under a name of its own: `prefix` and a hash
    of the path, as two output folders may hold files of the same name. Registered in
    sys.modules: torch.compile looks Functions up by module name."""
    name = f"{prefix}_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclasses.dataclass(frozen=True)
class Case:
    """One spec's data: what its test file checks, and against what."""

    module: object  # the generated module
    name: str  # the function's name in it
    # the expression written directly in torch ops, differentiated by autograd (a tuple of
    # them, or stacked, for a vector-valued spec)
    reference: Callable
    order: int
    strategy: str  # the concrete strategy the module must record
    domain: dict  # input -> (lo, hi): where the float64 tests draw it from
    shapes: dict  # input -> shape: shapes that broadcast together, a scalar among them
    # input -> float32 stability points: the domain's ends, and +-20, +-40, +-100 where
    # the spec sets no domain
    stability_points: dict
    params: dict = dataclasses.field(default_factory=dict)  # the params' defaults
    # other values of every param, chosen by dbgen at build time (a fixed scaling that
    # keeps the sign, checked to keep the function finite on the domain); None where no
    # values did
    other_params: dict | None = None
    native: str | None = None  # an equivalent torch function: a second reference
    fuse: bool = False
    cpp: bool = False  # the module also has the C++ op (cpp: true), which its public function calls
    # input -> the values in its domain where a branch's condition changes (x > 0: 0.0),
    # at the params' defaults
    boundaries: dict = dataclasses.field(default_factory=dict)
    # torch's own error in float64 for the special functions the spec calls, where it is
    # larger than RTOL, ATOL allow (bessel_j0 is off by up to 4e-7): the float64 tolerance
    accuracy: float = 0.0
    # float32's relative bound beyond autograd's own error; a spec calling special functions
    # torch cannot differentiate is compared with mpmath (rounded to float32, no error of its
    # own), and their derivatives sum terms of both signs: 1e-3 there
    float32_rtol: float = 1e-4
    # a vector-valued spec: its outputs' names, and whether it stacks them. Its checks run on
    # a weighted sum of the outputs in `used` (all by default): the others go unused, their
    # cotangents None
    outputs: tuple = ()
    stack: bool = False
    used: tuple | None = None
    # the spec calls external functions (SciPy's, or its externs): derivatives past `order`
    # raise, and torch.compile breaks the graph at each call
    order_limited: bool = False
    # exact values, computed by dbgen at build time with mpmath: (dtype, point, output,
    # partial (the inputs differentiated in, by position), value rounded to dtype, bits
    # of error allowed: the bound plus the point's conditioning), params at the defaults
    exact: tuple = ()
    # input -> the intervals inside `domain` where autograd through the composed expression is
    # accurate (measured by dbgen at build time against mpmath, at every order), for the tests
    # that compare with it; None: the whole domain. Beyond them the exact values check the
    # function (softplus(10*x)/10 as log(1 + exp(10*x))/10 is -100 at order 3 at x = 25)
    reference_domain: dict | None = None

    @property
    def tolerance(self) -> dict:
        """rtol and atol of the float64 comparisons: RTOL, ATOL, or torch's own error."""
        if not self.accuracy:
            return {"rtol": RTOL, "atol": ATOL}
        return {"rtol": max(RTOL, self.accuracy), "atol": max(ATOL, self.accuracy)}

    @property
    def function(self):
        """The function under test, looked up at each call: a test may replace it (a
        weighted sum of the outputs for a vector-valued spec)."""
        return self._combined(getattr(self.module, self.name))

    @property
    def composed(self):
        """The reference, as `function` combines the outputs."""
        return self._combined(self.reference)

    def _combined(self, function):
        if not self.outputs:
            return function
        used = range(len(self.outputs)) if self.used is None else self.used

        @functools.wraps(function)
        def weighted_sum(*args, **kwargs):
            values = self.split(function(*args, **kwargs))
            return sum(OUTPUT_WEIGHTS[k % len(OUTPUT_WEIGHTS)] * values[k] for k in used)

        return weighted_sum

    def split(self, value):
        """A vector-valued spec's outputs, one tensor each, whether stacked or a tuple."""
        return value.unbind(-1) if self.stack else value

    @property
    def param_sets(self) -> list[dict]:
        """The values of the params that the tests taking `params` run at."""
        return [self.params, *([self.other_params] if self.other_params else [])]

    def inputs(self, seed: int, dtype=torch.float64, reference: bool = False) -> list[torch.Tensor]:
        """One tensor per input, drawn from its domain in its shape, requiring grad; with
        `reference`, from where the composed expression is accurate (`reference_domain`)."""
        generator = torch.Generator().manual_seed(seed)
        inputs = []
        for name, bounds in self.domain.items():
            intervals = self.reference_domain[name] if reference and self.reference_domain else (bounds,)
            sample = torch.rand(self.shapes[name], generator=generator, dtype=torch.float64)
            inputs.append(_spread(sample, intervals).to(dtype).requires_grad_())
        return inputs

    def boundary_inputs(self, name: str, seed: int) -> list[torch.Tensor]:
        """Input `name` on each of its boundaries and just either side of it (inside
        the domain), the other inputs drawn from their domains: 1-D, requiring grad."""
        lo, hi = self.domain[name]
        step = (hi - lo) * 1e-2
        values = sorted({v + d for v in self.boundaries[name] for d in (-step, 0.0, step)
                         if lo <= v + d <= hi})
        generator = torch.Generator().manual_seed(seed)
        inputs = []
        for other, (a, b) in self.domain.items():
            if other == name:
                column = torch.tensor(values, dtype=torch.float64)
            else:
                column = a + (b - a) * torch.rand(len(values), generator=generator, dtype=torch.float64)
            inputs.append(column.requires_grad_())
        return inputs

    def point(self, seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Inputs without grad, and random tangents like them: for torch.func."""
        inputs = [x.detach() for x in self.inputs(seed)]
        generator = torch.Generator().manual_seed(seed)
        tangents = [torch.randn(x.shape, generator=generator, dtype=x.dtype) for x in inputs]
        return inputs, tangents

    def stability_columns(self) -> tuple[torch.Tensor, ...]:
        """Each input in turn at each of its stability points, the others at each end
        of their domain: one float32 column per input.

        One far input at a time: with two far inputs the float64 reference itself can
        fail (autograd through log(1 + exp(-x*y)) at x*y = -400 loses its second
        derivative to underflow).
        """
        names = list(self.stability_points)
        rows = set()
        for index, name in enumerate(names):
            others = [self.domain[other] for other in names if other != name]
            for value in self.stability_points[name]:
                for ends in itertools.product(*others):
                    rows.add((*ends[:index], value, *ends[index:]))
        columns = torch.tensor(sorted(rows), dtype=torch.float32)
        return columns.reshape(-1, len(names)).unbind(-1)


def _noise(generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """Fixed random cotangents in float64, in `like`'s shape and dtype."""
    noise = torch.randn(like.shape, generator=generator, dtype=torch.float64)
    return noise.to(like.dtype)


def _bessel(function, sign, overall=1):
    """The k-th derivative of a Bessel function of order n: (overall/2)**k sum_j binom(k, j)
    sign**j F(n - k + 2j) (DLMF 10.6.7, 10.29.5: sign -1 for J and Y, +1 for I and K; overall
    -1 for K)."""

    def derivative(n, k, t):
        terms = sum(mpmath.binomial(k, j) * sign**j * function(n - k + 2 * j, t) for j in range(k + 1))
        return terms * (mpmath.mpf(overall) / 2) ** k

    return derivative


def _scaled(derivative, rate):
    """The k-th derivative of exp(rate(t)) F(t), rate linear on each side of 0 (Leibniz)."""

    def scaled(n, k, t):
        slope = rate(1) if t > 0 else -rate(1) if t < 0 else 0
        return mpmath.exp(rate(t)) * sum(
            mpmath.binomial(k, j) * slope ** (k - j) * derivative(n, j, t) for j in range(k + 1)
        )

    return scaled


_J, _Y, _I = _bessel(mpmath.besselj, -1), _bessel(mpmath.bessely, -1), _bessel(mpmath.besseli, 1)
_K = _bessel(mpmath.besselk, 1, overall=-1)
# The special functions by mpmath: (k-th derivative of F_n at t, n) for the composed expression,
# an independent reference to every order where torch has no derivative (bessel_j0, ...) or none
# exact at every order (autograd's second derivative of torch.sinc is NaN at 0).
_MPMATH = {
    "bessel_j0": (_J, 0),
    "bessel_j1": (_J, 1),
    "bessel_y0": (_Y, 0),
    "bessel_y1": (_Y, 1),
    "i0": (_I, 0),
    "i1": (_I, 1),
    "i0e": (_scaled(_I, lambda t: -abs(t)), 0),
    "i1e": (_scaled(_I, lambda t: -abs(t)), 1),
    "modified_bessel_k0": (_K, 0),
    "modified_bessel_k1": (_K, 1),
    "scaled_modified_bessel_k0": (_scaled(_K, lambda t: t), 0),
    "scaled_modified_bessel_k1": (_scaled(_K, lambda t: t), 1),
    "spherical_bessel_j0": (lambda n, k, t: mpmath.diff(mpmath.sinc, t, k), 0),
    "sinc": (lambda n, k, t: mpmath.diff(mpmath.sincpi, t, k), 0),
}


def _real(value) -> float:
    """An mpmath value as a float: NaN where it is complex (outside the function's
    domain); an imaginary part of rounding (I_n(-t)'s, ~1e-30) is dropped."""
    value = mpmath.mpmathify(value)
    if isinstance(value, mpmath.mpc):
        return float(value.real) if abs(value.imag) <= 1e-20 * abs(value) else float("nan")
    return float(value)


def _mpmath_derivative(name: str, k: int, t: float) -> float:
    """The k-th derivative of special function `name` at t, to 30 digits."""
    derivative, n = _MPMATH[name]
    with mpmath.workdps(30):
        return _real(derivative(n, k, mpmath.mpf(t)))


# SciPy's functions (external functions of the language) by mpmath, for the composed
# expression: differentiated in their last argument by mpmath.diff at 30 digits
_SCIPY_MPMATH = {
    "jv": mpmath.besselj,
    "yv": mpmath.bessely,
    "iv": mpmath.besseli,
    "kv": mpmath.besselk,
    "ive": lambda nu, t: mpmath.besseli(nu, t) * mpmath.exp(-abs(t)),
    "kve": lambda nu, t: mpmath.besselk(nu, t) * mpmath.exp(t),
    "expi": mpmath.ei,
    "expn": mpmath.expint,
    "gammainc": lambda a, t: mpmath.gammainc(a, 0, t, regularized=True),
    "gammaincc": lambda a, t: mpmath.gammainc(a, t, mpmath.inf, regularized=True),
    "lambertw": mpmath.lambertw,
    "zeta": mpmath.zeta,
    "fresnel_s": mpmath.fresnels,
    "fresnel_c": mpmath.fresnelc,
    "airy_ai": mpmath.airyai,
    "airy_ai_prime": lambda t: mpmath.airyai(t, derivative=1),
    "airy_bi": mpmath.airybi,
    "airy_bi_prime": lambda t: mpmath.airybi(t, derivative=1),
    "struve": mpmath.struveh,
    "ellipk": mpmath.ellipk,
    "ellipe": mpmath.ellipe,
}


def _scipy_derivative(name: str, k: int, t: float, constants) -> float:
    """The k-th derivative of SciPy's `name` in its last argument at t, to 30 digits."""
    function = _SCIPY_MPMATH[name]
    with mpmath.workdps(30):
        point = mpmath.mpf(t)
        if k == 0:
            return _real(function(*constants, point))
        return _real(mpmath.diff(lambda u: function(*constants, u), point, k))


def _derivative(name: str, k: int, t: float, constants) -> float:
    """The k-th derivative of `name` (a special function, or SciPy's with `constants`
    before its last argument) at t."""
    if name in _MPMATH:
        return _mpmath_derivative(name, k, t)
    return _scipy_derivative(name, k, t, constants)


class _Mpmath(torch.autograd.Function):
    """The k-th derivative of a special or SciPy function by mpmath, elementwise in x
    (the arguments before it numbers); its backward is the next derivative, so autograd
    differentiates it to every order."""

    @staticmethod
    def forward(name, k, x, *constants):
        values = [_derivative(name, k, t, constants) for t in x.detach().flatten().tolist()]
        return torch.tensor(values, dtype=x.dtype, device=x.device).reshape(x.shape)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.name, ctx.k, x, *ctx.constants = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        derivative = _Mpmath.apply(ctx.name, ctx.k + 1, x, *ctx.constants)
        return (None, None, grad * derivative, *(None for _ in ctx.constants))

    @staticmethod
    def jvp(ctx, _name_tangent, _k_tangent, tangent, *_constant_tangents):
        (x,) = ctx.saved_tensors
        return tangent * _Mpmath.apply(ctx.name, ctx.k + 1, x, *ctx.constants)

    @staticmethod
    def vmap(info, in_dims, name, k, x, *constants):
        return _Mpmath.apply(name, k, x, *constants), in_dims[2]


def special(name: str, x: torch.Tensor) -> torch.Tensor:
    """Special function `name` (as specs write it) of `x`, by mpmath, differentiable."""
    return _Mpmath.apply(name, 0, x)


def scipy_reference(name: str, *args):
    """SciPy's function `name` (as specs write it) of `args` by mpmath, differentiable
    in its last argument to every order."""
    *constants, x = args
    if not isinstance(x, torch.Tensor):
        return _scipy_derivative(name, 0, x, constants)
    return _Mpmath.apply(name, 0, x, *constants)


# A spec's externs as it declares them: key -> (implementation "module:callable", one
# derivative per argument: a function of the arguments, or None)
_DECLARED = {}


def declare(key: str, impl: str, derivatives) -> None:
    _DECLARED[key] = (impl, tuple(derivatives))


@functools.cache
def implementation(impl: str):
    """The callable `impl` ("module:callable") names."""
    module, _, attribute = impl.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _batch_first(dims, args):
    """vmapped arguments, batched ones with the batch dimension first, padded to
    broadcast against the others."""
    tensors = [(arg, dim) for arg, dim in zip(args, dims) if isinstance(arg, torch.Tensor)]
    rank = max((arg.dim() - (dim is not None) for arg, dim in tensors), default=0)
    moved = []
    for arg, dim in zip(args, dims):
        if dim is not None:
            arg = arg.movedim(dim, 0)
            arg = arg.reshape(arg.shape[:1] + (1,) * (rank + 1 - arg.dim()) + arg.shape[1:])
        moved.append(arg)
    return moved


class _Declared(torch.autograd.Function):
    """A declared extern: its implementation's value, and as its backward its declared
    derivatives (which call declared externs again, so autograd goes to every order)."""

    @staticmethod
    def forward(key, *args):
        tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
        detached = [arg.detach() if isinstance(arg, torch.Tensor) else arg for arg in args]
        value = implementation(_DECLARED[key][0])(*detached)
        dtype = functools.reduce(torch.promote_types, [t.dtype for t in tensors])
        return torch.as_tensor(value).to(tensors[0].device, dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.key, *args = inputs
        ctx.layout = [None if isinstance(arg, torch.Tensor) else arg for arg in args]
        tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
        ctx.save_for_backward(*tensors)
        ctx.save_for_forward(*tensors)

    @staticmethod
    def _arguments(ctx):
        tensors = iter(ctx.saved_tensors)
        return [next(tensors) if slot is None else slot for slot in ctx.layout]

    @staticmethod
    def backward(ctx, grad):
        args = _Declared._arguments(ctx)
        derivatives = _DECLARED[ctx.key][1]
        grads = []
        for index, (arg, derivative) in enumerate(zip(args, derivatives)):
            if ctx.layout[index] is not None or derivative is None or not ctx.needs_input_grad[index + 1]:
                grads.append(None)
                continue
            grads.append((grad * derivative(*args)).sum_to_size(arg.shape))
        return (None, *grads)

    @staticmethod
    def jvp(ctx, _key_tangent, *tangents):
        args = _Declared._arguments(ctx)
        derivatives = _DECLARED[ctx.key][1]
        terms = [
            tangent * derivative(*args)
            for tangent, derivative, slot in zip(tangents, derivatives, ctx.layout)
            if slot is None and tangent is not None and derivative is not None
        ]
        if not terms:
            return torch.zeros_like(ctx.saved_tensors[0])
        return sum(terms[1:], terms[0])

    @staticmethod
    def vmap(info, in_dims, key, *args):
        return _Declared.apply(key, *_batch_first(in_dims[1:], args)), 0


def declared(key: str, *args):
    """The declared extern `key` of `args`, differentiable to every order."""
    if not any(isinstance(arg, torch.Tensor) for arg in args):
        return float(implementation(_DECLARED[key][0])(*args))
    return _Declared.apply(key, *args)


# distinct weights, of both signs, for the outputs of a vector-valued spec: a gradient arriving
# on one output is not the same as one arriving on another
OUTPUT_WEIGHTS = (1.0, -0.7, 1.3, 0.55, -1.15, 0.85, -0.4, 1.45)


def _grads(scalar, inputs, create_graph=True):
    return torch.autograd.grad(
        scalar, inputs, create_graph=create_graph, allow_unused=True, materialize_grads=True
    )


def derivative_chain(fn, inputs, order, seed, params):
    """[value, gradients of order 1, ..., gradients of order `order`], each level
    contracted with the same fixed random cotangents, whatever `fn` is."""
    generator = torch.Generator().manual_seed(seed)
    value = fn(*inputs, **params)
    chain = [value]
    scalar = (value * _noise(generator, value)).sum()
    for _ in range(order):
        if scalar.requires_grad:
            grads = _grads(scalar, inputs)
        else:
            grads = tuple(torch.zeros_like(x) for x in inputs)
        chain.append(grads)
        scalar = sum((g * _noise(generator, g)).sum() for g in grads)
    return chain


def elementwise_derivatives(fn, inputs, order, params):
    """[[value], [d/dx_i], [d2/dx_i dx_j], ...]: every partial derivative, elementwise,
    up to `order`."""
    levels = [[fn(*inputs, **params)]]
    for _ in range(order):
        following = []
        for derivative in levels[-1]:
            if derivative.requires_grad:
                following += _grads(derivative.sum(), inputs)
            else:
                following += [torch.zeros_like(x) for x in inputs]
        levels.append(following)
    return levels


def assert_float32_close(case: Case, params: dict) -> None:
    """Every order up to min(order, 3) in float32 against the composed expression in
    float64.

    Float32 cannot do better than its roundings allow (cancellation, saturation): the
    bound grows with the error of autograd through the composed expression in float32 at
    the same points, so this fails only where the generated code is worse than plain
    torch. Where plain torch is not finite in float32, nothing is demanded (a finite
    result there is a win, not a promise).
    """
    columns = case.stability_columns()
    order = min(case.order, 3)
    in_float32 = [c.clone().requires_grad_() for c in columns]
    ours = elementwise_derivatives(case.function, in_float32, order, params)
    in_float32 = [c.clone().requires_grad_() for c in columns]
    plain = elementwise_derivatives(case.composed, in_float32, order, params)
    in_float64 = [c.double().requires_grad_() for c in columns]
    truth = elementwise_derivatives(case.composed, in_float64, order, params)
    in_float64 = [c.double().requires_grad_() for c in columns]
    ours64 = elementwise_derivatives(case.function, in_float64, order, params)
    largest = torch.finfo(torch.float32).max
    for level, levels in enumerate(zip(ours, plain, truth, ours64)):
        for index, (got, torch_got, want, own) in enumerate(zip(*levels)):
            got = got.detach().double()
            want = _undisputed(want.detach(), own.detach(), case.tolerance)
            torch_got = torch_got.detach().double()
            # compared where the truth is finite, a float32 can hold it, and plain torch
            # is finite
            where = torch.isfinite(want) & (want.abs() <= largest)
            where &= torch.isfinite(torch_got)
            error = (got - want).abs()
            torch_error = (torch_got - want).abs()
            bound = case.float32_rtol * want.abs() + 1e-6 * want.abs().clamp(min=1)
            bad = where & ~(error <= bound + FLOAT32_FACTOR * torch_error)
            points = [c[bad].tolist() for c in columns]
            assert not bad.any(), (
                f"order {level}, derivative {index}: at {points} got {_digits(got[bad])}, "
                f"want {_digits(want[bad])}, autograd through the composed expression "
                f"in float32 gets {_digits(torch_got[bad])} (relative error "
                f"{_digits((error / want.abs())[bad])}, allowed {case.float32_rtol:.1e})"
            )


def _undisputed(reference: torch.Tensor, own: torch.Tensor, tolerance: dict) -> torch.Tensor:
    """The float32 test's target: the float64 reference, but where the module's own float64
    value is finite and differs from it, that value. There the two float64 values disagree
    on the point itself, not on float32's roundings: on a kink the module's formula is smooth
    through (abs(x - y) + log1p(exp(-2*abs(x - y))), which is log(cosh(x - y)): its second
    derivative at x == y is 1, where autograd follows abs's convention and gives 0). The
    float64 tests and the exact values own such points."""
    close = torch.isclose(own, reference, rtol=tolerance["rtol"], atol=tolerance["atol"])
    disputed = torch.isfinite(own) & torch.isfinite(reference) & ~close
    return torch.where(disputed, own, reference)


def _digits(values: torch.Tensor) -> str:
    """`values` with every digit a float64 holds: 0.0066405796 and 0.0066440753, not 0.0066 twice."""
    return "[" + ", ".join(f"{value:.17g}" for value in values.tolist()) + "]"


def elementwise(native: Callable) -> Callable:
    """`native`, elementwise: a loss (huber_loss, smooth_l1_loss, ...) with reduction="none"."""
    try:
        keywords = inspect.signature(native).parameters
    except (TypeError, ValueError):  # a builtin without a signature takes no reduction
        return native
    return functools.partial(native, reduction="none") if "reduction" in keywords else native


def _summed(fn):
    return lambda *inputs: fn(*inputs).sum()


def _transforms(argnums: tuple[int, ...]) -> dict[str, Callable]:
    """torch.func transforms, each applied to a function, inputs and tangents."""
    func = torch.func
    return {
        "grad": lambda f, xs, ts: func.grad(_summed(f), argnums=argnums)(*xs),
        "jacrev": lambda f, xs, ts: func.jacrev(f, argnums=argnums)(*xs),
        "jacfwd": lambda f, xs, ts: func.jacfwd(f, argnums=argnums)(*xs),
        "hessian": lambda f, xs, ts: func.hessian(_summed(f), argnums=argnums)(*xs),
        "jvp": lambda f, xs, ts: func.jvp(f, tuple(xs), tuple(ts)),
    }


TRANSFORMS = sorted(_transforms(()))


def _chain_with_plain_last_level(fn, inputs, order, seed, params):
    """derivative_chain, but the last gradient without create_graph, as a training step
    takes it."""
    generator = torch.Generator().manual_seed(seed)
    value = fn(*inputs, **params)
    chain = [value.detach()]
    scalar = (value * _noise(generator, value)).sum()
    for level in range(order):
        grads = _grads(scalar, inputs, create_graph=level < order - 1)
        chain.append(tuple(g.detach() for g in grads))
        scalar = sum((g * _noise(generator, g)).sum() for g in grads)
    return chain


def _spread(sample: torch.Tensor, intervals) -> torch.Tensor:
    """Uniform samples in [0, 1) mapped onto the intervals, each its share by length."""
    lengths = torch.tensor([hi - lo for lo, hi in intervals], dtype=torch.float64)
    ends = torch.cumsum(lengths, 0) / lengths.sum()
    which = torch.clamp(torch.searchsorted(ends, sample, right=True), max=len(intervals) - 1)
    starts = torch.cat([torch.zeros(1, dtype=torch.float64), ends[:-1]])
    los = torch.tensor([lo for lo, _ in intervals], dtype=torch.float64)
    share = (sample - starts[which]) / (ends[which] - starts[which])
    return los[which] + share * lengths[which]


def assert_order_matches_composed(case: Case, inputs, order: int, params: dict) -> None:
    """The gradients of order `order` (random cotangents at every level) of the function
    under test are autograd's through the composed expression, in shape and value, where
    autograd's are finite; where they are not (softplus(10*x)/10 written log(1 + exp(10*x))/10
    overflows from x = 39 at order 3), the function's must be (the exact values' test says
    whether they are right there)."""
    actual = derivative_chain(case.function, inputs, order, order, params)
    expected = derivative_chain(case.composed, inputs, order, order, params)
    for index, (got, want) in enumerate(zip(actual[-1], expected[-1])):
        shapes = tuple(got.shape), tuple(want.shape)
        assert shapes[0] == shapes[1], f"input {index}: shape {shapes[0]}; want {shapes[1]}"
        usable = torch.isfinite(want)
        if not usable.all():
            unusable = got.detach()[~usable]
            assert torch.isfinite(unusable).all(), f"input {index}: not finite: {unusable}"
            got, want = got[usable], want[usable]
        torch.testing.assert_close(got, want, **case.tolerance, msg=lambda m, i=index: f"input {i}: {m}")


def _output_tests(case: Case) -> dict[str, Callable]:
    """The checks of a vector-valued spec's outputs themselves: returned as the spec
    orders them, and every order with each output alone and with a subset used (the
    others' cotangents None), against the composed expressions."""
    count = len(case.outputs)
    subsets = [(k,) for k in range(count)]
    if count > 2:
        subsets.append(tuple(range(0, count, 2)))

    def test_outputs_are_returned_in_the_specs_order():
        inputs = case.inputs(5, reference=True)
        actual = getattr(case.module, case.name)(*inputs, **case.params)
        expected = case.reference(*inputs, **case.params)
        shape = tuple(torch.broadcast_shapes(*(x.shape for x in inputs)))
        if case.stack:
            assert tuple(actual.shape) == (*shape, count), f"stacked shape {tuple(actual.shape)}"
        else:
            assert isinstance(actual, tuple) and len(actual) == count, f"{type(actual)}, {count} outputs"
            assert all(tuple(value.shape) == shape for value in actual)
        for name, got, want in zip(case.outputs, case.split(actual), case.split(expected)):
            torch.testing.assert_close(got, want, **case.tolerance, msg=lambda m, n=name: f"{n}: {m}")

    @pytest.mark.parametrize("used", subsets, ids=lambda used: "+".join(case.outputs[k] for k in used))
    @pytest.mark.parametrize("order", range(1, case.order + 1))
    def test_derivatives_of_some_outputs_match_composed(order, used):
        some = dataclasses.replace(case, used=used)
        assert_order_matches_composed(some, case.inputs(40 + order, reference=True), order, case.params)

    return {test.__name__: test for test in (test_outputs_are_returned_in_the_specs_order,
                                             test_derivatives_of_some_outputs_match_composed)}


def _level_scalar(fn, inputs, level, seed, params):
    """The scalar whose gradient is level `level` + 1 of derivative_chain (the same
    cotangents)."""
    generator = torch.Generator().manual_seed(seed)
    value = fn(*inputs, **params)
    scalar = (value * _noise(generator, value)).sum()
    for _ in range(level):
        grads = _grads(scalar, inputs)
        scalar = sum((g * _noise(generator, g)).sum() for g in grads)
    return scalar


def _order_limit_tests(case: Case) -> dict[str, Callable]:
    """The checks of a spec that calls external functions: differentiating past its
    order raises the error that says to raise it, in autograd and under torch.func; and
    each order is the derivative of the one below by central differences (of the
    implementations themselves, whatever their declared derivatives say)."""
    message = f"derivatives above order {case.order} are not generated"

    def test_derivatives_past_the_order_raise():
        inputs = case.inputs(7)
        chain = derivative_chain(case.function, inputs, case.order, 7, case.params)
        scalar = sum(g.sum() for g in chain[-1])
        with pytest.raises(RuntimeError, match=message):
            torch.autograd.grad(scalar, inputs, allow_unused=True)
        nested = _summed(functools.partial(case.function, **case.params))
        for _ in range(case.order):
            nested = _summed(torch.func.grad(nested))
        assert torch.isfinite(nested(*inputs)), f"order {case.order} under torch.func"
        with pytest.raises(RuntimeError, match=message):
            torch.func.grad(nested)(*inputs)

    @pytest.mark.parametrize("order", range(1, case.order + 1))
    def test_each_order_is_the_difference_quotient_of_the_one_below(order):
        inputs = case.inputs(50 + order)
        exact = derivative_chain(case.function, inputs, order, 50 + order, case.params)[-1]
        generator = torch.Generator().manual_seed(order)
        directions = [torch.randn(x.shape, generator=generator, dtype=x.dtype) for x in inputs]
        step = 1e-5
        sides = []
        for sign in (1, -1):
            moved = [(x + sign * step * d).detach().requires_grad_() for x, d in zip(inputs, directions)]
            sides.append(_level_scalar(case.function, moved, order - 1, 50 + order, case.params).detach())
        quotient = (sides[0] - sides[1]) / (2 * step)
        directional = sum((g * d).sum() for g, d in zip(exact, directions)).detach()
        torch.testing.assert_close(directional, quotient, rtol=1e-5, atol=1e-6)

    return {test.__name__: test for test in (test_derivatives_past_the_order_raise,
                                             test_each_order_is_the_difference_quotient_of_the_one_below)}


def _ordered(value: float, dtype: str) -> int:
    """The float's place among all floats of `dtype` (-0.0 and 0.0 both 0)."""
    fmt, ifmt, width = {"float64": ("<d", "<q", 64), "float32": ("<f", "<i", 32)}[dtype]
    bits = struct.unpack(ifmt, struct.pack(fmt, value))[0]
    return bits if bits >= 0 else -(bits & ((1 << (width - 1)) - 1))


def bits_of_error(result: float, exact: float, dtype: str) -> float:
    """log2(1 + the floats of `dtype` between `result` and `exact`), every bit where
    `result` is not finite."""
    width = 64 if dtype == "float64" else 32
    if not math.isfinite(result):
        return float(width)
    return math.log2(1 + abs(_ordered(result, dtype) - _ordered(exact, dtype)))


def exact_partials(case: Case, dtype: str, rows) -> list[float]:
    """The generated function's value or partial derivative for each row, by autograd at
    the rows' points (params at their defaults)."""
    points = sorted({row[1] for row in rows})
    place = {point: i for i, point in enumerate(points)}
    xs = [
        torch.tensor(column, dtype=getattr(torch, dtype)).requires_grad_()
        for column in zip(*points)
    ]
    function = getattr(case.module, case.name)
    found = {}
    with torch.enable_grad():
        values = function(*xs, **case.params)
        if case.stack:
            values = values.unbind(-1)
        elif not case.outputs:
            values = (values,)
        for output, index in sorted({(row[2], row[3]) for row in rows}):
            value = values[output]
            for depth, i in enumerate(index):
                if not value.requires_grad:
                    value = torch.zeros_like(xs[i])
                    break
                (value,) = torch.autograd.grad(
                    value.sum(), xs[i], create_graph=depth + 1 < len(index),
                    retain_graph=True, allow_unused=True,
                )
                value = torch.zeros_like(xs[i]) if value is None else value
            found[(output, index)] = value.detach().tolist()
    return [found[(row[2], row[3])][place[row[1]]] for row in rows]


def _exact_failures(case: Case, dtype: str) -> list[str]:
    rows = [row for row in case.exact if row[0] == dtype]
    failures = []
    for row, result in zip(rows, exact_partials(case, dtype, rows)):
        _, point, output, index, exact, allowed = row
        lost = bits_of_error(result, exact, dtype)
        if lost > allowed:
            where = ", ".join(repr(v) for v in point)
            failures.append(
                f"output {output}, partial {index} at ({where}): {result!r}, exact "
                f"{exact!r} ({lost:.1f} bits of error, {allowed} allowed)"
            )
    return failures


def make_tests(case: Case) -> dict[str, Callable]:
    """The pytest tests of `case` by name, and the `params` fixture they take: a test
    file puts them in its globals, where pytest collects them."""
    tests = {}

    def test(function):
        tests[function.__name__] = function
        return function

    def at(params):
        """The function under test with `params` bound."""
        return functools.partial(case.function, **params)

    def composed_at(params):
        return functools.partial(case.composed, **params)

    if case.other_params:

        @pytest.fixture(params=case.param_sets, ids=["default_params", "other_params"])
        def params(request):
            """The tests that take `params` run at the defaults and at other values."""
            return request.param

    else:

        @pytest.fixture
        def params():
            return case.params

    tests["params"] = params

    @test
    def test_spec_unchanged():
        """The spec the module was built from still says what it said then: tests that
        pass against a spec edited since (a higher order, another formula) prove nothing.
        dbgen's own comparison; skipped where dbgen or the spec file is not there."""
        try:
            from codegen.build.pipeline import spec_state
        except ImportError:
            pytest.skip("dbgen is not installed here: the spec is not compared")
        found = spec_state(pathlib.Path(case.module.__file__))
        if found.state == "absent":
            pytest.skip(found.message)
        if found.state != "current":
            pytest.fail(found.message, pytrace=False)

    @test
    def test_module_constants():
        got = (case.module.ORDER, case.module.STRATEGY)
        want = (case.order, case.strategy)
        assert got == want, f"ORDER, STRATEGY = {got}; want {want}"

    @test
    @pytest.mark.parametrize("seed", [0, 1])
    def test_value_matches_composed(seed, params):
        inputs = case.inputs(seed, reference=True)
        actual = case.function(*inputs, **params)
        expected = case.composed(*inputs, **params)
        got = (tuple(actual.shape), actual.dtype)
        want = (tuple(torch.broadcast_shapes(*(x.shape for x in inputs))), torch.float64)
        assert got == want, f"shape, dtype = {got}; want {want}"
        torch.testing.assert_close(actual, expected, **case.tolerance)

    if case.exact:

        @test
        @pytest.mark.parametrize("dtype", sorted({row[0] for row in case.exact}))
        def test_exact_values(dtype):
            """Each order against exact values (mpmath), within the bound in bits."""
            failures = _exact_failures(case, dtype)
            assert not failures, f"{len(failures)} exact value(s) missed:\n" + "\n".join(
                failures[:10]
            )

    if case.cpp:

        @test
        def test_cpp_op_matches_the_python_functions_at_every_order(params, monkeypatch):
            """The public function's C++ op and the module's Python Functions compute the
            same formulas: equal to 1e-12 at every order, float64."""
            if case.module._OP is None:
                pytest.skip("the C++ op could not be built here (the module warned why)")
            inputs = case.inputs(40, reference=True)
            through_op = derivative_chain(case.function, inputs, case.order, 40, params)
            monkeypatch.setattr(case.module, "_OP", None)
            in_python = derivative_chain(case.function, inputs, case.order, 40, params)
            for level, (got, want) in enumerate(zip(through_op, in_python)):
                torch.testing.assert_close(
                    got, want, rtol=1e-12, atol=1e-12, msg=lambda m, k=level: f"order {k}: {m}"
                )

    @test
    def test_gradcheck(params):
        assert torch.autograd.gradcheck(at(params), case.inputs(2))

    if case.outputs:
        tests.update(_output_tests(case))

    if case.order >= 2:

        @test
        def test_gradgradcheck(params):
            assert torch.autograd.gradgradcheck(at(params), case.inputs(3))

    @test
    @pytest.mark.parametrize("order", range(1, case.order + 1))
    def test_derivatives_match_composed(order, params):
        assert_order_matches_composed(case, case.inputs(10 + order, reference=True), order, params)

    if case.boundaries:

        @test
        @pytest.mark.parametrize("name", sorted(case.boundaries))
        def test_both_sides_of_each_boundary_and_on_it(name, params):
            """Every order at and around where a branch's condition changes: finite, and
            the derivative of the branch the condition selects there."""
            inputs = case.boundary_inputs(name, 30)
            actual = derivative_chain(case.function, inputs, case.order, 30, params)
            expected = derivative_chain(case.composed, inputs, case.order, 30, params)
            for level, (got, want) in enumerate(zip(actual[1:], expected[1:]), start=1):
                for index, (g, w) in enumerate(zip(got, want)):
                    assert torch.isfinite(g).all(), f"order {level}, input {index}: {g}"
                    torch.testing.assert_close(g, w, **case.tolerance)

    @test
    def test_float32_keeps_dtype_and_shapes():
        inputs = case.inputs(4, dtype=torch.float32)
        order = min(case.order, 2)
        chain = derivative_chain(case.function, inputs, order, 4, case.params)
        assert chain[0].dtype == torch.float32, f"value dtype {chain[0].dtype}"
        for level, grads in enumerate(chain[1:], start=1):
            for grad, x in zip(grads, inputs):
                got = (tuple(grad.shape), grad.dtype)
                want = (tuple(x.shape), x.dtype)
                assert got == want, f"order {level}: gradient {got}; input {want}"

    if case.native:

        @test
        @pytest.mark.parametrize("order", range(case.order + 1))
        def test_matches_native(order, params):
            native = functools.reduce(getattr, case.native.split(".")[1:], torch)
            # torch.os.system is reachable by attribute lookup too: call only what torch
            # defines
            module = getattr(native, "__module__", "")
            assert module.startswith("torch"), f"{case.native} is not a torch function"
            native = elementwise(native)
            inputs = case.inputs(20 + order)
            actual = derivative_chain(case.function, inputs, order, order, params)
            try:
                expected = derivative_chain(native, inputs, order, order, params)
            except (RuntimeError, NotImplementedError) as exc:
                if "not implemented" not in str(exc):
                    raise
                # torch has no derivative of the native op to this order
                # (hardsigmoid's backward is not differentiable): nothing to compare
                pytest.skip(f"{case.native} has no derivative at order {order} in torch "
                            f"{torch.__version__}: {str(exc).splitlines()[0]}")
            if order:
                got, want = actual[-1], expected[-1]
            else:
                got, want = (actual[0],), (expected[0],)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-8)

    transforms = _transforms(tuple(range(len(case.domain))))

    @test
    @pytest.mark.parametrize("transform", TRANSFORMS)
    def test_torch_func_transform_matches_composed(transform, params):
        inputs, tangents = case.point(30)
        actual = transforms[transform](at(params), inputs, tangents)
        expected = transforms[transform](composed_at(params), inputs, tangents)
        torch.testing.assert_close(actual, expected, **case.tolerance)

    @test
    def test_vmap_matches_composed():
        batch = [torch.stack(xs) for xs in zip(case.point(33)[0], case.point(34)[0])]
        actual = torch.func.vmap(at(case.params))(*batch)
        expected = torch.func.vmap(composed_at(case.params))(*batch)
        torch.testing.assert_close(actual, expected, **case.tolerance)

    @test
    def test_forward_mode_dual_numbers_match_composed(params):
        inputs, tangents = case.point(31)
        results = []
        for fn in (at(params), composed_at(params)):
            with forward_ad.dual_level():
                duals = [forward_ad.make_dual(x, t) for x, t in zip(inputs, tangents)]
                primal, tangent = forward_ad.unpack_dual(fn(*duals))
                results.append((primal.clone(), tangent.clone()))
        torch.testing.assert_close(results[0], results[1], **case.tolerance)

    if case.order_limited:
        tests.update(_order_limit_tests(case))

    @test
    @pytest.mark.compile
    def test_compile_fullgraph_forward_and_backward():
        """fullgraph=True; where the spec calls external functions, fullgraph=False:
        torch.compile breaks the graph at each call of one."""
        torch._dynamo.reset()
        function = at(case.params)
        compiled = torch.compile(
            lambda *xs: function(*xs), fullgraph=not case.order_limited, backend="aot_eager"
        )
        inputs = case.inputs(32, reference=True)
        out = compiled(*inputs)
        grads = _grads(out.sum(), inputs, create_graph=False)
        expected = case.composed(*inputs, **case.params)
        expected_grads = _grads(expected.sum(), inputs, create_graph=False)
        torch.testing.assert_close(out, expected, **case.tolerance)
        torch.testing.assert_close(grads, expected_grads, **case.tolerance)

    @test
    def test_float32_is_finite_and_close_where_float64_is(params):
        """Every order up to 3 in float32, no less accurate than plain torch."""
        assert_float32_close(case, params)

    if case.fuse:

        @test
        @pytest.mark.compile
        def test_fused_levels_give_eager_numbers_in_float32():
            """fuse: true compiles each level's formulas into one kernel; the numbers
            may change only by roundings: over every order, no further from float64 than
            eager float32 is (times FLOAT32_FACTOR, plus 1e-5 relative, 1e-6 absolute)."""
            torch._dynamo.reset()
            inputs = case.inputs(40, dtype=torch.float32)

            def chain(xs):
                flat = _chain_with_plain_last_level(case.function, xs, case.order, 40, case.params)
                return [flat[0], *(g for grads in flat[1:] for g in grads)]

            fused = chain(inputs)
            case.module.FUSE = False
            try:
                eager = chain(inputs)
                truth = chain([x.detach().double().requires_grad_() for x in inputs])
            finally:
                case.module.FUSE = True
            for index, (got, plain, exact) in enumerate(zip(fused, eager, truth)):
                got, plain = got.double(), plain.double()
                bound = 1e-5 * exact.abs() + 1e-6 + FLOAT32_FACTOR * (plain - exact).abs()
                bad = ~((got - exact).abs() <= bound)
                assert not bad.any(), (
                    f"item {index}: fused {got[bad]}, eager {plain[bad]}, float64 {exact[bad]}"
                )

    return tests
