"""Plans -> the generated module's source: its Functions, public functions, runtime helpers and
the special and external functions it calls (Jinja templates for layout, ruff for format).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..language import external, special
from ..plan import ModulePlan
from ..provenance import header
from ..spec import DEFAULT_LINE_LENGTH
from .cpp import render_cpp
from .docstring import _derivative_lines, _formula, _summary
from .functions import (
    _argument_checks,
    _compile_choice,
    _documented_arguments,
    _function_view,
    _helpers_used,
    _typed_signature,
    _unpack,
)
from .printer import TorchPrinter
from .text import _environment, ruff_formatted, template_dir


def render_module(plan: ModulePlan, digest: str, with_op: bool = True) -> str:
    """The generated module's source.

    Args:
        plan: what each Function computes, saves and returns (``plan.make_plan``).
        digest: the spec's hash with the options (``Spec.digest``), for the header.
        with_op: for a spec with ``cpp: true``, the C++ op too; False: the Python Functions alone
            (what the build measures: the op computes the same formulas, and compiling each
            candidate's would take seconds).

    Returns:
        The module's text, ruff-formatted at the spec's line length, without its seal line
        (``provenance.seal`` adds it when the file is written).
    """
    spec = plan.spec
    printers: list[TorchPrinter] = []
    views = [_function_view(fn, plan, printers) for fn in plan.functions]
    helpers = _helpers_used(views)
    specials = _special_entries(set().union(*(p.specials for p in printers)))
    externals = _external_entries(set().union(*(p.externals for p in printers)))
    call_args = ", ".join([*spec.inputs, *spec.param_names])
    broadcast_inputs = _unpack(spec.inputs) if len(spec.inputs) > 1 else None
    op_source = render_cpp(plan) if spec.cpp and with_op else None
    if op_source:
        helpers = [*helpers, "_load_op", "_python_functions_needed"]
    return ruff_formatted(_environment().get_template("module.py.jinja").render(
        header=header(spec.path, digest),
        spec=spec,
        first_line=_summary(plan),
        output_formulas=[f"{name} = {_formula(expr)}" for (name, _), expr in zip(spec.outputs, plan.exprs)],
        derivatives=_derivative_lines(plan, spec.line_length),
        more_derivatives=plan.more_derivatives,
        strategy=plan.strategy,
        reason=plan.reason,
        uses_math=any(p.uses_math for p in printers) or any(entry.family for entry in specials),
        helpers=helpers,
        runtime=_runtime_source(_runtime_names(spec, helpers, broadcast_inputs is not None)),
        specials=specials,
        families=[entry.key for entry in specials if entry.family],
        externals=externals,
        scipy_names=[entry.name for entry in externals if entry.impl is None],
        implementations=[entry for entry in externals if entry.impl is not None],
        functions=views,
        signature=_typed_signature(spec),
        arguments=_documented_arguments(spec),
        summary=spec.doc or f"{spec.name}({', '.join(spec.inputs)}), as the module docstring writes it.",
        line_length=spec.line_length,
        argument_checks=_argument_checks(spec),
        function=plan.local("function"),
        choice=_compile_choice(plan.entry),
        call=_public_call(plan, f"{plan.local('function')}.apply({call_args})"),
        returns=_returns(spec),
        ctx_inputs=plan.local("inputs"),
        ctx_output=plan.local("output"),
        broadcast_inputs=broadcast_inputs,
        op_source=op_source,
        op_call=_op_call(plan, f"_OP({call_args})") if op_source else None,
    ), spec.line_length)


def _op_call(plan: ModulePlan, call: str) -> str:
    """What the public function returns from the C++ op, which returns the spec's outputs (one
    tensor, or a tuple of two or more)."""
    if plan.spec.outputs and plan.returned == 1:
        call = f"({call},)"
    return f"torch.stack({call}, dim=-1)" if plan.spec.stack else call


def _public_call(plan: ModulePlan, apply: str) -> str:
    """What the public function returns: the spec's outputs of the entry Function's (the others
    are values for backward), one tensor or a tuple, or stacked along a new last dimension."""
    count, outputs = plan.returned, len(plan.entry.outputs)
    vector = bool(plan.spec.outputs)  # a tuple, even of one output
    if outputs > count:
        apply += "[0]" if count == 1 and not vector else f"[:{count}]"
    elif outputs == 1 and vector:
        apply = f"({apply},)"
    return f"torch.stack({apply}, dim=-1)" if plan.spec.stack else apply


def _returns(spec) -> tuple[str, str]:
    """The public function's return annotation and the docstring's Returns."""
    shape = "the inputs' broadcast shape and promoted dtype"
    if not spec.outputs:
        return "torch.Tensor", f"The value, a tensor of {shape}."
    names = ", ".join(name for name, _ in spec.outputs)
    if spec.stack:
        return "torch.Tensor", (f"{names} stacked along a new last dimension: one tensor of shape (*broadcast "
                                f"shape, {len(spec.outputs)}), in the inputs' promoted dtype.")
    return "tuple[torch.Tensor, ...]", f"{names}: a tuple of tensors of {shape}."


@dataclass(frozen=True)
class SpecialEntry:
    """A special function in the generated module's ``_Special`` tables (special.py)."""

    key: str
    runtime: str
    family: bool
    value: str
    derivative: str
    doc: str


