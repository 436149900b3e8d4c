"""Bad specs: every kind is refused with exit 2, one `SPEC_PATH:LINE: message` line per problem,
no traceback, nothing written and nothing from the spec run (docs/guide/specs.md, docs/reference/errors.md).

The corpus below is checked twice: in process, one test per kind (exact problems, bounded time),
and through the real CLI, all kinds in one folder and one run (paths, exit code, stderr format).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import run_dbgen

from codegen.build import pipeline
from codegen.errors import SpecErrors
from codegen.spec import load_spec

REPO = Path(__file__).resolve().parents[3]
CLI_TIMEOUT_S = 60
IN_PROCESS_LIMIT_S = 2.0
TORCH = torch.__version__.split("+")[0]  # as native's messages name it
_LINE_RE = re.compile(r"(?P<path>[^:]+):(?P<line>\d+): (?P<message>.+)\Z")


@dataclass(frozen=True)
class Bad:
    """One kind of bad spec: the file's content and each problem expected, as (line, fragment)."""

    kind: str
    text: str | bytes
    problems: tuple[tuple[int, str], ...]


def spec(kind: str, **keys: str | None) -> str:
    """A spec whose key lines are name 1, expr 2, inputs 3, order 4, then extra keys in the order
    given. A value is the raw YAML text after 'key: '; None leaves the key out."""
    values = {"name": kind, "expr": "x", "inputs": "[x]", "order": "1", **keys}
    return "".join(f"{key}: {value}\n" for key, value in values.items() if value is not None)


def bad(kind: str, text: str | bytes, *problems: tuple[int, str]) -> Bad:
    return Bad(kind, text, problems)


def expr(kind: str, text: str, fragment: str, inputs: str = "[x]") -> Bad:
    """A spec whose only problem is its expression (on line 2)."""
    return bad(kind, spec(kind, expr=text, inputs=inputs), (2, fragment))


def vector(kind: str, *outputs: str, **keys: str | None) -> str:
    """A spec with outputs instead of expr, of inputs x and y: name 1, inputs 2, order 3, outputs 4,
    the outputs (each 'NAME: EXPR') from line 5 in a block mapping, then extra keys."""
    block = "".join(f"\n  {output}" for output in outputs)
    return spec(kind, expr=None, inputs="[x, y]", outputs=block, **keys)


def output(kind: str, *outputs: str, fragment: str, line: int = 5) -> Bad:
    """A spec whose only problem is one of its outputs (the first, on line 5, unless ``line``)."""
    return bad(kind, vector(kind, *outputs), (line, fragment))


SPHERICAL = ("r: sqrt(x**2 + y**2 + z**2)", "theta: atan2(sqrt(x**2 + y**2), z)", "phi: atan2(y, x)")


BILLION_LAUGHS = "".join(
    f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else 'lol'}]\n" for i in range(10)
)
ONE_PARAM_TOO_MANY = "{" + ", ".join(f"p{i}: {i}" for i in range(17)) + "}"

