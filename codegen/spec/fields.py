"""Each key of a spec read and checked on its own: name, expr, outputs, inputs, params, order,
domain, doc, strategy and the flags, native and extern.
"""

from __future__ import annotations

import builtins
import keyword
import re

import yaml

from ..errors import did_you_mean
from ..language import CONSTANT_NAMES, FUNCTION_ARITY
from .model import (
    DEFAULT_DOMAIN,
    EXTERN_KEYS,
    MAX_DOC_CHARS,
    MAX_EXTERNS,
    MAX_INPUTS,
    MAX_NAME_CHARS,
    MAX_ORDER,
    MAX_OUTPUTS,
    MAX_PARAMS,
    Extern,
)
from .nodes import _IDENT_RE, _NULL_TAG, _line, _Reader, _shorten, _shown, _yaml_kind

_NAME_RE = re.compile(r"[a-z][a-z0-9_]*\Z")
_IMPL_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*\Z")
_NATIVE_RE = re.compile(r"torch(\.[A-Za-z][A-Za-z0-9_]*)+\Z")  # public names only: no torch._C, torch.__builtins__
_UNDEFINED_RE = re.compile(r"undefined name '([A-Za-z][A-Za-z0-9_]*)'")  # expr.py's message for an unknown name
# File names Windows refuses whatever the extension: OUT/NAME.py could not be written there.
_WINDOWS_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
# Names the generated module itself defines or imports at top level (functools and warnings for
# fused kernels: a public function named warnings would break their fallback's warnings.warn).
_MODULE_GLOBALS = {"torch", "math", "functools", "warnings"}
# Names an input or param may not take: they would shadow the language or the generated code.
_RESERVED_SYMBOLS = set(FUNCTION_ARITY) | set(CONSTANT_NAMES) | _MODULE_GLOBALS | {"ctx"}


def _read_externs(reader: _Reader, node, name, inputs, params) -> list[tuple[Extern | None, dict[str, int]]]:
    """Each declaration under ``extern:`` (None where it has a problem) and the lines of its parts
    (``extern.NAME``, ``extern.NAME.impl``, ``extern.NAME.derivatives.I``, ...)."""
    if node is None:
        return []
    items = reader.mapping(node, "extern", valid=_symbol_name_ok)
    if len(items) > MAX_EXTERNS:
        reader.fail(node, f"at most {MAX_EXTERNS} externs are allowed, not {len(items)}")
    taken = {*(inputs or ()), *(params or ()), name}
    return [_read_extern(reader, key_node, value_node, taken) for key_node, value_node, _ in items]


def _read_extern(reader: _Reader, key_node, node, taken) -> tuple[Extern | None, dict[str, int]]:
    before = len(reader.problems)
    extern = _identifier(reader, key_node, "extern")
    if extern is not None and extern in taken:
        reader.fail(key_node, f"extern '{extern}' has the name of an input, a param or the spec; rename it")
    where = f"extern.{_shorten(extern or key_node.value)}"
    lines = {where: _line(key_node)}
    parts = {}
    for part_node, value_node, part in reader.mapping(node, where, valid=EXTERN_KEYS.__contains__):
        if part not in EXTERN_KEYS:
            reader.fail(part_node, f"{where}: unknown key '{_shorten(part)}'{did_you_mean(part, EXTERN_KEYS)}; "
                                   f"the keys are: {', '.join(EXTERN_KEYS)}")
            continue
        parts[part] = value_node
        lines[f"{where}.{part}"] = _line(part_node)
    for part in EXTERN_KEYS:
        if part not in parts and isinstance(node, yaml.MappingNode):
            reader.fail(key_node, f"{where}: missing '{part}'; {_EXTERN_EXAMPLE}")
    impl = _read_impl(reader, parts.get("impl"), where)
    args = _read_extern_args(reader, parts.get("args"), where)
    derivatives = _read_derivatives(reader, parts.get("derivatives"), where, args, lines)
    if len(reader.problems) > before:
        return None, lines
    return Extern(extern, impl, args, derivatives), lines


