"""The static checks of ``dbgen audit``: a Function's source read as a syntax tree, each finding
with its file and line.

What makes a higher derivative silently wrong is visible in the source: a tensor kept on ``ctx``
in forward and read in backward (the tutorial's SinhBad: autograd sees a constant), a backward
that leaves autograd (``.detach()``, ``.data``, ``.numpy()``, ``.item()``, ``torch.no_grad()``, an
in-place change of a saved tensor), or an intermediate saved for backward (neither input nor
output: computed where autograd does not record). What limits a Function is visible too:
``@once_differentiable``, a forward that takes ``ctx``, no ``jvp``, no vmap rule. The dynamic
checks (``dynamic.py``) then say whether a suspicion is a wrong number.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass

# kinds of finding: a likely wrong derivative, and a limit (an error, not a wrong number); what kept
# the audit from checking a target (it exits, hangs, raises, has no inputs, is not finite on its
# domain: the verdict is unchecked), and a note that changes no verdict
SUSPECT, LIMIT, ERROR, NOTE = "suspect", "limit", "error", "note"
# ctx attributes torch itself sets (a tensor there is torch's bookkeeping, not the user's)
TORCH_CTX_ATTRIBUTES = frozenset({
    "to_save", "saved_for_forward", "non_differentiable", "dirty_tensors", "materialize_grads",
    "needs_input_grad", "_materialize_non_diff_grads",
})
# calls that take a value out of autograd's sight in backward
_LEAVING = {
    "detach": "`.detach()`, which makes its value a constant to autograd",
    "detach_": "`.detach_()`, which makes its value a constant to autograd",
    "numpy": "`.numpy()`, which leaves torch: autograd cannot follow it",
    "item": "`.item()`, which makes a Python number: its dependence on the inputs is lost",
    "tolist": "`.tolist()`, which makes Python numbers: their dependence on the inputs is lost",
}
# attributes of a tensor that are not tensors: assigning them to ctx is fine
_NOT_TENSOR_ATTRIBUTES = {"shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "layout"}
_NOT_TENSOR_CALLS = {"int", "float", "bool", "len", "str", "tuple", "list", "dict", "size", "dim", "numel",
                     "item", "tolist", "isinstance", "type", "range"}
_IN_PLACE_EXCEPTIONS = {"requires_grad_", "retain_grad_", "share_memory_"}


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    message: str
    kind: str = SUSPECT
    check: str = ""  # the report column it belongs to: static, or a dynamic check's name
    attribute: str | None = None  # the ctx attribute a finding of a tensor kept on ctx is about


@dataclass(frozen=True)
class _Method:
    name: str
    tree: ast.FunctionDef
    file: str
    first_line: int  # the line of the def in the file
    decorators: tuple[str, ...]

    def line(self, node: ast.AST) -> int:
        return self.first_line + node.lineno - self.tree.lineno

    @property
    def params(self) -> list[str]:
        return [arg.arg for arg in self.tree.args.args]


def check(cls: type) -> list[Finding]:
    """Every static finding of Function ``cls``, in source order."""
    methods = {name: method for name in ("forward", "backward", "setup_context", "jvp", "vmap")
               if (method := _method(cls, name)) is not None}
    forward, backward = methods.get("forward"), methods.get("backward")
    if forward is None or backward is None:
        return []
    findings = []
    old_style = "setup_context" not in methods
    saving = forward if old_style else methods["setup_context"]
    stashed = _ctx_assignments(saving)
    findings += _stashed_reads(stashed, backward, saving)
    findings += _leaving_autograd(backward)
    if old_style:
        findings += _saved_intermediates(forward)
    findings += _limits(cls, methods, old_style)
    return sorted(findings, key=lambda f: (f.file, f.line))


def _method(cls: type, name: str) -> _Method | None:
    """``cls.name`` as a syntax tree, from the first class in its MRO that defines it (not torch's)."""
    import torch

    for owner in cls.__mro__:
        if owner in (torch.autograd.Function,) or owner.__module__.startswith("torch."):
            return None
        if name in vars(owner):
            function = inspect.unwrap(getattr(vars(owner)[name], "__func__", vars(owner)[name]))
            try:
                lines, first = inspect.getsourcelines(function)
                file = inspect.getsourcefile(function) or "<unknown>"
            except (OSError, TypeError):
                return None
            tree = ast.parse(textwrap.dedent("".join(lines)))
            node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
            decorators = tuple(ast.unparse(d) for d in node.decorator_list)
            first_def = first + next(i for i, text in enumerate(lines) if text.lstrip().startswith(("def ", "async def ")))
            return _Method(name, node, shown_path(file), first_def, decorators)
    return None


def source_place(cls: type) -> tuple[str, int]:
    """Where class ``cls`` is defined: its file as the report shows it, and its line (0 unknown)."""
    try:
        file = shown_path(inspect.getsourcefile(cls) or "<unknown>")
    except TypeError:
        file = "<unknown>"
    try:
        return file, inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return file, 0


def shown_path(file: str) -> str:
    """The file as the report shows it: relative to the current folder where it is inside it."""
    import os

    try:
        relative = os.path.relpath(file)
    except ValueError:
        return file
    return file if relative.startswith("..") else relative


def _ctx_name(method: _Method) -> str | None:
    return method.params[0] if method.params else None


def _ctx_assignments(method: _Method) -> dict[str, tuple[int, bool]]:
    """``ctx.NAME = value`` in ``method``: NAME -> (line, whether value may be a tensor)."""
    ctx = _ctx_name(method)
    found = {}
    for node in ast.walk(method.tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                if _is_ctx_attribute(element, ctx):
                    found.setdefault(element.attr, (method.line(node), _may_be_tensor(node.value)))
    return found


def _is_ctx_attribute(node: ast.AST, ctx: str | None) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == ctx


def _may_be_tensor(value: ast.AST) -> bool:
    """Whether an assigned value may hold a tensor (a constant, a shape, a dtype, len(...) do not)."""
    if isinstance(value, ast.Constant):
        return False
    if isinstance(value, ast.Attribute) and value.attr in _NOT_TENSOR_ATTRIBUTES:
        return False
    if isinstance(value, ast.Call):
        function = value.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
        if name in _NOT_TENSOR_CALLS:
            return False
    if isinstance(value, (ast.Tuple, ast.List)):
        return any(_may_be_tensor(element) for element in value.elts)
    return True


def _stashed_reads(stashed: dict[str, tuple[int, bool]], backward: _Method, saving: _Method) -> list[Finding]:
    """A tensor kept on ctx in forward and read in backward: the tutorial's SinhBad."""
    ctx = _ctx_name(backward)
    findings, reported = [], set()
    for node in ast.walk(backward.tree):
        if _is_ctx_attribute(node, ctx) and isinstance(node.ctx, ast.Load) and node.attr in stashed:
            line, maybe_tensor = stashed[node.attr]
            if not maybe_tensor or node.attr in reported or node.attr in TORCH_CTX_ATTRIBUTES:
                continue
            reported.add(node.attr)
            findings.append(Finding(saving.file, line, (
                f"ctx.{node.attr} is set in {saving.name} and read in backward (line {backward.line(node)}): a tensor "
                "kept on ctx is a constant to autograd, so the derivatives of backward miss how it depends on the "
                "inputs (the tutorial's SinhBad); save it with ctx.save_for_backward as an input or output, or "
                "recompute it in backward"), check="static", attribute=node.attr))
    return findings


def _leaving_autograd(backward: _Method) -> list[Finding]:
    """Calls in backward that autograd cannot see through, and in-place changes of saved tensors."""
    findings = []
    saved = _saved_names(backward)
    handed = _applied_arguments(backward)
    for node in ast.walk(backward.tree):
        if id(node) in handed:
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _LEAVING:
            findings.append(Finding(backward.file, backward.line(node),
                                    f"backward calls {_LEAVING[node.func.attr]} at the next order", check="static"))
        elif isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.ctx, ast.Load):
            findings.append(Finding(backward.file, backward.line(node),
                                    "backward reads `.data`: a constant to autograd at the next order", check="static"))
        elif isinstance(node, ast.With) and any("no_grad" in ast.unparse(item.context_expr) for item in node.items):
            findings.append(Finding(backward.file, backward.line(node),
                                    "backward computes under torch.no_grad(): nothing there is differentiable at the "
                                    "next order", check="static"))
        elif (in_place := _in_place_on(node, saved)) is not None:
            findings.append(Finding(backward.file, backward.line(node),
                                    f"backward changes the saved tensor {in_place} in place: autograd raises or "
                                    "differentiates the changed value at the next order", check="static"))
    if any("once_differentiable" in d for d in backward.decorators):
        findings.append(Finding(backward.file, backward.first_line, (
            "backward is @once_differentiable: it runs under no_grad, so its result is disconnected from the "
            "inputs when the cotangent does not require grad (a gradient penalty's loss.backward() then silently "
            "drops it) and raises when it does"), SUSPECT, "static"))
    if any("no_grad" in d for d in backward.decorators):
        findings.append(Finding(backward.file, backward.first_line,
                                "backward is decorated with torch.no_grad(): nothing there is differentiable at the "
                                "next order", check="static"))
    return findings


def _applied_arguments(backward: _Method) -> set[int]:
    """The arguments backward hands to another Function's ``apply`` (the nested pattern): a value
    detached there is a constant of that Function, whose own backward carries the derivatives."""
    return {id(arg) for node in ast.walk(backward.tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "apply"
            for arg in node.args}


def _saved_names(backward: _Method) -> set[str]:
    """The names backward binds from ``ctx.saved_tensors``."""
    names = set()
    for node in ast.walk(backward.tree):
        if isinstance(node, ast.Assign) and "saved_tensors" in ast.unparse(node.value):
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _in_place_on(node: ast.AST, saved: set[str]) -> str | None:
    """The saved tensor ``node`` changes in place (x.add_(1), x[i] = v, x += v), if any."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method, owner = node.func.attr, node.func.value
        if (method.endswith("_") and not method.startswith("_") and method not in _IN_PLACE_EXCEPTIONS
                and isinstance(owner, ast.Name) and owner.id in saved):
            return owner.id
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id in saved:
        return node.target.id
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id in saved:
                return target.value.id
    return None


def _saved_intermediates(forward: _Method) -> list[Finding]:
    """Names forward saves for backward that are neither its inputs nor among what it returns."""
    ctx = _ctx_name(forward)
    inputs = set(forward.params[1:])
    returned = set()
    for node in ast.walk(forward.tree):
        if isinstance(node, ast.Return) and node.value is not None:
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            returned |= {v.id for v in values if isinstance(v, ast.Name)}
    findings = []
    for node in ast.walk(forward.tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "save_for_backward" and isinstance(node.func.value, ast.Name)
                and node.func.value.id == ctx):
            for arg in node.args:
                if isinstance(arg, ast.Name) and arg.id not in inputs | returned:
                    findings.append(Finding(forward.file, forward.line(node), (
                        f"forward saves {arg.id}, neither an input nor an output: it is computed where autograd "
                        "does not record, so derivatives of backward through it miss its dependence on the "
                        "inputs; return it as an extra output (the tutorial's Sinh) or recompute it in backward"),
                        check="static"))
    return findings


def _limits(cls: type, methods: dict[str, _Method], old_style: bool) -> list[Finding]:
    """What keeps the Function from torch.func: a forward taking ctx, no jvp, no vmap rule."""
    forward = methods["forward"]
    findings = []
    if old_style:
        findings.append(Finding(forward.file, forward.first_line,
                                "forward takes ctx (no setup_context): torch.func transforms (vmap, grad, jacrev, "
                                "jacfwd, hessian, jvp) refuse it", LIMIT, "static"))
    if "jvp" not in methods:
        findings.append(Finding(forward.file, forward.first_line,
                                "no jvp: forward-mode AD, jacfwd, torch.func.jvp and hessian are unavailable",
                                LIMIT, "static"))
    if "vmap" not in methods and not getattr(cls, "generate_vmap_rule", False):
        findings.append(Finding(forward.file, forward.first_line,
                                "no vmap rule (generate_vmap_rule = True or a vmap staticmethod): torch.func.vmap "
                                "refuses it", LIMIT, "static"))
    return findings