CORPUS = [
    # required keys, unknown and repeated keys, empty values
    bad("missing_name", spec("x", name=None), (1, "missing required key 'name'; add a line such as 'name: ")),
    bad("missing_expr", spec("missing_expr", expr=None),
        (1, "missing required key 'expr'; add a line such as 'expr: x * sigmoid(x)' (or, for several outputs, an 'outputs:'")),
    bad("missing_inputs", spec("missing_inputs", inputs=None), (1, "missing required key 'inputs'; add a line")),
    bad("missing_order", spec("missing_order", order=None), (1, "missing required key 'order'; add a line")),
    bad("unknown_key", spec("unknown_key", order=None, ordr="2"),
        (1, "missing required key 'order'"), (4, "unknown key 'ordr' (did you mean 'order'?); the keys are: name,")),
    bad("unknown_key_with_newline", spec("unknown_key_with_newline") + '"bad\\nkey\\u2028": 1\n',
        (5, "unknown key 'bad\\nkey\\u2028'; the keys are")),
    bad("duplicate_key", spec("duplicate_key") + "order: 2\n", (5, "key 'order' appears twice (first on line 4); keep one")),
    bad("null_value", spec("null_value", order=""), (4, "order has no value; write one")),
    bad("null_word", spec("null_word", name="null"), (1, "name: 'null' means 'no value' in YAML; write a value")),
    bad("many_problems", spec("Many", expr="x^2", order="0", strategy="fast", colour="red"),
        (1, "name 'Many' must be lower snake_case"), (2, "write '**'"), (4, "order must be a whole number"),
        (5, "strategy 'fast' is not one of"), (6, "unknown key 'colour'")),
    # a key typo does not hide the expression's own problems (only its unknown names, which need
    # the inputs and params to be known)
    bad("key_typo_and_unknown_function", spec("key_typo_and_unknown_function", inputs=None, expr="sinn(x)", inptus="[x]"),
        (1, "missing required key 'inputs'"), (4, "unknown key 'inptus' (did you mean 'inputs'?)"),
        (2, "expr: 'sinn' is not a function of the language (did you mean 'sin'?)")),
    bad("key_typo_and_caret", spec("key_typo_and_caret", expr="k * x ^ 2", parms="{k: 2}"),
        (5, "unknown key 'parms' (did you mean 'params'?)"), (2, "expr: '^' is not power in dbgen")),
    bad("params_typo_and_unknown_function", spec("params_typo_and_unknown_function", expr="k * sinn(x)", parms="{k: 2}"),
        (5, "unknown key 'parms' (did you mean 'params'?)"), (2, "expr: 'sinn' is not a function")),
    bad("key_typo_and_unbalanced_parenthesis", spec("key_typo_and_unbalanced_parenthesis", inputs=None, expr="exp(x",
                                                   inptus="[x]"),
        (1, "missing required key 'inputs'"), (4, "unknown key 'inptus'"), (2, "expr: syntax error")),
    bad("bad_inputs_and_unknown_function", spec("bad_inputs_and_unknown_function", inputs="[x, x]", expr="sinn(x)"),
        (3, "input 'x' is listed twice"), (2, "expr: 'sinn' is not a function")),
    bad("bad_param_and_function_as_value", spec("bad_param_and_function_as_value", expr="k * exp", params="{k: one}"),
        (5, "param 'k' must be a number"), (2, "expr: 'exp' is a function; call it")),
    bad("key_typo_hides_only_unknown_names", spec("key_typo_hides_only_unknown_names", inputs=None, expr="x * zz",
                                                 inptus="[x]"),
        (1, "missing required key 'inputs'"), (4, "unknown key 'inptus'")),
    # the file and its YAML
    bad("empty_file", "", (1, "the file is empty; a spec needs at least: name, expr, inputs, order")),
    bad("comments_only", "# a spec, one day\n", (1, "the file is empty")),
    bad("not_utf8", spec("not_utf8").encode() + b"doc: caf\xe9\n", (5, "not valid UTF-8; save it as UTF-8")),
    bad("too_big", spec("too_big") + "# " + "x" * (64 * 1024) + "\n", (1, "a spec may be at most 65536")),
    bad("yaml_list", "- name: yaml_list\n- expr: x\n", (1, "a spec is a mapping of keys (name, expr, inputs, order")),
    bad("yaml_scalar", "just some text\n", (1, "a spec is a mapping of keys")),
    bad("invalid_yaml", spec("invalid_yaml", inputs="[x"), (4, "invalid YAML: expected ',' or ']', but got ':' (while parsing a flow sequence started on line 3)")),
    bad("two_documents", spec("two_documents") + "---\n" + spec("two_documents"), (5, "invalid YAML: a spec file holds one YAML document; remove the '---'")),
    bad("yaml_alias", spec("yaml_alias", name="&n yaml_alias", doc="*n"), (5, "YAML aliases (*name) are not allowed")),
    bad("alias_bomb", spec("alias_bomb") + BILLION_LAUGHS, (6, "YAML aliases (*name) are not allowed")),
    bad("yaml_too_deep", spec("yaml_too_deep", inputs="[" * 200 + "x" + "]" * 200), (3, "nested more than 20 deep")),
    bad("yaml_date", spec("x", name="2024-01-01"), (1, "name '2024-01-01' is read by YAML as a date; put it in quotes")),
    # YAML tags: never constructed, always refused
    bad("tag_apply_os_system", spec("tag_apply_os_system", expr='!!python/object/apply:os.system ["touch PWNED"]'),
        (2, "expr: YAML tag '!!python/object/apply:os.system' is not allowed; remove the tag")),
    bad("tag_apply_root", '!!python/object/apply:os.system ["touch PWNED"]\n',
        (1, "YAML tag '!!python/object/apply:os.system' is not allowed")),
    bad("tag_object_new", spec("tag_object_new", doc='!!python/object/new:os.system ["touch PWNED"]'),
        (5, "doc: YAML tag '!!python/object/new:os.system' is not allowed")),
    bad("tag_root_mapping", "--- !!python/object:codegen.spec.Spec\n" + spec("tag_root_mapping"),
        (1, "YAML tag '!!python/object:codegen.spec.Spec' is not allowed")),
    bad("tag_python_name", spec("tag_python_name", native="!!python/name:os.system ''"),
        (5, "native: YAML tag '!!python/name:os.system' is not allowed")),
    bad("tag_custom", spec("tag_custom", order="!foo 2"), (4, "order: YAML tag '!foo' is not allowed; remove the tag")),
    bad("tag_binary", spec("tag_binary", doc="!!binary aGVsbG8="), (5, "doc: YAML tag '!!binary' is not allowed")),
    bad("tag_on_list", spec("tag_on_list", inputs="!!python/tuple [x]"), (3, "inputs: YAML tag '!!python/tuple'")),
    # name
    bad("name_not_snake_case", spec("x", name="my-func"), (1, "name 'my-func' must be lower snake_case")),
    bad("name_uppercase", spec("x", name="Square"), (1, "name 'Square' must be lower snake_case")),
    bad("name_leading_underscore", spec("x", name="_square"), (1, "name '_square' must be lower snake_case")),
    bad("name_number", spec("x", name="123"), (1, "name '123' must be lower snake_case")),
    bad("name_keyword", spec("x", name="class"), (1, "name 'class' is a Python keyword; choose another name")),
    bad("name_soft_keyword", spec("x", name="match"), (1, "name 'match' is a Python keyword")),
    bad("name_builtin_print", spec("x", name="print"), (1, "would shadow the Python builtin 'print'; choose another")),
    bad("name_builtin_list", spec("x", name="list"), (1, "would shadow the Python builtin 'list'")),
    bad("name_torch", spec("x", name="torch"), (1, "name 'torch' would shadow the module 'torch'")),
    bad("name_math", spec("x", name="math"), (1, "name 'math' would shadow the module 'math'")),
    bad("name_list", spec("x", name="[a, b]"), (1, "name must be a single value, not a list")),
    bad("name_yaml_bool", spec("x", name="yes"), (1, "name 'yes' is read by YAML as true/false; put it in quotes")),
    bad("name_windows_reserved", spec("x", name="con"), (1, "name 'con' is a reserved file name on Windows")),
    bad("name_too_long", spec("x", name="a" * 101), (1, "name is 101 characters; keep it to 100")),
    # the name is a file name (OUT/NAME.py): no path may escape OUT
    bad("name_path_traversal", spec("x", name="../evil"), (1, "name '../evil' must be lower snake_case")),
    bad("name_with_slash", spec("x", name="a/b"), (1, "name 'a/b' must be lower snake_case")),
    bad("name_with_backslash", spec("x", name="'a\\b'"), (1, "must be lower snake_case")),
    bad("name_absolute_path", spec("x", name="/tmp/evil"), (1, "name '/tmp/evil' must be lower snake_case")),
    bad("name_dotted", spec("x", name="os.path"), (1, "name 'os.path' must be lower snake_case")),
    bad("name_trailing_newline", spec("x", name='"evil\\n"'), (1, "must be lower snake_case")),
    # inputs
    bad("inputs_string", spec("inputs_string", inputs="x"), (3, "inputs must be a list, e.g. [x, y]")),
    bad("inputs_mapping", spec("inputs_mapping", inputs="{x: 1}"), (3, "inputs must be a list")),
    bad("inputs_empty", spec("inputs_empty", inputs="[]"), (3, "inputs must list 1 to 8 names, not 0")),
    bad("inputs_too_many", spec("inputs_too_many", inputs="[a, b, c, d, e, f, g, h, i]"), (3, "1 to 8 names, not 9")),
    bad("inputs_duplicate", spec("inputs_duplicate", inputs="[x, x]"), (3, "input 'x' is listed twice")),
    bad("input_not_identifier", spec("input_not_identifier", inputs="[x-y]"), (3, "input 'x-y' must be an identifier")),
    bad("input_number", spec("input_number", inputs="[1]"), (3, "input '1' must be an identifier")),
    bad("input_non_ascii", spec("input_non_ascii", inputs="[λ]"), (3, "input 'λ' must be an identifier (ASCII")),
    bad("input_leading_underscore", spec("input_leading_underscore", inputs="[_x]"), (3, "must be an identifier")),
    bad("input_function_name", spec("input_function_name", inputs="[exp]"),
        (3, "input 'exp' would shadow the name 'exp' of the language")),
    bad("input_pi", spec("input_pi", inputs="[pi]"), (3, "input 'pi' would shadow")),
    bad("input_e", spec("input_e", inputs="[E]"), (3, "input 'E' would shadow")),
    bad("input_torch", spec("input_torch", inputs="[torch]"), (3, "input 'torch' would shadow")),
    bad("input_math", spec("input_math", inputs="[math]"), (3, "input 'math' would shadow")),
    bad("input_ctx", spec("input_ctx", inputs="[ctx]"), (3, "input 'ctx' would shadow")),
    bad("input_keyword", spec("input_keyword", inputs="[lambda]"), (3, "input 'lambda' is a Python keyword")),
    bad("input_nested_list", spec("input_nested_list", inputs="[[x]]"), (3, "input must be a single value, not a list")),
    bad("input_yaml_bool", spec("input_yaml_bool", inputs="[x, on]"), (3, "input 'on' is read by YAML as true/false")),
    # quoting would not help: True is a Python keyword (YAML reads it as true/false as well)
    bad("input_yaml_bool_keyword", spec("input_yaml_bool_keyword", inputs="[x, True]"), (3, "input 'True' is a Python keyword")),
    # order
    bad("order_string", spec("order_string", order='"2"'), (4, "order must be a whole number from 1 to 8, not '2' (remove")),
    bad("order_float", spec("order_float", order="2.5"), (4, "order must be a whole number from 1 to 8, not '2.5'")),
    bad("order_bool", spec("order_bool", order="true"), (4, "order must be a whole number")),
    bad("order_list", spec("order_list", order="[1]"), (4, "order must be a single value, not a list")),
    bad("order_zero", spec("order_zero", order="0"), (4, "order must be a whole number from 1 to 8, not '0'")),
    bad("order_too_high", spec("order_too_high", order="9"), (4, "from 1 to 8, not '9'")),
    bad("order_negative", spec("order_negative", order="-1"), (4, "from 1 to 8, not '-1'")),
    bad("order_huge", spec("order_huge", order="9" * 5000), (4, "order")),
    # params
    bad("params_not_mapping", spec("params_not_mapping", params="[a]"), (5, "params must be a mapping")),
    bad("param_string", spec("param_string", params="{a: '1'}"), (5, "param 'a' must be a number, not '1' (remove the quotes)")),
    bad("param_word", spec("param_word", params="{a: one}"), (5, "param 'a' must be a number, not 'one'")),
    bad("param_bool", spec("param_bool", params="{a: true}"), (5, "param 'a' must be a number")),
    bad("param_inf", spec("param_inf", params="{a: .inf}"), (5, "param 'a' must be a finite number")),
    bad("param_nan", spec("param_nan", params="{a: .nan}"), (5, "param 'a' must be a finite number")),
    bad("param_huge", spec("param_huge", params="{a: 1.0e+301}"), (5, "no larger than 1e300")),
    bad("param_huge_int", spec("param_huge_int", params="{a: 1" + "0" * 400 + "}"), (5, "param 'a' must be a finite")),
    bad("param_list", spec("param_list", params="{a: [1]}"), (5, "param 'a' must be a single value, not a list")),
    bad("param_null", spec("param_null", params="{a: }"), (5, "param 'a' has no value")),
    bad("param_clash_input", spec("param_clash_input", params="{x: 1}"), (5, "param 'x' has the name of an input")),
    bad("param_keyword", spec("param_keyword", params="{for: 1}"), (5, "param 'for' is a Python keyword")),
    bad("param_function_name", spec("param_function_name", params="{exp: 1}"), (5, "param 'exp' would shadow")),
    bad("param_not_identifier", spec("param_not_identifier", params="{a-b: 1}"), (5, "param 'a-b' must be an identifier")),
    bad("param_yaml_bool_key", spec("param_yaml_bool_key", expr="x", params="{on: 1, 'off': 2}"),
        (5, "params: key 'on' is read by YAML as true/false; put it in quotes")),
    bad("param_yaml_bool_keys", spec("param_yaml_bool_keys") + "params:\n  yes: 1\n  no: 2\n  true: 3\n",
        (6, "params: key 'yes' is read by YAML as true/false; put it in quotes"),
        (7, "params: key 'no' is read by YAML as true/false"), (8, "params: key 'true' is read by YAML as true/false")),
    bad("param_yaml_null_key", spec("param_yaml_null_key", params="{null: 1}"),
        (5, "params: key 'null' is read by YAML as 'no value'; put it in quotes")),
    bad("param_empty_key", spec("param_empty_key", params="{? : 1}"), (5, "params: a key is missing before a ':'")),
    bad("param_number_key", spec("param_number_key", params="{1: 2}"), (5, "param '1' must be an identifier")),
    bad("param_keyword_bool_key", spec("param_keyword_bool_key", params="{True: 2}"), (5, "param 'True' is a Python keyword")),
    bad("params_too_many", spec("params_too_many", params=ONE_PARAM_TOO_MANY), (5, "at most 16 params are allowed, not 17")),
    # strategy
    bad("strategy_unknown", spec("strategy_unknown", strategy="fastest"),
        (5, "strategy 'fastest' is not one of: auto, save_inputs, save_outputs, intermediates, nested")),
    bad("strategy_typo", spec("strategy_typo", strategy="nestd"), (5, "(did you mean 'nested'?)")),
    bad("strategy_list", spec("strategy_list", strategy="[auto]"), (5, "strategy must be a single value, not a list")),
    # domain
    bad("domain_non_input", spec("domain_non_input", domain="{y: [0, 1]}"),
        (5, "domain names 'y', which is not an input; the inputs are: x")),
    bad("domain_typo", spec("domain_typo", inputs="[alpha]", expr="alpha", domain="{alpah: [0, 1]}"),
        (5, "(did you mean 'alpha'?)")),
    bad("domain_yaml_bool_key", spec("domain_yaml_bool_key", expr="2 * on", inputs="['on']", domain="{on: [0, 1]}"),
        (5, "domain: key 'on' is read by YAML as true/false; put it in quotes")),
    bad("domain_yaml_bool_key_not_an_input", spec("domain_yaml_bool_key_not_an_input", domain="{on: [0, 1]}"),
        (5, "domain names 'on', which is not an input; the inputs are: x")),
    bad("top_level_yaml_bool_key", spec("top_level_yaml_bool_key") + "yes: 1\n", (5, "unknown key 'yes'; the keys are")),
    bad("domain_not_pair", spec("domain_not_pair", domain="{x: [0]}"), (5, "domain of 'x' must be [lo, hi]")),
    bad("domain_scalar", spec("domain_scalar", domain="{x: 1}"), (5, "domain of 'x' must be a list, e.g. [-2, 2]")),
    bad("domain_lo_equals_hi", spec("domain_lo_equals_hi", domain="{x: [1, 1]}"), (5, "must have lo < hi, not [1.0, 1.0]")),
    bad("domain_reversed", spec("domain_reversed", domain="{x: [2, -2]}"), (5, "must have lo < hi")),
    bad("domain_not_number", spec("domain_not_number", domain="{x: [a, 1]}"), (5, "domain of 'x' must be a number")),
    bad("domain_infinite", spec("domain_infinite", domain="{x: [-.inf, 1]}"), (5, "must be a finite number")),
    bad("domain_not_mapping", spec("domain_not_mapping", domain="[0, 1]"), (5, "domain must be a mapping")),
    # doc, native, fuse
    bad("doc_multiline", spec("doc_multiline", doc="|\n  one\n  two"), (5, "doc must be one line")),
    bad("doc_not_text", spec("doc_not_text", doc="3"), (5, "doc must be text, not a number; put it in quotes")),
    bad("doc_too_long", spec("doc_too_long", doc="a" * 501), (5, "doc is 501 characters; keep it to 500")),
    bad("doc_control_character", spec("doc_control_character", doc='"bell\\x07"'), (5, "doc contains control characters")),
    bad("native_not_torch", spec("native_not_torch", native="numpy.sin"), (5, "must be a dotted name of public names starting with 'torch.'")),
    bad("native_call", spec("native_call", native="torch.sin()"), (5, "native 'torch.sin()' must be a dotted name")),
    bad("native_bare_torch", spec("native_bare_torch", native="torch"), (5, "native 'torch' must be a dotted name")),
    bad("native_private", spec("native_private", native="torch.__builtins__.exec"), (5, "must be a dotted name of public names")),
    # native: resolved at build as the generated tests resolve it
    bad("native_typo", spec("native_typo", native="torch.squre"),
        (5, f"native: torch.squre is not defined by torch {TORCH}; did you mean torch.square?")),
    bad("native_module_typo", spec("native_module_typo", native="torch.nn.functinal.mish"),
        (5, (f"native: torch.nn.functinal.mish is not defined by torch {TORCH} (torch.nn has no 'functinal'); "
             "did you mean torch.nn.functional.mish?"))),
    bad("native_unknown", spec("native_unknown", native="torch.no_such_op"),
        (5, f"native: torch.no_such_op is not defined by torch {TORCH}; name a function torch defines, e.g. torch.exp")),
    bad("native_outside_torch", spec("native_outside_torch", native="torch.os.system"),
        (5, "native: torch.os.system is not a torch function; name one torch defines")),
    bad("native_class", spec("native_class", native="torch.nn.Mish"),
        (5, "native: torch.nn.Mish is a class, not a function; name the function form, e.g. torch.nn.functional.mish")),
    bad("native_in_place", spec("native_in_place", native="torch.exp_"),
        (5, ("native: torch.exp_ works in place (it overwrites its input, which the tests and bench reuse, and "
            "autograd refuses on a leaf); name the out-of-place op, torch.exp"))),
    bad("native_in_place_alone", spec("native_in_place_alone", native="torch.nn.init.zeros_"),
        (5, "native: torch.nn.init.zeros_ works in place")),
    bad("native_not_callable", spec("native_not_callable", native="torch.float32"),
        (5, "native: torch.float32 is not a function (it is a dtype)")),
    # native: called at build as the generated tests call it (native.probe)
    bad("native_random", spec("native_random", native="torch.nn.functional.dropout"),
        (5, "native: torch.nn.functional.dropout changes the random number generator's state; name a deterministic")),
    bad("native_random_like", spec("native_random_like", native="torch.rand_like"),
        (5, "native: torch.rand_like changes the random number generator's state")),
    bad("native_state", spec("native_state", native="torch.set_flush_denormal"),
        (5, "native: torch.set_flush_denormal fails on float64 tensors of the spec's inputs: flush_denormal expects")),
    bad("native_reduces", spec("native_reduces", native="torch.sum"),
        (5, "native: torch.sum returns a torch.float64 tensor of shape (), not one floating value per element")),
    bad("native_bool", spec("native_bool", native="torch.isnan"),
        (5, "native: torch.isnan returns a torch.bool tensor of shape (7,), not one floating value per element")),
    bad("native_arity", spec("native_arity", expr="x * y", inputs="[x, y]", native="torch.exp"),
        (5, "native: torch.exp fails on float64 tensors of the spec's inputs: exp() takes 1 positional argument")),
    bad("native_params", spec("native_params", expr="a * x", params="{a: 2}", native="torch.nn.functional.elu"),
        (6, ("native: torch.nn.functional.elu fails on float64 tensors of the spec's inputs and params: "
            "elu() got an unexpected keyword argument 'a'"))),
    bad("native_typo_with_other_problems", spec("native_typo_with_other_problems", order="0", native="torch.sinhh"),
        (4, "order must be a whole number"), (5, "did you mean torch.sinh?")),
    bad("fuse_string", spec("fuse_string", fuse='"true"'), (5, "fuse must be true or false (unquoted), not 'true'")),
    bad("fuse_number", spec("fuse_number", fuse="1"), (5, "fuse must be true or false")),
    bad("name_tests_folder", spec("name_tests_folder", name="tests"), (1, "generated tests folder")),
    bad("name_pytest_collects", spec("name_pytest_collects", name="test_swish"), (1, "one pytest collects")),
    bad("name_conftest", spec("name_conftest", name="conftest"), (1, "one pytest collects")),
    # outputs (a vector-valued function) and stack
    bad("expr_and_outputs", spec("expr_and_outputs", outputs="{y: 2 * x}"),
        (5, "a spec has expr or outputs, not both; keep expr for one output, or move it into outputs")),
    bad("outputs_before_expr", "name: outputs_before_expr\noutputs: {y: x}\nexpr: x\ninputs: [x]\norder: 1\n",
        (3, "a spec has expr or outputs, not both")),
    bad("outputs_empty", spec("outputs_empty", expr=None, outputs="{}"), (4, "outputs must map 1 to 64 names to expressions, not 0; e.g.")),
    bad("outputs_too_many", spec("outputs_too_many", expr=None, outputs="{" + ", ".join(f"o{i}: x" for i in range(65)) + "}"),
        (4, "at most 64 outputs are allowed, not 65; split the function into several specs")),
    bad("outputs_list", spec("outputs_list", expr=None, outputs="[x, 2 * x]"), (4, "outputs must be a mapping")),
    bad("outputs_null", spec("outputs_null", expr=None, outputs=""), (4, "outputs must be a mapping")),
    output("output_not_identifier", "r-x: x", fragment="output 'r-x' must be an identifier (ASCII"),
    output("output_number", "1: x", fragment="output '1' must be an identifier"),
    output("output_leading_underscore", "_r: x", fragment="output '_r' must be an identifier"),
    output("output_twice", "r: x", "r: y", line=6, fragment="outputs: key 'r' appears twice (first on line 5); keep one"),
    output("output_is_an_input", "y: x", fragment="output 'y' has the name of an input; names must be distinct, rename"),
    bad("output_is_a_param", vector("output_is_a_param", "k: x", params="{k: 2}"),
        (5, "output 'k' has the name of a param; names must be distinct, rename the output")),
    output("output_is_the_spec_name", "output_is_the_spec_name: x",
           fragment="output 'output_is_the_spec_name' has the spec's name (the public function's); rename the output"),
    output("output_function_name", "exp: x", fragment="output 'exp' would shadow the name 'exp' of the language"),
    output("output_pi", "pi: x", fragment="output 'pi' would shadow"),
    output("output_torch", "torch: x", fragment="output 'torch' would shadow"),
    output("output_keyword", "lambda: x", fragment="output 'lambda' is a Python keyword"),
    output("output_yaml_bool", "on: x", fragment="outputs: key 'on' is read by YAML as true/false; put it in quotes"),
    output("output_unknown_name", "r: x", "s: zz * y", line=6, fragment="outputs.s: undefined name 'zz'"),
    output("output_names_another_output", "r: x", "s: 2 * r", line=6,
           fragment="outputs.s: 'r' is another output; an output's expression may use only the inputs and params: write"),
    output("output_names_itself", "r: 2 * r", fragment="outputs.r: undefined name 'r'"),
    output("output_unknown_function", "r: sinn(x)",
           fragment="outputs.r: 'sinn' is not a function of the language (did you mean 'sin'?)"),
    output("output_syntax_error", "r: x", "s: x +", "t: y", line=6, fragment="outputs.s: syntax error"),
    output("output_caret", "r: x^2", fragment="outputs.r: '^' is not power in dbgen"),
    output("output_empty", "r: x", "s: ''", line=6, fragment="outputs.s is empty; write the function"),
    output("output_list", "r: [x]", fragment="outputs.r must be a single value, not a list"),
    output("output_bool", "r: true", fragment="outputs.r must be a formula such as 'sinh(x)', not true/false"),
    output("output_tag", "r: !!python/object/apply:os.system ['touch PWNED']",
           fragment="outputs.r: YAML tag '!!python/object/apply:os.system' is not allowed"),
    bad("output_bad_name_and_bad_expr", vector("output_bad_name_and_bad_expr", "r: x", "x: sinn(y)"),
        (6, "output 'x' has the name of an input"), (6, "outputs.x: 'sinn' is not a function")),
    bad("outputs_each_reported", vector("outputs_each_reported", "r: x^2", "s: y", "t: exp(zz)"),
        (5, "outputs.r: '^' is not power"), (7, "outputs.t: undefined name 'zz'")),
    bad("outputs_key_typo_hides_only_unknown_names", vector("outputs_key_typo_hides_only_unknown_names", "r: zz",
                                                            "s: sinn(x)", parms="{zz: 1}"),
        (7, "unknown key 'parms' (did you mean 'params'?)"), (6, "outputs.s: 'sinn' is not a function")),
    bad("stack_with_expr", spec("stack_with_expr", stack="true"),
        (5, "stack applies only to outputs (it stacks several outputs into one tensor); remove it, or write")),
    bad("stack_false_with_expr", spec("stack_false_with_expr", stack="false"), (5, "stack applies only to outputs")),
    bad("stack_number", vector("stack_number", "r: x", stack="3"), (6, "stack must be true or false (unquoted), not '3'")),
    bad("stack_string", vector("stack_string", "r: x", stack='"true"'), (6, "stack must be true or false (unquoted), not 'true'")),
    bad("native_with_outputs", vector("native_with_outputs", "r: x", native="torch.tanh"),
        (6, "native names one torch op for a one-output spec; a vector-valued spec's tests compare with its")),
    # expressions
    expr("expr_caret", "x^2", "'^' is not power in dbgen (it is XOR in Python); write '**'"),
    expr("expr_caret_syntax", "x^^2", "syntax error"),
    expr("expr_unknown_function", "sinn(x)", "'sinn' is not a function of the language (did you mean 'sin'?)"),
    expr("expr_undefined_name", "x + z", "undefined name 'z'; the inputs are: x (add it to inputs or params)"),
    expr("expr_min_one_argument", "min(x)", "expr: min() takes 2 arguments, got 1; write min(a, b)"),
    bad("expr_where_two_arguments", spec("expr_where_two_arguments", expr="x * where(x > a, 1)", params="{a: 1}"),
        (2, "expr: where() takes 3 arguments, got 2; write where(cond, a, b): a where cond holds, else b")),
    expr("expr_where_number_condition", "where(x, 1, 2)", "where()'s first argument must be a condition such as x > 0"),
    expr("expr_maximum", "maximum(x, 1)", "expr: 'maximum' is not in the language; write max(a, b)"),
    expr("expr_gammaln", "gammaln(x)", "expr: 'gammaln' is not in the language; write lgamma(x)"),
    expr("expr_polygamma_float", "polygamma(1.5, x)",
         "expr: polygamma()'s first argument must be a whole number from 0 to 50 written as it is, such as "
         "polygamma(1, x), not the number 1.5"),
    expr("expr_numpy_name", "arctan(x)", "expr: 'arctan' is not in the language; write atan(x)"),
    expr("expr_atan2_one_argument", "atan2(x)", "atan2() takes 2 arguments, got 1"),
    expr("expr_exp_two_arguments", "exp(x, y)", "exp() takes 1 argument, got 2", inputs="[x, y]"),
    expr("expr_keyword_argument", "exp(x=1)", "exp() takes plain positional arguments only"),
    expr("expr_star_argument", "exp(*x)", "exp() takes plain positional arguments only"),
    expr("expr_attribute", "x.real", "attribute access ('.real') is not allowed"),
    expr("expr_torch_call", "torch.exp(x)", "attribute access (a.b) is not allowed; call the language's functions by bare name"),
    expr("expr_dunder_import", "\"__import__('os').system('touch PWNED')\"", "attribute access (a.b) is not allowed"),
    expr("expr_import_call", "\"__import__('os')\"", "'__import__' is not a function of the language"),
    expr("expr_eval_call", "\"eval('x')\"", "'eval' is not a function of the language"),
    expr("expr_lambda", '"lambda: x"', "a lambda is not allowed in an expression"),
    expr("expr_lambda_call", '"(lambda: x)()"', "only the language's functions can be called"),
    expr("expr_subscript", "x[0]", "a subscript (a[i]) is not allowed"),
    expr("expr_string", "\"'abc'\"", "a string is not allowed"),
    expr("expr_is", "x is 1", "'is' is not a comparison of the language; use < <= > >= == !="),
    expr("expr_and_of_numbers", "x and x", "each operand of 'and' must be a condition such as x > 0"),
    expr("expr_not_of_a_number", "not x", "the operand of 'not' must be a condition such as x > 0"),
    expr("expr_if", "x if x else 1", "a conditional expression (a if c else b) is not allowed; write where(c, a, b)"),
    expr("expr_walrus", '"(y := x)"', "':=' is not allowed"),
    expr("expr_fstring", "\"f'{x}'\"", "an f-string is not allowed"),
    expr("expr_comprehension", '"[x for x in (1, 2)]"', "a comprehension is not allowed"),
    expr("expr_tuple", '"(x, x)"', "a tuple is not allowed"),
    expr("expr_floordiv", "x // 2", "operator '//' is not in the language; use + - * / **"),
    expr("expr_bool_literal", "x + True", "'True' is not a number"),
    expr("expr_huge_power", "2**10**10", "the exponent 10000000000 is too large; at most 1000"),
    expr("expr_power_tower", "9**9**9**9", "the exponent 387420489 is too large"),
    expr("expr_big_exponent", "x**100000", "the exponent 100000 is too large"),
    expr("expr_huge_constant_power", "2.0**1000 * 2**1000", "too large"),
    expr("expr_deep_parentheses", "(" * 500 + "x" + ")" * 500, "parentheses are nested 500 deep; at most 40"),
    expr("expr_too_long", "x" + " + x" * 1000, "the expression is 4001 characters; at most 2000"),
    expr("expr_too_many_nodes", "x" + "+x" * 900, "syntax nodes; at most 400"),
    expr("expr_5000_digits", "1" * 5000, "the expression is 5000 characters"),
    expr("expr_1500_digits", "x * " + "7" * 1500, "is too large; constants must be at most 1e300 in size"),
    expr("expr_1e999", "1e999 * x", "too large for a float"),
    expr("expr_division_by_zero", "1/0", "division by zero"),
    expr("expr_division_by_zero_symbolic", "x/(x - x)", "division by zero"),
    expr("expr_log_zero", "log(0) + x", "undefined or infinite as written"),
    expr("expr_nan_inside_a_call", "atan2(atan2(0, pi), atan2(0, 0)) + x", "undefined or infinite as written"),
    expr("expr_nan_exponent", "x ** atan2(0, 0)", "undefined or infinite as written"),
    expr("expr_slow_complex_constants", "atan2(acos(pi), acos(pi)) * x", "the constant part acos(pi) has no real value"),
    expr("expr_sqrt_negative", "sqrt(-1) * x", "complex value"),
    expr("expr_asin_outside_domain", "x + asin(2)", "the constant part asin(2) has no real value"),
    expr("expr_exp_overflow", "x * exp(1000)", "the constant part exp(1000) is too large for a float"),
    expr("expr_exp_underflow", "x * exp(-800) + exp(x - 800)", "the constant part exp(-800) is 3.7e-348"),
    expr("expr_complex_literal", "1j * x", "complex numbers are not allowed"),
    expr("expr_call_input", "x(2)", "'x' is an input or param, not a function"),
    expr("expr_function_as_value", "exp + x", "'exp' is a function; call it, as in exp(x)"),
    expr("expr_empty", '""', "expr is empty"),
    expr("expr_syntax_error", '"x +"', "syntax error"),
    expr("expr_list_value", "[x]", "expr must be a single value, not a list"),
    expr("expr_null_byte", '"x\\0"', "the expression contains the control character"),
    expr("expr_unicode_name", "λ * x", "undefined name 'λ'"),
    expr("expr_syntax_warning", "1if x else 2", "a conditional expression"),
    # SciPy's functions and declared externs
    expr("scipy_unknown_function", "hankel1(1, x)",
         "expr: 'hankel1' is not in the language; its special functions are lgamma"),
    expr("scipy_misspelled", "jvv(2, x)", "'jvv' is not a function of the language (did you mean 'jv'?)"),
    expr("scipy_order_is_an_input", "jv(x, x)",
         "expr: jv()'s first argument must be a number or a param, not x, which depends on x (dbgen does not "
         "differentiate jv in it; write jv(nu, x), the Bessel function of the first kind of real order nu)"),
    expr("scipy_arity", "kv(x)", "expr: kv() takes 2 arguments, got 1; write kv(nu, x)"),
    expr("scipy_expn_param_order", "expn(1.5, x)", "expn()'s first argument must be a whole number"),
    bad("scipy_with_save_inputs", spec("scipy_with_save_inputs", expr="jv(2, x)", strategy="save_inputs"),
        (5, ("strategy: save_inputs cannot be used with jv: it is computed outside autograd (SciPy or an extern's "
            "implementation), so its derivatives must be nested levels"))),
    bad("scipy_with_fuse", spec("scipy_with_fuse", expr="expi(x)", fuse="true"),
        (5, "fuse: true cannot compile expi: torch.compile cannot trace")),
    bad("scipy_param_named_like_the_function", spec("scipy_param_named_like_the_function", expr="x * zeta(2, x)",
                                                    params="{zeta: 0.3}"),
        (2, "'zeta' is an input or param of this spec, so the function zeta() cannot be called in it")),
    bad("extern_derivatives_count", spec("extern_derivatives_count", expr="g(x)",
                                         extern="\n  g: {impl: 'm:g', args: [u], derivatives: [u, u]}"),
        (6, "extern.g.derivatives must give 1 formula(s), one per argument (u), not 2")),
    bad("extern_bad_impl", spec("extern_bad_impl", expr="g(x)",
                                extern="\n  g: {impl: 'm.g', args: [u], derivatives: [u]}"),
        (6, "extern.g.impl must be module:callable, such as mypkg.kernels:sqexp, not 'm.g'")),
    bad("extern_missing_derivatives", spec("extern_missing_derivatives", expr="g(x)",
                                           extern="\n  g: {impl: 'm:g', args: [u]}"),
        (6, "extern.g: missing 'derivatives'; declare it as")),
    bad("extern_unknown_key", spec("extern_unknown_key", expr="g(x)",
                                   extern="\n  g: {impl: 'm:g', args: [u], derivative: [u]}"),
        (6, "extern.g: unknown key 'derivative' (did you mean 'derivatives'?)"), (6, "extern.g: missing 'derivatives'")),
    bad("extern_named_like_an_input", spec("extern_named_like_an_input", expr="x",
                                           extern="\n  x: {impl: 'm:g', args: [u], derivatives: [u]}"),
        (6, "extern 'x' has the name of an input, a param or the spec; rename it")),
    bad("extern_named_like_a_function", spec("extern_named_like_a_function", expr="x",
                                             extern="\n  exp: {impl: 'm:g', args: [u], derivatives: [u]}"),
        (6, "extern 'exp' would shadow the name 'exp' of the language")),
    bad("extern_derivative_calls_unknown", spec("extern_derivative_calls_unknown", expr="g(x)",
                                                extern="\n  g:\n    impl: m:g\n    args: [u]\n    derivatives:"
                                                       "\n      - gprime(u)"),
        (10, "extern.g.derivatives[0]: 'gprime' is not a function of the language")),
    bad("extern_derivative_not_closed", spec("extern_derivative_not_closed", expr="g(2, x)",
                                             extern="\n  g:\n    impl: m:g\n    args: [k, u]\n    derivatives:"
                                                    "\n      - null\n      - g(u, u)"),
        (11, ("extern.g.derivatives[1]: g()'s argument k must be a number or a param, not u, which depends on u "
             "(its derivative in extern.g.derivatives is null)"))),
    bad("extern_input_where_derivative_is_null", spec("extern_input_where_derivative_is_null", expr="g(x, x)",
                                                      extern="\n  g: {impl: 'm:g', args: [k, u], "
                                                             "derivatives: [null, 'g(k + 1, u)']}"),
        (2, ("expr: g()'s argument k must be a number or a param, not x, which depends on x (its derivative in "
            "extern.g.derivatives is null)"))),
    bad("extern_with_save_outputs", spec("extern_with_save_outputs", expr="g(x)", strategy="save_outputs",
                                         extern="\n  g: {impl: 'm:g', args: [u], derivatives: ['g(u)']}"),
        (5, "strategy: save_outputs cannot be used with g")),
]
KINDS = [case.kind for case in CORPUS]


