"""The plan's Functions as C++ autograd code, registered as one ``torch.library`` op per spec
(``cpp: true``; docs/guide/deployment.md).

Each of the plan's Functions becomes a ``torch::autograd::Function`` with the same forward,
saved tensors and backward as the Python one: a backward written in differentiable ATen ops is
differentiated by autograd (save_inputs, save_outputs, intermediates), and a nested level's backward
applies the next level, so the op differentiates to the spec's order from Python, TorchScript and
C++. The op's CompositeExplicitAutograd kernel (the forward formulas alone) serves every backend and
FakeTensor (torch.export, torch.compile); its Autograd kernel applies the first Function.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..plan import Block, FunctionPlan, ModulePlan, Result
from ..spec.cpp_names import CPP_RESERVED, why_reserved
from .aten import AtenPrinter
from .functions import accumulation_lines, guard_split, result_code
from .text import _environment

NAMESPACE = "dbgen"  # torch.ops.dbgen.NAME


class CppUnsupported(Exception):
    """A construct the C++ op cannot compute yet: the build says which, on the spec's cpp line."""


@dataclass(frozen=True)
class CppFunction:
    """One ``torch::autograd::Function`` of the op, as the template prints it."""

    name: str
    summary: str
    parameters: str  # forward's parameters after ctx
    arguments: str  # the same names, to pass them on
    compute_lines: tuple[str, ...]
    outputs: str
    saved: str
    params: tuple[str, ...]
    non_differentiable: str
    materialize: bool
    masked: bool
    unpack_lines: tuple[str, ...]
    backward_lines: tuple[str, ...]
    gradients: str


def op_schema(plan: ModulePlan) -> str:
    """The op's schema: tensors, then params with their defaults, then its outputs."""
    spec = plan.spec
    params = [f"float {name}={float(value)!r}" for name, value in spec.params]
    returns = "Tensor" if plan.returned == 1 else f"({', '.join(['Tensor'] * plan.returned)})"
    return f"{spec.name}({', '.join([*(f'Tensor {x}' for x in spec.inputs), *params])}) -> {returns}"


def render_cpp(plan: ModulePlan) -> str:
    """The op's C++ source: its Functions, kernels and registration.

    Raises:
        CppUnsupported: a formula uses a construct the C++ op cannot compute yet (named).
    """
    spec = plan.spec
    reserved = sorted({*spec.inputs, *spec.param_names, *(name for name, _ in spec.outputs)} & CPP_RESERVED)
    if reserved:
        raise CppUnsupported(f"a value named {reserved[0]!r} ({why_reserved(reserved[0])}: rename it)")
    try:
        functions = [_function(fn, plan) for fn in plan.functions]
    except NotImplementedError as refused:
        raise CppUnsupported(str(refused)) from None
    inputs = list(spec.inputs)
    returned = plan.returned
    single = returned == 1
    return _environment().get_template("op.cpp.jinja").render(
        spec=spec,
        namespace=NAMESPACE,
        schema=op_schema(plan),
        functions=functions,
        entry=functions[0],
        parameters=", ".join([*(f"const Tensor& {x}" for x in inputs), *(f"double {p}" for p in spec.param_names)]),
        inputs=inputs,
        input_names=", ".join(f'"{x}"' for x in inputs),
        call_args=", ".join([*(f"_inputs[{i}]" for i in range(len(inputs))), *spec.param_names]),
        result_type="Tensor" if single else f"std::tuple<{', '.join(['Tensor'] * returned)}>",
        returned=[f"_outputs[{i}]" for i in range(returned)],
        single=single,
        uses_norm="_norm({" in "\n".join(line for f in functions for line in (*f.compute_lines, *f.backward_lines)),
    ).rstrip() + "\n"


def _printer(block: Block, tensors, fold_sums: bool) -> AtenPrinter:
    names = set(tensors)
    for name, value in block.temporaries:
        if any(str(s) in names for s in value.free_symbols):
            names.add(name)
    printer = AtenPrinter(names, fold_sums=fold_sums)
    printer.masks = {sympy.Symbol(name, real=True): value for name, value in block.temporaries
                     if isinstance(value, sympy.logic.boolalg.Boolean) and not isinstance(value, sympy.Expr)}
    return printer


