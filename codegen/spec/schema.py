"""The JSON Schema (draft 2020-12) of a spec file, for editors and other tools.

Built from the constants the spec package validates with, so the two cannot drift apart on limits,
names and choices. The schema cannot express everything the loader checks (the expression
language, lo < hi in a domain, domain keys naming inputs, params and outputs distinct from inputs
and from each other): dbgen's own loader stays the authority, and the schema catches the rest as
you type.
"""

from __future__ import annotations

import builtins
import json
import keyword

# The loader's own rules (private to spec/fields.py, read here so the schema follows any change to them).
from . import fields, model

SCHEMA_FILE = "dbgen-spec.schema.json"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
_IDENTIFIER = "^[A-Za-z][A-Za-z0-9_]*$"
_FINITE = {"type": "number", "minimum": -1e300, "maximum": 1e300}


def spec_schema() -> dict:
    """The schema as a dict, keys in the order the README's table lists them."""
    return {
        "$schema": DRAFT,
        "title": "dbgen spec",
        "description": "One function for dbgen: a torch.autograd.Function with verified higher-order derivatives.",
        "type": "object",
        "required": list(model.REQUIRED_KEYS),
        # exactly one of expr (one output) and outputs (a vector-valued function)
        "oneOf": [{"required": [key]} for key in model.FORMULA_KEYS],
        "dependentRequired": {"stack": ["outputs"]},  # stack stacks outputs: never with expr
        "additionalProperties": False,
        "properties": {
            "name": _name(),
            "expr": _expression("The function of the inputs and params, e.g. x * tanh(softplus(x)); '**' is power."),
            "inputs": {
                "description": "Differentiable tensor inputs, in call order.",
                "type": "array",
                "items": _symbol_name("An input's name."),
                "minItems": 1,
                "maxItems": model.MAX_INPUTS,
                "uniqueItems": True,
            },
            "order": {
                "description": "Highest derivative order written out and verified by the generated tests.",
                "type": "integer",
                "minimum": 1,
                "maximum": model.MAX_ORDER,
            },
            "params": {
                "description": "Non-differentiable constants: keyword-only arguments with these defaults.",
                "type": "object",
                "propertyNames": _symbol_name("A param's name."),
                "additionalProperties": _FINITE,
                "maxProperties": model.MAX_PARAMS,
            },
            "strategy": {
                "description": "How the Function keeps what its backward needs; auto picks one.",
                "enum": list(model.STRATEGIES),
                "default": "auto",
            },
            "domain": {
                "description": "Where the generated tests draw each input from: input -> [lo, hi], lo < hi.",
                "type": "object",
                "propertyNames": {"pattern": _IDENTIFIER},
                "additionalProperties": {
                    "type": "array", "prefixItems": [_FINITE, _FINITE], "minItems": 2, "maxItems": 2,
                },
            },
            "doc": {
                "description": "One line: the docstring's first line.",
                "type": "string",
                "maxLength": model.MAX_DOC_CHARS,
                "pattern": "^[^\\n\\r]*$",
            },
            "native": {
                "description": "An equivalent PyTorch callable the generated tests also compare with.",
                "type": "string",
                "pattern": "^" + fields._NATIVE_RE.pattern.removesuffix("\\Z") + "$",
                "examples": ["torch.sinh", "torch.nn.functional.mish"],
            },
            "fuse": {
                "description": "Compile each level's formulas into one kernel with torch.compile.",
                "type": "boolean",
                "default": False,
            },
            "outputs": {
                "description": "Instead of expr: a vector-valued function, output name -> its expression, in order.",
                "type": "object",
                "propertyNames": _symbol_name("An output's name."),
                "additionalProperties": _expression("An output's function of the inputs and params."),
                "minProperties": 1,
                "maxProperties": model.MAX_OUTPUTS,
            },
            "stack": {
                "description": "With outputs: return one tensor, the outputs stacked along a new last dimension.",
                "type": "boolean",
                "default": False,
            },
            "extern": {
                "description": ("Functions the spec declares, computed by your own implementation outside "
                                "autograd (the spec is then generated nested): name -> impl, args, derivatives."),
                "type": "object",
                "propertyNames": _symbol_name("The function's name in expressions."),
                "additionalProperties": _extern(),
                "minProperties": 1,
                "maxProperties": model.MAX_EXTERNS,
            },
            "cpp": {
                "description": "Also build the Functions as C++ autograd code: the op torch.ops.dbgen.NAME, for "
                               "TorchScript, torch.export and C++ programs.",
                "type": "boolean",
                "default": False,
            },
        },
    }


def _extern() -> dict:
    return {
        "type": "object",
        "required": list(model.EXTERN_KEYS),
        "additionalProperties": False,
        "properties": {
            "impl": {"description": "module:callable; it gets detached tensors and returns a tensor.",
                     "type": "string", "pattern": "^" + fields._IMPL_RE.pattern.removesuffix("\\Z") + "$"},
            "args": {"description": "Its arguments, in call order.", "type": "array", "minItems": 1,
                     "maxItems": model.MAX_INPUTS, "uniqueItems": True, "items": _symbol_name("An argument.")},
            "derivatives": {
                "description": ("d/d(arg), one per argument, in the language (may call externs); null for an "
                                "argument that is only ever a number or a param."),
                "type": "array", "minItems": 1, "maxItems": model.MAX_INPUTS,
                "items": {"anyOf": [_expression("A derivative formula."), {"type": "null"}]},
            },
        },
    }


def _expression(description: str) -> dict:
    return {"description": description, "type": "string", "pattern": "\\S"}


def _name() -> dict:
    reserved = {n for n in dir(builtins) if fields._NAME_RE.match(n)}
    reserved |= {*keyword.kwlist, *keyword.softkwlist, *fields._MODULE_GLOBALS, *fields._WINDOWS_RESERVED, "tests"}
    return {
        "description": "Module file name and public function name; unique in a build.",
        "type": "string",
        "pattern": "^" + fields._NAME_RE.pattern.removesuffix("\\Z") + "$",
        "maxLength": model.MAX_NAME_CHARS,
        "not": {"anyOf": [
            {"enum": sorted(n for n in reserved if fields._NAME_RE.match(n))},
            {"pattern": "^(test|conftest$)"},  # modules pytest would collect
        ]},
    }


def _symbol_name(description: str) -> dict:
    reserved = {*fields._RESERVED_SYMBOLS, *keyword.kwlist}
    return {"description": description, "type": "string", "pattern": _IDENTIFIER, "not": {"enum": sorted(reserved)}}


def schema_text() -> str:
    """The schema as a JSON document, the same bytes for the same dbgen and Python version."""
    return json.dumps(spec_schema(), indent=2, ensure_ascii=False) + "\n"