def _write(folder: Path, case: Bad) -> Path:
    path = folder / f"{case.kind}.yaml"
    data = case.text if isinstance(case.text, bytes) else case.text.encode()
    path.write_bytes(data)
    return path


def _assert_problems(found: list[tuple[int, str]], case: Bad) -> None:
    """Each expected (line, fragment) matches its own problem, and no problem is left over."""
    left = list(found)
    for line, fragment in case.problems:
        match = next((p for p in left if p[0] == line and fragment in p[1]), None)
        assert match is not None, f"{case.kind}: no problem on line {line} with {fragment!r}; got {found}"
        left.remove(match)
    assert not left, f"{case.kind}: unexpected problems {left}"


def test_corpus_has_forty_distinct_kinds_with_distinct_names():
    assert len(set(KINDS)) == len(KINDS) >= 40


@pytest.mark.parametrize("case", CORPUS, ids=KINDS)
def test_bad_spec_is_refused_with_its_line_and_message(tmp_path, case):
    path = _write(tmp_path, case)
    start = time.perf_counter()
    with pytest.raises(SpecErrors) as raised:
        load_spec(path, f"specs/{case.kind}.yaml")
    assert time.perf_counter() - start < IN_PROCESS_LIMIT_S
    found = _problems_by_file([str(problem) for problem in raised.value.problems])
    assert list(found) == [f"specs/{case.kind}.yaml"]
    _assert_problems(found[f"specs/{case.kind}.yaml"], case)


