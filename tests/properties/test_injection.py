"""Nothing in a spec can break out of the generated code.

Docstrings (`doc`), the spec file's path (in every header), names, numbers (params and domain) and
`native` reach the generated files. For each hostile value the spec is either refused with a clean
`path:line:` problem, or it builds, and then: every file compiles; its code, docstrings blanked (and,
for numbers, number constants zeroed), is exactly the code of a plain spec's build, so the value
changed nothing but a docstring, a comment or a constant; the value reads back exactly (docstring
text, header line, signature default, PARAMS/DOMAIN literals); and the module imports and computes.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers import assert_chains_close, budget, derivative_chain, import_path, sample

from codegen import __version__
from codegen.build import pipeline, write
from codegen.errors import SpecErrors
from codegen.language import CONSTANT_NAMES, FUNCTION_ARITY

REPO = Path(__file__).resolve().parents[2]
PLAIN = "name: inj\nexpr: a * sin(x) * exp(y) + tanh(x * y)\ninputs: [x, y]\nparams: {a: 0.5}\norder: 2\n"
EXTRA_LINE = 6  # the line of a key appended to PLAIN
STRATEGIES = ("save_inputs", "save_outputs", "intermediates", "nested")


def reference(x, y, a=0.5):
    return a * torch.sin(x) * torch.exp(y) + torch.tanh(x * y)


def generate(folder: Path, text: str | bytes, file_name: str = "inj.yaml") -> dict[str, str]:
    """The files a build of one spec file writes (relative path -> content); raises SpecErrors."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return pipeline.generate(path, root=folder)


def code_shape(source: str, numbers: bool = True) -> str:
    """The code's syntax tree with every docstring blanked (and, unless ``numbers``, every number,
    signed or not, made 0, and the table of exact values, whose rows depend on the params' values,
    emptied): what remains is what runs."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and _is_docstring(body[0]):
            body[0].value.value = ""
        if not numbers and isinstance(node, ast.keyword) and node.arg == "exact":
            node.value = ast.Tuple(elts=[], ctx=ast.Load())
    return ast.dump(tree if numbers else _ZeroNumbers().visit(tree))


class _ZeroNumbers(ast.NodeTransformer):
    def visit_Constant(self, node):
        return ast.Constant(0) if type(node.value) in (int, float) else node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        number = isinstance(node.operand, ast.Constant) and node.operand.value == 0
        return node.operand if number and isinstance(node.op, (ast.USub, ast.UAdd)) else node


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)


@pytest.fixture(scope="module")
def plain_files(tmp_path_factory) -> dict[str, str]:
    return generate(tmp_path_factory.mktemp("plain"), PLAIN)


def assert_same_code(files: dict[str, str], plain: dict[str, str], numbers: bool = True) -> None:
    assert sorted(files) == sorted(plain)
    for rel, source in files.items():
        compile(source, rel, "exec")
        assert code_shape(source, numbers) == code_shape(plain[rel], numbers), f"{rel}: the code itself changed"


def assert_refused_on_line(folder: Path, text: str | bytes, line: int, fragment: str, file_name: str = "inj.yaml"):
    with pytest.raises(SpecErrors) as raised:
        generate(folder, text, file_name)
    messages = [str(p) for p in raised.value.problems]
    assert all(len(m.splitlines()) == 1 and m.isprintable() for m in messages), messages
    assert any(p.line == line and fragment in p.message for p in raised.value.problems), messages


def import_built(folder: Path, files: dict[str, str], name: str = "inj"):
    write.write_files(folder / "out", files)
    return import_path(folder / "out" / f"{name}.py")


def _check_value(module, name: str = "inj") -> None:
    x, y = sample((3, 4), -1, 1, seed=1), sample((4,), -1, 1, seed=2)
    torch.testing.assert_close(getattr(module, name)(x, y), reference(x, y))


# doc: a docstring, escaped ------------------------------------------------------------------------

# YAML scalar text -> the doc as it must read back in the docstrings
DOCS_KEPT = {
    "triple_double_quotes": ("'x\"\"\" + __import__(\"os\").system(\"touch PWNED\") + \"\"\"'",
                             'x""" + __import__("os").system("touch PWNED") + """'),
    "triple_single_quotes": ("\"x''' + __import__('os').system('touch PWNED') + '''\"",
                             "x''' + __import__('os').system('touch PWNED') + '''"),
    "ends_with_quote": ("'ends with a quote\"'", 'ends with a quote"'),
    "starts_with_quotes": ("'\"\"\"starts'", '"""starts'),
    "many_quotes": ("'\"\"\"\"\"\"\"\"\"\"'", '""""""""""'),
    "ends_with_backslash": ("'ends with a backslash \\'", "ends with a backslash \\"),
    "backslash_quotes": ("'\\\"\"\"'", '\\"""'),
    "escape_sequences": ("'\\N{BULLET} \\u0041 \\x41 \\n \\0'", "\\N{BULLET} \\u0041 \\x41 \\n \\0"),
    "jinja": ("'{{ spec.name }} {% if true %}x{% endif %} {# c #} {{ \"\"\"\" }}'",
              '{{ spec.name }} {% if true %}x{% endif %} {# c #} {{ """" }}'),
    "comment_tricks": ("'# -*- coding: latin-1 -*- # noqa'", "# -*- coding: latin-1 -*- # noqa"),
    "emoji_and_combining": ("'emoji 😀, e\u0301, 𝔘nicode, عربى'", "emoji 😀, e\u0301, 𝔘nicode, عربى"),
    "format_braces": ("'{0} {__class__} %s %(x)s'", "{0} {__class__} %s %(x)s"),
}
# YAML scalar text (double-quoted escapes put the characters in) -> refused: not one printable line
DOCS_REFUSED = {
    "newline": ('"first\\nsecond"', "doc must be one line"),
    "carriage_return": ('"first\\rsecond"', "doc must be one line"),
    "line_separator": ('"a\\u2028b"', "doc contains control characters"),
    "paragraph_separator": ('"a\\u2029b"', "doc contains control characters"),
    "next_line": ('"a\\x85b"', "doc contains control characters"),
    "rtl_override": ('"safe\\u202e\\u2066evil"', "doc contains control characters"),
    "zero_width": ('"a\\u200bb\\ufeff"', "doc contains control characters"),
    "nul": ('"a\\0b"', "doc contains control characters"),
    "form_feed": ('"a\\fb"', "doc contains control characters"),
    "escape": ('"a\\eb"', "doc contains control characters"),
    "tab": ('"a\\tb"', "doc contains control characters"),
    "block_scalar": ("|\n  one\n  \"\"\"two", "doc must be one line"),
}


