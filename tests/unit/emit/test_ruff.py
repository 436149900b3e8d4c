"""Generated code passes ruff's default checks and is ruff-formatted, as users' projects require."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
from helpers import HEAVY_EXAMPLES, strategy_matrix
from ruff.__main__ import find_ruff_bin

from codegen.build import pipeline, write

ROOT = Path(__file__).resolve().parents[3]


def _ruff(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([find_ruff_bin(), *args, "--isolated", "--no-cache", "."], cwd=cwd, capture_output=True, text=True, check=False)


def test_the_generator_passes_ruff_as_configured():
    """The package, its tests, tools and benchmarks: ruff's default rules and the complexity limit
    of pyproject.toml's [tool.ruff.lint] (make check runs the same)."""
    result = subprocess.run([find_ruff_bin(), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_checked_in_generated_code_passes_ruff_check_and_format():
    for args in (("check",), ("format", "--check")):
        result = _ruff(*args, cwd=ROOT / "generated")
        assert result.returncode == 0, result.stdout + result.stderr


def test_each_exact_value_of_a_generated_test_is_one_line_where_it_fits():
    """The tests' table of exact values (dtype, point, output, partial, value, bits) is data: a row
    a line, as its comment says, not a tuple spread over nine (ruff expands a tuple that ends in a
    comma; 15,710 lines of generated tests were 6,519 once the rows stopped ending in one)."""
    spread = []
    for path in sorted((ROOT / "generated" / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "exact":
                rows = node.value.elts
                assert rows, path.name
                spread += [f"{path.name}:{row.lineno}" for row in rows
                           if row.end_lineno > row.lineno and len(ast.unparse(row)) + len("        ,") <= 88]
    assert not spread


EXAMPLES = sorted(path.stem for path in (ROOT / "specs").glob("*.yaml"))
# How each example is built besides as checked in: eager (the defaults; what generated/ holds once
# rebuilt), fused, and at the two line lengths a project may set (88 is the default).
BUILDS = {"eager": {}, "fuse": {"fuse": True}, "100": {"line_length": 100}}


def _build(tmp_path: Path, name: str, options: dict) -> Path:
    out = tmp_path / "out"
    write.write_files(out, pipeline.generate(ROOT / "specs" / f"{name}.yaml", root=ROOT, **options))
    return out


# make test: each example once, the builds in turn, but the heavy ones only as checked in (the
# test above); make test-all: every pair
@pytest.mark.parametrize("name, build", strategy_matrix(EXAMPLES, BUILDS, fixed=dict.fromkeys(HEAVY_EXAMPLES)))
def test_every_build_passes_ruff(tmp_path, name, build):
    """Every file a build writes passes ruff's default checks and is ruff-formatted at the
    project's line length (at 100, a file formatted to 88 would be reformatted: ruff joins lines
    that now fit); the module passes pycodestyle (E501 included), pyflakes and isort at that length."""
    out = _build(tmp_path, name, BUILDS[build])
    width = str(BUILDS[build].get("line_length", 88))
    for args in (["check", "."], ["format", "--check", "--line-length", width, "."],
                 ["check", "--select", "E,W,F,I", "--line-length", width, f"{name}.py"]):
        result = _ruff_on(args, cwd=out)
        assert result.returncode == 0, result.stdout + result.stderr
    assert max(len(line) for line in (out / f"{name}.py").read_text().splitlines()) <= int(width)


def test_a_longer_line_length_is_used(tmp_path):
    """At 100 the longest lines of a module are over 88: the width reached the printer."""
    out = _build(tmp_path, "square", BUILDS["100"])
    assert max(len(line) for line in (out / "square.py").read_text().splitlines()) > 88


def _ruff_on(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([find_ruff_bin(), *args[:1], "--isolated", "--no-cache", *args[1:]], cwd=cwd,
                          capture_output=True, text=True, check=False)


def test_ruff_would_catch_an_unformatted_file(tmp_path):
    """The check above can fail: SymPy's own spacing (2*x) is not ruff's."""
    (tmp_path / "f.py").write_text("def f(x):\n    return 2*x\n")
    assert _ruff("format", "--check", cwd=tmp_path).returncode == 1