_EXTERN_EXAMPLE = ("declare it as {impl: mypkg.kernels:sqexp, args: [u], derivatives: ['2*u*sqexp(u)']}, one "
                   "derivative per argument (null for an argument that is only ever a number or a param)")


def _read_impl(reader: _Reader, node, where: str) -> str | None:
    if node is None:
        return None
    value = reader.text(node, f"{where}.impl", lambda text: False)
    if value is not None and not _IMPL_RE.match(value):
        reader.fail(node, f"{where}.impl must be module:callable, such as mypkg.kernels:sqexp, not {_shown(node)}")
        return None
    return value


def _read_extern_args(reader: _Reader, node, where: str) -> tuple[str, ...] | None:
    if node is None:
        return None
    items = reader.sequence(node, f"{where}.args", "[u]")
    if not 1 <= len(items) <= MAX_INPUTS:
        reader.fail(node, f"{where}.args must list 1 to {MAX_INPUTS} names, not {len(items)}")
        return None
    names = []
    for item in items:
        arg = _identifier(reader, item, f"{where}: argument")
        if arg is not None and arg in names:
            reader.fail(item, f"{where}: argument '{arg}' is listed twice")
        names.append(arg)
    return tuple(names) if None not in names else None


def _read_derivatives(reader: _Reader, node, where: str, args, lines: dict[str, int]) -> tuple[str | None, ...] | None:
    """One formula per argument, or null where the argument is only ever a number or a param."""
    if node is None:
        return None
    items = reader.sequence(node, f"{where}.derivatives", "['2*u*sqexp(u)']")
    if args is not None and len(items) != len(args):
        reader.fail(node, f"{where}.derivatives must give {len(args)} formula(s), one per argument "
                          f"({', '.join(args)}), not {len(items)}; null for an argument that is only ever a "
                          "number or a param")
        return None
    formulas = []
    for index, item in enumerate(items):
        lines[f"{where}.derivatives.{index}"] = _line(item)
        if isinstance(item, yaml.ScalarNode) and item.tag == _NULL_TAG and item.value in ("", "null", "~", "Null", "NULL"):
            formulas.append(None)
        else:
            formulas.append(_read_expr(reader, item, f"{where}.derivatives[{index}]") or "")
    return tuple(formulas)


def _read_name(reader: _Reader, node) -> str | None:
    if node is None:
        return None
    name = reader.text(node, "name", _NAME_RE.match)
    if name is None:
        return None
    if not _NAME_RE.match(name):
        reader.fail(node, f"name {_shown(node)} must be lower snake_case (a-z, 0-9, _), starting with a letter")
    elif len(name) > MAX_NAME_CHARS:
        reader.fail(node, f"name is {len(name)} characters; keep it to {MAX_NAME_CHARS} (it is a file name)")
    elif keyword.iskeyword(name) or keyword.issoftkeyword(name):
        reader.fail(node, f"name '{name}' is a Python keyword; choose another name")
    elif hasattr(builtins, name):
        reader.fail(node, f"name '{name}' would shadow the Python builtin '{name}'; choose another name")
    elif name == "tests":
        reader.fail(node, "name 'tests' is the generated tests folder (OUT/tests/); choose another name")
    elif name.startswith("test") or name == "conftest":
        reader.fail(node, f"name '{name}' is one pytest collects (OUT/{name}.py would be run as tests); choose another name")
    elif name in _MODULE_GLOBALS:
        reader.fail(node, f"name '{name}' would shadow the module '{name}' that generated code uses; choose another")
    elif name in _WINDOWS_RESERVED:
        reader.fail(node, f"name '{name}' is a reserved file name on Windows ({name}.py cannot be written); choose another")
    else:
        return name
    return None


def _read_expr(reader: _Reader, node, what: str = "expr") -> str | None:
    """An expression's text (``what``: expr, or outputs.NAME for an output's)."""
    if node is None:
        return None
    if not reader.tag_ok(node, what):
        return None
    if not isinstance(node, yaml.ScalarNode) or node.tag in (_NULL_TAG, "tag:yaml.org,2002:bool"):
        if reader.scalar(node, what) is not None:
            reader.fail(node, f"{what} must be a formula such as 'sinh(x)', not {_yaml_kind(node)}")
        return None
    # The text as written: whether YAML would read it as a number (2, 1e-3, 1_000) is no concern here.
    text = node.value.strip()
    if not text:
        reader.fail(node, f"{what} is empty; write the function, e.g. 'x * tanh(softplus(x))'")
        return None
    return text