def _run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DBGEN_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    return run_dbgen(args, cwd, env, timeout=CLI_TIMEOUT_S)


def _twins(folder: Path) -> None:
    """Two valid files with one name: the second (in path order) is the duplicate."""
    (folder / "twin_a.yaml").write_text(spec("twin"))
    (folder / "twin_b.yaml").write_text(spec("twin"))


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory):
    """One `dbgen build specs -o out` over every kind at once, from the folder holding specs/."""
    root = tmp_path_factory.mktemp("cli")
    folder = root / "specs" / "bad"
    folder.mkdir(parents=True)
    for case in CORPUS:
        _write(folder, case)
    _twins(folder)
    return root, _run_cli(root, "build", "specs", "-o", "out")


def _problems_by_file(lines: list[str]) -> dict[str, list[tuple[int, str]]]:
    """Parse 'PATH:LINE: message' lines (each must have that form) into the problems of each file."""
    found: dict[str, list[tuple[int, str]]] = {}
    for line in lines:
        match = _LINE_RE.fullmatch(line)
        assert match, f"not a 'PATH:LINE: message' line: {line!r}"
        found.setdefault(match["path"], []).append((int(match["line"]), match["message"]))
    return found


def test_cli_refuses_the_corpus_with_exit_2_and_writes_nothing(corpus_run):
    root, result = corpus_run
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""
    assert not (root / "out").exists()


