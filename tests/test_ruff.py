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


def test_ruff_would_catch_an_unformatted_file(tmp_path):
    """The check above can fail: SymPy's own spacing (2*x) is not ruff's."""
    (tmp_path / "f.py").write_text("def f(x):\n    return 2*x\n")
    assert _ruff("format", "--check", cwd=tmp_path).returncode == 1
