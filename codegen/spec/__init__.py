"""Stage 1: a YAML spec file -> a validated, frozen ``Spec``.

YAML is composed (never constructed into arbitrary objects) with line marks kept, so every
problem names its line. Aliases are refused outright, which makes alias bombs impossible; nesting
is bounded; and only the plain YAML tags (str, int, float, bool, null, seq, map) are accepted.
The expression (or each of ``outputs``' expressions) is parsed here too, so that one run reports
every problem of a file.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import keyword
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import Problem, SpecErrors, did_you_mean
from ..language import CONSTANT_NAMES, FUNCTION_ARITY

MAX_SPEC_BYTES = 64 * 1024
# The generated code's line length where the project sets none: ruff's and Black's default.
DEFAULT_LINE_LENGTH = 88
MAX_ORDER = 8
MAX_INPUTS = 8
MAX_PARAMS = 16
MAX_OUTPUTS = 64
MAX_DOC_CHARS = 500
MAX_NAME_CHARS = 100  # the name is a file name (test_NAME.py) on every platform
MAX_YAML_DEPTH = 20
MAX_SHOWN_CHARS = 40  # of a user's value quoted in a message
STRATEGIES = ("auto", "save_inputs", "save_outputs", "intermediates", "nested")
DEFAULT_DOMAIN = (-2.0, 2.0)

KEYS = ("name", "expr", "inputs", "order", "params", "strategy", "domain", "doc", "native", "fuse", "outputs", "stack",
        "extern")
EXTERN_KEYS = ("impl", "args", "derivatives")
MAX_EXTERNS = 16
# and exactly one of FORMULA_KEYS: expr (one output) or outputs (a vector-valued function)
REQUIRED_KEYS = ("name", "inputs", "order")
FORMULA_KEYS = ("expr", "outputs")
_EXAMPLES = {"name": "name: my_function", "expr": "expr: x * sigmoid(x)", "inputs": "inputs: [x]", "order": "order: 2"}

_NAME_RE = re.compile(r"[a-z][a-z0-9_]*\Z")
_IDENT_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_IMPL_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*\Z")
_NATIVE_RE = re.compile(r"torch(\.[A-Za-z][A-Za-z0-9_]*)+\Z")  # public names only: no torch._C, torch.__builtins__
_UNDEFINED_RE = re.compile(r"undefined name '([A-Za-z][A-Za-z0-9_]*)'")  # expr.py's message for an unknown name
# A plain number YAML 1.1 reads as text (1e-3, 1.5e3): YAML 1.2 and every PyTorch user read a number.
_NUMBER_RE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z")
# File names Windows refuses whatever the extension: OUT/NAME.py could not be written there.
_WINDOWS_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
# Names the generated module itself defines or imports at top level (functools and warnings for
# fused kernels: a public function named warnings would break their fallback's warnings.warn).
_MODULE_GLOBALS = {"torch", "math", "functools", "warnings"}
# Names an input or param may not take: they would shadow the language or the generated code.
_RESERVED_SYMBOLS = set(FUNCTION_ARITY) | set(CONSTANT_NAMES) | _MODULE_GLOBALS | {"ctx"}
_SCALAR_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}
_NULL_TAG = "tag:yaml.org,2002:null"
_STR_TAG = "tag:yaml.org,2002:str"
_COLLECTION_TAGS = {yaml.SequenceNode: "tag:yaml.org,2002:seq", yaml.MappingNode: "tag:yaml.org,2002:map"}
# Numbers as YAML 1.2's core schema reads them (yaml.org/spec/1.2.2, 10.3.2), not as PyYAML's YAML
# 1.1 does: 010 is 10 (not octal 8), 1e3 is 1000.0 (not text), 0o17 and 0x1F are 15 and 31.
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_YAML12_INT_RE = re.compile(r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z")
_YAML12_FLOAT_RE = re.compile(  # the implicit form: a dot or an exponent (a plain 1 is an int)
    r"(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*|[0-9]+(?=[eE]))(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"
)
# YAML 1.1's other numbers (1:30 sexagesimal, 0b101, 0x_1F, +0x1F, 0_17, 1_000): text in YAML 1.2,
# numbers to a 1.1 reader. A plain one gets this tag (which nothing constructs), so that a spec
# meaning 90 by 1:30 is refused at its line instead of read as text by one tool and 90 by another.
_YAML11_NUMBER_TAG = "tag:dbgen,2024:yaml-1.1-number"
_YAML11_NUMBERS = {tag: regexp for first in "0123456789-+." for tag, regexp in yaml.SafeLoader.yaml_implicit_resolvers[first]
                   if tag in (_INT_TAG, _FLOAT_TAG)}


@dataclass(frozen=True)
class Extern:
    """A function the spec declares under ``extern:`` (docs/guide/externals.md): computed by
    ``impl`` (``module:callable``, imported by the generated module when first called), with
    one derivative formula per argument (None: the argument must be a number or a param)."""

    name: str
    impl: str
    args: tuple[str, ...]
    derivatives: tuple[str | None, ...]

    @property
    def module(self) -> str:
        return self.impl.split(":")[0]


@dataclass(frozen=True)
class Spec:
    """One validated spec file. ``lines`` maps each key to the line it stands on, and each output
    of a vector-valued spec to its own (``outputs.NAME``).

    A spec has either ``expr`` (one output) or ``outputs`` (name, expression text, in the spec's
    order), never both: ``expr`` is "" for a vector-valued spec. ``formulas`` gives either kind as
    (name, expression) pairs."""

    path: str
    name: str
    expr: str
    inputs: tuple[str, ...]
    order: int
    params: tuple[tuple[str, float], ...] = ()
    strategy: str = "auto"
    domain: tuple[tuple[str, tuple[float, float]], ...] = ()
    doc: str = ""
    native: str | None = None
    fuse: bool = False
    # the inputs whose domain the spec sets (the others have DEFAULT_DOMAIN): the generated tests
    # probe far outside the domain only for the others, so an explicit [-2, 2] is respected
    explicit_domain: tuple[str, ...] = ()
    # a build option, like fuse: the project's line length (config.line_length), which the
    # generated code is wrapped and formatted to
    line_length: int = DEFAULT_LINE_LENGTH
    # a vector-valued function (docs/guide/specs.md): (name, expression text), in the spec's order;
    # empty for a spec with expr
    outputs: tuple[tuple[str, str], ...] = ()
    # with outputs: return one tensor, the outputs stacked along a new last dimension
    stack: bool = False
    # functions the spec declares (docs/guide/externals.md), in the spec's order
    externs: tuple[Extern, ...] = ()
    lines: tuple[tuple[str, int], ...] = field(default=(), compare=False)

    def line_of(self, key: str) -> int:
        lines = dict(self.lines)
        if key == "expr" and key not in lines and "outputs" in lines:
            key = "outputs"  # a problem of "the formula" of a vector-valued spec: its outputs line
        return lines.get(key, 1)

    def problem(self, key: str, message: str) -> Problem:
        return Problem(self.path, self.line_of(key), message)

    def bounds(self, name: str) -> tuple[float, float]:
        """Input ``name``'s domain: the spec's, else the default (a Spec made in code may leave it empty)."""
        return dict(self.domain).get(name, DEFAULT_DOMAIN)

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.params)

    @property
    def is_vector(self) -> bool:
        """Whether the spec gives ``outputs`` (a vector-valued function) instead of ``expr``."""
        return bool(self.outputs)

    @property
    def formulas(self) -> tuple[tuple[str, str], ...]:
        """(name, expression text) of each output: the outputs, or the spec's name and its expr."""
        return self.outputs if self.outputs else ((self.name, self.expr),)

    def canonical(self) -> dict:
        """Everything that determines the generated code, in a stable form. A spec with expr keeps
        exactly the keys it had before outputs existed, so the digests of earlier builds hold."""
        formula = ({"outputs": [[n, e] for n, e in self.outputs], "stack": self.stack} if self.outputs
                   else {"expr": self.expr})
        return {
            "name": self.name,
            **formula,
            "inputs": list(self.inputs),
            "order": self.order,
            "params": [[n, v] for n, v in self.params],
            "strategy": self.strategy,
            "domain": [[n, list(b)] for n, b in self.domain],
            "doc": self.doc,
            "native": self.native,
            "fuse": self.fuse,
            "explicit_domain": list(self.explicit_domain),
            # only when set: the default keeps the digests (and headers) of earlier builds
            **({"extern": [[e.name, e.impl, list(e.args), list(e.derivatives)] for e in self.externs]}
               if self.externs else {}),
            **({} if self.line_length == DEFAULT_LINE_LENGTH else {"line_length": self.line_length}),
        }

    def digest(self, version: str, rewrite: bool = True) -> str:
        """sha256 of the canonical spec, the generator version and its options: the staleness key."""
        key = {"spec": self.canonical(), "dbgen": version, **({} if rewrite else {"rewrite": False})}
        text = json.dumps(key, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


class _NoAliasLoader(yaml.SafeLoader):
    """A SafeLoader that refuses aliases (a spec never needs them, and they enable bombs) and
    nesting deeper than a spec can use (instead of running out of stack)."""

    _depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed in a spec; write the value out", event.start_mark
            )
        if self._depth >= MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"lists or mappings are nested more than {MAX_YAML_DEPTH} deep", event.start_mark
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """A YAML 1.2 int: decimal (010 is 10), 0o octal or 0x hex; ValueError for any other text (!!int 1_000)."""
    text = loader.construct_scalar(node)
    if not _YAML12_INT_RE.match(text):
        raise ValueError(f"not a YAML 1.2 int: {text!r}")
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    """A YAML 1.2 float (an int's text too, as in !!float 1); ValueError for any other text."""
    text = loader.construct_scalar(node)
    if text[-4:].lower() in (".inf", ".nan") and _YAML12_FLOAT_RE.match(text):
        return math.nan if text[-1] in "nN" else -math.inf if text[0] == "-" else math.inf
    if not (_YAML12_FLOAT_RE.match(text) or re.fullmatch(r"[-+]?[0-9]+", text)):
        raise ValueError(f"not a YAML 1.2 float: {text!r}")
    return float(text)