def test_cli_reports_every_bad_file_at_once_with_relative_paths(corpus_run):
    _, result = corpus_run
    *lines, summary = result.stderr.splitlines()
    assert summary == f"dbgen: {len(lines)} problem(s); nothing was written"
    found = _problems_by_file(lines)
    expected_paths = {f"specs/bad/{kind}.yaml" for kind in KINDS} | {"specs/bad/twin_b.yaml"}
    assert set(found) == expected_paths
    for case in CORPUS:
        _assert_problems(found[f"specs/bad/{case.kind}.yaml"], case)
    assert found["specs/bad/twin_b.yaml"] == [(1, "name 'twin' is also used by specs/bad/twin_a.yaml; names must be unique")]


def test_cli_runs_nothing_from_the_specs(corpus_run):
    root, _ = corpus_run
    assert not list(root.rglob("PWNED*"))


def test_cli_check_refuses_bad_specs_with_exit_2(tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    _write(folder, CORPUS[KINDS.index("order_string")])
    result = _run_cli(tmp_path, "check", "specs", "-o", "out")
    assert result.returncode == 2
    assert result.stderr.splitlines()[0].startswith("specs/order_string.yaml:4: order must be a whole number")
    assert "Traceback" not in result.stdout + result.stderr


def test_cli_bad_build_leaves_an_existing_output_unchanged(tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "good.yaml").write_text(spec("good"))
    assert _run_cli(tmp_path, "build", "specs", "-o", "out").returncode == 0
    before = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    (folder / "good.yaml").write_text(spec("good", order="9"))
    _write(folder, CORPUS[KINDS.index("expr_caret")])
    result = _run_cli(tmp_path, "build", "specs", "-o", "out")
    assert result.returncode == 2
    assert {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()} == before
    assert "specs/good.yaml:4: order" in result.stderr and "specs/expr_caret.yaml:2: expr:" in result.stderr


def test_cli_single_bad_file_argument_is_shown_relative_to_cwd(tmp_path):
    folder = tmp_path / "deep" / "er"
    folder.mkdir(parents=True)
    path = _write(folder, CORPUS[KINDS.index("expr_unknown_function")])
    result = _run_cli(tmp_path, "build", str(path), "-o", "out")
    assert result.returncode == 2
    assert result.stderr.startswith("deep/er/expr_unknown_function.yaml:2: expr: 'sinn' is not a function")
    assert not (tmp_path / "out").exists()


# In process: finer points of reporting

def _generate_problems(folder: Path) -> list[tuple[str, int]]:
    with pytest.raises(SpecErrors) as raised:
        pipeline.generate(folder, root=folder.parent)
    return [(p.path, p.line) for p in raised.value.problems]


def test_two_bad_files_are_both_reported(tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "a.yaml").write_text(spec("a", order="0"))
    (folder / "b.yaml").write_text(spec("b", expr="sinn(x)"))
    assert _generate_problems(folder) == [("specs/a.yaml", 4), ("specs/b.yaml", 2)]


def test_duplicate_names_across_two_files_name_both_files(tmp_path):
    folder = tmp_path / "specs"
    (folder / "sub").mkdir(parents=True)
    (folder / "one.yaml").write_text(spec("same"))
    (folder / "sub" / "two.yaml").write_text(spec("same"))
    with pytest.raises(SpecErrors) as raised:
        pipeline.generate(folder, root=tmp_path)
    [problem] = raised.value.problems
    assert str(problem) == "specs/sub/two.yaml:1: name 'same' is also used by specs/one.yaml; names must be unique"


def test_invalid_inputs_do_not_cascade_into_domain_params_or_expr(tmp_path):
    path = tmp_path / "cascade.yaml"
    path.write_text(spec("cascade", inputs="[x, x]", params="{k: 1}", domain="{x: [0, 1]}", expr="x * k"))
    with pytest.raises(SpecErrors) as raised:
        load_spec(path, "cascade.yaml")
    assert [str(p) for p in raised.value.problems] == ["cascade.yaml:3: input 'x' is listed twice"]


def test_a_native_typo_is_found_when_a_rebuild_regenerates_the_spec(tmp_path):
    """A rebuild loads specs without the expensive checks (no SymPy, no torch when up to date): a spec
    it generates again must still have its native op resolved."""
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "good.yaml").write_text(spec("good", native="torch.sinh", expr="sinh(x)"))
    (folder / "typo.yaml").write_text(spec("typo", native="torch.sinhh", expr="sinh(x)"))
    with pytest.raises(SpecErrors) as raised:
        pipeline.generate(folder, root=tmp_path, reuse_from=tmp_path / "out")
    assert [str(p) for p in raised.value.problems] == [
        f"specs/typo.yaml:5: native: torch.sinhh is not defined by torch {TORCH}; did you mean torch.sinh?"
    ]


