"""A build owns exactly the files it wrote.

``OUT/.dbgen-manifest.json`` records them (body hashes, the tests folder, the folders builds
created); ``check`` and ``--prune`` go by it: another build's output inside OUT is never an orphan,
two outputs sharing a ``--tests-out`` folder neither make each other's files stale nor prune each
other's tests, a generated file edited by hand is listed but never deleted, moving the tests leaves
no old file and no empty folder a build created. And ``--jobs`` is capped by the usable cores and
the available memory.

The write stage is tested in-process with made-up generated files (fast); the CLI end to end on
two tiny specs built once into a project (an output with its tests in ``t/``, and a second
output nested in it that shares ``t/``) and copied per test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import run_dbgen

from codegen import __version__, console, provenance
from codegen.build import write
from codegen.cli import build_commands

HEADER = provenance.header("specs/x.yaml", "0" * 64)


def generated(body: str, header: str = HEADER) -> str:
    return provenance.seal(f"{header}\n{body}")


def made_test_file(module: str, up: int = 1, into: tuple[str, ...] = ()) -> str:
    """A generated test file whose ``_PATH`` leads ``up`` folders above its own, then ``into``."""
    base = "pathlib.Path(__file__).resolve()" + (".parent.parent" if up == 1 else f".parents[{up}]")
    path = " / ".join([base, *(f'"{p}"' for p in [*into, f"{module}.py"])])
    return generated(f"import pathlib\n\n_PATH = {path}\n")


def tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under root: files with their bytes, folders as None."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def manifest(out: Path) -> dict:
    return json.loads((out / write.MANIFEST_NAME).read_text())


# --- the manifest ----------------------------------------------------------------------------------

FILES = {
    "__init__.py": generated("from .a import a\n"),
    "a.py": generated("def a(x):\n    return x\n"),
    "tests/conftest.py": generated("# conftest\n"),
    "tests/test_a.py": made_test_file("a"),
}


def test_a_build_records_the_files_it_wrote_their_body_hashes_and_its_tests_folder(tmp_path):
    out = tmp_path / "out"
    write.commit(out, FILES, tests="tests")
    recorded = manifest(out)
    assert recorded["format"] == 1 and recorded["generator"] == f"dbgen {__version__}"
    assert recorded["tests"] == "tests"
    assert recorded["files"] == {rel: text.split("\n")[2].removeprefix(provenance.BODY_HASH_PREFIX)
                                 for rel, text in FILES.items()}
    assert recorded["folders"] == ["tests"]  # created by the build, OUT itself not counted
    before = (out / write.MANIFEST_NAME).stat()
    write.commit(out, FILES, tests="tests")  # unchanged: not rewritten
    after = (out / write.MANIFEST_NAME).stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert not [p for p in out.iterdir() if p.name.startswith(write.TEMP_PREFIX)]
    plain = tmp_path / "plain"
    write.write_files(plain, FILES)  # a library caller that names no tests folder: no manifest
    assert not (plain / write.MANIFEST_NAME).exists()


def test_a_manifest_reaches_no_file_outside_the_output_but_a_tests_folders(tmp_path):
    """A manifest is read from the output (and may be committed to a repository): its entries are
    relative paths of dbgen's files; outside OUT only a tests folder's."""
    out = tmp_path / "out"
    write.commit(out, FILES, tests="tests")
    victim = tmp_path / "victim.py"
    victim.write_text(FILES["a.py"])
    data = manifest(out)
    body_hash = data["files"]["a.py"]
    data["files"].update({"../victim.py": body_hash, str(victim): body_hash, "x/../../victim.py": body_hash})
    (out / write.MANIFEST_NAME).write_text(json.dumps(data))
    assert write.orphaned_files(out, FILES) == []
    write.commit(out, FILES, prune=True, tests="tests")
    assert victim.read_text() == FILES["a.py"]
    (out / write.MANIFEST_NAME).write_text("{not json")  # unreadable: as if there were none
    assert write.read_manifest(out) is None and write.stale_files(out, FILES) == []


def test_without_a_manifest_prune_deletes_nothing_and_records_nothing_it_found(tmp_path):
    """A folder no build has recorded (a dbgen before manifests, or a first build into a folder the
    user filled): a copy of a generated file carries dbgen's header as an old orphan does, and
    nothing tells them apart. Both are listed, kept and left out of the manifest the build writes."""
    out = tmp_path / "out"
    out.mkdir()
    copy = generated("def b(x):\n    return 2 * x\n")
    (out / "b_backup.py").write_text(copy)  # the user's copy
    (out / "old.py").write_text(generated("def old(x):\n    return x\n"))  # an orphan of a pre-manifest build
    found = write.find_orphans(out, FILES, None)
    assert found.unrecorded == ["b_backup.py", "old.py"] and found.removable == [] and found.recorded == {}
    done = write.commit(out, FILES, prune=True, tests="tests")
    assert done.removed == [] and done.unrecorded_orphans == ["b_backup.py", "old.py"]
    assert (out / "b_backup.py").read_text() == copy and (out / "old.py").exists()
    assert set(manifest(out)["files"]) == set(FILES)
    again = write.commit(out, FILES, prune=True, tests="tests")  # with the manifest now: not this build's
    assert again.removed == again.orphans == [] and (out / "b_backup.py").exists()


def test_another_builds_output_inside_the_output_is_not_an_orphan(tmp_path):
    out = tmp_path / "out"
    write.commit(out, FILES, tests="tests")
    write.commit(out / "inner", FILES, tests="tests")  # a build of other specs into out/inner
    inner = tree(out / "inner")
    assert write.stale_files(out, FILES) == []
    done = write.commit(out, FILES, prune=True, tests="tests")
    assert done.orphans == done.removed == []
    assert tree(out / "inner") == inner


def test_prune_keeps_a_generated_file_edited_by_hand_and_says_so(tmp_path):
    out = tmp_path / "out"
    write.commit(out, {**FILES, "b.py": generated("B = 1\n")}, tests="tests")
    (out / "b.py").write_text((out / "b.py").read_text() + "B = 2  # mine now\n")
    copy = generated("C = 1\n")  # a copy of a generated file, edited: dbgen never wrote it here
    (out / "c.py").write_text(copy.replace("C = 1", "C = 2"))
    resealed = out / "tests" / "test_gone.py"  # its seal made to match again: the manifest still knows
    write.commit(out, {**FILES, "tests/test_gone.py": made_test_file("gone")}, tests="tests")
    resealed.write_text(provenance.seal(resealed.read_text().replace("gone.py", "kept.py")))

    done = write.commit(out, FILES, prune=True, tests="tests")
    # c.py is not in the manifest: never this build's, so neither an orphan nor deleted
    assert done.removed == [] and done.edited_orphans == done.orphans == ["b.py", "tests/test_gone.py"]
    assert "B = 2  # mine now" in (out / "b.py").read_text() and (out / "c.py").exists() and resealed.exists()
    assert write.stale_files(out, FILES) == [(rel, "orphaned") for rel in done.orphans]
    assert {"b.py", "tests/test_gone.py"} <= set(manifest(out)["files"])  # still listed, still kept


def test_moving_the_tests_leaves_no_old_file_and_no_folder_a_build_created(tmp_path):
    out = tmp_path / "out"
    old = {**FILES, "tests/deep/test_b.py": made_test_file("b", up=2)}
    write.commit(out, old, tests="tests")
    cache = out / "tests" / "__pycache__"
    cache.mkdir()
    (cache / f"test_a.cpython-311-pytest-{__version__}.pyc").write_bytes(b"")  # pytest ran them
    (tmp_path / "users").mkdir()  # a folder of the user's, given to --tests-out: kept
    moved = {"__init__.py": FILES["__init__.py"], "a.py": FILES["a.py"],
             "../new/place/conftest.py": FILES["tests/conftest.py"],
             "../new/place/test_dbgen_a.py": made_test_file("a", up=2, into=("out",)),
             "../users/conftest.py": FILES["tests/conftest.py"]}
    assert write.orphaned_files(out, moved) == ["tests/conftest.py", "tests/deep/test_b.py", "tests/test_a.py"]
    write.commit(out, moved, prune=True, tests="../new/place")
    assert not (out / "tests").exists()
    assert manifest(out)["folders"] == ["../new", "../new/place"]

    back = {rel: text for rel, text in FILES.items()}
    done = write.commit(out, back, prune=True, tests="tests")
    assert sorted(done.removed) == ["../new/place/conftest.py", "../new/place/test_dbgen_a.py", "../users/conftest.py"]
    assert not (tmp_path / "new").exists(), "a folder the build created was left empty"
    assert (tmp_path / "users").is_dir() and not any((tmp_path / "users").iterdir())
    assert manifest(out)["folders"] == ["tests"]


def test_outputs_sharing_a_tests_folder_keep_each_others_files(tmp_path):
    """Files keyed '../t/...': each output's tests, and the shared conftest and checks, the same
    but for the spec path on line 1."""
    one, two = tmp_path / "one", tmp_path / "two"
    shared = {"conftest.py": "# conftest\n", "_dbgen_checks.py": "# checks\n"}
    files_one = {"a.py": FILES["a.py"], "../t/test_dbgen_a.py": made_test_file("a", up=1, into=("one",)),
                 **{f"../t/{n}": generated(b, provenance.header("specs", "1" * 64)) for n, b in shared.items()}}
    files_two = {"b.py": FILES["a.py"], "../t/test_dbgen_b.py": made_test_file("b", up=1, into=("two",)),
                 **{f"../t/{n}": generated(b, provenance.header("more", "1" * 64)) for n, b in shared.items()}}
    write.commit(one, files_one, tests="../t")
    write.commit(two, files_two, tests="../t")  # finds one's conftest and checks: up to date
    assert write.stale_files(one, files_one) == [] and write.stale_files(two, files_two) == []
    assert write.commit(one, files_one, prune=True, tests="../t").removed == []
    assert (tmp_path / "t" / "test_dbgen_b.py").exists()

    # one's tests move away: its own old tests go, the shared files stay for two's
    moved = {"a.py": FILES["a.py"], "tests/test_a.py": made_test_file("a"), "tests/conftest.py": FILES["tests/conftest.py"]}
    assert write.commit(one, moved, prune=True, tests="tests").removed == ["../t/test_dbgen_a.py"]
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["_dbgen_checks.py", "conftest.py", "test_dbgen_b.py"]
    assert write.stale_files(two, files_two) == [] and write.stale_files(one, moved) == []


def test_a_test_file_tells_the_output_it_tests():
    folder = Path("/p/q/t")
    assert write.tested_folder(folder / "test_a.py", made_test_file("a", up=2, into=("x", "out"))) == Path(os.path.realpath("/p/x/out"))
    assert write.tested_folder(folder / "test_a.py", made_test_file("a")) == Path(os.path.realpath("/p/q"))
    wrapped = generated('_PATH = (\n    pathlib.Path(__file__).resolve().parents[3]\n    / "long"\n    / "a.py"\n)\n')
    assert write.tested_folder(Path("/p/q/r/s/test_a.py"), wrapped) == Path(os.path.realpath("/p/long"))
    for code in ('_PATH = "a.py"\n', '_PATH = pathlib.Path(__file__).resolve().parent / ("a" + "b")\n',
                 "_PATH = __import__('os').getcwd()\n", "def f(:\n", "X = 1\n"):
        assert write.tested_folder(folder / "test_a.py", generated(code)) is None, code


# --- the CLI ---------------------------------------------------------------------------------------

SQUARE = "name: sq\nexpr: x**2\ninputs: [x]\norder: 1\n"
CUBE = "name: cu\nexpr: x**3\ninputs: [x]\norder: 1\n"
QUARTIC = "name: qu\nexpr: x**4\ninputs: [x]\norder: 1\n"


def dbgen(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DBGEN_DEBUG"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    result = run_dbgen(args, cwd, env, timeout=300)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    return result


def ok(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    result = dbgen(*args, cwd=cwd)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def lines_with(result: subprocess.CompletedProcess, *words: str) -> list[str]:
    return [line for line in result.stderr.splitlines() if all(w in line for w in words)]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """specs/ (sq, cu) built into out/ with its tests in t/, and more/ (qu) built into out/inner/,
    another output inside the first, sharing t/."""
    root = tmp_path_factory.mktemp("owned")
    (root / "specs").mkdir()
    (root / "specs" / "sq.yaml").write_text(SQUARE)
    (root / "specs" / "cu.yaml").write_text(CUBE)
    (root / "more").mkdir()
    (root / "more" / "qu.yaml").write_text(QUARTIC)
    ok("build", "specs", "-o", "out", "--tests-out", "t", cwd=root)
    ok("build", "more", "-o", "out/inner", "--tests-out", "t", cwd=root)
    return root


@pytest.fixture
def project(built, tmp_path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(built, root)
    return root


OUTER = ("specs", "-o", "out", "--tests-out", "t")
INNER = ("more", "-o", "out/inner", "--tests-out", "t")


def test_cli_never_touches_another_builds_output_nested_inside(project):
    inner, shared = tree(project / "out" / "inner"), tree(project / "t")
    assert ok("check", *OUTER, cwd=project).stdout.startswith("dbgen: out/ is up to date")
    pruned = ok("build", *OUTER, "--prune", cwd=project)
    assert "orphan" not in pruned.stdout + pruned.stderr
    assert tree(project / "out" / "inner") == inner and tree(project / "t") == shared
    assert {"__init__.py", "qu.py", "../../t/test_dbgen_qu.py"} <= set(manifest(project / "out" / "inner")["files"])
    ok("check", *INNER, cwd=project)


def test_cli_outputs_sharing_tests_out_neither_stale_nor_prune_each_other(project):
    assert (project / "t" / "conftest.py").read_text().startswith(f"# @generated by dbgen {__version__} from specs.")
    ok("check", *INNER, cwd=project)  # the conftest the other build wrote is up to date for this one
    ok("build", *INNER, "--prune", cwd=project)
    ok("check", *OUTER, cwd=project)
    assert sorted(p.name for p in (project / "t").iterdir()) == [
        "_dbgen_checks.py", "conftest.py", "test_dbgen_cu.py", "test_dbgen_qu.py", "test_dbgen_sq.py"]

    # the outer output's tests move to t2: check names its old ones, --prune takes them, not the shared files
    check = dbgen("check", "specs", "-o", "out", "--tests-out", "t2", cwd=project)
    assert check.returncode == 1
    assert lines_with(check, "t/test_dbgen_sq.py: orphaned") and lines_with(check, "t/test_dbgen_cu.py: orphaned")
    assert not lines_with(check, "t/conftest.py") and not lines_with(check, "qu")
    ok("build", "specs", "-o", "out", "--tests-out", "t2", "--prune", cwd=project)
    assert sorted(p.name for p in (project / "t").iterdir()) == ["_dbgen_checks.py", "conftest.py", "test_dbgen_qu.py"]
    ok("check", "specs", "-o", "out", "--tests-out", "t2", cwd=project)
    ok("check", *INNER, cwd=project)


@pytest.mark.slow
def test_cli_moving_the_tests_leaves_no_old_files_nor_empty_folders(project):
    shutil.rmtree(project / "out" / "inner")  # only the outer output: t/ is its alone
    (project / "t" / "test_dbgen_qu.py").unlink()
    steps = [("--tests-out", "deep/er/checks"), (), ("--tests-out", "t")]
    for where in steps:
        assert dbgen("check", "specs", "-o", "out", *where, cwd=project).returncode == 1
        ok("build", "specs", "-o", "out", *where, "--prune", cwd=project)
        ok("check", "specs", "-o", "out", *where, cwd=project)
    assert not (project / "deep").exists(), "folders the build created were left empty"
    assert not (project / "out" / "tests").exists()
    assert sorted(p.name for p in (project / "t").iterdir()) == [
        "_dbgen_checks.py", "conftest.py", "test_dbgen_cu.py", "test_dbgen_sq.py"]
    assert sorted(p.name for p in (project / "out").iterdir()) == [".dbgen-manifest.json", "__init__.py", "cu.py", "sq.py"]


def test_cli_prune_keeps_a_hand_edited_generated_file_and_says_so(project):
    module = project / "out" / "cu.py"
    module.write_text(module.read_text() + "\n# my own fix\n")
    (project / "specs" / "cu.yaml").unlink()
    check = dbgen("check", *OUTER, cwd=project)
    assert check.returncode == 1
    assert lines_with(check, "out/cu.py: orphaned (edited by hand", "--prune keeps it")
    assert lines_with(check, "t/test_dbgen_cu.py: orphaned")
    pruned = ok("build", *OUTER, "--prune", cwd=project)
    assert "1 orphan(s) removed" in pruned.stdout  # the test file, as dbgen wrote it
    assert lines_with(pruned, "out/cu.py: orphaned but edited by hand", "kept")
    assert module.read_text().endswith("# my own fix\n") and not (project / "t" / "test_dbgen_cu.py").exists()
    ok("build", *OUTER, cwd=project)  # __init__.py without cu
    again = dbgen("check", *OUTER, cwd=project)
    assert again.returncode == 1 and lines_with(again, "out/cu.py: orphaned (edited by hand")
    assert again.stderr.splitlines()[-1] == "dbgen: 1 file(s) differ: orphans edited by hand; delete or move them"


def test_cli_prune_keeps_what_no_manifest_records_and_says_why(project):
    (project / "out" / write.MANIFEST_NAME).unlink()  # as a dbgen before manifests left it
    copy = (project / "out" / "cu.py").read_text()
    (project / "out" / "cu_copy.py").write_text(copy)
    check = dbgen("check", *OUTER, cwd=project)
    assert check.returncode == 1 and lines_with(check, "out/cu_copy.py: orphaned (in no manifest", "--prune keeps it")
    assert check.stderr.splitlines()[-1] == "dbgen: 1 file(s) differ: orphans in no manifest; delete or move them"
    pruned = ok("build", *OUTER, "--prune", cwd=project)
    assert lines_with(pruned, "out/cu_copy.py: orphaned but in no manifest", "kept")
    assert (project / "out" / "cu_copy.py").read_text() == copy
    assert "cu_copy.py" not in manifest(project / "out")["files"]
    ok("check", *OUTER, cwd=project)  # the manifest now says what the build owns: the copy is not its


def test_cli_a_renamed_output_gets_test_files_that_lead_to_it(tmp_path):
    """Tests set apart from OUT name OUT's folder in their _PATH: after out/ was renamed out2/, the
    old test file (leading to out/, where no module is) was read back as current by the build and
    by check. check now calls it stale, and a plain build writes it anew."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "sq.yaml").write_text("name: sq\nexpr: x**2\ninputs: [x]\norder: 1\n")
    ok("build", "specs", "-o", "out", "--tests-out", "t", cwd=tmp_path)
    (tmp_path / "out").rename(tmp_path / "out2")
    check = dbgen("check", "specs", "-o", "out2", "--tests-out", "t", cwd=tmp_path)
    assert check.returncode == 1 and lines_with(check, "t/test_dbgen_sq.py: stale"), check.stderr
    assert check.stderr.splitlines()[-1] == "dbgen: 1 file(s) differ; run: dbgen build specs -o out2 --tests-out t"
    built = ok("build", "specs", "-o", "out2", "--tests-out", "t", cwd=tmp_path)
    assert "(1 file(s) written)" in built.stdout
    assert write.tested_folder(tmp_path / "t" / "test_dbgen_sq.py",
                               (tmp_path / "t" / "test_dbgen_sq.py").read_text()) == (tmp_path / "out2").resolve()
    ok("check", "specs", "-o", "out2", "--tests-out", "t", cwd=tmp_path)


