"""``dbgen bench``: time, kernel ops, saved memory and graph size of the generated Functions.

For each spec, the module is generated under every strategy asked for, into a temporary folder,
and imported from there by path (a user's ``generated/`` folder is not needed). Each is compared
with the composed expression (the ``composed`` function of the generated test file, differentiated
by autograd) and with the spec's ``native`` op, on four workloads of inputs of N elements:

- W1: forward alone, under ``torch.no_grad()``;
- W2: the value and the first-order gradients for a random cotangent (``torch.autograd.grad``);
- W3: first-order gradients with ``create_graph=True``, then the gradients of those;
- W4: one level more (third order).

Times are medians of interleaved repeats in one process, after a warm-up. Kernel ops, the bytes
saved for backward and the autograd nodes are deterministic, so they are measured once.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import importlib.util
import itertools
import math
import os
import statistics
import sys
import tempfile
import time
import types
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import __version__
from ..spec import STRATEGIES, Spec

WORKLOADS = ("W1", "W2", "W3", "W4")  # W(k+1) takes derivatives of order k
SUMMARY_WORKLOAD = "W3"
COMPOSED, NATIVE = "composed", "native"
DTYPES = ("float32", "float64", "float16", "bfloat16")
MIN_SAMPLE_SECONDS = 0.002  # shorter calls are looped within one sample
SEED = 0
# aten ops that run no kernel (views, detach, ...), left out of the op counts; `is_view` catches the rest
NO_KERNEL = frozenset({
    "view", "_unsafe_view", "expand", "detach", "alias", "t", "transpose", "permute", "unsqueeze", "squeeze",
    "as_strided", "reshape", "_reshape_alias", "slice", "select", "unbind", "lift_fresh",
})
_module_ids = itertools.count()


class BenchError(Exception):
    """A problem with bench's arguments or environment: the CLI reports it on one line, exit 2."""


# --------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class Config:
    size: int = 2**20
    orders: tuple[int, ...] = (0, 1, 2, 3)
    strategies: tuple[str, ...] = STRATEGIES
    threads: int = 1
    repeats: int = 10
    dtype: str = "float32"
    report: Path | None = None  # the CLI writes files only where asked (--report, --plot)
    plot: Path | None = None
    fuse: bool = False

    @property
    def workloads(self) -> tuple[str, ...]:
        return tuple(WORKLOADS[k] for k in self.orders)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def command(self, specs: Path | Sequence[Path]) -> str:
        paths = " ".join(Path(p).as_posix() for p in ([specs] if isinstance(specs, (str, Path)) else specs))
        return (
            f"dbgen bench {paths} --size {self.size} --orders {','.join(map(str, self.orders))} "
            f"--strategies {','.join(self.strategies)} --threads {self.threads} --repeats {self.repeats} "
            f"--dtype {self.dtype}" + (" --fuse" if self.fuse else "")
        )


def make_config(size: int, orders: str, strategies: str, threads: int, repeats: int, dtype: str,
                report: Path | None = None, plot: Path | None = None, fuse: bool = False) -> Config:
    """Validate the command-line values; a wrong one raises ``BenchError``."""
    for name, value in (("--size", size), ("--threads", threads), ("--repeats", repeats)):
        if value < 1:
            raise BenchError(f"{name} must be a positive whole number, not {value}")
    if dtype not in DTYPES:
        raise BenchError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return Config(size, _parse_orders(orders), _parse_strategies(strategies), threads, repeats, dtype, report, plot,
                  fuse)


def _parse_orders(text: str) -> tuple[int, ...]:
    try:
        orders = {int(item) for item in _items(text)}
    except ValueError:
        orders = set()
    if not orders or not orders <= set(range(len(WORKLOADS))):
        raise BenchError(f"--orders takes derivative orders 0 to 3 (0 = W1, ..., 3 = W4), comma-separated, not {text!r}")
    return tuple(sorted(orders))


def _parse_strategies(text: str) -> tuple[str, ...]:
    chosen = _items(text)
    unknown = [s for s in chosen if s not in STRATEGIES]
    if unknown or not chosen:
        raise BenchError(f"--strategies takes some of {','.join(STRATEGIES)}, not {text!r}")
    return tuple(s for s in STRATEGIES if s in chosen)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


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
    from ..build import pipeline

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
    from ..errors import SpecErrors

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
    from ..build import pipeline

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
    from ..spec import native

    try:
        return native.resolve_native(name)
    except native.NativeError as exc:
        raise BenchError(str(exc)) from None