def test_an_up_to_date_rebuild_imports_neither_sympy_nor_torch(tmp_path):
    """Resolving native imports torch (a second): a rebuild that finds everything up to date needs neither
    it nor SymPy. The control run, a first build, does import torch, so the check can fail."""
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "f.yaml").write_text(spec("f", native="torch.sinh", expr="sinh(x)"))
    code = (
        "import sys\nfrom codegen.cli import run\nsys.argv = ['dbgen', 'build', 'specs', '-o', 'out']\n"
        "try:\n    run()\nexcept SystemExit as exit:\n    assert exit.code in (0, None), exit.code\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sympy', 'torch'}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=CLI_TIMEOUT_S, check=False) for _ in range(2)]
    assert [run.returncode for run in runs] == [0, 0], runs[-1].stderr
    assert "torch" in runs[0].stdout.splitlines()[-1]
    assert runs[1].stdout.splitlines()[-1] == "[]" and "(0 file(s) written)" in runs[1].stdout


def test_a_bad_key_line_is_the_line_of_the_value_in_a_block_mapping(tmp_path):
    path = tmp_path / "block.yaml"
    path.write_text(spec("block") + "params:\n  a: 1\n  b: 'two'\ndomain:\n  x: [3, 1]\n")
    with pytest.raises(SpecErrors) as raised:
        load_spec(path, "block.yaml")
    assert [(p.line, p.message.split(" must")[0]) for p in raised.value.problems] == [(7, "param 'b'"), (9, "domain of 'x'")]


# "Nothing is run": the tags and expressions that would run code leave no trace

@pytest.mark.parametrize("kind", ["tag_apply_os_system", "tag_apply_root", "tag_object_new", "tag_python_name", "expr_dunder_import"])
def test_spec_text_is_never_executed(tmp_path, monkeypatch, kind):
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a) or 0)
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: calls.append(a))
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "specs"
    folder.mkdir()
    _write(folder, CORPUS[KINDS.index(kind)])
    with pytest.raises(SpecErrors):
        pipeline.generate(folder, root=tmp_path)
    assert calls == [] and not (tmp_path / "PWNED").exists()


