"""[tool.dbgen] in pyproject.toml (codegen/spec/config.py), and the pre-commit hook that relies on it."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from codegen.cli import app
from codegen.spec import config

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "specs"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A configured project: pyproject.toml with [tool.dbgen], specs in 'functions/', as cwd."""
    (tmp_path / "functions").mkdir()
    for name in ("square", "exp"):
        shutil.copy(EXAMPLES / f"{name}.yaml", tmp_path / "functions")
    write_pyproject(tmp_path, 'specs = "functions"\noutput = "gen"\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_pyproject(folder: Path, table: str | None) -> None:
    text = '[project]\nname = "demo"\n' + (f"\n[tool.dbgen]\n{table}" if table is not None else "")
    (folder / "pyproject.toml").write_text(text)


# --- resolving -------------------------------------------------------------------------------------


def test_table_gives_the_defaults(project):
    settings = config.resolve(None, None, None, None)
    assert settings == config.Settings((Path("functions"),), Path("gen"), 1, False, project.resolve())


def test_command_line_wins(project):
    write_pyproject(project, 'specs = "functions"\noutput = "gen"\njobs = 4\nfuse = true\n')
    settings = config.resolve(Path("other"), Path("out"), 2, False)
    assert (settings.specs, settings.output, settings.jobs, settings.fuse) == ((Path("other"),), Path("out"), 2, False)
    assert config.resolve(None, None, None, None).jobs == 4 and config.resolve(None, None, None, None).fuse is True


def test_found_from_a_subfolder_with_paths_relative_to_the_project(project, monkeypatch):
    (project / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(project / "a" / "b")
    settings = config.resolve(None, None, None, None)
    assert settings.specs == (Path("../../functions"),) and settings.output == Path("../../gen")
    assert settings.root == project.resolve()


def test_the_nearest_pyproject_is_the_project(project, monkeypatch):
    """A nested pyproject.toml without [tool.dbgen] is another project: the search stops there."""
    (project / "inner").mkdir()
    write_pyproject(project / "inner", None)
    monkeypatch.chdir(project / "inner")
    settings = config.resolve(Path("specs"), None, None, None)
    assert settings == config.Settings((Path("specs"),), Path("generated"), 1, False, None)
    with pytest.raises(config.ConfigError, match="no SPECS given"):
        config.resolve(None, None, None, None)


def test_no_pyproject_means_dbgen_defaults(tmp_path):
    settings = config.resolve(Path("specs"), None, None, None, start=tmp_path)
    assert settings == config.Settings((Path("specs"),), Path("generated"), 1, False, None)


def test_an_empty_table_is_a_configured_project(project):
    write_pyproject(project, "")
    settings = config.resolve(Path("functions"), None, None, None)
    assert settings.output == Path("generated") and settings.root == project.resolve()


@pytest.mark.parametrize("table, message", [
    ('spec = "specs"\n',
     "[tool.dbgen] unknown key 'spec' (did you mean 'specs'?); the keys are: specs, output, tests, jobs, fuse"),
    ('jobs = "2"\n', "[tool.dbgen] jobs must be a whole number of at least 1, not '2'"),
    ("jobs = 0\n", "[tool.dbgen] jobs must be a whole number of at least 1, not 0"),
    ("jobs = true\n", "[tool.dbgen] jobs must be a whole number of at least 1, not True"),
    ('fuse = "yes"\n', "[tool.dbgen] fuse must be true or false, not 'yes'"),
    ("specs = 3\n", "[tool.dbgen] specs must be a path in quotes, not 3"),
    ('output = ""\n', "[tool.dbgen] output must be a path in quotes, not ''"),
])
def test_bad_table_exits_2_naming_the_file_and_key(project, table, message):
    write_pyproject(project, table)
    for command in ("build", "check"):
        result = invoke(command, "functions")
        assert result.exit_code == 2
        assert result.stderr.startswith(f"dbgen: pyproject.toml: {message}"), result.stderr
        assert len(result.stderr.splitlines()) == 1
    assert not (project / "gen").exists()


@pytest.mark.parametrize("table, message", [
    ("specs = []\n", "[tool.dbgen] specs must be a path in quotes, not []"),
    ('specs = ["functions", 3]\n', "[tool.dbgen] specs must be a path in quotes, not 3"),
    ("tests = 1\n", "[tool.dbgen] tests must be a path in quotes, not 1"),
])
def test_bad_specs_list_or_tests_path(project, table, message):
    write_pyproject(project, table)
    result = invoke("check")
    assert result.exit_code == 2 and result.stderr.startswith(f"dbgen: pyproject.toml: {message}"), result.stderr


def test_several_specs_paths_and_the_tests_folder_from_the_table(project, monkeypatch):
    (project / "more").mkdir()
    shutil.copy(EXAMPLES / "cube.yaml", project / "more")
    write_pyproject(project, 'specs = ["functions", "more"]\noutput = "gen"\ntests = "tests/gen"\n')
    (project / "sub").mkdir()
    monkeypatch.chdir(project / "sub")
    settings = config.resolve(None, None, None, None)
    assert settings.specs == (Path("../functions"), Path("../more")) and settings.tests == Path("../tests/gen")
    assert config.resolve(None, None, None, None, tests=Path("t")).tests == Path("t")  # the option wins
    result = invoke("build")
    assert result.exit_code == 0, result.stderr
    assert "dbgen: 3 spec(s) -> ../gen/" in result.stdout
    assert {p.name for p in (project / "gen").iterdir()} == {"__init__.py", "square.py", "exp.py", "cube.py",
                                                             ".dbgen-manifest.json"}
    assert {p.name for p in (project / "tests" / "gen").iterdir()} == {
        "conftest.py", "_dbgen_checks.py", "test_dbgen_square.py", "test_dbgen_exp.py", "test_dbgen_cube.py"}
    assert invoke("check").exit_code == 0


def test_without_a_table_specs_is_the_specs_folder(tmp_path, monkeypatch):
    (tmp_path / "specs").mkdir()
    monkeypatch.chdir(tmp_path)
    assert config.resolve(None, None, None, None).specs == (Path("specs"),)


def test_table_that_is_not_a_table(project):
    (project / "pyproject.toml").write_text("[tool]\ndbgen = 3\n")
    result = invoke("check")
    assert result.exit_code == 2
    assert result.stderr.startswith("dbgen: pyproject.toml: [tool.dbgen] must be a table")


def test_invalid_toml(project):
    (project / "pyproject.toml").write_text("[tool.dbgen\n")
    result = invoke("build")
    assert result.exit_code == 2
    assert result.stderr.startswith("dbgen: pyproject.toml: invalid TOML:") and "fix the file" in result.stderr


def test_problem_in_a_parent_pyproject_names_its_path(project, monkeypatch):
    write_pyproject(project, "jobs = -1\n")
    (project / "sub").mkdir()
    monkeypatch.chdir(project / "sub")
    result = invoke("build")
    assert result.stderr.startswith("dbgen: ../pyproject.toml: [tool.dbgen] jobs")


def test_missing_specs_without_a_table_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in ("build", "check"):
        result = invoke(command)
        assert result.exit_code == 2
        assert "no SPECS given" in result.stderr and "e.g. dbgen build SPECS)" in result.stderr
        assert "[tool.dbgen]" in result.stderr


def test_missing_specs_hint_names_the_users_own_folder(tmp_path, monkeypatch):
    """The example is a folder of this project that holds specs, not a specs/ that does not exist."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "swish.yaml").write_text("name: swish\n")
    monkeypatch.chdir(tmp_path)
    result = invoke("build")
    assert result.exit_code == 2
    assert "(e.g. dbgen build ops/)" in result.stderr and 'set specs = "ops" under [tool.dbgen]' in result.stderr
    assert "specs/)" not in result.stderr


# --- bare build and check ------------------------------------------------------------------------------


def test_bare_build_and_check_use_the_table(project):
    result = invoke("build")
    assert result.exit_code == 0, result.stderr
    assert "dbgen: 2 spec(s) -> gen/" in result.stdout
    first_line = (project / "gen" / "square.py").read_text().splitlines()[0]
    assert first_line.startswith("# @generated by dbgen") and "from functions/square.yaml." in first_line
    result = invoke("check")
    assert result.exit_code == 0, result.stderr
    assert "gen/ is up to date" in result.stdout


def test_a_subfolder_build_writes_the_same_files(project, monkeypatch):
    """Headers name specs relative to the project, so running from a subfolder changes nothing."""
    assert invoke("build").exit_code == 0
    before = {p: p.read_bytes() for p in (project / "gen").rglob("*.py")}
    (project / "tools").mkdir()
    monkeypatch.chdir(project / "tools")
    result = invoke("check")
    assert result.exit_code == 0, result.stderr
    assert "../gen/ is up to date" in result.stdout
    result = invoke("build", "--force")
    assert result.exit_code == 0
    assert {p: p.read_bytes() for p in (project / "gen").rglob("*.py")} == before


def test_check_suggests_a_command_that_fixes_it(project):
    assert invoke("build").exit_code == 0
    (project / "gen" / "exp.py").unlink()
    result = invoke("check")
    assert result.exit_code == 1
    assert "gen/exp.py: missing" in result.stderr
    assert "run: dbgen build functions -o gen" in result.stderr


def test_fuse_from_the_table_and_no_fuse_on_the_command_line(project):
    write_pyproject(project, 'specs = "functions"\noutput = "gen"\nfuse = true\n')
    assert invoke("build", "--no-fuse").exit_code == 0
    assert "_fused" not in (project / "gen" / "exp.py").read_text()
    result = invoke("check")
    assert result.exit_code == 1  # the table asks for fused code, which the build did not write
    assert invoke("check", "--no-fuse").exit_code == 0


def test_this_projects_own_table():
    table = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["dbgen"]
    assert table == {"specs": "specs", "output": "generated"}
    config._validate(table, "pyproject.toml")


# --- pre-commit ------------------------------------------------------------------------------------


def test_pre_commit_hook_runs_dbgen_check():
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert hook["id"] == "dbgen-check"
    assert hook["language"] == "python" and hook["pass_filenames"] is False
    assert {"id", "name", "entry", "language"} <= set(hook)
    program, *args = shlex.split(hook["entry"])
    assert program == "dbgen"
    pattern = re.compile(hook["files"])
    assert pattern.search("specs/mish.yaml") and pattern.search("generated/mish.py") and pattern.search("a.yml")
    assert not pattern.search("README.md")
    result = invoke(*args, "--help")  # a real command of dbgen's
    assert result.exit_code == 0 and "Usage" in result.stdout


def test_pre_commit_entry_checks_a_configured_project(project):
    hook = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())[0]
    assert invoke("build").exit_code == 0
    _, *args = shlex.split(hook["entry"])
    assert invoke(*args).exit_code == 0
    spec = project / "functions" / "exp.yaml"
    spec.write_text(spec.read_text().replace("order: 3", "order: 2"))
    assert invoke(*args).exit_code == 1


# --- the generated code's line length ---------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("", 88),
    ("[tool.ruff]\nline-length = 100\n", 100),
    ("[tool.black]\nline-length = 79\n", 79),
    ("[tool.black]\nline-length = 79\n[tool.ruff]\nline-length = 120\n", 120),  # ruff's first
    ("[tool.ruff.lint]\nselect = ['E']\n", 88),
])
def test_line_length_is_ruffs_else_blacks_else_88(tmp_path, text, expected):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "demo"\n' + text)
    (tmp_path / "sub").mkdir()
    assert config.line_length(tmp_path / "sub") == expected
    assert config.line_length(tmp_path / "no-pyproject-here-but-above") == expected


@pytest.mark.parametrize("value", ['"100"', "0", "1000", "true", "10.5"])
def test_bad_line_length_exits_2_naming_the_file(project, value):
    (project / "pyproject.toml").write_text(
        (project / "pyproject.toml").read_text() + f"\n[tool.ruff]\nline-length = {value}\n")
    result = invoke("build")
    assert result.exit_code == 2
    assert result.stderr.startswith("dbgen: pyproject.toml: [tool.ruff] line-length must be a whole number "
                                    "from 1 to 320, not "), result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not (project / "gen").exists()


def test_the_projects_line_length_shapes_the_code_and_a_change_rebuilds(project):
    """Built at the project's line length (some line longer than 88, none longer than 100); the
    line length is in the spec hash: changing it makes the files stale, and check says so."""
    assert invoke("build").exit_code == 0
    narrow = {p.name: p.read_text() for p in (project / "gen").glob("*.py")}
    assert max(len(line) for text in narrow.values() for line in text.splitlines()) <= 88
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.ruff]\nline-length = 100\n")
    result = invoke("check")
    assert result.exit_code == 1 and "square.py" in result.stdout + result.stderr, result.stdout + result.stderr
    assert invoke("build").exit_code == 0
    wide = {p.name: p.read_text() for p in (project / "gen").glob("*.py")}
    assert wide.keys() == narrow.keys() and wide["square.py"] != narrow["square.py"]
    assert narrow["square.py"].splitlines()[1] != wide["square.py"].splitlines()[1]  # the spec hash
    assert 88 < max(len(line) for text in wide.values() for line in text.splitlines()) <= 100
    assert invoke("check").exit_code == 0