@pytest.mark.parametrize("kind", budget(sorted(DOCS_KEPT)))
def test_doc_stays_inside_its_docstrings(tmp_path, plain_files, kind):
    raw, doc = DOCS_KEPT[kind]
    files = generate(tmp_path, PLAIN + f"doc: {raw}\n")
    assert_same_code(files, plain_files)
    module = import_built(tmp_path, files)
    assert module.inj.__doc__.splitlines()[0] == doc
    assert doc not in module.__doc__  # the module docstring has the formula; the doc is the function's
    _check_value(module)
    assert not list(tmp_path.rglob("PWNED*"))


@pytest.mark.parametrize("kind", sorted(DOCS_REFUSED))
def test_doc_that_is_not_one_printable_line_is_refused(tmp_path, kind):
    raw, fragment = DOCS_REFUSED[kind]
    assert_refused_on_line(tmp_path, PLAIN + f"doc: {raw}\n", EXTRA_LINE, fragment)


# The spec's path: in every file's header comment ------------------------------------------------

FILE_NAMES_KEPT = ['we"ird.yaml', "it's.yaml", '""".yaml', "{{ x }}.yaml", "{% raw %}.yaml", "a#b.yaml",
                   "sp ace.yaml", "back\\slash.yaml", "%s.yaml", "😀.yaml", "x = 1; import os.yaml"]
FILE_NAMES_REFUSED = {
    "newline": "a\nimport os.yaml", "carriage_return": "a\rb.yaml", "line_separator": "a\u2028b.yaml",
    "next_line": "a\x85b.yaml", "rtl_override": "a\u202eb.yaml", "zero_width": "a\u200bb.yaml",
    "not_utf8": os.fsdecode(b"a\xffb.yaml"),
}


@pytest.mark.parametrize("file_name", budget(FILE_NAMES_KEPT))
def test_spec_path_stays_inside_the_header_comment(tmp_path, plain_files, file_name):
    files = generate(tmp_path, PLAIN, file_name)
    assert_same_code(files, plain_files)
    for rel, source in files.items():
        first, second, *_ = source.split("\n")
        assert first == f"# @generated by dbgen {__version__} from {file_name}. DO NOT EDIT.", rel
        assert second.startswith("# spec-sha256: "), rel
    _check_value(import_built(tmp_path, files))


