"""What each generated Function's methods say: signatures, argument checks, forward, backward,
jvp and the statements of each block, as the views the module template prints.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass

import sympy

from ..language import external, special
from ..plan import Block, FunctionPlan, ModulePlan, Result, temporary_names
from .printer import Copy, TorchPrinter
from .text import template_dir


@dataclass(frozen=True)
class FunctionView:
    class_name: str
    summary: str
    args: str
    forward_lines: tuple[str, ...]
    forward_return: str
    input_unpack: str
    output_unpack: str | None
    saved: str
    saved_unpack: str
    compile_name: str
    ctx_lines: tuple[str, ...]
    cotangents: str
    backward_lines: tuple[str, ...]
    backward_return: str
    saved_for_forward: str
    saved_for_forward_unpack: str
    jvp_args: str
    jvp_lines: tuple[str, ...]
    jvp_return: str
    kernels: tuple[KernelView, ...] = ()


@dataclass(frozen=True)
class KernelView:
    """A level's elementwise computation as a plain function, fused by ``_fused`` (spec ``fuse``)."""

    name: str
    args: str
    doc: str
    lines: tuple[str, ...]
    returns: str
    eager_below: int = 0  # elements: below them the kernel runs eagerly (_eager_below)


def _block_printer(block: Block, tensors_in_scope, fold_sums: bool = True, scaled_last=()) -> TorchPrinter:
    """A printer that knows which names in ``block`` hold tensors (the rest hold floats)."""
    names = set(tensors_in_scope)
    for name, value in block.temporaries:
        if any(str(s) in names for s in value.free_symbols):
            names.add(name)
    printer = TorchPrinter(names, fold_sums=fold_sums, scaled_last=scaled_last)
    printer.masks = {sympy.Symbol(name, real=True): value for name, value in block.temporaries
                     if isinstance(value, sympy.logic.boolalg.Boolean) and not isinstance(value, sympy.Expr)}
    return printer


def _typed_signature(spec) -> str:
    """The public function's parameters with type hints: tensors, then keyword-only float params."""
    params = [f"{name}: float = {value!r}" for name, value in spec.params]
    return ", ".join([*(f"{x}: torch.Tensor" for x in spec.inputs), *(["*", *params] if params else [])])


def _documented_arguments(spec) -> list[tuple[str, str]]:
    """(name, description) of each input and param, for the public function's Args section."""
    number = "a tensor" if len(spec.inputs) == 1 else "a tensor, or a Python number beside a tensor input"
    inputs = [(x, f"{number}{_tested_on(spec, x)}.") for x in spec.inputs]
    params = [(name, f"a Python number, default {value!r}; a constant (to train it, make it an input).")
              for name, value in spec.params]
    return inputs + params


def _tested_on(spec, name: str) -> str:
    """Where the spec says the input is used (the generated tests check there), if it says."""
    if name not in spec.explicit_domain:
        return ""
    lo, hi = spec.bounds(name)
    return f", used on [{lo!r}, {hi!r}] (the generated tests check there)"


def _signature(spec) -> str:
    params = [f"{name}={value!r}" for name, value in spec.params]
    return ", ".join([*spec.inputs, *(["*", *params] if params else [])])


_GUARD_BUILTINS = {"type", "float", "isinstance"}  # what the public function's guards read


def _argument_checks(spec) -> list[str]:
    """The public function's first lines: every param must be a Python number, every input a tensor.

    The helpers refuse a tensor param (its gradient would be silently dropped) and wrap Python
    numbers given as inputs beside a tensor, or refuse them alone; they convert integer and bool
    tensors to float as torch's float ops do, and refuse complex ones (the expression is real: its
    derivatives are not autograd's complex ones) and any other dtype. Each call sits behind a cheap
    guard that the usual call (float params, floating tensor inputs) passes; the guard reads the
    builtins ``type``, ``float`` and ``isinstance``, so where an input or param takes one of those
    names the helpers are called unguarded.
    """
    name = f'"{spec.name}"'
    guarded = not _GUARD_BUILTINS & {*spec.inputs, *spec.param_names}
    lines = []
    if spec.params:
        check = f"_check_params({name}, {_keywords(spec.param_names)})"
        guard = " or ".join(f"type({param}) is not float" for param in spec.param_names)
        lines += [f"if {guard}:", f"    {check}"] if guarded else [check]
    wrap = f"{_unpack(spec.inputs)} = _tensor_inputs({name}, {_keywords(spec.inputs)})"
    guard = " and ".join([*(f"isinstance({x}, torch.Tensor)" for x in spec.inputs),
                          *(f"{x}.is_floating_point()" for x in spec.inputs)])
    lines += [f"if not ({guard}):", f"    {wrap}"] if guarded else [wrap]
    return lines