# The resolvers: PyYAML's YAML 1.1 ones for bool, null and the rest; YAML 1.2's for numbers, then
# YAML 1.1's for the forms only 1.1 reads as numbers (tried in this order, the first match wins).
_NoAliasLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_NoAliasLoader.add_implicit_resolver(_INT_TAG, _YAML12_INT_RE, list("-+0123456789"))
_NoAliasLoader.add_implicit_resolver(_FLOAT_TAG, _YAML12_FLOAT_RE, list("-+.0123456789"))
for _regexp in _YAML11_NUMBERS.values():
    _NoAliasLoader.add_implicit_resolver(_YAML11_NUMBER_TAG, _regexp, list("-+.0123456789"))
_NoAliasLoader.add_constructor(_INT_TAG, _construct_int)
_NoAliasLoader.add_constructor(_FLOAT_TAG, _construct_float)


def _yaml11_number(node: yaml.ScalarNode) -> str | None:
    """Why a scalar YAML 1.1 would read as a number is refused, or None: a plain 1:30 (tagged by
    the resolver), or an !!int or !!float in a form YAML 1.2 has not (!!int 0b101)."""
    text = node.value
    tagged = node.tag in (_INT_TAG, _FLOAT_TAG) and not (_YAML12_INT_RE.match(text) or _YAML12_FLOAT_RE.match(text))
    tag = next((tag for tag, regexp in _YAML11_NUMBERS.items() if regexp.match(text)), None)
    if tag is None or not (node.tag == _YAML11_NUMBER_TAG or tagged):
        return None
    digits = text.lstrip("+-")
    form = ("sexagesimal, base 60" if ":" in text else "binary" if digits.startswith("0b")
            else "hexadecimal" if digits.startswith("0x") else "octal" if tag == _INT_TAG and digits[:1] == "0"
            else "with '_' separators")
    try:
        loader = yaml.SafeLoader("")
        value = loader.construct_yaml_int(node) if tag == _INT_TAG else loader.construct_yaml_float(node)
        decimal = _shorten(repr(value))
    except (ValueError, OverflowError):
        decimal = None
    meaning = f": {decimal}" if decimal is not None else ""
    how = f"write the number in decimal ({decimal})" if decimal is not None else "write the number in decimal"
    where = "where it is text" if node.tag == _YAML11_NUMBER_TAG else f"which has no such {tag.rsplit(':', 1)[-1]}"
    return (f"{_shown(node)} is a number only in YAML 1.1 ({form}{meaning}); dbgen reads specs as YAML 1.2, "
            f"{where}: {how}, or quote it if it is text")