def _read_outputs(reader: _Reader, node, name, inputs, params) -> list[tuple[str, str | None, int]]:
    """(name, expression text or None when it has a problem, line) of each output, in the spec's
    order. Names follow the rules of inputs and params and are distinct from them and from the
    spec's name (checked against those that are valid: None skips). An output whose name has a
    problem still has its expression read, so that a run reports both."""
    if node is None:
        return []
    before = len(reader.problems)
    items = reader.mapping(node, "outputs", valid=_symbol_name_ok)
    if len(reader.problems) == before and not items:
        reader.fail(node, f"outputs must map 1 to {MAX_OUTPUTS} names to expressions, not 0; "
                          "e.g. outputs: {r: sqrt(x**2 + y**2), phi: atan2(y, x)}")
    elif len(items) > MAX_OUTPUTS:
        reader.fail(node, f"at most {MAX_OUTPUTS} outputs are allowed, not {len(items)}; split the function "
                          "into several specs")
    outputs = []
    for key_node, value_node, key in items:
        output = _identifier(reader, key_node, "output")
        if output is None:
            pass
        elif inputs is not None and output in inputs:
            reader.fail(key_node, f"output '{output}' has the name of an input; names must be distinct, rename the output")
        elif params is not None and output in params:
            reader.fail(key_node, f"output '{output}' has the name of a param; names must be distinct, rename the output")
        elif output == name:
            reader.fail(key_node, f"output '{output}' has the spec's name (the public function's); rename the output")
        outputs.append((key, _read_expr(reader, value_node, f"outputs.{_shorten(key)}"), _line(key_node)))
    return outputs


def _symbol_name_ok(text: str) -> bool:
    """Whether ``text`` is a name an input or param may take (what quoting a YAML word can fix)."""
    return bool(_IDENT_RE.match(text)) and not keyword.iskeyword(text) and text not in _RESERVED_SYMBOLS


def _identifier(reader: _Reader, node: yaml.Node, what: str) -> str | None:
    value = reader.text(node, what, _symbol_name_ok)
    if value is None:
        return None
    if not _IDENT_RE.match(value):
        reader.fail(node, f"{what} {_shown(node)} must be an identifier (ASCII letters, digits, _; a letter first)")
        return None
    if keyword.iskeyword(value):
        reader.fail(node, f"{what} '{value}' is a Python keyword; choose another name")
        return None
    if value in _RESERVED_SYMBOLS:
        reader.fail(node, f"{what} '{value}' would shadow the name '{value}' of the language or generated code; rename it")
        return None
    return value


def _read_inputs(reader: _Reader, node) -> tuple[str, ...] | None:
    if node is None:
        return None
    before = len(reader.problems)
    items = reader.sequence(node, "inputs", "[x, y]")
    if len(reader.problems) > before:
        return None
    if not 1 <= len(items) <= MAX_INPUTS:
        reader.fail(node, f"inputs must list 1 to {MAX_INPUTS} names, not {len(items)}")
        return None
    names: list[str] = []
    for item in items:
        name = _identifier(reader, item, "input")
        if name is None:
            continue
        if name in names:
            reader.fail(item, f"input '{name}' is listed twice")
            continue
        names.append(name)
    return tuple(names) if len(names) == len(items) else None


def _read_order(reader: _Reader, node) -> int | None:
    if node is None:
        return None
    value = reader.scalar(node, "order")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ORDER:
        quoted = " (remove the quotes)" if isinstance(value, str) and value.strip().isdigit() else ""
        reader.fail(node, f"order must be a whole number from 1 to {MAX_ORDER}, not {_shown(node)}{quoted}")
        return None
    return value


