"""A YAML spec file read -> a validated, frozen ``Spec``, or every problem of the file.

The expression (or each of ``outputs``' expressions) is parsed here too, so that one run reports
every problem of a file; the checks across keys (formulas against inputs and externs, the native
op) live here, each key's own reading in ``fields``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ..errors import Problem, SpecErrors, did_you_mean
from .cpp_names import CPP_RESERVED, why_reserved
from .fields import (
    _UNDEFINED_RE,
    _explicit_domain,
    _read_bool,
    _read_choice,
    _read_doc,
    _read_domain,
    _read_expr,
    _read_externs,
    _read_inputs,
    _read_name,
    _read_native,
    _read_order,
    _read_outputs,
    _read_params,
)
from .model import (
    DEFAULT_DOMAIN,
    FORMULA_KEYS,
    KEYS,
    MAX_SPEC_BYTES,
    REQUIRED_KEYS,
    STRATEGIES,
    Extern,
    Spec,
)
from .nodes import _compose, _line, _Reader, _shorten

_EXAMPLES = {"name": "name: my_function", "expr": "expr: x * sigmoid(x)", "inputs": "inputs: [x]", "order": "order: 2"}


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
    fields["cpp"] = _read_bool(reader, values.get("cpp"), "cpp", False)
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
    _check_cpp_settings(reader, [p for p in parsed if p is not None], fields, lines)


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


def _check_cpp_settings(reader: _Reader, parsed, fields: dict, lines: dict[str, int]) -> None:
    """What the C++ op (``cpp: true``) cannot compute yet, refused on the cpp line: functions whose
    derivatives the Python module supplies (the Bessel family, sinc; SciPy's and declared externs),
    and fused kernels (the op runs eagerly)."""
    if not fields.get("cpp"):
        return
    from ..language.external import calls
    from ..language.special import SpecialFunctionBase

    line = lines.get("cpp", 1)
    named = [*(fields.get("inputs") or ()), *(name for name, _ in fields.get("params") or ()),
             *(name for name, _ in fields.get("outputs") or ())]
    for name in sorted({name for name in named if name in CPP_RESERVED}):
        reader.fail(line, f"cpp: true cannot name a value '{name}': it is {why_reserved(name)}; rename it")
    if fields.get("fuse"):
        reader.fail(line, "cpp: true cannot be used with fuse: true (the C++ op runs eagerly); remove one of them")
    names = sorted({type(node).language or type(node).__name__ for expr in parsed for node in expr.atoms(SpecialFunctionBase)}
                   | {cls.language for cls in calls(parsed)})
    if names:
        reader.fail(line, f"cpp: true cannot compute {', '.join(names)} in C++ yet (its derivatives are the Python "
                          "module's own code); remove cpp, or write the function another way")


def native_problems(spec: Spec) -> list[Problem]:
    """The problem of the spec's native op, if any: for a spec loaded with ``check_expr=False`` that
    is then generated (its expression is parsed again by the generation; nothing resolves native)."""
    reader = _Reader(spec.path)
    if spec.native is not None:
        _check_native(reader, spec.line_of("native"), spec.native, spec.inputs, spec.domain, spec.params)
    return reader.problems


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