def _function(fn: FunctionPlan, plan: ModulePlan) -> CppFunction:
    params = plan.spec.param_names
    nested = plan.strategy == "nested"
    mask = ["_needed"] if fn.masked else []
    printer = _printer(fn.forward, fn.inputs, fold_sums=nested)
    guards = _forward_guards(fn, plan) if fn.masked else {}
    compute = _block_lines(fn.forward, printer, fn.inputs, guards, forward=True)
    unpack = [f"const auto& {name} = _saved[{i}];" for i, name in enumerate(fn.saved)]
    unpack += [f"double {p} = ctx->saved_data[\"{p}\"].toDouble();" for p in params]
    unpack += [f"auto {c} = _grad_outputs[{i}];" for i, c in enumerate(fn.cotangents)]
    if fn.values or fn.masked:  # gradients are not materialized: an unused output's is undefined
        anchor = fn.differentiable_inputs[0]
        unpack += [f"{c} = _zeros_if_undefined({c}, {anchor});" for c in fn.cotangents]
    backward, gradients = _backward(fn, plan)
    extra = ["Tensor()"] * (len(fn.constants) + len(params) + fn.masked)
    return CppFunction(
        name=fn.class_name,
        summary=fn.summary,
        parameters=", ".join([*(f"const Tensor& {x}" for x in fn.inputs), *(f"double {p}" for p in params),
                              *(["const std::vector<bool>& _needed"] if fn.masked else [])]),
        arguments=", ".join([*fn.inputs, *params, *mask]),
        compute_lines=tuple(compute),
        outputs=", ".join(fn.outputs),
        saved=", ".join(name if name in fn.inputs else f"_outputs[{fn.outputs.index(name)}]" for name in fn.saved),
        params=params,
        non_differentiable=", ".join(f"_outputs[{fn.outputs.index(name)}]" for name in fn.values),
        materialize=not (fn.values or fn.accumulations or fn.masked),
        masked=fn.masked,
        unpack_lines=tuple(unpack),
        backward_lines=tuple(backward),
        gradients=", ".join([*gradients, *extra]),
    )


def _forward_guards(fn: FunctionPlan, plan: ModulePlan) -> dict[str, str]:
    """A masked level's results, each computed where ``needed`` (the calling level's inputs' flags) says."""
    caller = next(f for f in plan.functions if f.next_level == fn.class_name)
    order = caller.differentiable_inputs
    return {r.name: f"_needed[{order.index(r.grad_of)}]" for r in fn.forward.results if r.grad_of is not None}


def _backward(fn: FunctionPlan, plan: ModulePlan) -> tuple[list[str], list[str]]:
    """backward's lines and the gradients it returns (the constants', params' and mask's apart)."""
    if fn.next_level is not None:
        nxt = plan.functions[[f.class_name for f in plan.functions].index(fn.next_level)]
        passed = [f"{name}.detach()" if name in fn.differentiable_outputs else name for name in nxt.inputs]
        args = [*passed, *plan.spec.param_names]
        lines = []
        if nxt.masked:
            lines.append(f"std::vector<bool> _needed = {_needed(fn)};")
            args.append("_needed")
        lines.append(f"auto _level = {nxt.class_name}::apply({', '.join(args)});")
        grads = nxt.differentiable_outputs
        if nxt.masked:  # the gradients it left out hold placeholders (see the template's forward)
            return lines, [f"_needed[{i}] ? _level[{i}] : Tensor()" for i in range(len(grads))]
        return lines, [f"_level[{i}]" for i in range(len(grads))]
    printer = _printer(fn.backward, [*fn.cotangents, *fn.saved], fold_sums=plan.strategy == "nested")
    in_scope = (*fn.cotangents, *fn.saved)
    if fn.accumulations:
        return accumulation_lines(fn, printer), [grad for grad, _ in fn.accumulations]
    guards = {}
    lines = []
    if len(fn.backward.results) > 1:
        lines.append(f"std::vector<bool> _needed = {_needed(fn)};")
        order = fn.differentiable_inputs
        guards = {r.name: f"_needed[{order.index(r.grad_of)}]" for r in fn.backward.results}
    lines += _block_lines(fn.backward, printer, in_scope, guards, forward=False)
    return lines, [r.name for r in fn.backward.results]


def _needed(fn: FunctionPlan) -> str:
    return "{" + ", ".join(f"ctx->needs_input_grad({i})" for i in range(len(fn.differentiable_inputs))) + "}"


def _block_lines(block: Block, printer: AtenPrinter, in_scope, guards: dict[str, str], forward: bool) -> list[str]:
    """Temporaries, then results; a result named in ``guards`` (with the temporaries only it reads)
    computed under its condition, and undefined where that is false."""
    always, guarded = guard_split(block, guards)
    lines = [f"Tensor {result.name};" for result, _ in guarded]
    lines += [printer.assign(name, printer.doprint(value)) for name, value in always.temporaries]
    for result in always.results:
        lines += _result_lines(result, printer, in_scope, forward, declare=True)
    for result, own in guarded:
        body = [printer.assign(name, printer.doprint(value)) for name, value in own.temporaries]
        body += _result_lines(result, printer, in_scope, forward, declare=False)
        lines += [f"if ({guards[result.name]}) {{", *(f"  {line}" for line in body), "}"]
    return lines


def _result_lines(result: Result, printer: AtenPrinter, in_scope, forward: bool, declare: bool) -> list[str]:
    if result.expr == sympy.Symbol(result.name, real=True):
        return []  # a temporary already holds it
    target = f"auto {result.name}" if declare else result.name
    return [f"{target} = {result_code(result, printer, in_scope, in_scope[0], forward)};"]