def _keywords(names) -> str:
    return ", ".join(f"{name}={name}" for name in names)


def _function_view(fn: FunctionPlan, plan: ModulePlan, printers: list[TorchPrinter]) -> FunctionView:
    params = plan.spec.param_names
    printer = _block_printer(fn.forward, fn.inputs, fold_sums=plan.strategy == "nested")
    printer.scalar_keywords = not plan.spec.fuse
    printer.name_for = _fold_names(fn, plan)
    printers.append(printer)
    mask = [plan.local("needed")] if fn.masked else []
    if fn.masked:
        guards = {r.name: f"{r.grad_of!r} in {mask[0]}" for r in fn.forward.results if r.grad_of is not None}
        forward_lines = _guarded_lines(fn.forward, guards, printer, in_scope=fn.inputs, forward=True)
    else:
        forward_lines = _block_lines(fn.forward, printer, in_scope=fn.inputs, anchor=fn.inputs[0], forward=True)
    backward_lines, backward_return = _backward(fn, plan, printers)
    outputs = fn.outputs
    needs_output = any(name in fn.saved for name in outputs)
    view = FunctionView(
        class_name=fn.class_name,
        summary=fn.summary,
        args=", ".join([*fn.inputs, *params, *mask]),
        forward_lines=tuple(forward_lines),
        forward_return=", ".join(outputs),
        input_unpack=_unpack_used([*fn.inputs, *params, *mask], {*fn.saved, *params, *mask}),
        output_unpack=((_unpack_used(outputs, fn.saved) if len(outputs) > 1 else outputs[0]) if needs_output else None),
        saved=", ".join(fn.saved),
        saved_unpack=_unpack(fn.saved) if fn.saved else "",
        ctx_lines=tuple(f"ctx.{ctx_name(name)} = {name}" for name in [*params, *mask]) + _materialize_lines(fn),
        compile_name=fn.compile_name,
        cotangents=", ".join([*fn.cotangents, *(f"_grad_{name}" for name in fn.values)]),
        backward_lines=tuple(backward_lines),
        backward_return=backward_return,
        **_jvp_fields(fn, params, mask, printers, _order_limited(plan, fn)),
    )
    return _fuse(view, fn, params) if plan.spec.fuse else view


# What autograd's ctx already has (dir(torch.autograd.function.BackwardCFunction), torch 2.13): a param
# stored under one of these names would replace it (ctx.apply = 0.5 breaks backward).
CTX_ATTRIBUTES = frozenset({
    "apply", "apply_boxed", "apply_jvp", "dirty_tensors", "mark_dirty", "mark_non_differentiable",
    "mark_shared_storage", "materialize_grads", "maybe_clear_saved_tensors", "metadata", "name",
    "needs_input_grad", "next_functions", "non_differentiable", "register_hook", "register_prehook",
    "requires_grad", "save_for_backward", "save_for_forward", "saved_for_forward", "saved_tensors",
    "saved_variables", "set_materialize_grads", "to_save",
})


def ctx_name(param: str) -> str:
    """The ctx attribute holding ``param``: its own name, unless ctx has an attribute of that name."""
    return f"{param}_param" if param in CTX_ATTRIBUTES else param


def _materialize_lines(fn: FunctionPlan) -> tuple[str, ...]:
    if fn.values:
        return (f"ctx.mark_non_differentiable({', '.join(fn.values)})",
                "ctx.set_materialize_grads(False)  # no zero-filled gradients for the values")
    if fn.accumulations:
        return ("ctx.set_materialize_grads(False)  # unused outputs' gradients arrive as None",)
    if fn.masked:
        return ("ctx.set_materialize_grads(False)  # gradients left out (None) have no cotangent",)
    return ()


