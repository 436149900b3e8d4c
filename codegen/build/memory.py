"""Whether a plan saves no more for backward than autograd through the composed expression.

README's memory promise, for any spec: the generated function never keeps more tensors for backward
than autograd through the expression written directly in torch ops (the generated tests'
``composed``), at W2 (what forward saves) and W3 (what forward and the first backward, taken with
``create_graph=True``, save). ``auto`` (``plan.make_plan``) asks ``excess`` about its candidates,
cheapest first, and takes the first that keeps the promise.

Measured, not modelled: the plan's module is rendered and run on a few float64 elements drawn from
the spec's domain, and the distinct full-size tensors autograd saves are counted
(``saved_tensors_hooks``), the inputs' and cotangents' storages left out, as ``dbgen bench``'s
``graph_measures`` does at full size. A static model would have to follow torch's saving rules
for every op and for the backward of every backward op; this is exact, and costs one torch import
per build process (about 2 s) and about 0.1 s per spec (rendering the candidate once more).
torch is imported with this module, which the pipeline does before a spec's time limit starts:
a timer firing inside an import would leave torch half imported.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import types

import torch

from ..emit.printer import INT64_LIMIT
from ..language.special import SpecialFunctionBase

SIZE = 16  # elements per input: a full-size tensor is one of SIZE elements; scalars do not count
_SEED = 0


def excess(plan) -> str | None:
    """None when ``plan`` saves no more than the composed expression at W2 and W3; else what it
    saves against what autograd saves, for the reason line of ``auto``. A spec that calls a special
    function torch cannot differentiate (special.py) has no composed expression to compare with."""
    if any(expr.atoms(SpecialFunctionBase) for expr in plan.exprs):
        return None
    ours = saved_counts(module_function(plan), plan.spec)
    printed = saved_counts(composed_function(plan), plan.spec)
    written = saved_counts(written_function(plan.spec), plan.spec)
    theirs = tuple(map(min, printed, written))
    over = [f"{w}: {n} tensors against {m}" for w, n, m in zip(("W2", "W3"), ours, theirs) if n > m]
    if not over:
        return None
    return "saves more for backward than autograd through the composed expression (" + ", ".join(over) + ")"


def saved_counts(fn, spec) -> tuple[int, int]:
    """(W2, W3): the full-size tensors autograd saves running forward, then forward and the first
    backward with create_graph, on inputs from ``spec``'s domain."""
    generator = torch.Generator().manual_seed(_SEED)
    bounds = [spec.bounds(name) for name in spec.inputs]
    inputs = [lo + (hi - lo) * torch.rand(SIZE, generator=generator, dtype=torch.float64) for lo, hi in bounds]
    inputs = [x.requires_grad_() for x in inputs]
    cotangent = torch.randn(SIZE, generator=generator, dtype=torch.float64)
    exclude = {t.untyped_storage().data_ptr() for t in (*inputs, cotangent)}

    def first_order():
        value = _summed(fn(*inputs), spec)
        if not value.requires_grad:  # a choice on params that takes a branch without inputs
            return value, ()
        return value, torch.autograd.grad(value, inputs, cotangent, create_graph=True, allow_unused=True)

    with torch.enable_grad():
        return _saved(lambda: fn(*inputs), exclude), _saved(first_order, exclude)


def _summed(value, spec):
    """A vector-valued spec's outputs added up (a sum saves nothing): one cotangent reaches each."""
    if isinstance(value, tuple):
        return sum(value)
    return value.sum(-1) if spec.stack else value


def saved_storages(action):
    """(data pointer -> bytes of each storage autograd saves while ``action`` runs, its result).
    The result keeps them alive, so no storage is freed and reused before it is counted."""
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = action()
    return storages, result


def _saved(action, exclude: set[int]) -> int:
    storages, _kept = saved_storages(action)
    full = SIZE * 8
    return sum(1 for ptr, nbytes in storages.items() if ptr and ptr not in exclude and nbytes >= full)