@pytest.mark.parametrize("kind", sorted(FILE_NAMES_REFUSED))
def test_spec_path_with_line_breaks_or_invisible_characters_is_refused(tmp_path, kind):
    try:
        (tmp_path / FILE_NAMES_REFUSED[kind]).touch()
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system cannot hold that name")
    with pytest.raises(SpecErrors) as raised:
        generate(tmp_path, PLAIN, FILE_NAMES_REFUSED[kind])
    [problem] = raised.value.problems
    assert "the file name" in problem.message and str(problem).isprintable()


def test_cli_refuses_a_spec_file_name_that_is_not_utf8_and_writes_nothing(tmp_path):
    """It used to exit 3 (UnicodeEncodeError writing the header) after writing __init__.py."""
    name = os.fsdecode(b"a\xffb.yaml")
    try:
        (tmp_path / "specs").mkdir()
        (tmp_path / "specs" / name).write_text(PLAIN)
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system cannot hold that name")
    env = {k: v for k, v in os.environ.items() if k != "DBGEN_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run([sys.executable, "-m", "codegen", "build", "specs", "-o", "out"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("specs/a\\udcffb.yaml:1: the file name is not valid UTF-8")
    assert not (tmp_path / "out").exists()


# Numbers: params and domain ------------------------------------------------------------------------

# YAML number text -> the float it must be, bit for bit (the sign of -0.0 included)
NUMBERS_KEPT = {
    "1e300": 1e300, "-1e300": -1e300, "-0.0": -0.0, "1e-320": 1e-320, "5e-324": 5e-324,
    "123456789012345678901234567890": 1.2345678901234568e29, "0x1F": 31.0, "010": 10.0,
    "0o17": 15.0, "+.5": 0.5, "-.5e-3": -0.0005, "1.": 1.0, "2E+2": 200.0, "0.1": 0.1,
}
NUMBERS_REFUSED = {"1e301": "no larger than 1e300", "1e400": "must be a finite", ".inf": "must be a finite",
                   "-.inf": "must be a finite", ".nan": "must be a finite", "'1'": "remove the quotes",
                   "0x": "must be a number", "1e": "must be a number", "1e300000": "must be a finite",
                   "1_000": "only in YAML 1.1", "1:30": "only in YAML 1.1"}


def _same_float(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _literal(source: str, name: str):
    """The literal given as ``name=`` to the test file's ``CASE = checks.Case(...)``."""
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign) and [t.id for t in statement.targets if isinstance(t, ast.Name)] == ["CASE"]:
            for keyword in statement.value.keywords:
                if keyword.arg == name:
                    return ast.literal_eval(keyword.value)
    raise AssertionError(f"no CASE = checks.Case(..., {name}=...) in the file")


@pytest.mark.parametrize("raw", budget(sorted(NUMBERS_KEPT)))
def test_param_numbers_are_written_exactly(tmp_path, raw):
    """However a number is spelled, the code is that of its value written plainly (a param's value
    may change the code: the accuracy oracle measures at it)."""
    value = NUMBERS_KEPT[raw]
    files = generate(tmp_path, PLAIN.replace("{a: 0.5}", f"{{a: {raw}}}"))
    plainly = generate(tmp_path / "plainly", PLAIN.replace("{a: 0.5}", f"{{a: {value!r}}}"))
    assert_same_code(files, plainly, numbers=False)
    assert _same_float(_literal(files["tests/test_inj.py"], "params")["a"], value)
    module = import_built(tmp_path, files)
    assert _same_float(inspect.signature(module.inj).parameters["a"].default, value)


@pytest.mark.parametrize("raw", sorted(NUMBERS_REFUSED))
def test_param_numbers_out_of_range_are_refused(tmp_path, raw):
    assert_refused_on_line(tmp_path, PLAIN.replace("{a: 0.5}", f"{{a: {raw}}}"), 4, NUMBERS_REFUSED[raw])


DOMAINS_KEPT = {"[-0.0, 1e-320]": (-0.0, 1e-320), "[-1e300, 1e300]": (-1e300, 1e300), "[5e-324, 1e-300]": (5e-324, 1e-300),
                "[0x10, 0x20]": (16.0, 32.0), "[-010, 1e3]": (-10.0, 1000.0)}


@pytest.mark.parametrize("raw", sorted(DOMAINS_KEPT))
def test_domain_numbers_are_written_exactly(tmp_path, raw):
    """As params: the code is that of the domain written plainly (a domain through tanh's tails
    changes it, planning._with_exact_tails)."""
    lo, hi = DOMAINS_KEPT[raw]
    files = generate(tmp_path, PLAIN + f"domain: {{x: {raw}}}\n")
    plainly = generate(tmp_path / "plainly", PLAIN + f"domain: {{x: [{lo!r}, {hi!r}]}}\n")
    test_file = files["tests/test_inj.py"]
    compile(test_file, "test_inj.py", "exec")
    domain, points = _literal(test_file, "domain"), _literal(test_file, "stability_points")
    assert _same_float(domain["x"][0], lo) and _same_float(domain["x"][1], hi)
    assert _same_float(points["x"][0], lo) and _same_float(points["x"][-1], hi)
    assert code_shape(files["inj.py"]) == code_shape(plainly["inj.py"])


# native: a dotted name, written into a string literal ---------------------------------------------

NATIVES_REFUSED = ['"torch.sin\\"; import os; \\""', "torch.sin()", "'torch.sin # x'", '"torch.sin\\n"',
                   "'torch.{{ x }}'", "torch.sín", '"torch.sin\\u2028"', "torch..sin", "torch.sin.", "os.system",
                   "'torch.sin; import os'", "'torch.sin\\\\'"]


@pytest.mark.parametrize("raw", NATIVES_REFUSED)
def test_native_that_is_not_a_dotted_torch_name_is_refused(tmp_path, raw):
    assert_refused_on_line(tmp_path, PLAIN + f"native: {raw}\n", EXTRA_LINE, "native")


def test_native_is_written_as_a_plain_string_literal(tmp_path):
    one_input = "name: inj\nexpr: log(1 + exp(x))\ninputs: [x]\norder: 2\n"  # softplus(x): a native must fit
    files = generate(tmp_path, one_input + "native: torch.nn.functional.softplus\n")
    assert _literal(files["tests/test_inj.py"], "native") == "torch.nn.functional.softplus"
    assert code_shape(files["inj.py"]) == code_shape(generate(tmp_path / "plain", one_input)["inj.py"])


# Names: any name the generated code uses itself is fine for an input or a param ------------------

def _names_in(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def _allowed_symbol(name: str) -> bool:
    """Whether a spec may name an input or param so (README: ASCII identifiers that are not keywords,
    the language's function names, pi, E, the generated module's imports or ctx)."""
    import keyword

    reserved = set(FUNCTION_ARITY) | set(CONSTANT_NAMES) | {"torch", "math", "functools", "warnings", "ctx"}
    return name.isascii() and name[:1].isalpha() and name.isidentifier() and not keyword.iskeyword(name) \
        and name not in reserved


@pytest.fixture(scope="module")
def generated_code_names(tmp_path_factory) -> list[str]:
    """Every name the generated module and test file use, under every strategy, fused or not."""
    folder = tmp_path_factory.mktemp("names")
    names: set[str] = set()
    for strategy in STRATEGIES:
        for fuse in ("false", "true"):
            spec = PLAIN.replace("order: 2", "order: 2\nstrategy: " + strategy) + f"fuse: {fuse}\n"
            for rel, source in generate(folder / f"{strategy}_{fuse}", spec).items():
                if not rel.endswith("_dbgen_checks.py"):  # the tests' shared checks hold no name of the spec's
                    names |= _names_in(source)
    return sorted(n for n in names if _allowed_symbol(n) and n not in ("x", "y", "a"))


INPUT_PACK = 7  # each build takes x and up to 7 names as inputs (8 at most)
PARAM_PACK = 16  # and up to 16 names as params


def test_the_generated_code_uses_many_names(generated_code_names):
    """A control: the harvest finds the generated code's locals, classes, helpers and imports."""
    assert {"grad_out", "output", "Inj", "InjForCompile", "generated", "composed", "CASE"} \
        <= set(generated_code_names)
    assert len(generated_code_names) > 80  # the tests' checks, shared in _dbgen_checks.py, no longer count


def _packs(names: list[str], size: int):
    """Consecutive packs of ``size`` names, each with a strategy in turn (all four take ~4x longer)."""
    for number, index in enumerate(range(0, len(names), size)):
        yield index, names[index:index + size], STRATEGIES[number % len(STRATEGIES)]


@pytest.mark.slow
def test_the_generated_codes_own_names_can_be_inputs(tmp_path, generated_code_names):
    """x and 7 of those names as inputs: the generated code renames its own locals, and the
    derivatives stay right."""
    for index, names, strategy in _packs(generated_code_names, INPUT_PACK):
        expr = f"sin(x) * tanh({' + '.join(names)}) + {names[0]}**2 * x"
        spec = f"name: inj\nexpr: {expr}\ninputs: [x, {', '.join(names)}]\norder: 2\nstrategy: {strategy}\n"
        module = import_built(tmp_path / str(index), generate(tmp_path / str(index), spec))
        inputs = [sample((3,), -1, 1, seed=i) for i in range(len(names) + 1)]

        def ref(x, *others):
            return torch.sin(x) * torch.tanh(sum(others)) + others[0] ** 2 * x

        assert_chains_close(derivative_chain(module.inj, inputs, 2, seed=3), derivative_chain(ref, inputs, 2, seed=3))


def test_the_generated_codes_own_names_can_be_params(tmp_path, generated_code_names):
    """16 of those names as params, with defaults and passed by keyword."""
    for index, names, strategy in _packs(generated_code_names, PARAM_PACK):
        values = {name: 0.1 * (i + 1) for i, name in enumerate(names)}
        expr = " + ".join(f"{name} * sin({i + 1} * x + y)" for i, name in enumerate(names))
        params = ", ".join(f"{name}: {value}" for name, value in values.items())
        spec = f"name: inj\nexpr: {expr}\ninputs: [x, y]\nparams: {{{params}}}\norder: 2\nstrategy: {strategy}\n"
        module = import_built(tmp_path / str(index), generate(tmp_path / str(index), spec))
        inputs = [sample((3,), -1, 1, seed=1), sample((3,), -1, 1, seed=2)]

        def ref(x, y, values=values):
            return sum(v * torch.sin((i + 1) * x + y) for i, v in enumerate(values.values()))

        assert_chains_close(derivative_chain(module.inj, inputs, 2, seed=3), derivative_chain(ref, inputs, 2, seed=3))
        changed = {name: -value for name, value in values.items()}
        torch.testing.assert_close(module.inj(*inputs, **changed), -ref(*inputs))


# The spec's name: the public function shares the module's namespace -----------------------------

def _module_globals(source: str) -> set[str]:
    names = set()
    for statement in ast.parse(source).body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in statement.names}
        elif isinstance(statement, ast.Assign):
            names |= {t.id for t in statement.targets if isinstance(t, ast.Name)}
        elif isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
            names.add(statement.name)
    return names


def test_every_module_global_a_spec_could_name_is_tested(tmp_path):
    """The spec names tested below cover every fused-module global a name may take (a new import fails here)."""
    files = generate(tmp_path, PLAIN + "fuse: true\n")
    names = {n for n in _module_globals(files["inj.py"]) if n.islower() and not n.startswith("_")} - {"inj"}
    assert names - {"math", "torch"} <= {"functools", "warnings"}  # all four are refused as names


@pytest.mark.parametrize("name", ["functools", "warnings"])
def test_names_of_the_fused_modules_imports_are_refused(tmp_path, name):
    with pytest.raises(SpecErrors, match=f"would shadow the module '{name}'"):
        generate(tmp_path, PLAIN.replace("name: inj", f"name: {name}") + "fuse: true\n")


@pytest.mark.parametrize("name", ["inj"])
def test_a_fused_module_still_falls_back_to_eager(tmp_path, monkeypatch, name):
    files = generate(tmp_path, PLAIN.replace("name: inj", f"name: {name}") + "fuse: true\n")
    module = import_built(tmp_path, files, name)

    def failing_compile(function, **kwargs):
        def run(*args):
            raise RuntimeError("no C++ compiler")
        return run

    def failing_standalone(graph, example, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", failing_compile)
    monkeypatch.setattr(importlib.import_module("torch._inductor"), "standalone_compile", failing_standalone)
    x, y = sample((3, 4), -1, 1, seed=1).detach(), sample((4,), -1, 1, seed=2).detach()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(module, name)(x, y)
    torch.testing.assert_close(value, reference(x, y))
    assert any("torch.compile failed" in str(w.message) for w in caught)


@pytest.mark.parametrize("name", budget(["x", "a", "generated", "composed", "make_inputs", "derivative_chain", "pytest",
                                         "sys", "forward", "backward", "setup_context", "jvp", "apply"]))
def test_spec_names_that_the_generated_code_uses_elsewhere(tmp_path, name):
    """The name of an input, of a param, or of something in the test file or the Functions."""
    files = generate(tmp_path, PLAIN.replace("name: inj", f"name: {name}"))
    for rel, source in files.items():
        compile(source, rel, "exec")
    _check_value(import_built(tmp_path, files, name), name)


@pytest.mark.parametrize("strategy", ["save_inputs", "nested"])
def test_a_param_named_like_a_ctx_attribute_does_not_replace_it(tmp_path, strategy):
    """Params are kept on ctx; ctx.apply = 0.5 or ctx.saved_tensors = 0.5 would break backward."""
    names = ["apply", "saved_tensors", "needs_input_grad", "name", "metadata"]
    expr = " + ".join(f"{name} * sin({i + 1} * x)" for i, name in enumerate(names))
    params = ", ".join(f"{name}: {0.1 * (i + 1)}" for i, name in enumerate(names))
    spec = f"name: ctxnames\nexpr: {expr}\ninputs: [x]\nparams: {{{params}}}\norder: 2\nstrategy: {strategy}\n"
    module = import_built(tmp_path, generate(tmp_path, spec, "ctxnames.yaml"), "ctxnames")
    x = sample((4,), -1, 1, seed=1)

    def ref(x):
        return sum(0.1 * (i + 1) * torch.sin((i + 1) * x) for i in range(len(names)))

    assert_chains_close(derivative_chain(module.ctxnames, [x], 3, seed=2), derivative_chain(ref, [x], 3, seed=2))


# Folder names: the output's path is written into the generated tests' _PATH line as data --------

# Output folder names that would break or inject into the _PATH line if written unescaped (with the
# tests set apart by --tests-out, the tests find the module by the output's path)
FOLDER_NAMES = {
    "code": 'o"+__import__("os").system("touch PWNED")+"ut',
    "triple_quotes": 'x""" + __import__("os").system("touch PWNED") + """',
    "backslash": "back\\slash",
    "trailing_backslash": "ends\\",
    "newline": "a\nimport os",
    "not_utf8": os.fsdecode(b"a\xffb"),
    "single_quote": "it's",
    "line_separator": "a\u2028b",
    "jinja": "{{ x }}",
    "emoji": "😀",
}


@pytest.mark.parametrize("kind", sorted(FOLDER_NAMES))
def test_output_folder_names_are_written_into_the_tests_as_data(tmp_path, kind):
    """The _PATH expression holds nothing but the path's parts as string constants, and leads to
    the output, whatever characters its folder's name holds."""
    out = tmp_path / FOLDER_NAMES[kind] / "out"
    tests = tmp_path / "tests" / "gen"
    code = f"_PATH = {pipeline.tests_layout(out, tests).module_path('inj')}\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # '\s' reads as a backslash, for now, with a warning: not as written
        assert write.tested_folder(tests / "test_dbgen_inj.py", code) == Path(os.path.realpath(out)), code


@pytest.mark.slow
def test_a_hostile_output_folder_name_runs_nothing_and_breaks_no_test_file(tmp_path):
    """Built as users build: the generated tests collect and lead to the module, the code in the
    folder's name never runs (not when pytest collects, not when dbgen checks), and a check of
    a file that would run it cannot call it up to date."""
    marker = tmp_path / "PWNED"
    out = f'o"+__import__("pathlib").Path({str(marker)!r}).touch()+"ut'
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "inj.yaml").write_text(PLAIN)
    env = {k: v for k, v in os.environ.items() if k != "DBGEN_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    for command in (["build"], ["check"]):
        result = subprocess.run([sys.executable, "-m", "codegen", *command, "specs", "-o", out, "--tests-out", "tests/gen"],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
    test_file = tmp_path / "tests" / "gen" / "test_dbgen_inj.py"
    source = test_file.read_text(encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile(source, str(test_file), "exec")
        assert write.tested_folder(test_file, source) == Path(os.path.realpath(tmp_path / out))
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                str(test_file)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                               check=False)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert not marker.exists(), "code in the output folder's name ran"