# --- --jobs ----------------------------------------------------------------------------------------


class Notes(console.Console):
    def __init__(self):
        super().__init__()
        self.lines = []

    def note(self, message: str) -> None:
        self.lines.append(message)


@pytest.mark.parametrize("cores, memory, requested, usable", [
    (2, 64 * 2**30, 16, 2),  # the cores decide
    (16, 1 * 2**30, 16, 3),  # the memory decides: 1 GiB / 300 MB
    (16, 100 * 2**20, 4, 1),  # never below 1
    (4, None, 8, 4),  # no /proc/meminfo: the cores alone
    (4, 64 * 2**30, 3, 3),  # asked for no more than fits: as asked, nothing said
])
def test_jobs_are_capped_by_usable_cores_and_available_memory(monkeypatch, cores, memory, requested, usable):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(build_commands, "_available_memory", lambda: memory)
    say = Notes()
    assert build_commands._usable_jobs(requested, say) == usable
    if usable == requested:
        assert say.lines == []
    else:
        [line] = say.lines
        assert line.startswith(f"dbgen: --jobs {requested} lowered to {usable} ({cores} usable core(s)")


def test_available_memory_is_read_from_proc_meminfo():
    memory = build_commands._available_memory()
    if not Path("/proc/meminfo").is_file():
        assert memory is None
    else:
        assert memory is not None and memory > 0


