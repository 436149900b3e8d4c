"""The generated tests in a user's project, run as users run them: plain ``python -m pytest`` (the
default import mode, prepend), with the user's own tests beside them under the same file names,
and ``--strict-markers``; and the tests' folder set apart with --tests-out or ``[tool.dbgen] tests``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runs import EXAMPLES, dbgen, files_under

USER_TEST = """\
import torch

from generated import square


def test_users_own_square():
    assert square(torch.tensor(3.0)).item() == 9.0
"""


def user_project(root: Path, table: str = "") -> Path:
    """specs/square.yaml, the user's own tests/test_square.py, and pyproject.toml without pytest
    settings (the defaults: rootdir here, import mode prepend)."""
    (root / "specs").mkdir(parents=True)
    shutil.copy(EXAMPLES / "square.yaml", root / "specs")
    (root / "tests").mkdir()
    (root / "tests" / "test_square.py").write_text(USER_TEST)
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\n' + (f"\n[tool.dbgen]\n{table}" if table else ""))
    return root


def plain_pytest(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m pytest`` with no import-mode option."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600, check=False)


def passed(result: subprocess.CompletedProcess) -> int:
    match = re.search(r"\b(\d+) passed\b", result.stdout)
    return int(match.group(1)) if match else 0


@pytest.mark.slow
def test_generated_tests_collect_beside_a_users_test_of_the_same_name(tmp_path):
    root = user_project(tmp_path)
    assert dbgen("build", "specs", cwd=root).returncode == 0
    assert (root / "generated" / "tests" / "test_square.py").is_file()
    result = plain_pytest(root, "-k", "not compile", "-vv")  # -q -vv: one line per test
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "import file mismatch" not in output
    assert "tests/test_square.py::test_users_own_square PASSED" in result.stdout
    generated = re.findall(r"^generated/tests/test_square\.py::\S+ PASSED", result.stdout, re.MULTILINE)
    assert len(generated) >= 10 and passed(result) == len(generated) + 1, result.stdout[-3000:]


@pytest.mark.slow
def test_the_compile_marker_is_registered_by_the_generated_conftest(tmp_path):
    """--strict-markers refuses an unregistered marker at collection: the conftest registers it."""
    root = user_project(tmp_path)
    assert dbgen("build", "specs", cwd=root).returncode == 0
    result = plain_pytest(root, "--strict-markers", "--collect-only", "generated/tests")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert re.search(r"\b\d+ tests? collected\b", result.stdout) and "compile" in (root / "generated" / "tests"
                                                                                    / "conftest.py").read_text()
    (root / "generated" / "tests" / "conftest.py").unlink()  # the check above can fail without it
    refused = plain_pytest(root, "--strict-markers", "--collect-only", "generated/tests")
    assert refused.returncode != 0 and "'compile' not found in `markers`" in refused.stdout + refused.stderr


@pytest.mark.slow
@pytest.mark.parametrize("how", ["option", "table"])
def test_tests_set_apart_collect_and_pass_and_check_knows_them(tmp_path, how):
    """tests/generated/: outside the package, no package marker (it would become a top-level
    package 'generated' and shadow the real one, which the user's test imports), names of their own."""
    table = 'specs = "specs"\ntests = "tests/generated"\n' if how == "table" else ""
    root = user_project(tmp_path, table)
    args = ("--tests-out", "tests/generated") if how == "option" else ()
    assert dbgen("build", "specs", *args, cwd=root).returncode == 0
    assert files_under(root / "generated") == {"__init__.py", "square.py"}
    assert files_under(root / "tests") == {"test_square.py", "generated/conftest.py", "generated/_dbgen_checks.py",
                                           "generated/test_dbgen_square.py"}
    assert dbgen("check", "specs", *args, cwd=root).returncode == 0
    result = plain_pytest(root, "--strict-markers", "-m", "not compile")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert passed(result) >= 2

    # check and --prune know the tests' folder: a generated test whose spec is gone is an orphan there
    shutil.copy(EXAMPLES / "cube.yaml", root / "specs")
    assert dbgen("build", "specs", *args, cwd=root).returncode == 0
    (root / "specs" / "cube.yaml").unlink()
    check = dbgen("check", "specs", *args, cwd=root)
    assert check.returncode == 1 and "tests/generated/test_dbgen_cube.py: orphaned" in check.stderr, check.stderr
    if how == "option":  # the command check suggests builds the same layout
        assert "run: dbgen build specs -o generated --tests-out tests/generated --prune" in check.stderr, check.stderr
    assert dbgen("build", "specs", *args, "--prune", cwd=root).returncode == 0
    assert not (root / "tests" / "generated" / "test_dbgen_cube.py").exists()
    assert (root / "tests" / "test_square.py").read_text() == USER_TEST


@pytest.mark.slow
def test_moving_the_tests_leaves_the_old_ones_as_orphans(tmp_path):
    root = user_project(tmp_path)
    assert dbgen("build", "specs", cwd=root).returncode == 0
    moved = dbgen("build", "specs", "--tests-out", "checks", "--prune", cwd=root)
    assert moved.returncode == 0, moved.stderr
    assert files_under(root / "generated") == {"__init__.py", "square.py"}
    assert files_under(root / "checks") == {"conftest.py", "_dbgen_checks.py", "test_dbgen_square.py"}


@pytest.mark.slow
def test_tests_in_a_subfolder_of_the_output_are_packages_of_it(tmp_path):
    root = user_project(tmp_path)
    assert dbgen("build", "specs", "--tests-out", "generated/checks/deep", cwd=root).returncode == 0
    assert files_under(root / "generated") == {"__init__.py", "square.py", "checks/__init__.py",
                                               "checks/deep/__init__.py", "checks/deep/conftest.py",
                                               "checks/deep/_dbgen_checks.py", "checks/deep/test_square.py"}
    result = plain_pytest(root, "--strict-markers", "-m", "not compile")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def test_a_native_torch_cannot_differentiate_to_the_order_is_skipped_saying_why(tmp_path):
    """hardsigmoid's backward has no derivative in torch: the generated comparison at order 2 failed
    with "not implemented" right after a build (a held-out style probe); it is skipped with torch's
    reason, and orders 0 and 1 are still compared."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "hard_sigmoid.yaml").write_text(
        "name: hard_sigmoid\nexpr: where(x <= -3, 0, where(x >= 3, 1, x / 6 + 0.5))\ninputs: [x]\norder: 2\n"
        "domain: {x: [-5, 5]}\nnative: torch.nn.functional.hardsigmoid\n")
    assert dbgen("build", "specs", cwd=tmp_path).returncode == 0
    result = plain_pytest(tmp_path, "generated/tests", "-k", "matches_native", "-rs")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert passed(result) == 2 and "1 skipped" in result.stdout
    assert "hardsigmoid has no derivative at order 2" in result.stdout and "not implemented" in result.stdout


def test_a_kink_the_formula_is_smooth_through_passes_the_float32_test(tmp_path):
    """log(cosh(x - y)) written with abs: at the domain's corners x == y, where the module's second
    derivative is the smooth function's 1 and autograd's abs convention gives 0, the float32 test
    failed right after the build (a held-out style probe)."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "logcosh.yaml").write_text(
        "name: logcosh\nexpr: abs(x - y) + log1p(exp(-2 * abs(x - y))) - log(2)\ninputs: [x, y]\norder: 3\n"
        "domain: {x: [-20, 20], y: [-20, 20]}\n")
    assert dbgen("build", "specs", cwd=tmp_path).returncode == 0
    result = plain_pytest(tmp_path, "generated/tests", "-k", "float32")
    assert result.returncode == 0 and passed(result) >= 1, (result.stdout + result.stderr)[-3000:]
