"""Parser fuzzing: random and mutated expressions and YAML documents are either refused with clean
`path:line: message` problems or load into a spec that builds. Nothing else may happen: no other
exception type, no hang (each example runs under a time limit), and no code run from the spec text
(eval, exec, compile to code, sympify or parse_expr of text, os.system and subprocesses all refuse
while a spec is loaded).

Mutations start from the bundled specs/*.yaml: byte flips, truncations, deletions, and insertions of
YAML syntax (tags such as !!python/object, anchors and aliases, flow brackets, tabs, directives,
document markers, BOMs, line separators, non-UTF-8 bytes). A fixed batch of them also goes through
the real CLI: exit 2, one `path:line:` line per problem, no traceback, nothing written."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import sympy
import sympy.parsing.sympy_parser
import yaml
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from no_code_runs import _CodeRun, nothing_runs

import codegen.language.expr  # noqa: F401 - imported here, as importing compiles code, which the guard refuses
from codegen.build import pipeline
from codegen.errors import SpecErrors
from codegen.language import CONSTANT_NAMES, FUNCTION_ARITY
from codegen.spec import KEYS, load_spec

REPO = Path(__file__).resolve().parents[2]
BUNDLED = {p.name: p.read_bytes() for p in sorted((REPO / "specs").glob("*.yaml"))}
SHOWN = "specs/fuzz.yaml"
LOAD_LIMIT_S = 5.0  # loading a spec (YAML and expression) is bounded: far below this
BUILD_LIMIT_S = 60.0  # a build at order <= 2 of a bounded expression
_LINE_RE = re.compile(r"(?P<path>[^:]+):(?P<line>\d+): (?P<message>\S.*)\Z")


def scaled(examples: int) -> int:
    """A test's own budget, scaled by the profile (ci: 100 -> as written; long: 2000 -> 20x)."""
    return max(1, examples * settings.default.max_examples // 100)


# Guards: a time limit, and nothing from the spec run -------------------------------------------

class _Timeout(BaseException):
    """Raised by the alarm; a BaseException, so no `except Exception` in dbgen can swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    """Fail the example if the block takes more than ``seconds`` (where SIGALRM exists)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum, frame):
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Timeout:
        raise AssertionError(f"{what} took more than {seconds} s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# The property: a clean refusal or a spec that builds ---------------------------------------------

def assert_clean_problems(errors: SpecErrors, shown: str, data: bytes) -> None:
    """Every problem names the file, a line inside it, and is exactly one printable line."""
    last_line = data.count(b"\n") + 2  # an error at the end of the file may point just past it
    assert errors.problems, "SpecErrors without problems"
    for problem in errors.problems:
        line = str(problem)
        assert len(line.splitlines()) == 1 and line.isprintable(), f"not one printable line: {line!r}"
        match = _LINE_RE.fullmatch(line)
        assert match and match["path"] == shown, f"not '{shown}:LINE: message': {line!r}"
        assert 1 <= problem.line <= last_line, f"line {problem.line} outside the file ({last_line - 1} lines): {line!r}"


def check_document(data: bytes, build: bool = True) -> None:
    """Load ``data`` as a spec file: it is refused cleanly, or it loads and (with ``build``) builds."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.yaml"
        path.write_bytes(data)
        try:
            with time_limit(LOAD_LIMIT_S, "loading the spec"), nothing_runs():
                spec = load_spec(path, SHOWN)
        except SpecErrors as errors:
            assert_clean_problems(errors, SHOWN, data)
            event("refused")  # the events show in --hypothesis-show-statistics
            return
    event("loaded and built" if build else "loaded")
    if build:
        build_bounded(spec, data)


def build_bounded(spec, data: bytes) -> None:
    """Generate the spec's files (at order <= 2, to bound the symbolic work): they must compile."""
    spec = dataclasses.replace(spec, order=min(spec.order, 2))
    try:
        with time_limit(BUILD_LIMIT_S, "building the spec"):
            files = pipeline.generate_one(spec)
    except SpecErrors as errors:  # a problem only the build finds is still a clean problem
        assert_clean_problems(errors, SHOWN, data)
        return
    for rel, source in files.items():
        compile(source, rel, "exec")


# Expressions -------------------------------------------------------------------------------------

# Tokens of the language (a soup of them is often a valid, odd expression: x**-2**3, exp(exp(x)), ...)
LANGUAGE_TOKENS = [*FUNCTION_ARITY, *CONSTANT_NAMES, "x", "y", "a", "(", ")", ",", " ", "+", "-", "*", "/", "**",
                   "0", "1", "2.5", "1e-3", "1e999", "10**10", "999"]
HOSTILE_TOKENS = ["^", ".", "[", "]", "'", '"', ":", "=", "lambda", "__import__", "os", "system", "eval", "j", "_",
                  "λ", "\t", "\n", "\\", "#", "{", "}", "@", "%", "//", "<", "not", "if", "\x00", "\u2028"]
TOKENS = LANGUAGE_TOKENS + HOSTILE_TOKENS


def expression_spec(text: str) -> bytes:
    spec = {"name": "fuzz", "expr": text, "inputs": ["x", "y"], "params": {"a": 0.5}, "order": 1}
    return yaml.safe_dump(spec, allow_unicode=True).encode("utf-8", "surrogatepass")


@settings(max_examples=scaled(300))
@given(text=st.lists(st.sampled_from(LANGUAGE_TOKENS) | st.sampled_from(TOKENS), max_size=25).map("".join))
def test_token_soup_expressions_are_refused_cleanly_or_build(text):
    check_document(expression_spec(text))


@settings(max_examples=scaled(200))
@given(text=st.text(max_size=60))
def test_arbitrary_text_expressions_are_refused_cleanly_or_build(text):
    check_document(expression_spec(text))


def _grammar(children):
    """One level of the language's grammar over ``children`` (expression strategies)."""
    unary = st.tuples(st.sampled_from(sorted(name for name, n in FUNCTION_ARITY.items() if n == 1)), children)
    return (unary.map(lambda t: f"{t[0]}({t[1]})")
            | st.tuples(children, children).map(lambda t: f"atan2({t[0]}, {t[1]})")
            | st.tuples(children, st.sampled_from(["+", "-", "*", "/", "**"]), children).map(" ".join)
            | children.map(lambda e: f"-({e})") | children.map(lambda e: f"({e})"))


# Grammatical expressions, with no care for domains: exp(exp(E**10)), asin(2 + x), 1/(x - x), x**-1e999 ...
GRAMMAR_EXPRESSIONS = st.recursive(st.sampled_from(["x", "y", "a", "pi", "E", "0", "1", "2", "0.5", "1e-3", "10"]),
                                   _grammar, max_leaves=8)


@settings(max_examples=scaled(100))
@given(text=GRAMMAR_EXPRESSIONS)
# found by the long profile: atan2(0, 0) is NaN, which SymPy then compared (TypeError, exit 3);
# atan2 of complex constants took SymPy 100 s
@example(text="atan2(atan2(0, pi), atan2(0, 0))")
@example(text="x ** atan2(0, 0)")
@example(text="-(atan2(acos(pi), acos(pi)))")
def test_grammatical_expressions_are_refused_cleanly_or_build(text):
    check_document(expression_spec(text))


VALID_EXPRESSIONS = ["x * tanh(softplus(x))", "atan2(y, x) + a * erf(x)**2", "-x**2 / (1 + exp(-y))",
                     "sqrt(1 + x**2) * log1p(y**2)", "acosh(2 + x**2) - asin(tanh(y) / 2)"]


@st.composite
def mutated_text(draw, texts: list[str], tokens: list[str]) -> str:
    """A valid text with one to three characters or tokens inserted, deleted or replaced."""
    text = draw(st.sampled_from(texts))
    for _ in range(draw(st.integers(1, 3))):
        position = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        token = draw(st.sampled_from(tokens))
        end = min(len(text), position + draw(st.integers(1, 4)))
        if kind == "insert":
            text = text[:position] + token + text[position:]
        elif kind == "delete":
            text = text[:position] + text[end:]
        else:
            text = text[:position] + token + text[end:]
    return text


@settings(max_examples=scaled(300))
@given(text=mutated_text(VALID_EXPRESSIONS, LANGUAGE_TOKENS) | mutated_text(VALID_EXPRESSIONS, TOKENS))
def test_mutated_expressions_are_refused_cleanly_or_build(text):
    check_document(expression_spec(text))


# YAML documents ----------------------------------------------------------------------------------

YAML_TOKENS = [
    b"!!python/object/apply:os.system ['touch PWNED'] ", b"!!python/name:os.system ", b"!!python/tuple ",
    b"!!binary ", b"!!str ", b"!!int ", b"!foo ", b"&a ", b"*a", b"<<: ", b"{", b"}", b"[", b"]", b",",
    b"\t", b"\xff", b"\xc3", b"\xe2\x80", b"\x00", b"\x07", b"---\n", b"...\n", b"%YAML 1.1\n",
    b"%TAG ! tag:yaml.org,2002:python/\n", b"? ", b": ", b"- ", b"|\n", b">-\n", b'"', b"'", b"#", b"\r",
    b"\n", b"\n  ", b"\xef\xbb\xbf", b"\xe2\x80\xa8", b"\xc2\x85", b"\xe2\x80\xae", b"~", b"null", b"yes",
    b"0x1F", b"1_000", b"1:30", b"1e400", b".nan", b"-.inf", b"2024-01-01", b"@", b"`", b"%", b"\\",
    b'"\\u2028"', b'"\\x85"', b'"\\0"', b"9" * 40, b"[" * 30, b"{a: " * 30,
]


@st.composite
def mutated_bytes(draw, documents: dict[str, bytes]) -> bytes:
    """A bundled spec with one to three mutations: flips, deletions, truncations, insertions."""
    data = bytearray(draw(st.sampled_from(sorted(documents.values()))))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["insert", "flip", "delete", "truncate", "duplicate_line"]))
        position = draw(st.integers(0, len(data)))
        if kind == "insert":
            data[position:position] = draw(st.sampled_from(YAML_TOKENS))
        elif kind == "flip" and position < len(data):
            data[position] ^= draw(st.integers(1, 255))
        elif kind == "delete":
            del data[position:position + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del data[position:]
        elif kind == "duplicate_line":
            lines = bytes(data).splitlines(keepends=True) or [b""]
            index = position % len(lines)
            data = bytearray(b"".join(lines[: index + 1] + lines[index:]))
    return bytes(data)


@settings(max_examples=scaled(600))
@given(data=mutated_bytes(BUNDLED))
def test_mutated_bundled_specs_are_refused_cleanly_or_build(data):
    # building every mutation that still loads would cost minutes: build one in four (by content)
    check_document(data, build=sum(data) % 4 == 0)


@settings(max_examples=scaled(200))
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_are_refused_cleanly(data):
    check_document(data)


SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
           | st.sampled_from(["x", "sin(x)", "[x]", "auto", "nested", "torch.sin", "1e-3", "yes", "x, y"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=6) | st.sampled_from(["x", "y", "a"]), inner, max_size=3), max_leaves=8)


