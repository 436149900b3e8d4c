"""What a bench run compares: each spec's generated Functions under each strategy, the composed
formula and the native op, each checked against the others before it is timed.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import itertools
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ...spec import Spec
from .config import COMPOSED, NATIVE, BenchError
from .workloads import Inputs, _as_tuple, derivatives, make_inputs

_module_ids = itertools.count()


# --------------------------------------------------------------------------------------------
# candidates: the generated module under each strategy, the composed expression, the native op


@dataclass(frozen=True)
class Candidate:
    label: str
    fn: Callable
    note: str = ""  # the strategy a generated module actually uses, where it is not its label
    same_as: str | None = None  # a candidate with identical code, measured once for both


@dataclass(frozen=True)
class Subject:
    """One spec and the candidates it is benchmarked with."""

    spec: Spec
    candidates: tuple[Candidate, ...]

    @property
    def params(self) -> dict[str, float]:
        return dict(self.spec.params)


def load_specs(specs_path: Path) -> list[Spec]:
    """The validated specs under SPECS; problems raise ``SpecErrors`` as in ``dbgen build``."""
    from ...build import pipeline

    return pipeline.load_specs(pipeline.discover(specs_path))


def make_subject(spec: Spec, strategies: Sequence[str], workdir: Path, fuse: bool = False,
                 orders: Sequence[int] = (0, 1, 2, 3), dtype: torch.dtype = torch.float32) -> Subject:
    """Generate and import ``spec`` under each strategy (fused with ``fuse``, as ``build --fuse``
    does); add the composed expression and the native op, once it is checked to compute the same
    function (``check_native``: its derivatives up to the largest of ``orders`` in ``dtype``)."""
    spec = dataclasses.replace(spec, fuse=spec.fuse or fuse)
    modules = {
        s: _generate_and_import(dataclasses.replace(spec, strategy=s), workdir / spec.name / s) for s in strategies
    }
    first = workdir / spec.name / strategies[0]
    tests = import_path(first / "tests" / f"test_{spec.name}.py")
    candidates = [Candidate(COMPOSED, _timed_composed(tests.composed, modules[strategies[0]]))]
    codes: dict[str, str] = {}  # the first strategy named explicitly with each code
    for strategy, module in modules.items():
        concrete = module.STRATEGY
        code = strategy if strategy == "auto" else codes.setdefault(_code_of(module), strategy)
        same_as = concrete if strategy == "auto" and concrete in modules else (code if code != strategy else None)
        note = f"= {concrete}" if concrete != strategy else (f"= {code}" if same_as else "")
        candidates.append(Candidate(strategy, getattr(module, spec.name), note, same_as))
    if spec.native:
        # as the generated tests call it: a loss elementwise (reduction="none")
        native = tests.checks.elementwise(resolve_native(spec.native))
        # against the generated function; fused, against the composed expression its tests check it
        # with (the generated one would compile for float64 first: 20 s for softplus)
        reference = candidates[0].fn if spec.fuse else getattr(modules[strategies[0]], spec.name)
        check_native(spec, native, reference, max(orders, default=0), dtype)
        candidates.append(Candidate(NATIVE, native, spec.native))
    return Subject(spec, tuple(candidates))


NATIVE_CHECK_SIZE = 64  # elements per input on which native is compared with the generated function
NATIVE_RTOL, NATIVE_ATOL = 1e-6, 1e-8  # float64, as the generated tests' test_matches_native


def check_native(spec: Spec, native: Callable, generated: Callable, order: int = 0,
                 dtype: torch.dtype = torch.float32) -> None:
    """Refuse (``SpecErrors``, on the ``native`` line) a native op that is not the spec's function
    elementwise, before anything is timed: one that fails on the spec's inputs, returns another
    number of outputs, another shape (torch.sum) or non-floating values, or other values than the
    generated function (float64, on points of the domain); or other derivatives, up to ``order``
    and the spec's order (none: torch.special.bessel_j0); or whose derivatives up to ``order``
    fail in ``dtype``. Otherwise the timed workloads would stop with a traceback (exit 3), or time
    another function."""
    from ...errors import SpecErrors

    params = dict(spec.params)
    native_at, generated_at = functools.partial(native, **params), functools.partial(generated, **params)
    inputs = make_inputs(spec, NATIVE_CHECK_SIZE, torch.float64)
    problem = (_value_problem(spec, native_at, generated_at, inputs)
               or _derivative_problem(spec, native_at, generated_at, inputs, order)
               or _dtype_problem(spec, native_at, order, dtype))
    if problem:
        what, advice = problem
        advice = advice or f"bench times a native op only where it computes {spec.name} elementwise: fix native or remove it"
        raise SpecErrors([spec.problem("native", f"native: {spec.native} {what}; {advice}")])


def _value_problem(spec: Spec, native_at: Callable, generated_at: Callable, inputs: Inputs) -> tuple[str, str] | None:
    """(what is wrong, advice or "") where native's values are not the generated function's."""
    with torch.no_grad():
        expected = _as_tuple(generated_at(*inputs.tensors))
        try:
            got = native_at(*inputs.tensors)
        except Exception as exc:  # noqa: BLE001 - whatever the op raises is the message
            return f"fails on {spec.name}'s inputs ({_error_text(exc)})", ""
    returned = tuple(got) if isinstance(got, list) else got
    got = _as_tuple(returned)
    if not all(isinstance(g, torch.Tensor) for g in got):
        return f"returns a {type(returned).__name__}, not a tensor", ""
    if len(got) != len(expected):
        counted = "one tensor" if len(expected) == 1 else f"{len(expected)} tensors"
        return f"returns {len(got)} tensors where {spec.name} returns {counted}", ""
    for g, e in zip(got, expected):
        if g.shape != e.shape:
            return (f"returns shape {tuple(g.shape)} where {spec.name} returns {tuple(e.shape)}, for inputs of shape "
                    f"{tuple(inputs.tensors[0].shape)}: it is not elementwise"), ""
        if not g.is_floating_point():
            return f"returns {str(g.dtype).removeprefix('torch.')} values where {spec.name} returns float64", ""
    differs = _first_difference(spec, inputs, got, expected)
    return (f"computes other values than {spec.name}: {differs}", "") if differs else None


def _derivative_problem(spec: Spec, native_at: Callable, generated_at: Callable, inputs: Inputs,
                        order: int) -> tuple[str, str] | None:
    """(what is wrong, advice) where native's derivatives up to ``order`` are not the generated ones."""
    for k in range(1, min(order, spec.order) + 1):
        try:
            got, expected = derivatives(native_at, inputs, k), derivatives(generated_at, inputs, k)
        except Exception as exc:  # noqa: BLE001 - whatever the op raises is the message
            return f"fails at derivative order {k} ({_error_text(exc)})", f"time it with --orders below {k}, or remove native"
        if not got and any(e is not None and bool(e.abs().max() > 0) for e in expected):
            # (a derivative that is 0 everywhere, as huber_loss's third, may be no graph at all)
            return (f"has no derivative in torch (its result does not require grad), where {spec.name} has",
                    "time it with --orders 0, or remove native")
        differs = _first_difference(spec, inputs, got, expected) if got else None
        if differs:
            return f"computes other derivatives of order {k} than {spec.name}: {differs}", ""
    return None