def _read_params(reader: _Reader, node, inputs) -> tuple[tuple[str, float], ...]:
    if node is None:
        return ()
    params = []
    items = reader.mapping(node, "params", valid=_symbol_name_ok)
    if len(items) > MAX_PARAMS:
        reader.fail(node, f"at most {MAX_PARAMS} params are allowed, not {len(items)}")
    for key_node, value_node, key in items:
        name = _identifier(reader, key_node, "param")
        value = reader.number(value_node, f"param '{key}'")
        if name is not None and inputs is not None and name in inputs:
            reader.fail(key_node, f"param '{name}' has the name of an input; names must be distinct")
        elif name is not None and value is not None:
            params.append((name, value))
    return tuple(params)


def _read_choice(reader: _Reader, node, what: str, choices, default: str) -> str:
    if node is None:
        return default
    value = reader.scalar(node, what)
    if value is None:
        return default
    if value not in choices:
        hint = did_you_mean(str(value), choices)
        reader.fail(node, f"{what} {_shown(node)} is not one of: {', '.join(choices)}{hint}")
        return default
    return value


def _read_domain(reader: _Reader, node, inputs) -> tuple[tuple[str, tuple[float, float]], ...]:
    """Bounds for every input; a domain key is checked against the inputs only when they are valid."""
    bounds = {name: DEFAULT_DOMAIN for name in inputs or ()}
    if node is None:
        return tuple(bounds.items())
    for key_node, value_node, key in reader.mapping(node, "domain", valid=_IDENT_RE.match if inputs is None else inputs.__contains__):
        if inputs is not None and key not in inputs:
            hint = did_you_mean(key, inputs)
            reader.fail(key_node, f"domain names '{_shorten(key)}', which is not an input{hint}; the inputs are: {', '.join(inputs)}")
            continue
        items = reader.sequence(value_node, f"domain of '{key}'", "[-2, 2]")
        if isinstance(value_node, yaml.SequenceNode) and len(items) != 2:
            reader.fail(value_node, f"domain of '{key}' must be [lo, hi]")
            continue
        numbers = [reader.number(item, f"domain of '{key}'") for item in items]
        if len(numbers) != 2 or None in numbers:
            continue
        lo, hi = numbers
        if not lo < hi:
            reader.fail(value_node, f"domain of '{key}' must have lo < hi, not [{lo}, {hi}]")
            continue
        bounds[key] = (lo, hi)
    return tuple(bounds.items())


def _explicit_domain(node, inputs) -> tuple[str, ...]:
    """The inputs the spec's domain mapping names, in input order (its problems are _read_domain's)."""
    if not isinstance(node, yaml.MappingNode) or inputs is None:
        return ()
    named = {key.value for key, _ in node.value if isinstance(key, yaml.ScalarNode)}
    return tuple(name for name in inputs if name in named)


def _read_doc(reader: _Reader, node) -> str:
    if node is None:
        return ""
    value = reader.scalar(node, "doc")
    if value is None:
        return ""
    if not isinstance(value, str):
        reader.fail(node, f"doc must be text, not {_yaml_kind(node)}; put it in quotes")
        return ""
    value = value.strip()
    if "\n" in value or "\r" in value:
        reader.fail(node, "doc must be one line; put longer notes in comments of the spec file")
    elif len(value) > MAX_DOC_CHARS:
        reader.fail(node, f"doc is {len(value)} characters; keep it to {MAX_DOC_CHARS}")
    elif any(not ch.isprintable() for ch in value):
        reader.fail(node, "doc contains control characters; remove them")
    else:
        return value
    return ""


def _read_native(reader: _Reader, node) -> str | None:
    if node is None:
        return None
    value = reader.scalar(node, "native")
    if value is None:
        return None
    if not isinstance(value, str) or not _NATIVE_RE.match(value):
        reader.fail(node, f"native {_shown(node)} must be a dotted name of public names starting with 'torch.', e.g. torch.sinh")
        return None
    return value


def _read_bool(reader: _Reader, node, what: str, default: bool) -> bool:
    if node is None:
        return default
    value = reader.scalar(node, what)
    if value is None:
        return default
    if not isinstance(value, bool):
        reader.fail(node, f"{what} must be true or false (unquoted), not {_shown(node)}")
        return default
    return value