def display_path(path: Path, root: Path | None = None) -> str:
    """The path as users see it in messages and headers: relative to ``root``, '/' separators."""
    root = root or Path.cwd()
    try:
        rel = Path(path).resolve().relative_to(root.resolve())
    except ValueError:
        import os

        rel = Path(os.path.relpath(Path(path).resolve(), root.resolve()))
    return rel.as_posix()


def load_spec(path: Path, shown: str, check_expr: bool = True) -> Spec:
    """Read, parse and validate one spec file; raise ``SpecErrors`` listing every problem.

    ``check_expr=False`` parses the expression and resolves the ``native`` op only when the file
    has other problems (to report them all at once); a build that finds its output up to date then
    never imports SymPy or torch (``native_problems`` checks that for the specs it generates).
    """
    if not shown.isprintable():
        # The path is written into every generated file's header: it must encode as UTF-8 (a name
        # that is not UTF-8 on disk arrives as lone surrogates) and hold no line breaks (U+2028,
        # NEL included), bidi overrides or other invisible characters.
        reason = "is not valid UTF-8" if _has_surrogates(shown) else "contains control or invisible characters"
        raise SpecErrors([Problem(repr(shown)[1:-1], 1, f"the file name {reason}; rename the file")])
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SpecErrors([Problem(shown, 1, f"cannot read the file: {exc.strerror}")]) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecErrors([Problem(shown, 1, f"the file is {len(raw)} bytes; a spec may be at most {MAX_SPEC_BYTES}")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecErrors([Problem(shown, line, "the file is not valid UTF-8; save it as UTF-8")]) from None
    return load_text(text, shown, check_expr)


def load_text(text: str, shown: str, check_expr: bool = True) -> Spec:
    """A spec's text validated as ``load_spec`` validates a file's (``shown``: the name problems
    carry): what ``dbgen new`` and ``dbgen audit --write-spec`` check before writing one."""
    return _validate(_compose(text, shown), shown, check_expr)


def _has_surrogates(text: str) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


def _compose(text: str, shown: str) -> yaml.MappingNode:
    try:
        root = yaml.compose(text, Loader=_NoAliasLoader)
    except yaml.MarkedYAMLError as exc:
        raise SpecErrors([_yaml_problem(exc, shown)]) from None
    except yaml.YAMLError as exc:
        raise SpecErrors([Problem(shown, 1, f"invalid YAML: {exc}")]) from None
    except RecursionError:
        raise SpecErrors([Problem(shown, 1, "the YAML is nested too deeply")]) from None
    if root is None or (isinstance(root, yaml.ScalarNode) and root.tag == _NULL_TAG and not root.value):
        raise SpecErrors([Problem(shown, 1, "the file is empty; a spec needs at least: name, expr, inputs, order")])
    tag = _bad_tag(root)
    if tag:
        raise SpecErrors([Problem(shown, _line(root), f"YAML tag {_tag_text(tag)!r} is not allowed; remove the tag")])
    if not isinstance(root, yaml.MappingNode):
        raise SpecErrors([Problem(shown, _line(root), "a spec is a mapping of keys (name, expr, inputs, order, ...)")])
    return root


def _yaml_problem(exc: yaml.MarkedYAMLError, shown: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark else 1
    what = exc.problem or exc.context or "cannot read it"
    if "another document" in what:
        what = "a spec file holds one YAML document; remove the '---' and put each spec in its own file"
    elif exc.context and exc.problem and exc.context_mark and exc.context_mark.line + 1 != line:
        what += f" ({exc.context} started on line {exc.context_mark.line + 1})"
    return Problem(shown, line, f"invalid YAML: {what}")


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _bad_tag(node: yaml.Node) -> str | None:
    """The node's tag when it is not one of the plain YAML tags a spec may hold, else None."""
    allowed = _COLLECTION_TAGS.get(type(node))
    ok = node.tag == allowed if allowed else node.tag in _SCALAR_TAGS or node.tag == _YAML11_NUMBER_TAG
    return None if ok else node.tag


def _shorten(text: str) -> str:
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."


def _tag_text(tag: str) -> str:
    """A tag as it is written in YAML: '!!binary', not 'tag:yaml.org,2002:binary'."""
    return _shorten("!!" + tag[len("tag:yaml.org,2002:"):] if tag.startswith("tag:yaml.org,2002:") else tag)


def _shown(node: yaml.Node) -> str:
    """A scalar's text as quoted in a message, cut to a readable length."""
    return repr(_shorten(node.value)) if isinstance(node, yaml.ScalarNode) else "a list or mapping"


def _implicit(node: yaml.ScalarNode) -> bool:
    """Whether YAML gave the scalar its type by itself (no quotes, no tag), as 'yes' -> true."""
    resolved = _NoAliasLoader("").resolve(yaml.ScalarNode, node.value, (True, False))
    return node.style is None and node.tag == resolved


def _yaml_kind(node: yaml.ScalarNode) -> str:
    names = {"bool": "true/false", "int": "a number", "float": "a number", "null": "'no value'",
             "timestamp": "a date", "str": "text"}
    return names.get(node.tag.rsplit(":", 1)[-1], node.tag)


class _Reader:
    """Turns YAML nodes into plain values, collecting problems instead of stopping at the first."""

    def __init__(self, shown: str):
        self.shown = shown
        self.problems: list[Problem] = []

    def fail(self, node: yaml.Node | int, message: str) -> None:
        line = node if isinstance(node, int) else _line(node)
        self.problems.append(Problem(self.shown, line, message))

    def tag_ok(self, node: yaml.Node, what: str) -> bool:
        tag = _bad_tag(node)
        if tag is None:
            return True
        if isinstance(node, yaml.ScalarNode) and _implicit(node):
            self.fail(node, f"{what} {_shown(node)} is read by YAML as {_yaml_kind(node)}; put it in quotes")
        else:
            self.fail(node, f"{what}: YAML tag {_tag_text(tag)!r} is not allowed; remove the tag")
        return False

    def scalar(self, node: yaml.Node, what: str):
        """A plain, non-null scalar value, or ``None`` (with a problem recorded) for anything else."""
        if not self.tag_ok(node, what):
            return None
        if not isinstance(node, yaml.ScalarNode):
            kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
            self.fail(node, f"{what} must be a single value, not {kind}")
            return None
        refused = _yaml11_number(node)
        if refused:
            self.fail(node, f"{what}: {refused}")
            return None
        if node.tag == _NULL_TAG:
            if node.value:
                self.fail(node, f"{what}: {_shown(node)} means 'no value' in YAML; write a value (quoted, if text)")
            else:
                self.fail(node, f"{what} has no value; write one after the ':'")
            return None
        try:
            return _NoAliasLoader("").construct_object(node)
        except (yaml.YAMLError, ValueError, OverflowError):
            self.fail(node, f"{what}: cannot read the value {_shown(node)}")
            return None

    def text(self, node: yaml.Node, what: str, valid) -> str | None:
        """A scalar meant as text. A plain word YAML reads as something else ('yes', 'on') is refused
        with a hint to quote it when the text itself would do; otherwise its text is returned, for the
        caller to judge as text."""
        value = self.scalar(node, what)
        if value is None or isinstance(value, str):
            return value
        if valid(node.value):
            self.fail(node, f"{what} {_shown(node)} is read by YAML as {_yaml_kind(node)}; put it in quotes")
            return None
        return node.value

    def key(self, node: yaml.Node, what: str, valid) -> str | None:
        """A mapping's key as text. A plain word YAML reads as something else (on, no, null, 1) is
        refused with a hint to quote it when its text would be a valid key (``valid``); otherwise
        its text is returned, for the caller to judge as text ('unknown key', 'not an identifier')."""
        if not isinstance(node, yaml.ScalarNode) or _bad_tag(node):
            self.scalar(node, f"a key in {what}")  # reports the list, mapping or tag
            return None
        if node.tag == _STR_TAG:
            return node.value
        if not node.value:
            self.fail(node, f"{what}: a key is missing before a ':'; write a name")
        elif valid(node.value):
            self.fail(node, f"{what}: key {_shown(node)} is read by YAML as {_yaml_kind(node)}; put it in quotes")
        else:
            return node.value
        return None

    def mapping(self, node: yaml.Node, what: str, valid=_IDENT_RE.match) -> list[tuple[yaml.Node, yaml.Node, str]]:
        """Key nodes, value nodes and key strings of a mapping; duplicate keys are problems.
        ``valid(text)`` says whether a key YAML reads as other than text would be right quoted."""
        if not self.tag_ok(node, what):
            return []
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, f"{what} must be a mapping (key: value lines)")
            return []
        seen: dict[str, int] = {}
        items = []
        for key_node, value_node in node.value:
            key = self.key(key_node, what, valid)
            if key is None:
                continue
            if key in seen:
                self.fail(key_node, f"{what}: key '{_shorten(key)}' appears twice (first on line {seen[key]}); keep one")
                continue
            seen[key] = _line(key_node)
            items.append((key_node, value_node, key))
        return items

    def sequence(self, node: yaml.Node, what: str, example: str) -> list[yaml.Node]:
        if not self.tag_ok(node, what):
            return []
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, f"{what} must be a list, e.g. {example}")
            return []
        return list(node.value)

    def number(self, node: yaml.Node, what: str) -> float | None:
        value = self.scalar(node, what)
        if value is None:
            return None
        if isinstance(value, str) and node.style is None and _NUMBER_RE.match(value):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            quoted = " (remove the quotes)" if isinstance(value, str) and _NUMBER_RE.match(value) else ""
            self.fail(node, f"{what} must be a number, not {_shown(node)}{quoted}")
            return None
        try:
            result = float(value)
        except OverflowError:
            result = math.inf
        if not math.isfinite(result) or abs(result) > 1e300:
            self.fail(node, f"{what} must be a finite number no larger than 1e300 in size, not {_shown(node)}")
            return None
        if result == 0 and re.search(r"[1-9]", str(node.value).partition("e")[0].partition("E")[0]):
            self.fail(node, f"{what} is {_shown(node)}, below float64's smallest number: it would be 0; write 0 "
                            "if you mean it, or a number of at least 5e-324 in size")
            return None
        return result


def _validate(root: yaml.MappingNode, shown: str, check_expr: bool = True) -> Spec:
    """The spec in ``root``, every key read and checked; SpecErrors with all the problems found."""
    reader = _Reader(shown)
    values, lines, unknown_keys = _top_level(reader, root)
    _check_key_combinations(reader, values, lines)
    fields, outputs, names_known, externs_ok = _read_fields(reader, values, lines)
    if check_expr or reader.problems:
        # an unknown key may be the inputs or params misspelled: the expression's names are then unknown
        declared = _check_externs(reader, fields["externs"], lines) if externs_ok else None
        if declared is not None:  # else a declaration has a problem: the calls of it cannot be judged yet
            _check_formulas(reader, fields, outputs, lines, declared, names_known and not unknown_keys)
        if fields["native"] is not None:  # probed only where the inputs, domain and params are sound
            _check_native(reader, lines["native"], fields["native"], fields["inputs"], fields["domain"],
                          fields["params"], probing=not reader.problems)
    if reader.problems:
        raise SpecErrors(reader.problems)
    return Spec(path=shown, lines=tuple(sorted(lines.items())), **fields)


def _top_level(reader: _Reader, root: yaml.MappingNode) -> tuple[dict[str, yaml.Node], dict[str, int], bool]:
    """(value node by key, line by key, whether a key was unknown): the spec's top-level mapping."""
    values: dict[str, yaml.Node] = {}
    lines: dict[str, int] = {}
    unknown_keys = False
    for key_node, value_node, key in reader.mapping(root, "the spec", valid=KEYS.__contains__):
        if key not in KEYS:
            hint = did_you_mean(key, KEYS)
            reader.fail(key_node, f"unknown key '{_shorten(key)}'{hint}; the keys are: {', '.join(KEYS)}")
            unknown_keys = True
            continue
        values[key] = value_node
        lines[key] = _line(key_node)
    return values, lines, unknown_keys


def _check_key_combinations(reader: _Reader, values: dict[str, yaml.Node], lines: dict[str, int]) -> None:
    """The required keys are there, and no two keys contradict each other."""
    for key in REQUIRED_KEYS:
        if key not in values:
            reader.fail(1, f"missing required key '{key}'; add a line such as '{_EXAMPLES[key]}'")
    if not any(key in values for key in FORMULA_KEYS):
        reader.fail(1, f"missing required key 'expr'; add a line such as '{_EXAMPLES['expr']}' "
                       "(or, for several outputs, an 'outputs:' mapping of names to expressions)")
    if all(key in values for key in FORMULA_KEYS):
        reader.fail(max(lines["expr"], lines["outputs"]), "a spec has expr or outputs, not both; keep expr for one "
                    "output, or move it into outputs as one of several")
    elif "stack" in values and "expr" in values:
        reader.fail(lines["stack"], "stack applies only to outputs (it stacks several outputs into one tensor); "
                    "remove it, or write the function as outputs instead of expr")
    if "native" in values and "outputs" in values:
        reader.fail(lines["native"], "native names one torch op for a one-output spec; a vector-valued spec's "
                    "tests compare with its outputs' formulas in torch ops: remove native")


def _read_fields(reader: _Reader, values: dict[str, yaml.Node],
                 lines: dict[str, int]) -> tuple[dict, list, bool, bool]:
    """(Spec's fields as read, the outputs as (name, text, line), whether the inputs and params are
    known well enough to judge the names an expression uses, whether every extern declaration was
    read). ``lines`` gains the outputs' and the externs' lines."""
    fields = {
        "name": _read_name(reader, values.get("name")),
        "expr": _read_expr(reader, values.get("expr")),
        "inputs": _read_inputs(reader, values.get("inputs")),
        "order": _read_order(reader, values.get("order")),
    }
    inputs = fields["inputs"]
    before = len(reader.problems)
    fields["params"] = _read_params(reader, values.get("params"), inputs)
    params_ok = len(reader.problems) == before
    fields["strategy"] = _read_choice(reader, values.get("strategy"), "strategy", STRATEGIES, "auto")
    fields["domain"] = _read_domain(reader, values.get("domain"), inputs)
    fields["explicit_domain"] = _explicit_domain(values.get("domain"), inputs)
    fields["doc"] = _read_doc(reader, values.get("doc"))
    fields["native"] = _read_native(reader, values.get("native"))
    fields["fuse"] = _read_bool(reader, values.get("fuse"), "fuse", False)
    params = tuple(name for name, _ in fields["params"])
    outputs = _read_outputs(reader, values.get("outputs"), fields["name"], inputs, params if params_ok else None)
    lines.update((f"outputs.{name}", line) for name, _, line in outputs)
    fields["outputs"] = tuple((name, text) for name, text, _ in outputs if text is not None)
    fields["stack"] = _read_bool(reader, values.get("stack"), "stack", False)
    externs = _read_externs(reader, values.get("extern"), fields["name"], inputs, params if params_ok else None)
    lines.update((key, line) for extern, extern_lines in externs for key, line in extern_lines.items())
    fields["externs"] = tuple(extern for extern, _ in externs if extern is not None)
    if "outputs" in values and "expr" not in values:
        fields["expr"] = ""  # a vector-valued spec: its formulas are the outputs
    return fields, outputs, inputs is not None and params_ok, all(extern is not None for extern, _ in externs)


def _check_formulas(reader: _Reader, fields: dict, outputs: list, lines: dict[str, int], declared,
                    names_known: bool) -> None:
    """Parse the expression or each output's (``declared``: the spec's externs, their derivatives
    parsed), and check the settings a call of an external function rules out. With ``names_known``
    False every name is taken for a symbol, so that the expressions' other problems are still
    reported."""
    inputs, params = (fields["inputs"], tuple(n for n, _ in fields["params"])) if names_known else (None, None)
    parsed = []
    if fields["expr"]:
        parsed.append(_check_expr(reader, lines["expr"], fields["expr"], inputs, params, externs=declared))
    for name, text, line in outputs:
        if text is not None:
            others = {other for other, _, _ in outputs if other != name}
            parsed.append(_check_expr(reader, line, text, inputs, params, f"outputs.{_shorten(name)}", others,
                                      externs=declared))
    _check_external_settings(reader, [p for p in parsed if p is not None], fields, lines)


def _check_expr(reader: _Reader, line: int, text: str, inputs, params, what: str = "expr", outputs=(),
                externs=()) -> None:
    """Parse the expression now, so that its problems are reported with the file's others. With
    inputs or params None (missing or invalid), every other problem of the expression is still
    reported, only not its unknown names. ``what``: expr, or outputs.NAME for an output's, whose
    ``outputs`` are the other outputs' names (an expression cannot use them). ``externs``: the
    spec's (None where a declaration has a problem: their names are then taken for functions of
    any arity)."""
    from ..language.expr import (  # SymPy: imported only when an expression is parsed
        ExprError,
        parse_expr,
    )

    try:
        return parse_expr(text, inputs, params, externs)
    except ExprError as exc:
        message = str(exc)
        unknown = _UNDEFINED_RE.match(message)
        if unknown and unknown[1] in outputs:
            message = (f"'{unknown[1]}' is another output; an output's expression may use only the inputs and "
                       "params: write that output's formula out in it")
        reader.fail(line, f"{what}: {message}")


def _check_external_settings(reader: _Reader, parsed, fields: dict, lines: dict[str, int]) -> None:
    """A spec that calls external functions is nested, and not fused (external.conflicts)."""
    if not parsed:
        return
    from ..language.external import calls, conflicts

    for key, message in conflicts(fields["strategy"] or "auto", bool(fields["fuse"]), calls(parsed)):
        reader.fail(lines.get(key, 1), message)


def native_problems(spec: Spec) -> list[Problem]:
    """The problem of the spec's native op, if any: for a spec loaded with ``check_expr=False`` that
    is then generated (its expression is parsed again by the generation; nothing resolves native)."""
    reader = _Reader(spec.path)
    if spec.native is not None:
        _check_native(reader, spec.line_of("native"), spec.native, spec.inputs, spec.domain, spec.params)
    return reader.problems


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


def _check_externs(reader: _Reader, externs: tuple[Extern, ...], lines: dict[str, int]) -> tuple[Extern, ...] | None:
    """Parse every extern's derivatives (they may call each other and SciPy's functions); the
    externs, or None when one has a problem (reported on its derivative's line)."""
    from ..language.expr import DerivativeError, declared_functions

    try:
        declared_functions(externs)
    except DerivativeError as exc:
        key = f"extern.{exc.extern}.derivatives.{exc.index}"
        reader.fail(lines.get(key, 1), f"extern.{exc.extern}.derivatives[{exc.index}]: {exc}")
        return None
    return externs


def _check_native(reader: _Reader, line: int, name: str, inputs, domain, params, probing: bool = True) -> None:
    """Resolve the native op now and, with ``probing``, call it as the generated tests will
    (``native.probe``), so that a typo, or an op that is not a pure function of the inputs, fails
    the build."""
    # torch: imported only when needed
    from .native import NativeError, probe, resolve_native

    bounds = dict(domain)
    try:
        found = resolve_native(name)
        if probing:
            probe(name, found, [bounds.get(x, DEFAULT_DOMAIN) for x in inputs], dict(params))
    except NativeError as exc:
        reader.fail(line, str(exc))


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