def test_cli_says_once_that_it_lowered_jobs(project):
    result = ok("build", *OUTER, "--jobs", "100000", cwd=project)
    [line] = lines_with(result, "--jobs 100000 lowered to")
    assert "usable core(s)" in line
    assert "lowered" not in dbgen("build", *OUTER, "--jobs", "1", cwd=project).stderr


def test_copies_of_generated_files_the_manifest_does_not_list_are_left_alone(tmp_path):
    """A user's backup of a generated file (exp_backup.py), a copy in a subfolder, a copied test:
    they carry dbgen's header, but with a manifest only what it records is this build's, so check
    does not count them and --prune does not delete them."""
    out = tmp_path / "out"
    write.commit(out, {**FILES, "b.py": generated("B = 1\n")}, tests="tests")
    (out / "a_backup.py").write_text((out / "a.py").read_text())
    (out / "sub").mkdir()
    (out / "sub" / "b.py").write_text((out / "b.py").read_text())
    (out / "tests" / "test_a_backup.py").write_text((out / "tests" / "test_a.py").read_text())
    done = write.commit(out, FILES, prune=True, tests="tests")
    assert done.removed == ["b.py"] and done.orphans == ["b.py"]
    for kept in ("a_backup.py", "sub/b.py", "tests/test_a_backup.py"):
        assert (out / kept).exists(), kept
    assert write.stale_files(out, FILES) == []


def test_a_second_output_with_a_spec_of_the_same_name_in_a_shared_tests_folder_is_refused(project):
    """Two outputs sharing --tests-out, each with a spec named sq: the second build would take over
    t/test_dbgen_sq.py (its _PATH leading to its own module), and the two could never both be up
    to date. It is refused, naming the output the file tests, and writes nothing."""
    (project / "more" / "sq.yaml").write_text(SQUARE.replace("x**2", "3*x**2"))
    before = tree(project / "t")
    refused = dbgen("build", *INNER, cwd=project)
    assert refused.returncode == 2 and "t/test_dbgen_sq.py:1: tests the module of another output (out)" in \
        refused.stderr, refused.stderr
    assert tree(project / "t") == before
    ok("check", *OUTER, cwd=project)