@settings(max_examples=scaled(300))
@given(
    # each required key valid about half the time, so that documents get past the first check
    required=st.fixed_dictionaries({
        "name": st.just("fuzz") | st.sampled_from(["Fuzz", "../evil", "a/b", "class", "con"]) | SCALARS,
        "expr": st.sampled_from(VALID_EXPRESSIONS) | SCALARS,
        "inputs": st.just(["x", "y"]) | st.sampled_from([["x"], [], ["x", "x"], ["x", "a"]]) | VALUES,
        "order": st.integers(1, 2) | st.integers(-1, 10) | SCALARS,
    }),
    optional=st.dictionaries(st.sampled_from(KEYS[4:]), VALUES, max_size=3),
    unknown=st.dictionaries(st.text(max_size=8), VALUES, max_size=1),
    drop=st.sets(st.sampled_from(["name", "expr", "inputs", "order"]), max_size=1),
)
def test_random_spec_documents_are_refused_cleanly_or_build(required, optional, unknown, drop):
    document = {k: v for k, v in {**required, **optional, **unknown}.items() if k not in drop}
    data = yaml.safe_dump(document, allow_unicode=True).encode("utf-8", "surrogatepass")
    check_document(data)


# The guards themselves work: otherwise the tests above could not fail ----------------------------