# A kernel of fewer operations runs eagerly below SMALL_KERNEL_SIZE elements (``_fused``'s
# eager_below): there its direct call (about 5 us on CPU, runtime._thin_call) costs more than one
# or two ops' dispatch; above it inductor's kernel wins even for one op (measured, float32, one
# thread: silu's two-op forward 7.1 us fused, 2.7 eager at 256 elements; tanh alone 8.5 and 9.4
# at 4,096, 1,021 and 2,160 at 2**20).
MIN_FUSED_OPS = 3
SMALL_KERNEL_SIZE = 4096


def _fuse(view: FunctionView, fn: FunctionPlan, params) -> FunctionView:
    """Move the forward's formulas, and a last level's backward formulas, into fused kernels."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in fn.class_name)
    forward = KernelView(f"{snake}_forward", view.args, f"{fn.class_name}'s forward formulas.",
                         view.forward_lines, view.forward_return, _eager_below(fn.forward))
    kernels = [forward]
    changes = {"forward_lines": (), "forward_return": f"{forward.name}({view.args})"}
    if fn.backward is not None:
        grads = [grad for grad, _ in fn.accumulations] or [r.name for r in fn.backward.results]
        args = [*fn.cotangents, *fn.saved, *params]
        ctx_prefix = tuple(f"{name} = ctx.{ctx_name(name)}" for name in params)
        body = tuple(line for line in view.backward_lines if line not in ctx_prefix)
        backward = KernelView(f"{snake}_backward", ", ".join(args), f"{fn.class_name}'s backward formulas.",
                              body, ", ".join(grads), _eager_below(fn.backward))
        kernels.append(backward)
        call_args = ", ".join([*fn.cotangents, *fn.saved, *(f"ctx.{ctx_name(name)}" for name in params)])
        changes.update(backward_lines=(f"{_unpack(grads) if len(grads) > 1 else grads[0]} = {backward.name}({call_args})",))
    return dataclasses.replace(view, kernels=tuple(kernels), **changes)


def _eager_below(block: Block) -> int:
    """The size below which ``block``'s kernel runs eagerly: ``SMALL_KERNEL_SIZE`` for one of
    fewer than ``MIN_FUSED_OPS`` operations, else 0 (always fused)."""
    return SMALL_KERNEL_SIZE if sum(sympy.count_ops(value) for value in block.values) < MIN_FUSED_OPS else 0


def _jvp_fields(fn: FunctionPlan, params, mask, printers: list[TorchPrinter], limit=lambda name: name) -> dict:
    printer = _block_printer(fn.jvp, [*fn.tangents, *fn.saved_for_forward], fold_sums=False)
    printers.append(printer)
    lines = [f"{name} = ctx.{ctx_name(name)}" for name in [*params, *mask] if name in {*_used_names(fn.jvp), *mask}]
    if (fn.accumulations or fn.values or fn.masked) and len(fn.tangents) > 1:
        # gradients are not materialized here, and neither are tangents: a non-dual input's is None
        lines.append(f"{_unpack(fn.tangents)} = _zero_missing(({_unpack(fn.tangents)}))")
    lines += _block_lines(fn.jvp, printer, in_scope=(*fn.tangents, *fn.saved_for_forward), anchor=fn.tangents[0],
                          forward=False)
    return {
        "saved_for_forward": ", ".join(fn.saved_for_forward),
        "saved_for_forward_unpack": _unpack_used(fn.saved_for_forward, _read_names(fn.jvp)) or "",
        "jvp_args": ", ".join([*fn.tangents, *(f"_tangent_{name}" for name in fn.constants),
                               *(f"_{name}" for name in [*params, *mask])]),
        "jvp_lines": tuple(lines),
        "jvp_return": ", ".join([*(f"{limit(r.name)} if {grad_of!r} in {mask[0]} else None" if mask else limit(r.name)
                                   for r, grad_of in zip(fn.jvp.results, fn.gradient_of)),
                                 *("None" for _ in fn.values)]),
    }


def _backward(fn: FunctionPlan, plan: ModulePlan, printers: list[TorchPrinter]):
    params = plan.spec.param_names
    nones = ["None"] * (len(fn.constants) + len(params) + fn.masked)
    lines = [f"{name} = ctx.{ctx_name(name)}" for name in params if name in _used_names(fn.backward)]
    if fn.values or fn.masked:  # gradients are not materialized: an unused output's cotangent is None
        anchor = fn.differentiable_inputs[0]
        lines += [f"{c} = _zeros_if_none({c}, {anchor})" for c in fn.cotangents]
    if fn.next_level is not None:
        nxt = plan.functions[[f.class_name for f in plan.functions].index(fn.next_level)]
        # the output passed on as a value is detached: the next level returns no gradient for it, and
        # an edge back to this Function would only make autograd run it again on zeros
        passed = [f"{name}.detach()" if name in fn.differentiable_outputs else name for name in nxt.inputs]
        # the next level computes only the gradients this pass uses
        mask = [_needed_call(fn)] if nxt.masked else []
        args = ", ".join([*passed, *(f"ctx.{ctx_name(name)}" for name in params), *mask])
        level = plan.local("level")
        lines.append(f"{level} = {_compile_choice(nxt)}")
        grads = nxt.differentiable_outputs
        call = f"{level}.apply({args})"
        if len(nxt.outputs) > len(grads):  # the values it passes on are not gradients
            call += "[0]" if len(grads) == 1 else f"[:{len(grads)}]"
        if not nones:
            return lines, call
        lines.append(f"{_unpack(grads) if len(grads) > 1 else grads[0]} = {call}")
        return lines, ", ".join([*grads, *nones])
    nested = plan.strategy == "nested"  # else autograd differentiates this backward at second order
    printer = _block_printer(fn.backward, [*fn.cotangents, *fn.saved], fold_sums=nested,
                             scaled_last=() if nested else fn.cotangents)
    printer.scalar_keywords = not plan.spec.fuse
    printer.name_for = _fold_names(fn, plan) if not fn.accumulations else None  # no line before an `if`
    printers.append(printer)
    if fn.accumulations:
        lines += accumulation_lines(fn, printer)
        return lines, ", ".join([*(grad for grad, _ in fn.accumulations), *nones])
    in_scope = (*fn.cotangents, *fn.saved)
    if len(fn.backward.results) > 1 and not plan.spec.fuse:
        needed = plan.local("needed")
        lines.append(f"{needed} = {_needed_call(fn)}")
        guards = {r.name: f"{r.grad_of!r} in {needed}" for r in fn.backward.results}
        lines += _guarded_lines(fn.backward, guards, printer, in_scope, forward=False)
    else:
        lines += _block_lines(fn.backward, printer, in_scope=in_scope, anchor=fn.cotangents[0], forward=False)
    limit = _order_limited(plan)
    return lines, ", ".join([*(limit(r.name) for r in fn.backward.results), *nones])


def _order_limited(plan: ModulePlan, fn: FunctionPlan | None = None):
    """How the last level writes a gradient it returns: through ``_at_order_limit`` where the spec
    calls external functions (differentiating it again raises), else as it is."""
    last = fn is None or fn.next_level is None
    if last and plan.externals:
        return lambda name: f"_at_order_limit({name})"
    return lambda name: name


def _needed_call(fn: FunctionPlan) -> str:
    """The names of ``fn``'s inputs whose gradient the running backward pass uses (a set)."""
    return f"_needed_gradients(ctx, {', '.join(map(repr, fn.differentiable_inputs))})"


