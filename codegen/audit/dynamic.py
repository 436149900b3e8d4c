"""The dynamic checks of ``dbgen audit``: a Function run on inputs drawn from the domain, float64.

Each order k up to N is checked against central differences of order k - 1 (the Function's own
lower order, recomputed at shifted inputs, so a backward that hides a dependence from autograd
shows at once), and against autograd through ``--expr`` where given; gradcheck and gradgradcheck
as PyTorch runs them; values that are not finite where the difference quotient is; the torch.func
transforms and ``torch.compile(fullgraph=True)``, each run and compared with autograd's numbers.
Each check is pass, fail (with the one-line reason PyTorch gives) or wrong (it runs and gives
another number: silently wrong), or n/a.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.autograd import forward_ad
from torch.autograd.function import FunctionCtx

from .static import TORCH_CTX_ATTRIBUTES

PASS, FAIL, WRONG, NOT_APPLICABLE = "pass", "fail", "wrong", "n/a"
DEFAULT_DOMAIN = (-2.0, 2.0)
STEP = 1e-5  # the central difference's step, relative to the inputs' scale
TOLERANCE = 1e-5  # relative agreement of an order with its difference quotient
GRID_POINTS = 256  # the fewest points of the even grid (Setup.spread): a gap of 1/255 of the domain
TRANSFORMS = ("vmap", "grad", "jacrev", "jacfwd", "hessian", "jvp", "forward_ad", "compile")


@dataclass(frozen=True)
class Result:
    """One dynamic check: its status, a one-line reason, and for a wrong number its order."""

    check: str
    status: str
    reason: str = ""
    order: int | None = None


@dataclass(frozen=True)
class Setup:
    """How the Function is called: its inputs' names, domains and shape (float64)."""

    names: tuple[str, ...]
    domains: tuple[tuple[float, float], ...]
    shape: tuple[int, ...] = (6,)
    # inputs the Function returns no gradient for (None, as for a mask): drawn, never differentiated
    constant: tuple[str, ...] = ()
    # trailing arguments it takes as Python numbers (a param such as alpha): 3/4 into their domain
    numbers: tuple[str, ...] = ()
    # numbers given their value (audit --params): (name, value) pairs
    fixed: tuple[tuple[str, float], ...] = ()

    @property
    def tensor_names(self) -> tuple[str, ...]:
        """The inputs passed as tensors (not as numbers), in argument order."""
        return tuple(name for name in self.names if name not in self.numbers)

    def number_values(self) -> dict[str, float]:
        """The value forward is passed for each number: its --params value, else 3/4 into its domain."""
        given = dict(self.fixed)
        return {name: given.get(name, lo + 0.75 * (hi - lo))
                for name, (lo, hi) in zip(self.names, self.domains) if name in self.numbers}

    def inputs(self, seed: int, shape=None) -> list[torch.Tensor]:
        """The tensor inputs (not the numbers), drawn from their domains."""
        generator = torch.Generator().manual_seed(seed)
        shape = self.shape if shape is None else shape
        return [(lo + (hi - lo) * torch.rand(shape, generator=generator, dtype=torch.float64))
                .requires_grad_(name not in self.constant) for name, (lo, hi) in zip(self.names, self.domains)
                if name not in self.numbers]

    def spread(self) -> list[torch.Tensor]:
        """The tensor inputs on an even grid over each domain, its ends a thousandth inside (where a
        function often changes, and random draws rarely land), each input's grid turned by its
        place so that the inputs' values pair differently. At least GRID_POINTS points, the shape's
        first size made larger: six points (the default shape) missed a backward wrong on a
        fiftieth of the domain between them."""
        rest = math.prod(self.shape[1:])
        shape = (max(self.shape[0], -(-GRID_POINTS // rest)), *self.shape[1:])
        count = math.prod(shape)
        tensors = []
        for index, (name, (lo, hi)) in enumerate(zip(self.names, self.domains)):
            if name in self.numbers:
                continue
            margin = (hi - lo) * 1e-3
            grid = torch.linspace(lo + margin, hi - margin, count, dtype=torch.float64).roll(index)
            tensors.append(grid.reshape(shape).requires_grad_(name not in self.constant))
        return tensors

    def arguments(self, tensors) -> list:
        """forward's arguments: the tensors, with the numbers in their places."""
        given, numbers = iter(tensors), self.number_values()
        return [numbers[name] if name in numbers else next(given) for name in self.names]


def wrt(inputs) -> list[torch.Tensor]:
    """The inputs that are differentiated (those the Function returns a gradient for)."""
    return [x for x in inputs if x.requires_grad]


def ungraded_inputs(cls: type, setup: Setup) -> tuple[str, ...]:
    """The inputs the Function returns no gradient for (backward's None), found by one backward;
    raises what calling it raises."""
    inputs = setup.inputs(seed=8)
    subject = Subject(cls, setup)
    scalar = subject.scalar(inputs)
    if not scalar.requires_grad:
        return ()
    grads = torch.autograd.grad(scalar, inputs, allow_unused=True)
    return tuple(name for name, grad in zip(setup.tensor_names, grads) if grad is None)


def input_names(cls: type) -> tuple[str, ...]:
    """The names of forward's tensor inputs: its parameters after ctx (old style), without defaults."""
    parameters = list(inspect.signature(cls.forward).parameters.values())
    if _old_style(cls):
        parameters = parameters[1:]
    return tuple(p.name for p in parameters
                 if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _old_style(cls: type) -> bool:
    return "setup_context" not in {name for owner in cls.__mro__ for name in vars(owner)
                                   if not owner.__module__.startswith("torch")}


def outputs(value) -> list[torch.Tensor]:
    """The tensor outputs of a call: one, or those of a tuple."""
    values = value if isinstance(value, (tuple, list)) else [value]
    return [v for v in values if isinstance(v, torch.Tensor)]


class Subject:
    """A Function as a function of its inputs: the first output (what a wrapper returns), and a
    scalar of all outputs with fixed random cotangents (every output's derivative counts)."""

    def __init__(self, cls: type, setup: Setup):
        self.cls, self.setup = cls, setup

    def __call__(self, *inputs):
        return self.cls.apply(*self.setup.arguments(inputs))

    def first(self, *inputs) -> torch.Tensor:
        return outputs(self(*inputs))[0]

    def scalar(self, inputs, seed: int = 0) -> torch.Tensor:
        """The differentiable outputs (not those marked non-differentiable), each with its cotangent."""
        generator = torch.Generator().manual_seed(seed)
        values = outputs(self(*inputs))
        differentiable = [v for v in values if v.requires_grad] or values[:1]
        return sum((v * _noise(generator, v)).sum() for v in differentiable)


def _noise(generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    return torch.randn(like.shape, generator=generator, dtype=torch.float64).to(like.dtype)


def level_scalar(fn: Callable, inputs, level: int, seed: int = 0) -> torch.Tensor:
    """The scalar whose gradient is the derivative of order ``level`` + 1: ``fn(inputs)`` (a
    scalar) differentiated ``level`` times, each time contracted with fixed random cotangents."""
    generator = torch.Generator().manual_seed(1000 + seed)
    scalar = fn(inputs)
    for _ in range(level):
        scalar = sum((g * _noise(generator, g)).sum() for g in _gradients(scalar, wrt(inputs), create_graph=True))
    return scalar


def _gradients(scalar: torch.Tensor, inputs, create_graph: bool = False):
    """The gradients of ``scalar``; zeros where it does not depend on the inputs in autograd's graph
    (a piecewise-linear function's second derivative: whether that is right, the differences say)."""
    if not scalar.requires_grad:
        return [torch.zeros_like(x) for x in inputs]
    return torch.autograd.grad(scalar, inputs, create_graph=create_graph, allow_unused=True, materialize_grads=True)


def order_checks(subject: Subject, order: int, reference: Callable | None = None) -> list[Result]:
    """Each order 1..``order`` against the central difference of the order below, and against
    ``reference`` (autograd through --expr, applied to the first output) where given."""
    results = []
    drawn, spread = subject.setup.inputs(seed=1), subject.setup.spread()
    if reference is not None:
        results.append(_either(_value_against_reference(subject, reference, drawn),
                               lambda: _value_against_reference(subject, reference, spread)))
    for k in range(1, order + 1):
        results.append(_either(_against_differences(subject, drawn, k),
                               lambda k=k: _against_differences(subject, spread, k)))
        if reference is not None:
            results.append(_either(_against_reference(subject, reference, drawn, k),
                                   lambda k=k: _against_reference(subject, reference, spread, k)))
    return results


def _either(drawn: Result, on_the_grid: Callable[[], Result]) -> Result:
    """The check at the drawn points, and where it passes there, at an even grid over the domain
    too (a backward wrong on (1.8, 2] of [-2, 2] passed six drawn points): wrong or failing at
    either is the result; not comparable on the grid (its ends near a singularity) is no news."""
    if drawn.status != PASS:
        return drawn
    found = on_the_grid()
    return found if found.status in (WRONG, FAIL) else drawn


def _against_differences(subject: Subject, inputs, k: int) -> Result:
    check = f"order {k}"
    scalar = subject.scalar
    try:
        top = level_scalar(scalar, inputs, k - 1)
        grads = _gradients(top, wrt(inputs))
    except Exception as exc:  # noqa: BLE001 - the user's Function: its error is the finding
        return Result(check, FAIL, f"order {k} raises: {first_line(exc)}")
    disconnected = "" if top.requires_grad else (
        f" (order {k - 1} is disconnected from the inputs in autograd's graph: a loss holding it silently "
        "loses its derivative)")
    generator = torch.Generator().manual_seed(k)
    directions = [torch.randn(x.shape, generator=generator, dtype=torch.float64).to(x.dtype) for x in wrt(inputs)]
    exact = sum((g * d).sum() for g, d in zip(grads, directions)).item()
    quotients = [_quotient(scalar, inputs, directions, k - 1, STEP * factor) for factor in (1.0, 0.5)]
    if not all(math.isfinite(q) for q in quotients):
        return Result(check, NOT_APPLICABLE, "the difference quotient is not finite on this domain")
    if abs(quotients[0] - quotients[1]) > 10 * TOLERANCE * max(1.0, abs(quotients[1])):
        return Result(check, NOT_APPLICABLE, "not smooth at the drawn points (two steps disagree)")
    want = quotients[1]
    if not math.isfinite(exact):
        return Result(check, WRONG, f"order {k} is {exact} where the difference quotient is {want:.6g}", k)
    if abs(exact - want) > TOLERANCE * max(1.0, abs(want)):
        return Result(check, WRONG, f"order {k} gives {exact:.6g}, the difference quotient of order {k - 1} "
                                    f"{want:.6g}{disconnected}", k)
    return Result(check, PASS)


def _quotient(scalar, inputs, directions, level: int, step: float) -> float:
    sides = []
    for sign in (1, -1):
        steps = iter(directions)
        moved = [(x + sign * step * next(steps)).detach().requires_grad_() if x.requires_grad else x for x in inputs]
        with torch.enable_grad():
            sides.append(level_scalar(scalar, moved, level).item())
    return (sides[0] - sides[1]) / (2 * step)


def _value_against_reference(subject: Subject, reference: Callable, inputs) -> Result:
    got, want = subject.first(*inputs).detach(), reference(*inputs).detach()
    if not torch.isfinite(want).any():
        return Result("expr order 0", NOT_APPLICABLE, "--expr is not finite at any drawn point")
    if got.shape == want.shape and not torch.isfinite(got[torch.isfinite(want)]).all():
        return Result("expr order 0", WRONG, "the value is not finite where --expr's is", 0)
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-7, atol=1e-9, equal_nan=True):
        error = (got - want).abs().max().item() if got.shape == want.shape else float("nan")
        return Result("expr order 0", WRONG, f"the value differs from --expr's by up to {error:.3g}", 0)
    return Result("expr order 0", PASS)


def _against_reference(subject: Subject, reference: Callable, inputs, k: int) -> Result:
    """Order k of the first output against autograd through the formula (both contracted alike)."""
    check = f"expr order {k}"

    def first(fn):
        def scalar(xs):
            value = fn(*xs)
            return (value * _noise(torch.Generator().manual_seed(7), value)).sum()

        return scalar

    try:
        ours = _gradients(level_scalar(first(subject.first), inputs, k - 1), wrt(inputs))
    except Exception as exc:  # noqa: BLE001
        return Result(check, FAIL, f"order {k} raises: {first_line(exc)}")
    theirs = _gradients(level_scalar(first(reference), inputs, k - 1), wrt(inputs))
    if not any(bool(torch.isfinite(want).any()) for want in theirs):
        return Result(check, NOT_APPLICABLE, f"--expr's order {k} is not finite at any drawn point")
    for got, want in zip(ours, theirs):
        finite = torch.isfinite(want)
        if not torch.isfinite(got[finite]).all():
            return Result(check, WRONG, f"order {k} is not finite where --expr's is", k)
        if not torch.allclose(got[finite], want[finite], rtol=1e-7, atol=1e-9):
            error = (got[finite] - want[finite]).abs().max().item()
            return Result(check, WRONG, f"order {k} differs from --expr's by up to {error:.3g}", k)
    return Result(check, PASS)


def float32_check(subject: Subject, order: int) -> Result:
    """Every order up to ``order`` in float32 against float64 at the same points, within 1e-3 of
    the largest float64 value (float32 derivatives cannot be checked by differences of their own)."""
    exact = subject.setup.inputs(seed=9)
    single = [x.detach().float().requires_grad_(x.requires_grad) for x in exact]
    if not _finite(subject, exact):
        return Result("float32", NOT_APPLICABLE, NOT_FINITE)
    try:
        for k in range(order + 1):
            want = _order_values(subject, exact, k)
            got = [g.double() for g in _order_values(subject, single, k)]
            for g, w in zip(got, want):
                scale = max(1.0, w.abs().max().item())
                if not torch.isfinite(g).all() or (g - w).abs().max().item() > 1e-3 * scale:
                    error = (g - w).abs().max().item()
                    if error > 0.5 * scale:  # half the largest value: a wrong formula, not float32's rounding
                        return Result("float32", WRONG, f"order {k} in float32 differs from float64's by {error:.3g} "
                                                        f"(the largest value is {scale:.3g}): a float32-only error", k)
                    return Result("float32", FAIL, f"order {k} in float32 is off float64's by {error:.3g}")
    except Exception as exc:  # noqa: BLE001 - the Function refuses float32
        return Result("float32", FAIL, first_line(exc))
    return Result("float32", PASS)


def _order_values(subject: Subject, inputs, k: int) -> list[torch.Tensor]:
    """The outputs (k = 0), else the gradients of order k (contracted as the order checks do)."""
    if not k:
        return [v.detach() for v in outputs(subject(*inputs))]
    return [g.detach() for g in _gradients(level_scalar(subject.scalar, inputs, k - 1), wrt(inputs))]


def gradchecks(subject: Subject, order: int) -> list[Result]:
    results = []
    for name, run, needed in (("gradcheck", torch.autograd.gradcheck, 1),
                              ("gradgradcheck", torch.autograd.gradgradcheck, 2)):
        if order < needed:
            continue
        inputs = subject.setup.inputs(seed=2, shape=(3,))
        if not _finite(subject, inputs):
            results.append(Result(name, NOT_APPLICABLE, NOT_FINITE))
            continue
        try:
            run(lambda *xs: tuple(outputs(subject(*xs))), inputs)
            results.append(Result(name, PASS))
        except Exception as exc:  # noqa: BLE001 - GradcheckError, or the Function's own error
            wrong = type(exc).__name__ == "GradcheckError"
            results.append(Result(name, WRONG if wrong else FAIL, first_line(exc), needed if wrong else None))
    return results


NOT_FINITE = "the Function is not finite at the drawn points: give each input's --domain"


def _finite(subject: Subject, inputs) -> bool:
    """Whether every output is finite at ``inputs`` (else a comparison there says nothing)."""
    try:
        with torch.no_grad():
            return all(bool(torch.isfinite(v).all()) for v in outputs(subject(*inputs)))
    except Exception:  # noqa: BLE001 - the checks themselves report the Function's errors
        return True


@contextlib.contextmanager
def ctx_tensors():
    """Record every attribute set on a ctx (torch's own bookkeeping aside), and its value."""
    stored: list[tuple[str, object]] = []

    def record(ctx, attribute, value):
        if attribute not in TORCH_CTX_ATTRIBUTES:
            stored.append((attribute, value))
        object.__setattr__(ctx, attribute, value)

    original = FunctionCtx.__dict__.get("__setattr__")
    FunctionCtx.__setattr__ = record
    try:
        yield stored
    finally:
        if original is None:
            del FunctionCtx.__setattr__
        else:
            FunctionCtx.__setattr__ = original


def _holds_tensor(value) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return False


def stashed_on_ctx(subject: Subject) -> dict[str, str]:
    """The ctx attributes set through a call and a create_graph backward: name ->
    "output" where it is an output of the call itself (autograd keeps its graph), "constant input"
    where it is an input backward returns no gradient for, "no tensor" where it held none (a number),
    else "tensor"."""
    inputs = subject.setup.inputs(seed=3)
    with ctx_tensors() as stored:
        try:
            returned = outputs(subject(*inputs))
            scalar = sum(v.sum() for v in returned if v.requires_grad)
            torch.autograd.grad(scalar, wrt(inputs), create_graph=True, allow_unused=True)
        except Exception:  # noqa: BLE001 - the order checks report the Function's errors
            returned = []
    found = {}
    for attribute, value in stored:
        if not _holds_tensor(value):
            kind = "no tensor"
        elif any(value is x for x in inputs if not x.requires_grad):
            kind = "constant input"  # an input it returns no gradient for: a constant to autograd anyway
        else:
            kind = "output" if any(value is out for out in returned) else "tensor"
        found[attribute] = found[attribute] if found.get(attribute) == "tensor" else kind
    return found


def transform_checks(subject: Subject) -> list[Result]:
    """Each torch.func transform, forward-mode AD and torch.compile, against autograd's numbers."""
    inputs = subject.setup.inputs(seed=4, shape=(4,))
    plain = [x.detach() for x in inputs]
    generator = torch.Generator().manual_seed(5)
    tangents = [torch.randn(x.shape, generator=generator, dtype=torch.float64).to(x.dtype) if x.requires_grad
                else torch.zeros_like(x) for x in inputs]
    argnums = tuple(i for i, x in enumerate(inputs) if x.requires_grad)
    first = subject.first
    if not _finite(subject, inputs):
        return [Result(name, NOT_APPLICABLE, NOT_FINITE) for name in TRANSFORMS]
    try:
        grads, directional, hvp = _autograd_numbers(first, inputs, [tangents[i] for i in argnums])
    except Exception as exc:  # noqa: BLE001 - nothing to compare the transforms with
        return [Result(name, NOT_APPLICABLE, f"autograd itself raises: {first_line(exc)}") for name in TRANSFORMS]
    summed = lambda *xs: first(*xs).sum()
    # a Jacobian is shaped (*output, *input): summed over the output's dimensions (none for a loss,
    # two for a matrix-valued Function) it is the gradient of the output's sum
    out_dims = tuple(range(first(*plain).dim()))
    contracted = lambda jacobians: [j.sum(out_dims) if out_dims else j for j in jacobians]
    runs = {
        "vmap": (lambda: torch.func.vmap(first)(*(torch.stack([x, x.flip(0)]) for x in plain)),
                 lambda got: _close(got, torch.stack([first(*plain).detach(), first(*(x.flip(0) for x in plain))
                                                      .detach()])), 0),
        "grad": (lambda: torch.func.grad(summed, argnums=argnums)(*plain), lambda got: _close(got, grads), 1),
        # the Jacobians contracted with the cotangent of ones: autograd's gradients
        "jacrev": (lambda: torch.func.jacrev(first, argnums=argnums)(*plain),
                   lambda got: _close(contracted(got), grads), 1),
        "jacfwd": (lambda: torch.func.jacfwd(first, argnums=argnums)(*plain),
                   lambda got: _close(contracted(got), grads), 1),
        "hessian": (lambda: _hessian_vector(summed, plain, tangents, argnums), lambda got: _close(got, hvp), 2),
        "jvp": (lambda: torch.func.jvp(first, tuple(plain), tuple(tangents))[1],
                lambda got: _close(got.sum(), directional), 1),
        "forward_ad": (lambda: _dual_tangent(first, plain, tangents), lambda got: _close(got.sum(), directional), 1),
        "compile": (lambda: _compiled(first, plain), lambda got: _close(got, first(*plain).detach()), 0),
    }
    results = []
    for name in TRANSFORMS:
        run, agrees, order = runs[name]
        try:
            got = run()
        except Exception as exc:  # noqa: BLE001 - the transform's refusal is the finding
            results.append(Result(name, FAIL, first_line(exc)))
            continue
        if name == "hessian" and hvp is None:
            results.append(Result(name, NOT_APPLICABLE, "autograd's own second derivative is not connected"))
        elif agrees(got):
            results.append(Result(name, PASS))
        else:
            results.append(Result(name, WRONG, f"{name} runs and gives other numbers than autograd", order))
    return results


def _autograd_numbers(first, inputs, tangents):
    """Autograd's gradients of the first output's sum, its directional derivative along the
    tangents, and the Hessian-vector product (None where autograd's second order is disconnected)."""
    value = first(*inputs)
    grads = torch.autograd.grad(value, wrt(inputs), torch.ones_like(value), create_graph=True, allow_unused=True,
                                materialize_grads=True)
    directional = sum((g * t).sum() for g, t in zip(grads, tangents))
    hvp = None
    if directional.requires_grad:
        hvp = torch.autograd.grad(directional, wrt(inputs), allow_unused=True, materialize_grads=True)
    return [g.detach() for g in grads], directional.detach(), hvp


def _hessian_vector(summed, plain, tangents, argnums):
    hessian = torch.func.hessian(summed, argnums=argnums)(*plain)
    along = [tangents[i] for i in argnums]
    return [sum((block * t).sum(-1) if block.dim() == 2 else block * t for block, t in zip(row, along))
            for row in hessian]


def _dual_tangent(first, plain, tangents):
    with forward_ad.dual_level():
        duals = [forward_ad.make_dual(x, t) for x, t in zip(plain, tangents)]
        return forward_ad.unpack_dual(first(*duals)).tangent.clone()


def _compiled(first, plain):
    torch._dynamo.reset()
    try:
        return torch.compile(first, fullgraph=True, backend="eager")(*plain)
    finally:
        torch._dynamo.reset()


def _close(got, want) -> bool:
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    return len(got) == len(want) and all(
        torch.allclose(g.detach().to(torch.float64), w.detach().to(torch.float64), rtol=1e-6, atol=1e-8,
                       equal_nan=True) for g, w in zip(got, want))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()