def test_the_guard_refuses_code_runs():
    spec_code = compile("1", "<spec>", "eval")
    with nothing_runs():
        for action in (lambda: eval("1"), lambda: sympy.sympify("x + 1"), lambda: os.system("true"),
                       lambda: compile("1", "<s>", "eval"), lambda: exec(spec_code)):  # noqa: S102 - the guard must refuse it
            with pytest.raises(_CodeRun):
                action()
        assert isinstance(compile("1", "<s>", "eval", ast.PyCF_ONLY_AST), ast.Expression)
        assert exec(compile("x = 1", os.path.abspath(__file__), "exec")) is None  # noqa: S102 - imports still work


def test_the_time_limit_stops_a_hang():
    if not hasattr(signal, "setitimer"):
        pytest.skip("no SIGALRM here")
    start = time.perf_counter()
    with pytest.raises(AssertionError, match="took more than"), time_limit(0.2, "sleeping"):
        time.sleep(5)
    assert time.perf_counter() - start < 2


def test_a_problem_outside_the_file_or_on_two_lines_is_caught():
    from codegen.errors import Problem

    with pytest.raises(AssertionError, match="outside the file"):
        assert_clean_problems(SpecErrors([Problem(SHOWN, 9, "far")]), SHOWN, b"a: 1\n")
    with pytest.raises(AssertionError, match="not '"):
        assert_clean_problems(SpecErrors([Problem("other.yaml", 1, "x")]), SHOWN, b"a: 1\n")