def _guarded_lines(block: Block, guards: dict[str, str], printer: TorchPrinter, in_scope, forward: bool) -> list[str]:
    """``block`` with each result named in ``guards`` computed only under its condition.

    A gradient is computed only where the running backward pass uses it, as PyTorch's own
    derivatives do (``task_should_compute_output``): a force-matching loss backpropagated to a
    potential's parameters needs no gradient for the distances. A temporary only one guarded
    result reads is computed under that result's ``if``; the results without a guard (values a
    nested level passes on) are always computed.
    """
    always, guarded = guard_split(block, guards)
    anchor = in_scope[0]
    lines = [f"{' = '.join(result.name for result, _ in guarded)} = None"]
    lines += _block_lines(always, printer, in_scope, anchor, forward)
    for result, own in guarded:
        printer.new_scope()
        body = _block_lines(own, printer, in_scope, anchor, forward)
        lines.append(f"if {guards[result.name]}:")
        lines += [f"    {line}" for line in body]
    printer.new_scope()
    return lines


def guard_split(block: Block, guards) -> tuple[Block, list[tuple[Result, Block]]]:
    """``block`` split for guarded results (the names in ``guards``): the part always computed (the
    temporaries more than one result or an unguarded result reads, and the unguarded results), and
    for each guarded result its own part (the temporaries only it reads, and it)."""
    readers = _readers(block)
    shared = tuple((name, value) for name, value in block.temporaries
                   if len(readers[name]) > 1 or readers[name] - set(guards))
    always = Block(shared, tuple(r for r in block.results if r.name not in guards))
    guarded = [(result, Block(tuple((name, value) for name, value in block.temporaries
                                    if readers[name] == {result.name}), (result,)))
               for result in block.results if result.name in guards]
    return always, guarded


