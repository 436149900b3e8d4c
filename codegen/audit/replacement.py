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


def formula_function(expr: str, names: tuple[str, ...], order: int):
    """``expr`` of the inputs ``names`` as a torch function (TargetError where it is not in the
    language, with the parser's message)."""
    from ..expr import ExprError, parse_expr
    from ..memory import written_function

    try:
        parse_expr(expr, names, ())
    except ExprError as exc:
        raise TargetError(f"--expr: {exc} (the Function's inputs are {', '.join(names)})") from None
    return written_function(Spec(path="--expr", name="audited", expr=expr, inputs=names, order=order))


def replacing_spec(target: Target, names: tuple[str, ...], options) -> str | None:
    """The spec replacing an elementwise Function that --expr matches; None where it is not elementwise."""
    if not _elementwise(target.cls, names):
        return None
    wanted = spec_name(target.cls.__name__)
    refused = None
    for name in (wanted, f"{wanted}_fn", f"{wanted}_function"):  # Abs -> abs is a builtin: abs_fn
        text = _spec_text(target, names, options, name, wanted if name != wanted else None, refused)
        try:
            _validate(text, f"{name}.yaml")
        except TargetError as exc:
            refused = refused or str(exc).split("would not load: ", 1)[-1].split("; choose")[0]
            continue
        return text
    raise TargetError(f"the replacing spec would not load: {refused}")


def _spec_text(target: Target, names, options, name: str, renamed: str | None, why: str | None) -> str:
    lines = [f"# Replaces {target.name}: dbgen audit found --expr equal to it at every order up to {options.order}."]
    if renamed:
        lines.append(f"# Named {name}, not {renamed}: {why}.")
    lines += [f"name: {name}", f"expr: {_quoted(options.expr)}", f"inputs: [{', '.join(names)}]",
              f"order: {options.order}"]
    domains = {n: options.domains[n] for n in names if n in options.domains}
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


def _elementwise(cls: type, names: tuple[str, ...]) -> bool:
    """One output of the inputs' shape whose Jacobian in each input is diagonal."""
    setup = dynamic.Setup(names, tuple(dynamic.DEFAULT_DOMAIN for _ in names), (4,))
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