# The real CLI on a fixed batch of mutated files -------------------------------------------------

def _cli_batch() -> dict[str, bytes]:
    """Each bundled spec with one mutation that is certainly invalid, of a different kind each."""
    mutations = [
        lambda d: d.replace(b"expr: ", b"expr: !!python/object/apply:os.system ['touch PWNED'] ", 1),
        lambda d: d.replace(b"inputs: [", b"inputs: [[", 1),
        lambda d: d.replace(b"name: ", b"name: &a ", 1) + b"doc2: *a\n",
        lambda d: b"\t" + d,
        lambda d: d.replace(b"name: ", b"name: \xff", 1),
        lambda d: d[: d.index(b"inputs: [") + len(b"inputs: [")],
        lambda d: d + b"---\n" + d,
        lambda d: b"%TAG ! tag:yaml.org,2002:python/\n--- !object:os.system\n" + d,
        lambda d: d.replace(b"order: ", b"order: {", 1),
        lambda d: d.replace(b"expr: ", b"expr: \"\\u2028", 1),
        lambda d: d.replace(b"\n", b"\n\x00", 1),
        lambda d: d.replace(b"name: ", b"name: ../", 1),
    ]
    def mutated(index: int, data: bytes) -> bytes:
        """The index-th mutation, or the next one that changes the file (a spec with outputs has
        no 'expr: ' to mutate)."""
        for step in range(len(mutations)):
            changed = mutations[(index + step) % len(mutations)](data)
            if changed != data:
                return changed
        raise AssertionError("no mutation changes the file")

    names = sorted(BUNDLED)
    return {f"m{i}_{name}": mutated(i, BUNDLED[name]) for i, name in enumerate(names)}


def test_cli_refuses_mutated_specs_with_exit_2_and_path_line_messages(tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    batch = _cli_batch()
    for name, data in batch.items():
        (folder / name).write_bytes(data)
    env = {k: v for k, v in os.environ.items() if k != "DBGEN_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run([sys.executable, "-m", "codegen", "build", "specs", "-o", "out"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stdout + result.stderr
    *lines, summary = result.stderr.splitlines()
    assert summary == f"dbgen: {len(lines)} problem(s); nothing was written"
    reported = set()
    for line in lines:
        match = _LINE_RE.fullmatch(line)
        assert match, f"not a 'path:line: message' line: {line!r}"
        reported.add(match["path"])
    assert reported == {f"specs/{name}" for name in batch}
    assert not (tmp_path / "out").exists() and not list(tmp_path.rglob("PWNED*"))