@dataclass(frozen=True)
class ExternalEntry:
    """A function the generated module calls outside autograd (external.py): SciPy's (``call``,
    its code with ``special`` the scipy.special module) or the spec's (``impl``)."""

    name: str
    runtime: str
    params: str
    summary: str
    doc: str
    call: str | None = None
    impl: str | None = None


def _external_entries(printed: set[type]) -> list[ExternalEntry]:
    """The external functions printed and every one their derivatives call (any level may)."""
    entries = []
    for cls in external.closure(printed):
        if issubclass(cls, external.UserExternBase):
            extern = cls.declaration
            params = ", ".join(extern.args)
            summary = f"{extern.name}({params}): the spec's extern, computed outside autograd."
            entries.append(ExternalEntry(cls.language, f"_{cls.language}", params, summary,
                                         f"Its implementation: {extern.impl}.", impl=extern.impl))
        else:
            params = ", ".join(cls.params)
            summary = cls.summary or f"scipy.special.{cls.language}, computed outside autograd."
            summary = f"{cls.language}({params}): {summary}"
            doc = f"The function: {cls.usage}."
            entries.append(ExternalEntry(cls.language, f"_{cls.language}", params, summary, doc, call=cls.call))
    return entries


def _special_entries(printed: set[type]) -> list[SpecialEntry]:
    """The ``_Special`` table rows of the functions printed and of every one their derivatives call."""
    entries = []
    for cls in special.in_order(special.closure(printed)):
        printer = TorchPrinter(["x"])
        derivative = printer.doprint(special.derivative_of(cls))
        doc = cls.__doc__.strip() if cls.family else ""
        entries.append(SpecialEntry(cls.__name__, cls.runtime, cls.family, cls.value, derivative, doc))
    return entries


def render_init(names: list[str], specs_path: str, digest: str, line_length: int = DEFAULT_LINE_LENGTH) -> str:
    return ruff_formatted(
        _environment().get_template("init.py.jinja").render(header=header(specs_path, digest), names=sorted(names)),
        line_length,
    )


# The runtime helpers every generated module has; the others only where its Functions use them.
ALWAYS_RUNTIME = ("_tensor_inputs", "_floating_dtype", "_dtype_refusal", "_transforms_active", "_direct_apply")


def _runtime_names(spec, helpers, broadcasts: bool) -> set[str]:
    """The runtime functions a module calls: ``helpers`` (its Functions'), ``_check_params`` where
    the spec has params, ``_broadcast`` where its public function broadcasts its inputs."""
    names = {*ALWAYS_RUNTIME, *helpers}
    if spec.params:
        names.add("_check_params")
    if broadcasts:
        names.add("_broadcast")
    return names


def _runtime_source(names: set[str]) -> str:
    """The source of templates/runtime.py's functions named ``names``, in the file's order, each
    with the constants and comments just above it (``_INTEGRAL`` belongs to ``_tensor_inputs``)."""
    blocks = _runtime_blocks()
    missing = names - {name for name, _ in blocks}
    if missing:
        raise ValueError(f"templates/runtime.py defines no {', '.join(sorted(missing))}")
    names = _with_callees(names, dict(blocks))
    return "\n\n\n".join(text for name, text in blocks if name in names)


def _with_callees(names: set[str], blocks: dict[str, str]) -> set[str]:
    """``names`` and every runtime function their source calls, transitively (``_fused`` calls
    ``_thin_call``, which calls ``_standalone_kernel``)."""
    names, todo = set(names), list(names)
    while todo:
        text = blocks[todo.pop()]
        for callee in blocks.keys() - names:
            if re.search(rf"\b{callee}\(", text):
                names.add(callee)
                todo.append(callee)
    return names


@functools.lru_cache(maxsize=1)
def _runtime_blocks() -> tuple[tuple[str, str], ...]:
    """(function name, its source with what stands above it since the previous function) per
    top-level function of templates/runtime.py."""
    import ast

    source = (template_dir() / "runtime.py").read_text(encoding="utf-8")
    lines = source.split("\n")
    tree = ast.parse(source)
    blocks, start = [], None
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]) - 1
        module_setting = isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["FUSE"]
        if start is None and not isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr)) and not module_setting:
            start = _comments_above(lines, first)
        if isinstance(node, ast.FunctionDef):
            blocks.append((node.name, "\n".join(lines[start:node.end_lineno]).strip("\n")))
            start = None
    return tuple(blocks)


def _comments_above(lines: list[str], index: int) -> int:
    """The first line of the comment lines directly above line ``index``."""
    while index > 0 and lines[index - 1].startswith("#"):
        index -= 1
    return index


def render_support(template: str, specs_path: str, digest: str, line_length: int = DEFAULT_LINE_LENGTH) -> str:
    """A file of the generated tests' that depends on no spec: ``templates/TEMPLATE`` itself where it
    is Python (the checks library, conftest.py: linted and imported as such), else
    ``templates/TEMPLATE.jinja`` filled; either way under the generated header."""
    verbatim = template_dir() / template
    if verbatim.is_file():
        text = f"{header(specs_path, digest)}\n{verbatim.read_text(encoding='utf-8')}"
    else:
        text = _environment().get_template(f"{template}.jinja").render(header=header(specs_path, digest))
    return ruff_formatted(text, line_length)
