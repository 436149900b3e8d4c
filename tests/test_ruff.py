"""Generated code passes ruff's default checks and is ruff-formatted, as users' projects require."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ruff.__main__ import find_ruff_bin

from codegen import pipeline, write

ROOT = Path(__file__).resolve().parent.parent


def _ruff(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([find_ruff_bin(), *args, "--isolated", "--no-cache", "."], cwd=cwd, capture_output=True, text=True)


@pytest.fixture(scope="module", params=[False, True], ids=["eager", "fuse"])
def built(request, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ruff")
    write.write_files(out, pipeline.generate(ROOT / "specs", root=ROOT, fuse=request.param))
    return out


def test_checked_in_generated_code_passes_ruff_check_and_format():
    for args in (("check",), ("format", "--check")):
        result = _ruff(*args, cwd=ROOT / "generated")
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("args", [("check",), ("format", "--check")], ids=["check", "format"])
def test_every_build_passes_ruff(built, args):
    result = _ruff(*args, cwd=built)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module", params=[88, 100], ids=["88", "100"])
def built_at(request, tmp_path_factory) -> tuple[Path, int]:
    """Every example built at a line length (the user project's, ``config.line_length``)."""
    out = tmp_path_factory.mktemp(f"ruff{request.param}")
    write.write_files(out, pipeline.generate(ROOT / "specs", root=ROOT, line_length=request.param))
    return out, request.param


def test_modules_pass_ruff_at_the_projects_line_length(built_at):
    """pycodestyle (E501 included), pyflakes and isort at the line length, and formatted to it
    (at 100, a file formatted to 88 would be reformatted: ruff joins lines that now fit)."""
    out, width = built_at
    modules = sorted(path.name for path in out.glob("*.py"))
    checked = _ruff_on(["check", "--select", "E,W,F,I", "--line-length", str(width), *modules], cwd=out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    formatted = _ruff_on(["format", "--check", "--line-length", str(width), "."], cwd=out)
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr
    longest = max(len(line) for name in modules for line in (out / name).read_text().splitlines())
    assert longest <= width and (width == 88 or longest > 88), longest


def _ruff_on(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([find_ruff_bin(), *args[:1], "--isolated", "--no-cache", *args[1:]], cwd=cwd,
                          capture_output=True, text=True)


def test_ruff_would_catch_an_unformatted_file(tmp_path):
    """The check above can fail: SymPy's own spacing (2*x) is not ruff's."""
    (tmp_path / "f.py").write_text("def f(x):\n    return 2*x\n")
    assert _ruff("format", "--check", cwd=tmp_path).returncode == 1
