"""Generated tests fail when the spec beside them has changed since the build: tests
that pass against an edited, unbuilt spec (order 2 -> 3: all passed) are no evidence."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_dbgen

from codegen.build.pipeline import spec_state

EXAMPLES = Path(__file__).resolve().parents[3] / "specs"


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "specs").mkdir()
    shutil.copy(EXAMPLES / "square.yaml", tmp_path / "specs")
    assert run_dbgen(["build", "specs", "-o", "out"], cwd=tmp_path).returncode == 0
    return tmp_path


def _edit(project: Path, old: str, new: str) -> None:
    spec = project / "specs" / "square.yaml"
    spec.write_text(spec.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")


def test_current_after_a_build_and_a_comment(project):
    assert spec_state(project / "out" / "square.py").state == "current"
    _edit(project, "name:", "# a note\nname:")
    assert spec_state(project / "out" / "square.py").state == "current"


@pytest.mark.parametrize("options", [("--no-rewrite",), ("--fuse",)])
def test_current_after_a_build_with_options(project, options):
    assert run_dbgen(["build", "specs", "-o", "out", *options], cwd=project).returncode == 0
    assert spec_state(project / "out" / "square.py").state == "current"


def test_changed_names_the_spec_and_the_build(project):
    _edit(project, "order: 2", "order: 3")
    found = spec_state(project / "out" / "tests" / "test_square.py")
    assert found.state == "changed"
    assert found.message.startswith("specs/square.yaml has changed since dbgen built test_square.py"), found.message
    assert "run: dbgen build specs -o out" in found.message, found.message
    _edit(project, "order: 3", "order: [")
    assert "no longer loads" in spec_state(project / "out" / "square.py").message


def test_absent_without_the_spec_or_a_header(project):
    (project / "specs" / "square.yaml").unlink()
    assert spec_state(project / "out" / "square.py").state == "absent"
    (project / "plain.py").write_text("x = 1\n")
    assert spec_state(project / "plain.py").state == "absent"


def test_the_generated_tests_fail_on_an_edited_spec_and_skip_without_it(project):
    def run_tests() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "spec_unchanged",
                               "out/tests/test_square.py"], cwd=project, capture_output=True, text=True, check=False)

    assert "1 passed" in run_tests().stdout
    _edit(project, "order: 2", "order: 3")
    failed = run_tests()
    assert failed.returncode == 1 and "specs/square.yaml has changed since dbgen built" in failed.stdout, failed.stdout
    (project / "specs" / "square.yaml").unlink()
    assert "1 skipped" in run_tests().stdout
