"""``dbgen new NAME --expr ... --inputs ...``: write a new spec file, checked before it is written.

The text is validated by the same loader ``build`` uses (expression included) before anything
is written, so a file that ``new`` writes passes every check of a spec that ``build`` makes. Its first line points editors at the JSON Schema of specs
(``dbgen schema``), through a relative path to ``dbgen-spec.schema.json``: the nearest one in the
spec's folder or a folder above it (up to the current folder), else one written beside the spec.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecErrors
from ..spec import display_path, load_text
from ..spec.nodes import _NUMBER_RE  # the loader's own rule for a plain number
from ..spec.schema import SCHEMA_FILE, schema_text

SCHEMA_COMMENT = "# yaml-language-server: $schema="
_PLAIN_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}  # YAML 1.1 reads these as bool/null


class NewSpecError(Exception):
    """A problem with ``new``'s arguments or target file: exit 2 with these lines."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class NewSpec:
    name: str
    expr: str
    inputs: tuple[str, ...]
    order: int
    params: tuple[tuple[str, str], ...] = ()
    strategy: str | None = None
    doc: str | None = None
    domain: tuple[tuple[str, str, str], ...] = ()  # (input, low, high), numbers as typed


@dataclass(frozen=True)
class Written:
    spec: Path
    schema: Path | None  # the schema file, when this run wrote it


def parse_inputs(text: str) -> tuple[str, ...]:
    """'x, y' -> ('x', 'y'); the loader judges the names."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parse_params(values: list[str]) -> tuple[tuple[str, str], ...]:
    """['a=1.0', 'b=2,c=3'] -> (('a', '1.0'), ('b', '2'), ('c', '3')); each value must be a number."""
    params = []
    for item in (part.strip() for value in values for part in value.split(",")):
        if not item:
            continue
        name, sep, number = (text.strip() for text in item.partition("="))
        if not sep or not name or not _NUMBER_RE.match(number):
            example = f"{name if name.isidentifier() else 'beta'}=1.0"  # the user's own name where given
            raise NewSpecError([f"dbgen: --params {item!r} must be NAME=NUMBER, e.g. --params {example}"])
        params.append((name, _decimal(number)))
    return tuple(params)


def parse_domain(values: list[str]) -> tuple[tuple[str, str, str], ...]:
    """['x=0,1', 'y=-1,1'] -> (('x', '0', '1'), ('y', '-1', '1')); the loader judges names and order."""
    domain = []
    for item in (value.strip() for value in values):
        name, sep, bounds = (text.strip() for text in item.partition("="))
        ends = [end.strip() for end in bounds.split(",")]
        if not sep or not name or len(ends) != 2 or not all(_NUMBER_RE.match(end) for end in ends):
            example = f"{name if name.isidentifier() else 'x'}=0,1"
            raise NewSpecError([f"dbgen: --domain {item!r} must be INPUT=LOW,HIGH, e.g. --domain {example}"])
        domain.append((name, _decimal(ends[0]), _decimal(ends[1])))
    return tuple(domain)


def _decimal(number: str) -> str:
    """A whole number without leading zeros or '+' ('010' -> '10'): what dbgen reads (YAML 1.2,
    decimal 10), written so that a YAML 1.1 tool reads it alike (not as octal 8)."""
    if re.fullmatch(r"[-+]?[0-9]+", number):
        try:
            return str(int(number))
        except ValueError:  # more digits than Python converts: left for the loader to refuse
            return number
    return number


def target_path(name: str, output: Path | None, default_folder: Path) -> Path:
    """OUTPUT when it names a .yaml/.yml file, else OUTPUT/NAME.yaml (default: the specs folder)."""
    if output is not None and output.suffix in (".yaml", ".yml"):
        return output
    return (output if output is not None else default_folder) / f"{name}.yaml"


def spec_text(new: NewSpec, schema_ref: str) -> str:
    """The spec file: YAML written by hand, for a stable, readable layout (strings as JSON, which is YAML)."""
    lines = [f"{SCHEMA_COMMENT}{schema_ref}", f"name: {_scalar(new.name)}", f"expr: {json.dumps(new.expr)}",
             f"inputs: [{', '.join(_scalar(x) for x in new.inputs)}]", f"order: {new.order}"]
    if new.params:
        lines += ["params:", *(f"  {_scalar(name)}: {value}" for name, value in new.params)]
    if new.domain:
        lines += ["domain:", *(f"  {_scalar(name)}: [{low}, {high}]" for name, low, high in new.domain)]
    if new.strategy:
        lines.append(f"strategy: {_scalar(new.strategy)}")
    if new.doc:
        lines.append(f"doc: {json.dumps(new.doc)}")
    return "\n".join(lines) + "\n"


def _scalar(text: str) -> str:
    """A name as YAML text: plain when YAML reads it back as that very string, else quoted.

    Quoting keeps what the user typed ('yes' stays text, 'a: b' cannot add a key); the loader
    then judges the name itself.
    """
    if _PLAIN_RE.match(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)


def create(new: NewSpec, target: Path) -> Written:
    """Validate and write the spec (never over an existing file), and the schema file if none is near."""
    shown = display_path(target)
    if target.exists():
        raise NewSpecError([f"dbgen: {shown} already exists; pick another name (or -o path), or delete the file first"])
    schema_path, schema_missing = _schema_for(target.parent)
    text = spec_text(new, Path(os.path.relpath(schema_path, target.parent)).as_posix())
    _validate(text, shown)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "x", encoding="utf-8") as handle:  # "x": never replace a file created meanwhile
        handle.write(text)
    if schema_missing:
        schema_path.write_text(schema_text(), encoding="utf-8")
    return Written(target, schema_path if schema_missing else None)


def _validate(text: str, shown: str) -> None:
    """The loader's own checks on the text about to be written, then the build's domain check (the
    function and its derivatives finite on the domain); problems name the option to change."""
    from ..build.planning import check_finite

    try:
        check_finite(load_text(text, shown))
    except SpecErrors as errors:
        lines = [f"dbgen: {_option_hint(p.message)}" for p in errors.problems]
        raise NewSpecError(lines + [f"dbgen: {shown} was not written; fix the option(s) above and rerun"]) from None


def _option_hint(message: str) -> str:
    """'expr: ...' -> '--expr: ...', 'set domain: {x: [0.1, 2]}' -> 'give --domain x=0.1,2': the
    loader speaks of keys, the user typed options."""
    message = re.sub(r"set domain: \{(.*)\}$", lambda m: "give " + _domain_options(m.group(1)), message)
    for key in ("name", "expr", "inputs", "input", "order", "params", "param", "domain", "strategy", "doc"):
        if message.startswith((key + " ", key + ":")):
            option = {"name": "NAME", "input": "--inputs", "param": "--params"}.get(key, f"--{key}")
            return f"{option}{message[len(key):]}"
    return message


def _domain_options(inner: str) -> str:
    """'x: [0.1, 2], y: [-2, 2]' -> '--domain x=0.1,2 --domain y=-2,2'."""
    found = re.findall(r"(\w+): \[([^,\]]+), ([^\]]+)\]", inner)
    return " ".join(f"--domain {name}={lo},{hi}" for name, lo, hi in found)


def _schema_for(folder: Path) -> tuple[Path, bool]:
    """The nearest schema file from ``folder`` up to the current folder, or where to write one."""
    start = folder.resolve()
    stop = Path.cwd().resolve()
    for candidate in (start, *start.parents):
        if (candidate / SCHEMA_FILE).is_file():
            return candidate / SCHEMA_FILE, False
        if candidate == stop:
            break
    return folder / SCHEMA_FILE, True
