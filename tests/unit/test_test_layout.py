"""The tests are grouped as the package is, and pytest collects every one of them: a folder whose
name pytest skips by default (``build``, as the build stage's tests are) hid six test files once."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
GROUPS = {"unit", "features", "properties", "end_to_end"}


def _skipped_folders() -> list[str]:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    return options["norecursedirs"]


def test_no_folder_holding_tests_is_one_pytest_skips():
    hidden = [str(path.relative_to(ROOT)) for path in TESTS.rglob("test_*.py")
              if any(fnmatch.fnmatch(part, pattern) for part in path.relative_to(TESTS).parts[:-1]
                     for pattern in _skipped_folders())]
    assert hidden == []


def test_every_test_file_is_in_a_group_and_the_unit_tests_follow_the_stages():
    stages = {p.name for p in (ROOT / "codegen").iterdir() if (p / "__init__.py").is_file()} - {"audit"}
    placed = [path.relative_to(TESTS).parts for path in TESTS.rglob("test_*.py")]
    assert [parts for parts in placed if parts[0] not in GROUPS] == []
    assert {parts[1] for parts in placed if parts[0] == "unit" and len(parts) == 3} <= stages