# Control: the validation refuses what is wrong, not what is right

def test_every_example_spec_still_loads():
    for path in sorted((REPO / "specs").glob("*.yaml")):
        assert load_spec(path, path.name).name == path.stem


def test_an_outputs_spec_loads_with_each_output_on_its_line(tmp_path):
    path = tmp_path / "to_spherical.yaml"
    path.write_text(spec("to_spherical", expr=None, inputs="[x, y, z]", order="2",
                         outputs="".join(f"\n  {o}" for o in SPHERICAL), stack="true", params="{k: 2}"))
    loaded = load_spec(path, "to_spherical.yaml")
    expected = (("r", "sqrt(x**2 + y**2 + z**2)"), ("theta", "atan2(sqrt(x**2 + y**2), z)"), ("phi", "atan2(y, x)"))
    assert (loaded.outputs, loaded.stack, loaded.expr, loaded.is_vector) == (expected, True, "", True)
    assert loaded.formulas == expected
    assert dict(loaded.lines) == {"name": 1, "inputs": 2, "order": 3, "outputs": 4, "outputs.r": 5, "outputs.theta": 6,
                                  "outputs.phi": 7, "stack": 8, "params": 9}
    assert [loaded.line_of(f"outputs.{name}") for name, _ in expected] == [5, 6, 7]
    assert loaded.line_of("expr") == 4  # a problem of "the formula", found later, points at outputs
    canonical = loaded.canonical()
    assert "expr" not in canonical
    assert (canonical["outputs"], canonical["stack"]) == ([list(pair) for pair in expected], True)


