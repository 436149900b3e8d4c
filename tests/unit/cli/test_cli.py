"""The ``dbgen`` command as users and CI run it, in their own folder.

Every run goes through the entry point (``python -m codegen`` in a subprocess, or ``cli.run()`` in
this process under ``make test``: helpers.run_dbgen) with its working directory a temporary
folder holding a few small example specs, so that paths in headers and messages are the ones a user
sees. Every failing run is also checked for a traceback: none may reach a user."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_runs import EXAMPLES, _env, dbgen, files_under
from helpers import run_dbgen

import codegen
from codegen import provenance
from codegen.build.write import MANIFEST_NAME as MANIFEST

SMALL = ("square", "exp", "sinh", "cube", "gaussian_rbf")
VERSION = codegen.__version__
CONCRETE_STRATEGIES = {"save_inputs", "save_outputs", "intermediates", "nested"}


def python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120, check=False)


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under root: content, mtime and inode (a rewrite through rename changes the inode)."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


PACKAGE_FILES = {"__init__.py", "tests/__init__.py", "tests/conftest.py", "tests/_dbgen_checks.py"}


def expected_files(names) -> set[str]:
    return {*PACKAGE_FILES, *(f"{n}.py" for n in names), *(f"tests/test_{n}.py" for n in names)}


def stderr_lines_with(result: subprocess.CompletedProcess, path: str, word: str) -> list[str]:
    return [line for line in result.stderr.splitlines() if path in line and word in line]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A folder with specs/ (the small examples) and out/ built from them, built once."""
    root = tmp_path_factory.mktemp("built")
    (root / "specs").mkdir()
    for name in SMALL:
        shutil.copy(EXAMPLES / f"{name}.yaml", root / "specs")
    result = dbgen("build", "specs", "-o", "out", cwd=root)
    assert result.returncode == 0, result.stderr
    return root


@pytest.fixture
def work(built, tmp_path) -> Path:
    """A private copy of ``built`` to change."""
    root = tmp_path / "work"
    shutil.copytree(built, root)
    return root


@pytest.fixture
def specs_only(tmp_path) -> Path:
    (tmp_path / "specs").mkdir()
    for name in SMALL:
        shutil.copy(EXAMPLES / f"{name}.yaml", tmp_path / "specs")
    return tmp_path


# --- the command line ----------------------------------------------------------------------------