def module_function(plan, source: str | None = None):
    """The public function of ``plan``'s module (``source``: its text, where already rendered), run
    eagerly (a fused build's kernels save the same)."""
    from ..emit.render import render_module

    module = _module(source or render_module(plan, digest="", with_op=False), "dbgen_memory_check")
    if hasattr(module, "FUSE"):
        module.FUSE = False
    return getattr(module, plan.spec.name)


def composed_function(plan):
    """The expression written directly in torch ops, as the generated tests' ``composed``."""
    from ..emit.suite import composed_code

    spec = plan.spec
    value, _ = composed_code(plan)
    params = "".join(f", {name}={value!r}" for name, value in spec.params)
    source = f"import math\nimport torch\n\ndef composed({', '.join(spec.inputs)}{params}):\n    return {value}\n"
    return _module(source, "dbgen_memory_composed").composed


def _torch_scalar(value):
    """``value``, an int beyond int64 as a float: torch refuses it as a scalar (``x * 2**64``)."""
    if isinstance(value, int) and not -INT64_LIMIT <= value < INT64_LIMIT:
        return float(value)
    return value


def written_function(spec):
    """The spec's expression exactly as written, in torch ops (``(sigma/r)**12`` stays a quotient
    raised to a power, where SymPy would print ``sigma**12/r**12``), params as Python numbers."""
    from ..language import FUNCTION_ARITY

    functions = {name: getattr(torch.special, name, None) or getattr(torch, name) for name in FUNCTION_ARITY
                 if hasattr(torch, name) or hasattr(torch.special, name)}
    functions.update(softplus=torch.nn.functional.softplus, min=torch.minimum, max=torch.maximum)
    operators = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
                 ast.Pow: operator.pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
                 ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
                 ast.Eq: operator.eq, ast.NotEq: operator.ne}
    # parse_expr has checked each against the language
    trees = [ast.parse(text, mode="eval").body for _, text in spec.formulas]

    def fn(*inputs):
        names = {**dict(zip(spec.inputs, inputs)), **dict(spec.params), "pi": math.pi, "E": math.e}

        def walk(node):
            if isinstance(node, ast.Constant):
                return _torch_scalar(node.value)
            if isinstance(node, ast.Name):
                return names[node.id]
            if isinstance(node, ast.UnaryOp):
                if isinstance(node.op, (ast.Not, ast.Invert)):
                    return ~walk(node.operand)
                return -walk(node.operand) if isinstance(node.op, ast.USub) else walk(node.operand)
            if isinstance(node, ast.BinOp):
                return _torch_scalar(operators[type(node.op)](walk(node.left), walk(node.right)))
            if isinstance(node, ast.Compare):  # as torch code writes it: a chain joined by &
                values = [walk(part) for part in (node.left, *node.comparators)]
                tests = [operators[type(op)](a, b) for op, a, b in zip(node.ops, values, values[1:])]
                return functools.reduce(operator.and_, tests)
            if isinstance(node, ast.BoolOp):
                return functools.reduce(operator.and_ if isinstance(node.op, ast.And) else operator.or_,
                                        [walk(value) for value in node.values])
            args = [walk(arg) for arg in node.args]
            if node.func.id == "where" and not isinstance(args[0], torch.Tensor):
                return args[1] if args[0] else args[2]  # a condition on params: chosen in Python
            if node.func.id == "polygamma":
                args[1:] = [torch.as_tensor(args[1], dtype=torch.float64)]  # n stays a Python int
                return torch.polygamma(*args)
            args = [a if isinstance(a, torch.Tensor) else torch.tensor(a, dtype=torch.float64) for a in args]
            return functions[node.func.id](*args)

        # every input in the graph, as the generated tests' composed
        values = tuple(walk(tree) + 0 * sum(inputs) for tree in trees)
        return values if spec.outputs else values[0]

    return fn


def _module(source: str, name: str):
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)  # noqa: S102 - code dbgen generated itself
    return module