def _readers(block: Block) -> dict[str, set[str]]:
    """For each temporary, the results that read it, directly or through other temporaries."""
    readers = {name: set() for name, _ in block.temporaries}
    for result in block.results:
        for symbol in map(str, result.expr.free_symbols):
            if symbol in readers:
                readers[symbol].add(result.name)
    for name, value in reversed(block.temporaries):
        for symbol in map(str, value.free_symbols):
            if symbol in readers:
                readers[symbol] |= readers[name]
    return readers


def accumulation_lines(fn: FunctionPlan, printer: TorchPrinter) -> list[str]:
    """Each gradient as the sum of the terms whose cotangent arrived (None, or undefined in C++: that
    output went unused), the terms' constant parts summed apart where ``fn.constant_sums`` says so.
    Python and C++ alike: the printer spells each statement."""
    terms = {r.name: r.expr for r in fn.backward.results}
    sums = {grad: (name, parts) for grad, name, parts in fn.constant_sums}
    lines = [printer.assign(name, printer.doprint(value)) for name, value in fn.backward.temporaries]
    for x, (grad, contributions) in zip(fn.inputs, fn.accumulations):
        if not contributions and grad not in sums:  # no output depends on x; the cotangents may all be None
            lines.append(printer.assign(grad, printer.zeros_like(x)))
            continue
        lines += printer.sum_present(grad, _products(contributions, terms, printer))
        if grad in sums:
            name, parts = sums[grad]
            lines.append(printer.comment("the constant parts apart, lest (1 + u) - (1 + v) cancel"))
            lines += printer.sum_present(name, _products(parts, terms, printer))
            lines += printer.add_present(grad, name, bool(contributions))
    return lines


def _products(contributions, terms: dict, printer: TorchPrinter) -> list[tuple[str, str]]:
    """(cotangent, the printed cotangent * term) of each contribution."""
    return [(cotangent, printer.doprint(sympy.Symbol(cotangent, real=True) * terms[term]))
            for cotangent, term in contributions]


def _compile_choice(fn: FunctionPlan) -> str:
    """The class to apply: the jvp-less twin while torch.compile traces (Dynamo refuses custom jvp)."""
    return f"{fn.compile_name} if torch.compiler.is_compiling() else {fn.class_name}"


def _read_names(block: Block) -> set[str]:
    """The names ``block`` reads from outside: its own temporaries left out."""
    return _used_names(block) - {name for name, _ in block.temporaries}


def _used_names(block: Block | None) -> set[str]:
    if block is None:
        return set()
    return {str(s) for s in block.reads}


def _fold_names(fn: FunctionPlan, plan: ModulePlan):
    """Names for the temporaries a folding printer adds in ``fn`` (``TorchPrinter.name_for``):
    none of the names the function's code already uses."""
    blocks = fn.blocks
    taken = {*fn.inputs, *fn.saved, *fn.cotangents, *fn.tangents, *fn.outputs, *fn.values,
             *plan.spec.param_names, *(name for _, name in plan.locals), plan.spec.name,
             *(name for block in blocks for name, _ in block.temporaries),
             *(r.name for block in blocks for r in block.results),
             *(f.class_name for f in plan.functions), *(f.compile_name for f in plan.functions)}
    return temporary_names(taken)


