"""YAML composed, never constructed, with line marks kept; its nodes read into plain values.

Aliases are refused outright, which makes alias bombs impossible; nesting is bounded; and only the
plain YAML tags (str, int, float, bool, null, seq, map) are accepted. ``_Reader`` turns nodes into
values, collecting every problem with its line instead of stopping at the first.
"""

from __future__ import annotations

import math
import re

import yaml

from ..errors import Problem, SpecErrors

MAX_YAML_DEPTH = 20
MAX_SHOWN_CHARS = 40  # of a user's value quoted in a message
_IDENT_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
# A plain number YAML 1.1 reads as text (1e-3, 1.5e3): YAML 1.2 and every PyTorch user read a number.
_NUMBER_RE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z")
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