# --------------------------------------------------------------------------------------------
# workloads


@dataclass(frozen=True)
class Inputs:
    """Inputs drawn from the spec's domain and fixed random cotangents for every derivative level."""

    tensors: tuple[torch.Tensor, ...]
    cotangents: tuple[tuple[torch.Tensor, ...], ...]  # level 0: the output's; level k: the order-k gradients'

    def storages(self) -> set[int]:
        every = [*self.tensors, *itertools.chain.from_iterable(self.cotangents)]
        return {t.untyped_storage().data_ptr() for t in every}


def make_inputs(spec: Spec, size: int, dtype: torch.dtype, seed: int = SEED) -> Inputs:
    generator = torch.Generator().manual_seed(seed)
    tensors = tuple(
        _uniform(*spec.bounds(name), size, dtype, generator).requires_grad_() for name in spec.inputs
    )
    cotangents = [_output_cotangents(spec, size, dtype, generator)]
    for _ in range(len(WORKLOADS) - 2):
        cotangents.append(tuple(torch.randn(size, generator=generator).to(dtype) for _ in tensors))
    return Inputs(tensors, tuple(cotangents))


def _output_cotangents(spec: Spec, size: int, dtype: torch.dtype, generator) -> tuple[torch.Tensor, ...]:
    """One random cotangent per output (a vector-valued spec's all of them: none goes unused), or
    one for the stacked outputs."""
    if spec.stack:
        return (torch.randn(size, len(spec.outputs), generator=generator).to(dtype),)
    return tuple(torch.randn(size, generator=generator).to(dtype) for _ in spec.formulas)