def test_version(tmp_path):
    result = dbgen("--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"dbgen {VERSION}"


# Every command once in a fresh process (``python -m codegen``, as users run it), beside a run in
# the tests' own process (helpers.run_dbgen, how the rest of the suite runs it): the same exit
# status and the same words, so that what the in-process runs show holds for the real command.
SEED_FUNCTIONS = Path(__file__).resolve().parents[2] / "fixtures" / "audit" / "seed_functions.py"
EACH_COMMAND = {
    "version": ["--version"],
    "build": ["build", "specs", "-o", "again"],
    "check": ["check", "specs", "-o", "out"],
    "show": ["show", "specs/sinh.yaml"],
    "accuracy": ["accuracy", "specs/gaussian_rbf.yaml", "--points", "8", "--dtype", "float64"],
    "audit": ["audit", f"{SEED_FUNCTIONS}:Sinh", "--order", "2"],
    "new": ["new", "swish", "--expr", "x * sigmoid(x)", "--inputs", "x", "-o", "new"],
    "schema": ["schema"],
    "failing": ["build", "specs/no_such.yaml"],
}


@pytest.mark.slow
@pytest.mark.parametrize("command", EACH_COMMAND.values(), ids=EACH_COMMAND.keys())
def test_each_command_in_a_fresh_process_does_what_it_does_in_the_tests_own(built, tmp_path, command):
    results = []
    for mode in ("subprocess", "inprocess"):
        root = tmp_path / mode
        shutil.copytree(built, root)
        result = run_dbgen(command, root, _env(), timeout=120, mode=mode)
        results.append((result.returncode, result.stdout.replace(str(root), "ROOT"),
                        result.stderr.replace(str(root), "ROOT")))
        assert "Traceback" not in result.stderr, result.stderr
    assert results[0] == results[1]
    assert (results[0][0] == 0) == (command != EACH_COMMAND["failing"]), results[0]


def test_no_arguments_prints_help(tmp_path):
    result = dbgen(cwd=tmp_path)
    text = result.stdout + result.stderr
    assert result.returncode in (0, 2)
    assert "Usage" in text and "build" in text and "check" in text


@pytest.mark.parametrize("command, options", [("build", ("--output", "--prune", "--fuse", "--jobs", "--force", "--no-rewrite")), ("check", ("--output", "--fuse", "--jobs", "--force"))])
def test_command_help(tmp_path, command, options):
    result = dbgen(command, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout
    for option in options:
        assert option in result.stdout


@pytest.mark.parametrize("args, line", [
    (("build", "--jobs", "0"), "dbgen: invalid value for '--jobs' / '-j': "),
    (("build", "--time-limit", "soon"), "dbgen: invalid value for '--time-limit': "),
    (("build", "--bogus"), "dbgen: no such option: --bogus"),
    (("show",), "dbgen: missing argument 'SPEC'; see 'dbgen show --help'"),
    (("graph", "specs/sinh.yaml"), "dbgen: missing option '-o' / '--output'; see 'dbgen graph --help'"),
    (("new", "swish"), "dbgen: missing option '--expr'; see 'dbgen new --help'"),
    (("frobnicate",), "dbgen: no such command 'frobnicate'; see 'dbgen --help'"),
])
def test_usage_errors_are_one_dbgen_line(specs_only, args, line):
    """click's usage errors read like every other error: one 'dbgen: ...' line, exit 2, no box and
    no usage block (click printed 'Usage: ...', a hint and the error framed in a box)."""
    result = dbgen(*args, cwd=specs_only)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(line), result.stderr
    assert "Usage" not in result.stderr and "╭" not in result.stderr and "Error" not in result.stderr


def test_no_arguments_prints_the_help(tmp_path):
    result = dbgen(cwd=tmp_path)
    assert result.stderr.startswith("Usage: dbgen [OPTIONS] COMMAND [ARGS]...") or \
        result.stdout.startswith("Usage: dbgen [OPTIONS] COMMAND [ARGS]...")


def test_main_module_runs_nothing_on_import(tmp_path):
    result = python("import codegen.__main__", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""


# --- build -----------------------------------------------------------------------------------------


def test_build_writes_every_file(built):
    assert files_under(built / "out") == expected_files(SMALL)


def test_build_reports_what_it_wrote(specs_only):
    result = dbgen("build", "specs", "-o", "out", cwd=specs_only)
    assert result.returncode == 0, result.stderr
    assert f"{len(SMALL)} spec(s)" in result.stdout
    assert f"{len(expected_files(SMALL))} file(s) written" in result.stdout


def test_headers_name_the_spec_version_and_hash(built):
    out = built / "out"
    hashes = {}
    for name in SMALL:
        for rel in (f"{name}.py", f"tests/test_{name}.py"):
            first, second = (out / rel).read_text(encoding="utf-8").splitlines()[:2]
            assert first == f"# @generated by dbgen {VERSION} from specs/{name}.yaml. DO NOT EDIT.", rel
            match = re.fullmatch(r"# spec-sha256: ([0-9a-f]{64})", second)
            assert match, f"{rel}: {second!r}"
            third, body = (out / rel).read_text(encoding="utf-8").split("\n", 3)[2:]
            assert third == f"# dbgen-body-sha256: {hashlib.sha256(body.encode()).hexdigest()}", rel
            hashes.setdefault(name, set()).add(match.group(1))
        assert len(hashes[name]) == 1, f"{name}: module and tests record different spec hashes"
    assert len({h for hs in hashes.values() for h in hs}) == len(SMALL), "two specs share a hash"
    first = (out / "__init__.py").read_text(encoding="utf-8").splitlines()[0]
    assert first == f"# @generated by dbgen {VERSION} from specs. DO NOT EDIT."


def test_spec_hash_follows_the_spec(work):
    before = (work / "out" / "square.py").read_text(encoding="utf-8").splitlines()[1]
    spec = work / "specs" / "square.yaml"
    spec.write_text(spec.read_text(encoding="utf-8").replace("doc: Square", "doc: The square"), encoding="utf-8")
    assert dbgen("build", "specs", "-o", "out", cwd=work).returncode == 0
    after = (work / "out" / "square.py").read_text(encoding="utf-8").splitlines()[1]
    assert before != after


def test_init_imports_every_function(built):
    code = (
        "import torch, out\n"
        f"names = {sorted(SMALL)!r}\n"
        "assert sorted(out.__all__) == names, out.__all__\n"
        "for name in names:\n"
        "    assert callable(getattr(out, name)), name\n"
        "x = torch.tensor([1.5, -2.0], dtype=torch.float64)\n"
        "assert torch.equal(out.square(x), x * x)\n"
        "torch.testing.assert_close(out.exp(x), torch.exp(x))\n"
        "print('ok')\n"
    )
    result = python(code, cwd=built)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_package_names_are_the_functions_and_the_modules_are_one_import_away(built):
    """``out.cube`` is the function (the package imports it under the module's name); its module,
    with ORDER, STRATEGY and the classes, is reached by importing from it, as the package says."""
    code = (
        "import importlib, inspect, out, out.cube\n"
        "assert inspect.isfunction(out.cube)\n"
        "from out.cube import ORDER, STRATEGY, Cube\n"
        "module = importlib.import_module('out.cube')\n"
        "assert module.ORDER == ORDER == 3 and module.STRATEGY == STRATEGY and module.cube is out.cube\n"
        "assert 'from PACKAGE.cube import ORDER' in out.__doc__\n"
        "assert 'importlib.import_module(\"PACKAGE.cube\")' in out.__doc__\n"
        "assert 'is the function' in out.__doc__\n"
        "print('ok')\n"
    )
    result = python(code, cwd=built)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_each_module_stands_alone(built):
    out = built / "out"
    for name in SMALL:
        source = (out / f"{name}.py").read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{name}.py: relative import"
                roots = {node.module.split(".")[0]}
            elif isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            else:
                continue
            assert not roots & {"codegen", "dbgen", "out"}, f"{name}.py imports {roots}"
    orders = {name: yaml.safe_load((built / "specs" / f"{name}.yaml").read_text())["order"] for name in SMALL}
    # each file loaded by path from another folder, on its own: no package, no dbgen
    code = (
        "import importlib.util, sys, torch\n"
        f"for name, order in {orders!r}.items():\n"
        f"    spec = importlib.util.spec_from_file_location('m_' + name, {str(out)!r} + '/' + name + '.py')\n"
        "    module = importlib.util.module_from_spec(spec)\n"
        "    spec.loader.exec_module(module)\n"
        "    assert module.ORDER == order, (name, module.ORDER)\n"
        f"    assert module.STRATEGY in {sorted(CONCRETE_STRATEGIES)!r}, (name, module.STRATEGY)\n"
        "    assert callable(getattr(module, name))\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('codegen', 'dbgen')], 'dbgen was imported'\n"
        "print('ok')\n"
    )
    result = python(code, cwd=built.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.slow
def test_default_output_folder_is_generated(specs_only):
    result = dbgen("build", "specs", cwd=specs_only)
    assert result.returncode == 0, result.stderr
    assert files_under(specs_only / "generated") == expected_files(SMALL)
    assert dbgen("check", "specs", cwd=specs_only).returncode == 0


@pytest.mark.slow
def test_single_spec_file(specs_only):
    result = dbgen("build", "specs/square.yaml", "-o", "out", cwd=specs_only)
    assert result.returncode == 0, result.stderr
    assert files_under(specs_only / "out") == expected_files(["square"])
    for rel in ("square.py", "tests/test_square.py", *PACKAGE_FILES):
        first = (specs_only / "out" / rel).read_text(encoding="utf-8").splitlines()[0]
        assert first == f"# @generated by dbgen {VERSION} from specs/square.yaml. DO NOT EDIT."
    assert dbgen("check", "specs/square.yaml", "-o", "out", cwd=specs_only).returncode == 0


def test_nested_folders_and_both_suffixes(tmp_path):
    nested = tmp_path / "specs" / "a" / "b"
    nested.mkdir(parents=True)
    shutil.copy(EXAMPLES / "square.yaml", tmp_path / "specs" / "square.yaml")
    shutil.copy(EXAMPLES / "cube.yaml", nested / "cube.yml")
    (nested / "notes.txt").write_text("name: not_a_spec\n")
    result = dbgen("build", "specs", "-o", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert files_under(tmp_path / "out") == expected_files(["square", "cube"])
    first = (tmp_path / "out" / "cube.py").read_text(encoding="utf-8").splitlines()[0]
    assert first == f"# @generated by dbgen {VERSION} from specs/a/b/cube.yml. DO NOT EDIT."


def test_rebuild_without_changes_writes_nothing(work):
    out = work / "out"
    for path in out.rglob("*"):
        os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    before = snapshot(out)
    result = dbgen("build", "specs", "-o", "out", cwd=work)
    assert result.returncode == 0, result.stderr
    assert "(0 file(s) written" in result.stdout
    assert snapshot(out) == before


def test_rebuild_rewrites_only_what_changed(work):
    out = work / "out"
    for path in out.rglob("*"):
        os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    before = snapshot(out)
    spec = work / "specs" / "exp.yaml"
    spec.write_text(spec.read_text(encoding="utf-8").replace("doc: ", "doc: Changed. "), encoding="utf-8")
    assert dbgen("build", "specs", "-o", "out", cwd=work).returncode == 0
    after = snapshot(out)
    changed = {rel for rel in before if before[rel] != after[rel]}
    assert changed == {"exp.py", "tests/test_exp.py", MANIFEST}  # not __init__.py: the set of names is the same


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_written_files_get_ordinary_permissions(specs_only):
    assert dbgen("build", "specs", "-o", "out", cwd=specs_only, umask=0o022).returncode == 0
    out = specs_only / "out"
    for rel in expected_files(SMALL):
        assert stat.S_IMODE((out / rel).stat().st_mode) == 0o644, rel
    # a rewrite keeps the mode the file had
    os.chmod(out / "exp.py", 0o640)
    (out / "exp.py").write_text((out / "exp.py").read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert dbgen("build", "specs", "-o", "out", "--force", cwd=specs_only, umask=0o022).returncode == 0
    assert stat.S_IMODE((out / "exp.py").stat().st_mode) == 0o640
    assert "# edited" not in (out / "exp.py").read_text(encoding="utf-8")


def test_build_refuses_to_overwrite_a_file_it_did_not_write(specs_only):
    out = specs_only / "out"
    out.mkdir()
    (out / "square.py").write_text("def square(x):\n    return x * x\n")
    before = snapshot(specs_only)
    result = dbgen("build", "specs", "-o", "out", cwd=specs_only)
    assert result.returncode == 2
    assert stderr_lines_with(result, "out/square.py", "not written by dbgen")
    assert snapshot(specs_only) == before, "a refused build wrote something"


def test_build_with_a_bad_spec_writes_nothing(specs_only):
    (specs_only / "specs" / "bad.yaml").write_text("name: bad\nexpr: x^2\ninputs: [x]\norder: 2\n")
    result = dbgen("build", "specs", "-o", "out", cwd=specs_only)
    assert result.returncode == 2
    assert any(line.startswith("specs/bad.yaml:") for line in result.stderr.splitlines()), result.stderr
    assert not (specs_only / "out").exists()


@pytest.mark.slow
def test_prune_removes_orphans_only(work):
    out = work / "out"
    (out / "handwritten.py").write_text("# not generated\nVALUE = 1\n")
    (out / "tests" / "test_handwritten.py").write_text("def test_value():\n    pass\n")
    (work / "specs" / "cube.yaml").unlink()

    kept = dbgen("build", "specs", "-o", "out", cwd=work)
    assert kept.returncode == 0, kept.stderr
    assert (out / "cube.py").exists() and (out / "tests" / "test_cube.py").exists()
    assert stderr_lines_with(kept, "out/cube.py", "orphaned") and "--prune" in kept.stderr

    pruned = dbgen("build", "specs", "--prune", "-o", "out", cwd=work)
    assert pruned.returncode == 0, pruned.stderr
    assert not (out / "cube.py").exists() and not (out / "tests" / "test_cube.py").exists()
    assert (out / "handwritten.py").read_text() == "# not generated\nVALUE = 1\n"
    assert (out / "tests" / "test_handwritten.py").exists()
    remaining = [n for n in SMALL if n != "cube"]
    assert files_under(out) == expected_files(remaining) | {"handwritten.py", "tests/test_handwritten.py"}
    assert dbgen("check", "specs", "-o", "out", cwd=work).returncode == 0


# --- check -----------------------------------------------------------------------------------------


def test_check_passes_after_build_and_writes_nothing(work):
    before = snapshot(work)
    result = dbgen("check", "specs", "-o", "out", cwd=work)
    assert result.returncode == 0, result.stderr
    assert snapshot(work) == before


def test_check_lists_stale_missing_and_orphaned_files(work):
    out = work / "out"
    with open(out / "exp.py", "a", encoding="utf-8") as handle:
        handle.write("# hand edit\n")
    (out / "tests" / "test_sinh.py").unlink()
    (work / "specs" / "cube.yaml").unlink()
    before = snapshot(work)

    result = dbgen("check", "specs", "-o", "out", cwd=work)
    assert result.returncode == 1
    assert stderr_lines_with(result, "out/exp.py", "stale"), result.stderr
    assert stderr_lines_with(result, "out/__init__.py", "stale"), result.stderr  # cube left the package
    assert stderr_lines_with(result, "out/tests/test_sinh.py", "missing"), result.stderr
    assert stderr_lines_with(result, "out/cube.py", "orphaned"), result.stderr
    assert stderr_lines_with(result, "out/tests/test_cube.py", "orphaned"), result.stderr
    for fine in ("out/square.py", "out/tests/test_exp.py", "out/sinh.py"):
        assert not [line for line in result.stderr.splitlines() if line.startswith(fine + ":")], fine
    assert snapshot(work) == before, "check wrote something"


def test_check_sees_a_changed_spec(work):
    spec = work / "specs" / "sinh.yaml"
    spec.write_text(spec.read_text(encoding="utf-8").replace("order: 2", "order: 3"), encoding="utf-8")
    result = dbgen("check", "specs", "-o", "out", cwd=work)
    assert result.returncode == 1
    assert stderr_lines_with(result, "out/sinh.py", "stale"), result.stderr
    assert stderr_lines_with(result, "out/tests/test_sinh.py", "stale"), result.stderr


@pytest.mark.slow
def test_fuse_flag_sets_fuse_on_every_spec_and_check_follows(specs_only):
    assert dbgen("build", "specs", "--fuse", "-o", "out", cwd=specs_only).returncode == 0
    assert "@_fused" in (specs_only / "out" / "square.py").read_text()
    assert dbgen("check", "specs", "--fuse", "-o", "out", cwd=specs_only).returncode == 0
    result = dbgen("check", "specs", "-o", "out", cwd=specs_only)
    assert result.returncode == 1 and "square.py: stale" in result.stderr


# --- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["build", "check"])
def test_missing_specs_path(tmp_path, command):
    result = dbgen(command, "nowhere", "-o", "out", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "nowhere" in lines[0] and "no such" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["build", "check"])
def test_folder_without_specs(tmp_path, command):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("no specs here\n")
    result = dbgen(command, "empty", "-o", "out", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "empty" in lines[0] and "spec" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_output_that_is_a_file(specs_only):
    (specs_only / "out").write_text("a file\n")
    result = dbgen("build", "specs", "-o", "out", cwd=specs_only)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "out" in lines[0], result.stderr
    assert (specs_only / "out").read_text() == "a file\n"


@pytest.mark.parametrize("debug", [None, "0"])
def test_internal_error_has_no_traceback(tmp_path, debug):
    code = (
        "import sys\n"
        "import codegen.cli, codegen.build.pipeline\n"
        "def boom(*args, **kwargs):\n"
        "    raise RuntimeError('simulated bug')\n"
        "codegen.build.pipeline.generate = boom\n"
        "sys.argv = ['dbgen', 'build', 'specs']\n"
        "codegen.cli.run()\n"
    )
    env = _env({"DBGEN_DEBUG": debug} if debug is not None else None)
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 3
    assert "Traceback" not in result.stderr
    assert "internal error" in result.stderr and "simulated bug" in result.stderr


# --- the generated tests ---------------------------------------------------------------------------


@pytest.mark.slow
def test_generated_tests_pass(work):
    (work / "pytest.ini").write_text("[pytest]\n")  # keep any outer configuration out
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "out/tests"],
        cwd=work,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", result.stdout) and " failed" not in result.stdout


# --- build speed: skipping up-to-date specs, --force, --jobs -------------------------------------

@pytest.mark.slow
def test_unchanged_rebuild_skips_generation_and_rewrites_a_hand_edited_file(specs_only):
    """build and check agree about a hand edit: check says plain build fixes it, and build does."""
    assert dbgen("build", "specs", "-o", "out", cwd=specs_only).returncode == 0
    out = specs_only / "out"
    module, tests = out / "square.py", out / "tests" / "test_square.py"
    pristine = {path: path.read_text() for path in (module, tests)}
    module.write_text(pristine[module] + "# hand edit\n")
    loosened = "checks.RTOL = checks.ATOL = 1e-1\nglobals().update("
    tests.write_text(pristine[tests].replace("globals().update(", loosened))
    assert loosened in tests.read_text()
    check = dbgen("check", "specs", "-o", "out", cwd=specs_only)
    assert check.returncode == 1
    assert stderr_lines_with(check, "out/square.py", "stale (edited by hand)"), check.stderr
    assert stderr_lines_with(check, "out/tests/test_square.py", "stale (edited by hand)"), check.stderr
    assert check.stderr.rstrip().endswith("run: dbgen build specs -o out"), check.stderr  # no --force needed
    before = snapshot(out)
    again = dbgen("build", "specs", "-o", "out", cwd=specs_only)
    assert again.returncode == 0 and "(2 file(s) written)" in again.stdout, again.stdout + again.stderr
    for rel in ("out/square.py", "out/tests/test_square.py"):
        assert f"dbgen: rewrote hand-edited {rel}" in again.stderr, again.stderr
    assert {path: path.read_text() for path in (module, tests)} == pristine
    after = snapshot(out)
    assert {rel for rel in before if before[rel] != after[rel]} == {"square.py", "tests/test_square.py"}
    assert dbgen("check", "specs", "-o", "out", cwd=specs_only).returncode == 0


@pytest.mark.slow
def test_check_asks_for_force_only_for_a_file_build_would_keep(specs_only):
    """A file as dbgen wrote it (header and body hash agree) that is not what dbgen writes now --
    written by another ruff, say -- is kept by build and by check; check --force regenerates it,
    and only then asks for build --force."""

    assert dbgen("build", "specs", "-o", "out", cwd=specs_only).returncode == 0
    module = specs_only / "out" / "square.py"
    pristine = module.read_text()
    first, second, _, body = pristine.split("\n", 3)
    module.write_text(provenance.seal(f"{first}\n{second}\n{body}# another formatter\n"))
    assert dbgen("check", "specs", "-o", "out", cwd=specs_only).returncode == 0  # its header vouches for it
    check = dbgen("check", "specs", "-o", "out", "--force", cwd=specs_only)
    assert check.returncode == 1 and stderr_lines_with(check, "out/square.py", "stale"), check.stderr
    assert "edited by hand" not in check.stderr and check.stderr.rstrip().endswith("--force"), check.stderr
    assert "(0 file(s) written)" in dbgen("build", "specs", "-o", "out", cwd=specs_only).stdout
    assert dbgen("build", "specs", "-o", "out", "--force", cwd=specs_only).returncode == 0
    assert module.read_text() == pristine


def test_an_unchanged_check_regenerates_nothing(specs_only):
    """check takes a spec whose files' headers vouch for it as up to date without SymPy (a
    second, not a minute: a four-spec project took 42-51 s); a changed spec is still
    regenerated and compared, in --jobs processes."""
    assert dbgen("build", "specs", "-o", "out", cwd=specs_only).returncode == 0
    code = (
        "import sys\nfrom codegen.cli import run\nsys.argv = ['dbgen', 'check', 'specs', '-o', 'out', '-v']\n"
        "try:\n    run()\nexcept SystemExit as exit:\n    assert exit.code in (0, None), exit.code\n"
        "assert 'sympy' not in sys.modules, 'an unchanged check imported SymPy'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=specs_only, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "up to date, skipped" in result.stderr + result.stdout and "generated in" not in result.stderr + result.stdout
    spec = specs_only / "specs" / "square.yaml"
    spec.write_text(spec.read_text(encoding="utf-8").replace("order: 2", "order: 3"), encoding="utf-8")
    changed = dbgen("check", "specs", "-o", "out", "--jobs", "2", cwd=specs_only)
    assert changed.returncode == 1 and stderr_lines_with(changed, "out/square.py", "stale"), changed.stderr


@pytest.mark.parametrize("tests_out", [(), pytest.param(("--tests-out", "tests/gen"), marks=pytest.mark.slow)], ids=["default", "tests_out"])
def test_an_unchanged_rebuild_reads_everything_back_without_importing_sympy(specs_only, tests_out):
    """Importing SymPy is most of a rebuild's time: an unchanged one (__init__.py included) needs none."""
    assert dbgen("build", "specs", "-o", "out", *tests_out, cwd=specs_only).returncode == 0
    code = (
        f"import sys\nfrom codegen.cli import run\nsys.argv = ['dbgen', 'build', 'specs', '-o', 'out', *{tests_out!r}]\n"
        "try:\n    run()\nexcept SystemExit as exit:\n    assert exit.code in (0, None), exit.code\n"
        "assert 'sympy' not in sys.modules, 'an unchanged rebuild imported SymPy'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=specs_only, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "(0 file(s) written)" in result.stdout


@pytest.mark.slow
def test_a_changed_spec_is_regenerated_and_only_it(specs_only):
    assert dbgen("build", "specs", "-o", "out", cwd=specs_only).returncode == 0
    spec = specs_only / "specs" / "square.yaml"
    spec.write_text(spec.read_text().replace("order: 2", "order: 3"))
    result = dbgen("build", "specs", "-o", "out", cwd=specs_only)
    assert result.returncode == 0 and "(2 file(s) written)" in result.stdout  # the module and its tests
    assert "ORDER = 3" in (specs_only / "out" / "square.py").read_text()


@pytest.mark.slow
def test_jobs_output_is_identical_to_a_serial_build(specs_only):
    assert dbgen("build", "specs", "-o", "serial", cwd=specs_only).returncode == 0
    assert dbgen("build", "specs", "-o", "parallel", "--jobs", "2", cwd=specs_only).returncode == 0
    serial = {p.relative_to(specs_only / "serial"): p.read_bytes() for p in (specs_only / "serial").rglob("*.py")}
    parallel = {p.relative_to(specs_only / "parallel"): p.read_bytes() for p in (specs_only / "parallel").rglob("*.py")}
    assert serial == parallel


@pytest.mark.slow
def test_a_bad_expression_is_reported_with_other_files_problems_on_rebuild(specs_only):
    assert dbgen("build", "specs", "-o", "out", cwd=specs_only).returncode == 0
    (specs_only / "specs" / "bad_order.yaml").write_text("name: bad_order\nexpr: x\ninputs: [x]\norder: 99\n")
    (specs_only / "specs" / "bad_expr.yaml").write_text("name: bad_expr\nexpr: x^2\ninputs: [x]\norder: 1\n")
    result = dbgen("build", "specs", "-o", "out", cwd=specs_only)
    assert result.returncode == 2
    assert "specs/bad_order.yaml:4:" in result.stderr and "specs/bad_expr.yaml:2:" in result.stderr


# --- several spec paths ----------------------------------------------------------------------------


@pytest.mark.slow
def test_several_spec_paths_as_a_shell_glob_gives_them(specs_only):
    """`dbgen build specs/*.yaml` (the shell expands it) builds them all; each header names its own
    spec, and the files made from all specs name the folder that holds them, as `build specs` does:
    the two builds write the same files."""
    paths = sorted(f"specs/{name}.yaml" for name in SMALL)
    result = dbgen("build", *paths, "-o", "out", cwd=specs_only)
    assert result.returncode == 0, result.stderr
    assert f"{len(SMALL)} spec(s)" in result.stdout
    assert files_under(specs_only / "out") == expected_files(SMALL)
    for name in SMALL:
        first = (specs_only / "out" / f"{name}.py").read_text().splitlines()[0]
        assert first == f"# @generated by dbgen {VERSION} from specs/{name}.yaml. DO NOT EDIT."
    for rel in PACKAGE_FILES:
        assert (specs_only / "out" / rel).read_text().splitlines()[0] == f"# @generated by dbgen {VERSION} from specs. DO NOT EDIT."
    assert dbgen("check", *paths, "-o", "out", cwd=specs_only).returncode == 0
    assert dbgen("check", "specs", "-o", "out", cwd=specs_only).returncode == 0
    again = dbgen("build", "specs", "-o", "out", cwd=specs_only)
    assert again.returncode == 0 and "(0 file(s) written)" in again.stdout


@pytest.mark.slow
def test_several_folders_and_files_together(specs_only):
    more = specs_only / "more"
    more.mkdir()
    (specs_only / "specs" / "cube.yaml").rename(more / "cube.yaml")
    shutil.copy(EXAMPLES / "gelu_tanh.yaml", more)
    # a file also found through its folder counts once
    result = dbgen("build", "specs", "more/cube.yaml", "more", "-o", "out", cwd=specs_only)
    assert result.returncode == 0, result.stderr
    assert files_under(specs_only / "out") == expected_files([*SMALL, "gelu_tanh"])
    assert "from more/cube.yaml." in (specs_only / "out" / "cube.py").read_text().splitlines()[0]
    assert dbgen("check", "more", "specs", "-o", "out", cwd=specs_only).returncode == 0
    missing = dbgen("check", "specs", "-o", "out", cwd=specs_only)  # more/ left out: its files are orphans
    assert missing.returncode == 1 and stderr_lines_with(missing, "out/gelu_tanh.py", "orphaned")
    assert "run: dbgen build specs -o out --prune" in missing.stderr


def test_names_must_be_unique_across_every_path(specs_only):
    (specs_only / "other").mkdir()
    shutil.copy(EXAMPLES / "square.yaml", specs_only / "other")
    result = dbgen("build", "specs", "other", "-o", "out", cwd=specs_only)
    assert result.returncode == 2
    assert "name 'square' is also used by" in result.stderr and "other/square.yaml" in result.stderr
    assert not (specs_only / "out").exists()
    bad = dbgen("build", "specs", "nowhere", "-o", "out", cwd=specs_only)
    assert bad.returncode == 2 and "nowhere: no such file or directory" in bad.stderr


@pytest.mark.slow
def test_bare_build_without_a_table_builds_specs_folder(specs_only):
    """No argument, no [tool.dbgen]: SPECS is specs/, where `dbgen new` writes specs."""
    result = dbgen("build", cwd=specs_only)
    assert result.returncode == 0, result.stderr
    assert files_under(specs_only / "generated") == expected_files(SMALL)
    assert dbgen("check", cwd=specs_only).returncode == 0


def test_show_takes_several_spec_files(specs_only):
    result = dbgen("show", "specs/square.yaml", "specs/exp.yaml", cwd=specs_only)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("square: specs/square.yaml\n")
    assert "\nexp: specs/exp.yaml\n" in result.stdout
    refused = dbgen("show", "specs/square.yaml", "specs", cwd=specs_only)
    assert refused.returncode == 2 and "specs: is a folder" in refused.stderr


@pytest.mark.slow
def test_bench_takes_several_spec_paths(specs_only):
    result = dbgen("bench", "specs/square.yaml", "specs/exp.yaml", "--size", "8", "--orders", "0",
                   "--strategies", "save_inputs", "--repeats", "1", "--report", "r.md", "--plot", "p.png",
                   cwd=specs_only)
    assert result.returncode == 0, result.stderr
    report = (specs_only / "r.md").read_text()
    assert "dbgen bench specs/square.yaml specs/exp.yaml --size 8" in report
    assert "square" in report and "exp" in report
