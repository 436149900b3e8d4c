"""``--expr``: the audited Function compared with a formula, and the spec that replaces it.

The formula is read by dbgen's own parser (the spec language) and run in torch ops as the
generated tests' composed expression is, so that autograd through it is the reference at every
order. Where the Function is elementwise and agrees with it at every order up to ``--order``, the
spec that ``dbgen build`` turns into its replacement is written out (validated by the loader).
Where the class's name makes a name the spec cannot have (``Abs`` -> ``abs``, a builtin), the spec
is named ``abs_fn`` and says why.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from ..errors import SpecErrors
from ..spec import Spec, load_text
from . import dynamic
from .targets import Target, TargetError

_SUFFIXES = ("_auto_fn", "_function", "_func", "_fn")


def formula_function(expr: str, names: tuple[str, ...], order: int, params: dict | None = None):
    """``expr`` of the inputs ``names`` and the ``params`` (name -> value) as a torch function
    (TargetError where it is not in the language, with the parser's message)."""
    from ..build.memory import written_function
    from ..language.expr import ExprError, parse_expr

    params = params or {}
    try:
        parse_expr(expr, names, tuple(params))
    except ExprError as exc:
        given = f"the Function's inputs are {', '.join(names)}" + (f"; params: {', '.join(params)}" if params else "")
        raise TargetError(f"--expr: {exc} ({given}; give a param's value with --params NAME=NUMBER)") from None
    return written_function(Spec(path="--expr", name="audited", expr=expr, inputs=names, order=order,
                                 params=tuple((n, float(v)) for n, v in params.items())))


def expr_params(setup: dynamic.Setup, options) -> dict[str, float]:
    """--expr's params: the Function's numbers at the values it is passed, and the other --params."""
    return {**setup.number_values(), **{n: float(v) for n, v in options.params.items() if n not in setup.names}}


def replacing_spec(target: Target, setup: dynamic.Setup, options, found) -> str:
    """The spec replacing an elementwise Function whose value is --expr's; TargetError saying why
    not where there is none. ``found``: the audit's (verdict, wrong_at_order, correct_to_order)."""
    if not _elementwise(target.cls, setup):
        raise TargetError("the Function is not elementwise (one output of its inputs' shape, each element of "
                          "the same elements of the inputs): write its spec by hand (dbgen new)")
    wanted = spec_name(target.cls.__name__)
    refused = None
    for name in (wanted, f"{wanted}_fn", f"{wanted}_function"):  # Abs -> abs is a builtin: abs_fn
        text = _spec_text(target, setup, options, found, name, (wanted if name != wanted else None, refused))
        try:
            _validate(text, f"{name}.yaml")
        except TargetError as exc:
            refused = refused or str(exc).split("would not load: ", 1)[-1].split("; choose")[0]
            continue
        return text
    raise TargetError(f"the replacing spec would not load: {refused}")


def _spec_text(target: Target, setup: dynamic.Setup, options, found, name: str, renamed) -> str:
    _, wrong_at, correct_to = found
    if wrong_at is not None:
        found_text = f"its value equal to --expr, its derivatives wrong from order {wrong_at}; this spec's are exact"
    elif correct_to == options.order:
        found_text = f"--expr equal to it at every order up to {options.order}"
    else:
        found_text = f"its value equal to --expr, and its derivatives to order {correct_to} (no further order checked)"
    lines = [f"# Replaces {target.name}: dbgen audit found {found_text}."]
    if renamed[0]:
        lines.append(f"# Named {name}, not {renamed[0]}: {renamed[1]}.")
    tensors = setup.tensor_names
    params = expr_params(setup, options)
    lines += [f"name: {name}", f"expr: {_quoted(options.expr)}", f"inputs: [{', '.join(tensors)}]",
              f"order: {options.order}"]
    if params:
        guessed = [n for n in params if n not in options.params]
        if guessed:
            lines.append(f"# {', '.join(guessed)}: the value the audit passed the Function; set your default.")
        lines += ["params:", *(f"  {n}: {value!r}" for n, value in params.items())]
    domains = {n: options.domains[n] for n in tensors if n in options.domains}
    if domains:
        lines += ["domain:", *(f"  {n}: [{lo!r}, {hi!r}]" for n, (lo, hi) in domains.items())]
    lines.append(f"doc: {_quoted(f'Replaces the hand-written {target.cls.__name__}.')}")
    return "\n".join(lines) + "\n"


def spec_name(class_name: str) -> str:
    """SwishAutoFn -> swish, SinhBad -> sinh_bad, _SoftUnitStep -> soft_unit_step, GELUFunction -> gelu."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", class_name.strip("_")).lower()
    for suffix in _SUFFIXES:
        if snake.endswith(suffix) and len(snake) > len(suffix):
            snake = snake[: -len(suffix)]
            break
    snake = re.sub(r"[^a-z0-9_]", "_", snake)
    return snake if snake[:1].isalpha() else f"f_{snake}"


def _quoted(text: str) -> str:
    import json

    return json.dumps(text)


def _elementwise(cls: type, setup: dynamic.Setup) -> bool:
    """One output of the inputs' shape whose Jacobian in each tensor input is diagonal."""
    setup = dynamic.Setup(setup.names, tuple(dynamic.DEFAULT_DOMAIN for _ in setup.names), (4,),
                          numbers=setup.numbers, fixed=tuple(setup.number_values().items()))
    subject = dynamic.Subject(cls, setup)
    inputs = setup.inputs(seed=6)
    try:
        jacobians = torch.autograd.functional.jacobian(subject.first, tuple(inputs))
    except Exception:  # noqa: BLE001 - a Function that cannot be differentiated has no replacement here
        return False
    if subject.first(*inputs).shape != inputs[0].shape:
        return False
    return all(torch.equal(block, torch.diag(torch.diagonal(block))) for block in jacobians)


def _validate(text: str, shown: str) -> None:
    try:
        load_text(text, shown)
    except SpecErrors as errors:
        raise TargetError(f"the replacing spec would not load: {errors.problems[0].message}") from None


def write_spec(text: str, folder: Path) -> Path:
    """Write the spec as FOLDER/NAME.yaml (never over an existing file)."""
    name = re.search(r"^name: (\S+)$", text, re.MULTILINE)[1]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    with open(path, "x", encoding="utf-8") as handle:
        handle.write(text)
    return path