def _uniform(lo: float, hi: float, size: int, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    return (lo + (hi - lo) * torch.rand(size, generator=generator, dtype=torch.float64)).to(dtype)


def derivatives(fn: Callable, inputs: Inputs, order: int, create_graph_last: bool = False):
    """The value (order 0), or the gradients of order ``order`` contracted with the cotangents.

    Every level but the last is taken with ``create_graph=True`` (the last too with
    ``create_graph_last``). Order 0 runs under ``no_grad``: forward alone, as inference does.
    """
    if order == 0:
        with torch.no_grad():
            return _as_tuple(fn(*inputs.tensors))
    outputs = _as_tuple(fn(*inputs.tensors))
    for level in range(order):
        pairs = [(o, c) for o, c in zip(outputs, inputs.cotangents[level]) if o is not None and o.requires_grad]
        if not pairs:  # the derivatives vanish from here on
            return ()
        outputs = torch.autograd.grad(
            [o for o, _ in pairs], inputs.tensors, [c for _, c in pairs],
            create_graph=create_graph_last or level < order - 1, allow_unused=True,
        )
    return outputs


def _as_tuple(value) -> tuple[torch.Tensor, ...]:
    """A function's outputs: a vector-valued spec's tuple, else the one tensor."""
    return value if isinstance(value, tuple) else (value,)


def workload(fn: Callable, inputs: Inputs, order: int) -> Callable[[], object]:
    return functools.partial(derivatives, fn, inputs, order)


# --------------------------------------------------------------------------------------------
# measures


class OpCounter(TorchDispatchMode):
    """Counts the aten ops that run a kernel: views, detach and other no-kernel ops are left out."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in NO_KERNEL and not func.is_view:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def count(self) -> int:
        return sum(self.ops.values())


def count_ops(work: Callable[[], object]) -> int:
    with OpCounter() as counter:
        work()
    return counter.count


COMPILED_GRAPH = "## Call CompiledFxGraph"


def count_kernels_profiled(work: Callable[[], object]) -> int:
    """Kernel ops of ``work`` where some of it runs compiled: each call of a compiled graph counts
    one (an elementwise graph is one fused loop), and each aten op outside them as ``OpCounter``
    counts it. A dispatch mode cannot count them: under one, torch.compile runs eagerly."""
    from torch.profiler import ProfilerActivity, profile

    with _stderr_silenced(), profile(activities=[ProfilerActivity.CPU]) as profiler:
        work()
    return sum(1 for event in profiler.events() if _counted_event(event))


@contextlib.contextmanager
def _stderr_silenced():
    """File descriptor 2 sent to /dev/null: the profiler's C++ side logs each start and stop there."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _counted_event(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(("aten::", COMPILED_GRAPH)):
            return False  # inside an op or a compiled graph already counted
        parent = parent.cpu_parent
    if event.name.startswith(COMPILED_GRAPH):
        return True
    if not event.name.startswith("aten::"):
        return False
    name = event.name.removeprefix("aten::")
    packet = getattr(torch.ops.aten, name, None)
    views = packet is not None and any(getattr(packet, o).is_view for o in packet.overloads())
    return name not in NO_KERNEL and not views


def saved_bytes(action: Callable[[], object], exclude: set[int] = frozenset()):
    """(bytes, result): the unique storages autograd saves while ``action`` runs, by data pointer,
    leaving out the storages in ``exclude`` (the inputs' and the cotangents')."""
    from ..build.memory import saved_storages

    storages, result = saved_storages(action)
    return sum(n for ptr, n in storages.items() if ptr and ptr not in exclude), result


def graph_nodes(tensors) -> int:
    """Unique autograd nodes reachable from the tensors' ``grad_fn`` (AccumulateGrad included)."""
    stack = [t.grad_fn for t in tensors if t is not None and t.grad_fn is not None]
    seen = set()
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(child for child, _ in node.next_functions if child is not None)
    return len(seen)


def graph_measures(fn: Callable, inputs: Inputs) -> dict[str, tuple[int, int]]:
    """Workload -> (bytes saved, autograd nodes): W2, the forward graph (what forward saves);
    W3, the graph of the first-order gradients taken with create_graph (forward and first backward)."""
    exclude = inputs.storages()
    forward_bytes, value = saved_bytes(lambda: _as_tuple(fn(*inputs.tensors)), exclude)
    first_bytes, grads = saved_bytes(lambda: derivatives(fn, inputs, 1, create_graph_last=True), exclude)
    return {"W2": (forward_bytes, graph_nodes(value)), "W3": (first_bytes, graph_nodes(grads))}


def clock(work: Callable[[], object], loops: int) -> float:
    start = time.perf_counter()
    for _ in range(loops):
        work()
    return (time.perf_counter() - start) / loops


def median_times(works: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Seconds per call of each work: the median of ``repeats`` samples, the works interleaved within
    each repeat (in a rotating order), after a warm-up call that also sets how many calls a sample
    takes (enough for ``MIN_SAMPLE_SECONDS``)."""
    loops = {label: _loops_for(work) for label, work in works.items()}
    labels = list(works)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    for repeat in range(repeats):
        shift = repeat % len(labels)
        for label in labels[shift:] + labels[:shift]:
            samples[label].append(clock(works[label], loops[label]))
    return {label: statistics.median(values) for label, values in samples.items()}


def _loops_for(work: Callable[[], object]) -> int:
    work()  # warm-up
    # the fastest of three calls: one call that another process preempted would set far too few loops
    fastest = math.inf
    for _ in range(3):
        fastest = min(fastest, clock(work, 1))
        if fastest >= MIN_SAMPLE_SECONDS:
            return 1
    return max(1, math.ceil(MIN_SAMPLE_SECONDS / max(fastest, 1e-9)))


def memory_pass_seconds(size: int, dtype: torch.dtype, repeats: int) -> float:
    """One pass over memory for scale: ``torch.add(x, 1.0, out=buf)`` on ``size`` elements."""
    x = torch.rand(size).to(dtype)
    buf = torch.empty_like(x)
    return median_times({"pass": lambda: torch.add(x, 1.0, out=buf)}, repeats)["pass"]


# --------------------------------------------------------------------------------------------
# running


@dataclass(frozen=True)
class Row:
    """One (spec, workload, candidate)."""

    spec: str
    workload: str
    candidate: str
    note: str
    above_order: bool
    seconds: float
    ratio: float  # to the composed expression
    passes: float  # seconds / one memory pass
    ops: int
    saved_bytes: int | None = None  # W2 and W3 rows only
    nodes: int | None = None  # W2 and W3 rows only


@dataclass
class Results:
    config: Config
    specs_path: Path
    pass_seconds: float
    subjects: list[Subject] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)


def run(specs_path: Path, config: Config, echo: Callable[[str], None] = print) -> Results:
    """Benchmark every spec under ``specs_path``, printing each spec's rows as they are measured."""
    from ..build.pipeline import external_calls

    specs = []
    for spec in load_specs(specs_path):
        called = external_calls(spec)
        if called:
            echo(f"dbgen: {spec.name} skipped: it calls {', '.join(called)}, computed outside autograd: there "
                 "is no formula in torch ops to time it against")
        else:
            specs.append(spec)
    if not specs:
        raise BenchError("no spec left to time: every one calls external functions")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        with tempfile.TemporaryDirectory(prefix="dbgen-bench-") as tmp:
            subjects = [make_subject(spec, config.strategies, Path(tmp), config.fuse, config.orders, config.torch_dtype)
                        for spec in specs]
            pass_seconds = memory_pass_seconds(config.size, config.torch_dtype, config.repeats)
            results = Results(config, specs_path, pass_seconds)
            echo(format_text_table([], header=True))
            for subject in subjects:
                rows = bench_subject(subject, config, results.pass_seconds)
                results.subjects.append(subject)
                results.rows.extend(rows)
                echo(format_text_table(rows, header=False))
    finally:
        torch.set_num_threads(previous_threads)
    echo("")
    echo(format_text_summary(results))
    return results


def bench_subject(subject: Subject, config: Config, pass_seconds: float) -> list[Row]:
    inputs = make_inputs(subject.spec, config.size, config.torch_dtype)
    measured = [c for c in subject.candidates if c.same_as is None]
    fns = {c.label: functools.partial(c.fn, **subject.params) for c in measured}
    works = {order: {label: workload(fn, inputs, order) for label, fn in fns.items()} for order in config.orders}
    # Timed first: a fused kernel compiled while a dispatch mode or saved-tensor hooks are active is
    # compiled for them and runs eagerly from then on (measured: 3.6 ms -> 15.6 ms for cube, W3).
    seconds = {order: median_times(works[order], config.repeats) for order in config.orders}
    graphs = {label: graph_measures(fn, inputs) for label, fn in fns.items()}
    counter = count_kernels_profiled if config.fuse else count_ops
    ops = {order: {label: counter(work) for label, work in works[order].items()} for order in config.orders}
    rows = []
    for order, name in zip(config.orders, config.workloads):
        for candidate in subject.candidates:
            label = candidate.same_as or candidate.label
            saved, nodes = graphs[label].get(name, (None, None))
            rows.append(Row(
                subject.spec.name, name, candidate.label, candidate.note, order > subject.spec.order,
                seconds[order][label], seconds[order][label] / seconds[order][COMPOSED],
                seconds[order][label] / pass_seconds, ops[order][label], saved, nodes,
            ))
    return rows


# --------------------------------------------------------------------------------------------
# summaries


@dataclass(frozen=True)
class Summary:
    candidate: str
    specs: int
    time_ratio: float
    op_ratio: float
    native_specs: int = 0  # specs that name a native op, over which the next two are taken
    time_vs_native: float | None = None
    ops_vs_native: float | None = None


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(rows: Sequence[Row], workload_name: str = SUMMARY_WORKLOAD) -> list[Summary]:
    """Per candidate, geometric means over specs at one workload: time and kernel ops relative to the
    composed expression, and (over the specs that name one) relative to the native op."""
    at = [r for r in rows if r.workload == workload_name]
    by_spec: dict[str, dict[str, Row]] = {}
    for r in at:
        by_spec.setdefault(r.spec, {})[r.candidate] = r
    summaries = []
    for candidate in dict.fromkeys(r.candidate for r in at):
        mine = [(cells[candidate], cells) for cells in by_spec.values() if candidate in cells]
        with_native = [(r, cells[NATIVE]) for r, cells in mine if NATIVE in cells]
        summaries.append(Summary(
            candidate, len(mine),
            geometric_mean([r.ratio for r, _ in mine]),
            geometric_mean([_ratio(r.ops, cells[COMPOSED].ops) for r, cells in mine]),
            len(with_native),
            geometric_mean([r.seconds / n.seconds for r, n in with_native]) if with_native else None,
            geometric_mean([_ratio(r.ops, n.ops) for r, n in with_native]) if with_native else None,
        ))
    return summaries


def _ratio(a: int, b: int) -> float:
    return a / b if b else float("nan") if a else 1.0


# --------------------------------------------------------------------------------------------
# tables, report, plot

ROW_COLUMNS = ("spec", "workload", "candidate", "time ms", "passes", "× composed", "kernel ops", "saved MiB", "nodes")
SUMMARY_COLUMNS = ("candidate", "specs", "time × composed", "ops × composed", "specs with native",
                   "time × native", "ops × native")


def row_cells(row: Row) -> list[str]:
    workload_name = row.workload + ("*" if row.above_order else "")
    candidate = f"{row.candidate} ({row.note})" if row.note else row.candidate
    return [
        row.spec, workload_name, candidate, f"{row.seconds * 1e3:.3f}", f"{row.passes:.1f}", f"{row.ratio:.2f}",
        str(row.ops), _optional(row.saved_bytes, lambda b: f"{b / 2**20:.3g}"), _optional(row.nodes, str),
    ]


def summary_cells(s: Summary) -> list[str]:
    return [
        s.candidate, str(s.specs), f"{s.time_ratio:.2f}", f"{s.op_ratio:.2f}", str(s.native_specs),
        _optional(s.time_vs_native, lambda v: f"{v:.2f}"), _optional(s.ops_vs_native, lambda v: f"{v:.2f}"),
    ]


def _optional(value, fmt) -> str:
    return "-" if value is None else fmt(value)


def format_text_table(rows: Sequence[Row], header: bool = True) -> str:
    widths = (14, 8, 36, 10, 8, 10, 10, 9, 6)
    lines = [_text_line(ROW_COLUMNS, widths)] if header else []
    lines += [_text_line(row_cells(r), widths) for r in rows]
    return "\n".join(lines)


def format_text_summary(results: Results) -> str:
    summaries = summarize(results.rows)
    if not summaries:
        return f"(no geometric means: {SUMMARY_WORKLOAD} was not run)"
    widths = (14, 6, 16, 15, 18, 14, 13)
    lines = [f"geometric means over specs at {SUMMARY_WORKLOAD}:", _text_line(SUMMARY_COLUMNS, widths)]
    return "\n".join(lines + [_text_line(summary_cells(s), widths) for s in summaries])


def _text_line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()


def markdown_table(columns: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    return "\n".join(out + ["| " + " | ".join(cells) + " |" for cells in lines])


def report_markdown(results: Results) -> str:
    config = results.config
    parts = [
        "# dbgen bench",
        f"`{config.command(results.specs_path)}`",
        markdown_table(("setting", "value"), _settings(results)),
        _WORKLOAD_TEXT,
        f"## Geometric means over specs at {SUMMARY_WORKLOAD}",
        _summary_section(results.rows),
        f"## {SUMMARY_WORKLOAD} at a glance: time × composed (kernel ops × composed)",
        _glance_table(results),
        "## Per spec",
    ]
    for subject in results.subjects:
        spec = subject.spec
        native = f"; native `{spec.native}`" if spec.native else ""
        parts.append(f"### {spec.name} (order {spec.order}{native})")
        rows = [r for r in results.rows if r.spec == spec.name]
        parts.append(markdown_table(ROW_COLUMNS[1:], [row_cells(r)[1:] for r in rows]))
    return "\n\n".join(parts) + "\n"


def _settings(results: Results) -> list[tuple[str, str]]:
    config = results.config
    return [
        ("dbgen", __version__),
        ("torch", torch.__version__),
        ("threads", str(config.threads)),
        ("size", f"{config.size} elements per input"),
        ("dtype", config.dtype),
        ("repeats", f"{config.repeats} (median of interleaved repeats in one process, after a warm-up)"),
        ("memory pass", f"{results.pass_seconds * 1e3:.4f} ms: `torch.add(x, 1.0, out=buf)`, same size and dtype"),
        ("workloads", ", ".join(config.workloads)),
        ("strategies", ", ".join(config.strategies)),
        ("fused", "yes: every level compiled into kernels (build --fuse)" if config.fuse else "no (eager)"),
    ]


_WORKLOAD_TEXT = """\
Workloads, on inputs of `size` elements drawn from each spec's domain, params at their defaults:
W1 forward alone (`torch.no_grad()`); W2 the value and the first-order gradients for a random
cotangent (`torch.autograd.grad`); W3 first-order gradients with `create_graph=True`, then the
gradients of those for random cotangents (second order); W4 one level more (third order). A `*`
marks a workload above the spec's `order`: the generated code is still correct there (its last
level is written in differentiable torch ops), but not with explicit formulas.

Columns: `time ms` is the median time of one call; `passes` is that time in memory passes (the
time of the memory pass above); `× composed` is the time relative to autograd through the composed
expression; `kernel ops` counts the aten ops dispatched that run a kernel (views and detach left
out); `saved MiB` is the memory autograd saves, unique storages other than the inputs' and the
cotangents' (W2: what forward saves; W3: what forward and the first backward with
`create_graph=True` save together); `nodes` counts the autograd nodes reachable from the outputs
(W2: the forward graph; W3: the graph of the first-order gradients). `auto (= X)` has the code of
strategy X and shares its measures."""


def _summary_section(rows: Sequence[Row]) -> str:
    summaries = summarize(rows)
    if not summaries:
        return f"({SUMMARY_WORKLOAD} was not run.)"
    return markdown_table(SUMMARY_COLUMNS, [summary_cells(s) for s in summaries])


def _glance_table(results: Results) -> str:
    at = [r for r in results.rows if r.workload == SUMMARY_WORKLOAD]
    if not at:
        return f"({SUMMARY_WORKLOAD} was not run.)"
    candidates = list(dict.fromkeys(r.candidate for r in at if r.candidate != COMPOSED))
    lines = []
    for subject in results.subjects:
        cells = {r.candidate: r for r in at if r.spec == subject.spec.name}
        composed_ops = cells[COMPOSED].ops
        lines.append([subject.spec.name, str(subject.spec.order)] + [
            f"{cells[c].ratio:.2f} ({_ratio(cells[c].ops, composed_ops):.2f})" if c in cells else "-"
            for c in candidates
        ])
    return markdown_table(("spec", "order", *candidates), lines)


def write_report(results: Results, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_markdown(results), encoding="utf-8")


def write_plot(results: Results, path: Path) -> str | None:
    """A panel per spec: time relative to composed by workload, a line per strategy and native.
    Returns why the plot was skipped, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib)"
    subjects = results.subjects
    columns = min(4, len(subjects))
    nrows = math.ceil(len(subjects) / columns)
    fig, axes = plt.subplots(nrows, columns, figsize=(4 * columns, 3.2 * nrows), squeeze=False)
    for ax, subject in zip(axes.flat, subjects):
        _plot_panel(ax, subject, results)
    for ax in list(axes.flat)[len(subjects):]:
        ax.set_visible(False)
    legend = {}
    for ax in axes.flat:
        legend.update(zip(*reversed(ax.get_legend_handles_labels())))
    fig.legend(legend.values(), legend.keys(), loc="center right", frameon=False)
    config = results.config
    fig.suptitle(f"time relative to the composed expression\n{config.size} elements, {config.dtype}, "
                 f"{config.threads} thread(s); grey: workloads above the spec's order", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1 - 1.6 / fig.get_figwidth(), 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


# one colour per strategy in every panel; auto is a wide grey band under the strategy it resolves to
_PLOT_STYLES = {
    "auto": {"color": "0.5", "linewidth": 7, "alpha": 0.3, "zorder": 1},
    "save_inputs": {"color": "C0"},
    "save_outputs": {"color": "C1"},
    "intermediates": {"color": "C2"},
    "nested": {"color": "C3"},
    NATIVE: {"color": "black", "linestyle": "--"},
}


_RATIO_TICKS = [m * 10.0**e for e in (-2, -1, 0, 1, 2) for m in (1, 1.5, 2, 3, 5, 7)]


def _plot_panel(ax, subject: Subject, results: Results) -> None:
    from matplotlib import ticker

    workloads = results.config.workloads
    rows = {(r.workload, r.candidate): r for r in results.rows if r.spec == subject.spec.name}
    ax.axhline(1.0, color="black", linewidth=1, label=COMPOSED)
    for candidate in subject.candidates:
        if candidate.label == COMPOSED:
            continue
        ratios = [rows[(w, candidate.label)].ratio for w in workloads]
        ax.plot(workloads, ratios, marker="o", label=candidate.label, **_PLOT_STYLES.get(candidate.label, {}))
    above = [w for w in workloads if WORKLOADS.index(w) > subject.spec.order]
    if above:
        ax.axvspan(workloads.index(above[0]) - 0.5, len(workloads) - 0.5, color="0.9", zorder=0)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(ticker.FixedLocator(_RATIO_TICKS))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_locator(ticker.NullLocator())
    ax.set_title(f"{subject.spec.name} (order {subject.spec.order})")
    ax.grid(True, which="both", alpha=0.3)