def test_outputs_keep_the_order_of_the_spec_and_stack_defaults_to_false(tmp_path):
    path = tmp_path / "order.yaml"
    path.write_text(spec("order", expr=None, outputs="{zeta: x, alpha: 2 * x, mid: 3 * x}"))
    loaded = load_spec(path, "order.yaml")
    assert [name for name, _ in loaded.outputs] == ["zeta", "alpha", "mid"]
    assert loaded.stack is False
    assert loaded.canonical()["stack"] is False


def test_sixty_four_outputs_are_allowed(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text(spec("many", expr=None, outputs="{" + ", ".join(f"o{i}: {i} * x" for i in range(64)) + "}"))
    assert len(load_spec(path, "many.yaml").outputs) == 64


def test_an_expr_spec_keeps_its_canonical_form_and_digest(tmp_path):
    """Generated files record the digest of Spec.canonical(): outputs must not change it for a spec
    with expr. The digests are those dbgen 0.9.0 gave (and recorded in generated/sinh.py)."""
    path = tmp_path / "full.yaml"
    path.write_text(spec(
        "full", expr="a * tanh(x) + eps * y", inputs="[x, y]", order="3", params="{a: 2, eps: 1e-3}",
        strategy="nested", domain="{x: [-1.5e0, 1], y: [0.5, 2]}", doc="A full spec.", native="torch.tanh", fuse="true",
    ))
    loaded = load_spec(path, "full.yaml", check_expr=False)  # the text 0.9.0 took; torch.tanh(x, y, a=, eps=) fails
    assert list(loaded.canonical()) == ["name", "expr", "inputs", "order", "params", "strategy", "domain", "doc",
                                        "native", "fuse", "explicit_domain"]
    assert (loaded.outputs, loaded.stack, loaded.is_vector) == ((), False, False)
    assert loaded.formulas == (("full", "a * tanh(x) + eps * y"),)
    assert loaded.digest("0.9.0") == "f1f126a13f4c11be3d5b753441da9ac39d3ccd80db45838257dced2c6ecfadb3"
    sinh = load_spec(REPO / "specs" / "sinh.yaml", "specs/sinh.yaml")
    assert sinh.digest("0.9.0") == "b6b08d78b2d5d7bb6921a3a29f3a090eca8204ea50f5b983a6d1fc4343d51c7f"


def test_a_spec_using_every_optional_key_loads(tmp_path):
    path = tmp_path / "full.yaml"
    path.write_text(spec(
        "full", expr="where(x > 0, x, alpha * expm1(x))", inputs="[x]", order="3", params="{alpha: 2}",
        strategy="nested", domain="{x: [-1.5e0, 1]}", doc="A full spec.", native="torch.nn.functional.elu",
        fuse="true",
    ))
    loaded = load_spec(path, "full.yaml")
    assert loaded.params == (("alpha", 2.0),)
    assert loaded.domain == (("x", (-1.5, 1.0)),)
    assert (loaded.strategy, loaded.native, loaded.fuse, loaded.doc) == (
        "nested", "torch.nn.functional.elu", True, "A full spec.")