def _dtype_problem(spec: Spec, native_at: Callable, order: int, dtype: torch.dtype) -> tuple[str, str] | None:
    """(what is wrong, advice) where native fails in ``dtype`` at some order up to ``order``."""
    small = make_inputs(spec, NATIVE_CHECK_SIZE, dtype)
    for k in range(order + 1):
        try:
            derivatives(native_at, small, k)
        except Exception as exc:  # noqa: BLE001 - whatever the op raises is the message
            failed = f"fails {f'at derivative order {k} ' if k else ''}in {str(dtype).removeprefix('torch.')}"
            lower = f"--orders below {k} or " if k else ""
            return f"{failed} ({_error_text(exc)})", f"time it with {lower}another --dtype, or remove native"
    return None


def _first_difference(spec: Spec, inputs: Inputs, got, expected) -> str | None:
    """Where two tuples of tensors on ``inputs`` (values, or gradients contracted with the
    cotangents; None: a gradient that is zero) first differ beyond float64's tolerance, in words."""
    for g, e in zip(got, expected):
        g = torch.zeros(()) if g is None else g.detach().to(torch.float64)
        e = torch.zeros(()) if e is None else e.detach()
        g, e = torch.broadcast_tensors(g, e)
        close = torch.isclose(g, e, rtol=NATIVE_RTOL, atol=NATIVE_ATOL, equal_nan=True)
        if not bool(close.all()):
            index = int((~close).flatten().nonzero()[0])
            row = index // max(1, g.numel() // len(inputs.tensors[0]))  # a stacked output has a row per point
            at = ", ".join(f"{name} = {float(x[row].detach()):.6g}" for name, x in zip(spec.inputs, inputs.tensors))
            return f"{float(g.flatten()[index]):.6g} where {spec.name} gives {float(e.flatten()[index]):.6g}, at {at}"
    return None


def _error_text(exc: Exception) -> str:
    """An exception on one line: its type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _timed_composed(composed, module):
    """The tests' composed expression, its special functions (``checks.special``: mpmath, element
    by element, an exact reference but no rival) made the generated module's ``_Special`` ones:
    the formula in torch ops as a user would write it with a differentiable bessel_j0."""
    if "checks" not in composed.__code__.co_names:
        return composed
    shim = types.SimpleNamespace(special=lambda name, x: getattr(module, f"_{name}")(x))
    timed = types.FunctionType(composed.__code__, {**composed.__globals__, "checks": shim}, composed.__name__)
    timed.__kwdefaults__ = composed.__kwdefaults__
    return timed


def _code_of(module) -> str:
    """What a generated module runs: its syntax tree without docstrings and without STRATEGY.

    Two strategies can generate the same code (atan2 has no call to share, so save_outputs and
    intermediates are save_inputs); measured apart, identical code differed by up to 15 % between
    columns, so it is measured once and shown for each.
    """
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            node.body = body[1:] or [ast.Pass()]
    tree.body = [node for node in tree.body
                 if not (isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["STRATEGY"])]
    return ast.dump(tree)


def _generate_and_import(spec: Spec, folder: Path):
    from ...build import pipeline

    for rel, text in pipeline.generate_one(spec).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return import_path(folder / f"{spec.name}.py")


def import_path(path: Path):
    """Import a file by path under a unique module name, registered in ``sys.modules``."""
    name = f"dbgen_bench_{path.stem}_{next(_module_ids)}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except ModuleNotFoundError as exc:
        del sys.modules[name]
        raise BenchError(
            f"{exc.name} is not installed; bench imports the composed expression from the generated test "
            f"file, which needs it: pip install pytest (or dbgen's test extra)"
        ) from None
    return module


def resolve_native(name: str) -> Callable:
    """``torch.nn.functional.mish`` -> the callable, by attribute lookup from ``torch`` only."""
    from ...spec import native

    try:
        return native.resolve_native(name)
    except native.NativeError as exc:
        raise BenchError(str(exc)) from None