def _block_lines(block: Block, printer: TorchPrinter, in_scope, anchor: str, forward: bool) -> list[str]:
    """Temporaries, then results; ``anchor`` is a tensor in scope with the common shape. Each
    line comes after the temporaries its printing added (``TorchPrinter.take_hoisted``)."""
    lines = []
    for name, value in block.temporaries:
        code = printer.doprint(value)
        lines += [*printer.take_hoisted(), f"{name} = {code}"]
    for result in block.results:
        if result.expr != sympy.Symbol(result.name, real=True):  # else a temporary already holds it
            code = result_code(result, printer, in_scope, anchor, forward)
            lines += [*printer.take_hoisted(), f"{result.name} = {code}"]
    return lines


def result_code(result: Result, printer: TorchPrinter, in_scope, anchor: str, forward: bool) -> str:
    if result.expr == 0:
        # like the anchor (a cotangent where there is one): it carries torch.func's batching
        return printer.zeros_like(anchor)
    value = printer.doprint(result.expr)
    if result.broadcast:
        return printer.broadcast_all(value, in_scope)
    if forward and result.expr.is_Symbol and str(result.expr) in in_scope:
        # Not the input itself, nor a view of it: under torch.func a view must be matched by a view
        # in jvp and may alias an expanded input. A copy is simplest, and only linear terms need it.
        return f"{value}.clone()"
    if forward and isinstance(result.expr, sympy.Piecewise):
        return printer.doprint(_copied_inputs(result.expr, {sympy.Symbol(name, real=True) for name in in_scope}))
    return value


def _copied_inputs(expr: sympy.Expr, inputs: set) -> sympy.Expr:
    """A choice whose branches that are an input itself are copies of it (see result_code)."""
    if expr in inputs:
        return Copy(expr)
    if not isinstance(expr, sympy.Piecewise) or any(arg.cond.free_symbols & inputs for arg in expr.args):
        return expr  # torch.where returns a new tensor
    return sympy.Piecewise(*((_copied_inputs(arg.expr, inputs), arg.cond) for arg in expr.args), evaluate=False)


def _helpers_used(views: list[FunctionView]) -> list[str]:
    lines = [line for view in views for line in (*view.forward_lines, *view.backward_lines)]
    lines += [line for view in views for kernel in view.kernels for line in kernel.lines]
    lines += [line for view in views for line in view.jvp_lines]
    lines += [view.backward_return for view in views]
    text = "\n".join(lines)
    names = ("_broadcast_all", "_accumulate", "_zero_missing", "_zeros_if_none", "_needed_gradients", "_horner",
             "_norm")
    helpers = [name for name in names if f"{name}(" in text]
    return helpers + (["_fused"] if any(view.kernels for view in views) else [])


def _unpack_used(names, used) -> str | None:
    """An unpacking target naming only what is used (others get a leading "_", or "_unused_" where
    that would rebind one of the module's own names: a value named ``horner`` is not ``_horner``);
    None if nothing is."""
    if not set(names) & set(used):
        return None
    private = _module_private_names()
    return _unpack([name if name in used else f"_unused_{name}" if f"_{name}" in private else f"_{name}"
                    for name in names])


@functools.cache
def _module_private_names() -> frozenset[str]:
    """The generated module's private globals: its helpers and constants, read off its templates,
    and the functions it may call outside autograd (``_kv_power``)."""
    text = "".join((template_dir() / name).read_text() for name in ("module.py.jinja", "runtime.py", "external.py.jinja"))
    calls = {cls.runtime for cls in special.ALL} | {f"_{name}" for name in external.evaluated()}
    return frozenset(re.findall(r"^(?:def |class )?(_\w+)", text, flags=re.MULTILINE)) | calls


def _unpack(names) -> str:
    names = list(names)
    return f"({names[0]},)" if len(names) == 1 else ", ".join(names)
