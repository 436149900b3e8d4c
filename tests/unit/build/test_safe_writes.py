"""Safe writes: a build changes its output all or nothing, two builds never write one folder at
once, and nothing dbgen did not write is ever overwritten, deleted or followed.

The write phase is tested in-process with ``os.replace`` replaced by a wrapper that fails, delivers
a signal, or (in a child process) SIGKILLs at each step in turn, so that every step boundary is
tried deterministically. The CLI is tested as users run it: real SIGTERM/SIGINT sent to a build
busy on a spec that cannot finish, and a second build while the first holds the lock.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codegen import provenance, signals
from codegen.build import lock as lock_module
from codegen.build import write

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "specs"
HEADER = provenance.header("specs/x.yaml", "0" * 64) + "\n"
# A nested spec whose order-8 derivatives take minutes: a build of it is still generating when
# the test signals it, whatever the machine's speed (its limits are switched off).
ENDLESS = "name: endless\nexpr: x * tanh(softplus(x))\ninputs: [x]\norder: 8\nstrategy: nested\n"

pytestmark = pytest.mark.skipif(os.name != "posix", reason="signals and fcntl locks as on POSIX")


def generated(text: str) -> str:
    return HEADER + text


OLD = {
    "a.py": generated("A = 'old'\n"),
    "b.py": generated("B = 'old'\n"),
    "tests/test_a.py": generated("def test_a(): pass\n"),
    "orphan.py": generated("ORPHAN = 1\n"),
}
# a and b change, tests/test_a.py does not, c.py and sub/deeper/d.py are new (in new folders),
# and with prune orphan.py goes: five renames in all
NEW = {
    "a.py": generated("A = 'new'\n"),
    "b.py": generated("B = 'new'\n"),
    "tests/test_a.py": OLD["tests/test_a.py"],
    "c.py": generated("C = 'new'\n"),
    "sub/deeper/d.py": generated("D = 'new'\n"),
}
SWAP_STEPS = 5


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root, hidden ones and folders included: kind, bytes, mode, inode, mtime.
    A rollback must restore the very same files, not copies."""
    entries = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
        content = os.readlink(path) if kind == "link" else path.read_bytes() if kind == "file" else b""
        entries[path.relative_to(root).as_posix()] = (kind, content, stat.S_IMODE(info.st_mode), info.st_ino,
                                                      info.st_mtime_ns)
    return entries


def contents(root: Path) -> dict[str, str]:
    """Every file under root but the manifest (its own tests: test_manifest.py)."""
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != write.MANIFEST_NAME}


def make_output(root: Path, files: dict[str, str]) -> Path:
    """A CLI build's output of ``files`` (its manifest records them), and a file of the user's."""
    out = root / "out"
    write.commit(out, files, tests="tests")
    (out / "handwritten.py").write_text("VALUE = 1\n")  # not dbgen's: never touched
    return out


@pytest.fixture
def replace_calls(monkeypatch):
    """Install ``os.replace`` that runs ``action(n)`` before the n-th call (counting from 1);
    returns the list of (source, target) of every call."""
    real = os.replace

    def install(action):
        calls = []

        def replace(source, target):
            calls.append((source, target))
            action(len(calls))
            real(source, target)

        monkeypatch.setattr(os, "replace", replace)
        return calls

    return install


@pytest.fixture
def cli_like_handlers():
    """SIGINT and SIGTERM raise signals.Interrupted, as the CLI installs them."""
    def stop(signum, frame):
        raise signals.Interrupted(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


# --- all or nothing, in-process ---------------------------------------------------------------------


def test_commit_writes_changes_creates_folders_and_prunes(tmp_path):
    out = make_output(tmp_path, OLD)
    done = write.commit(out, NEW, prune=True)
    assert done.written == ["a.py", "b.py", "c.py", "sub/deeper/d.py"]
    assert done.removed == done.orphans == ["orphan.py"]
    assert contents(out) == {**NEW, "handwritten.py": "VALUE = 1\n"}
    assert not [p for p in out.iterdir() if p.name.startswith(write.TEMP_PREFIX)], "a temporary file was left"


@pytest.mark.parametrize("step", range(1, SWAP_STEPS + 1))
def test_an_error_at_any_step_of_the_swap_restores_the_output(tmp_path, replace_calls, step):
    out = make_output(tmp_path, OLD)
    before = snapshot(out)

    def fail(n):
        if n == step:
            raise OSError(5, "simulated I/O error")

    replace_calls(fail)
    with pytest.raises(OSError, match="simulated"):
        write.commit(out, NEW, prune=True)
    assert snapshot(out) == before


@pytest.mark.parametrize("step", range(1, SWAP_STEPS + 1))
def test_sigterm_during_the_swap_rolls_back_then_stops(tmp_path, replace_calls, cli_like_handlers, step):
    out = make_output(tmp_path, OLD)
    before = snapshot(out)

    def signal_once(n):
        if n == step:
            signal.raise_signal(signal.SIGTERM)  # held during the swap: the rename still happens

    renames = replace_calls(signal_once)
    with pytest.raises(signals.Interrupted) as stopped:
        write.commit(out, NEW, prune=True)
    assert stopped.value.signum == signal.SIGTERM
    assert snapshot(out) == before
    # the swap stopped at the step the signal came in: every later rename puts an old file back
    assert all(Path(source).parent.name.startswith(write.TEMP_PREFIX) and Path(source).name.startswith(("old", "pruned"))
               for source, _ in renames[step:]), renames


def test_a_second_signal_does_not_interrupt_the_rollback(tmp_path, replace_calls, cli_like_handlers):
    out = make_output(tmp_path, OLD)
    before = snapshot(out)

    def signal_twice(n):
        if n == 3:
            signal.raise_signal(signal.SIGTERM)
        if n == 4:  # the first undo step
            signal.raise_signal(signal.SIGINT)

    replace_calls(signal_twice)
    with pytest.raises(signals.Interrupted) as stopped:
        write.commit(out, NEW, prune=True)
    assert stopped.value.signum == signal.SIGTERM
    assert snapshot(out) == before


def test_a_commit_into_a_new_folder_that_fails_leaves_no_folder(tmp_path, replace_calls):
    def fail(n):
        if n == 3:
            raise OSError(28, "simulated full disk")

    replace_calls(fail)
    with pytest.raises(OSError):
        write.commit(tmp_path / "new" / "out", NEW)
    assert list(tmp_path.iterdir()) == []


# A child process that SIGKILLs itself at one step of a commit (arguments: out, step, kind, files).
KILLER = """
import json, os, signal, sys
from pathlib import Path
from codegen.build import write
out, step, kind, files = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
real = getattr(os, kind)
calls = {"n": 0}
def wrapper(*args):
    calls["n"] += 1
    if calls["n"] == step:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args)
setattr(os, kind, wrapper)
write.commit(out, files, prune=True)
"""


@pytest.mark.parametrize("kind, step", [("fsync", 2)] + [("replace", n) for n in range(1, SWAP_STEPS + 1)])
def test_sigkill_leaves_every_file_whole_and_the_next_build_cleans_up(tmp_path, kind, step):
    """A kill cannot be undone: each final name must still hold a complete file (old or new); the
    leftovers are hidden, ``check`` ignores them, and the next build deletes them."""
    out = make_output(tmp_path, OLD)
    killed = subprocess.run([sys.executable, "-c", KILLER, str(out), str(step), kind, json.dumps(NEW)],
                            cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    now = contents(out)
    for rel in sorted({*OLD, *NEW}):
        assert now.get(rel) in (OLD.get(rel), NEW.get(rel)), f"{rel} is neither the old nor the new file"
    leftovers = {rel.split("/")[0] for rel in now if rel not in OLD and rel not in NEW and rel != "handwritten.py"}
    assert all(name.startswith(write.TEMP_PREFIX) for name in leftovers), leftovers
    assert all(not rel.startswith(".") for rel, _ in write.stale_files(out, NEW)), "check sees temporary files"

    write.lock_output(out).release()  # what every build does first
    assert not [p for p in out.iterdir() if p.name.startswith(write.TEMP_PREFIX)]
    write.commit(out, NEW, prune=True)
    assert contents(out) == {**NEW, "handwritten.py": "VALUE = 1\n"}


# --- the lock ----------------------------------------------------------------------------------------


def test_the_lock_is_exclusive_and_leaves_nothing_behind(tmp_path):
    out = tmp_path / "out"
    lock = write.lock_output(out)
    with pytest.raises(write.OutputBusy, match=f"process {os.getpid()}"):
        write.lock_output(out)
    lock.release()
    assert not out.exists(), "the lock created the folder and should have removed it, empty"
    write.lock_output(out).release()


def test_the_lock_without_fcntl_is_an_exclusive_file(tmp_path, monkeypatch):
    monkeypatch.setattr(lock_module, "fcntl", None)
    (tmp_path / "out").mkdir()
    lock = write.lock_output(tmp_path / "out")
    with pytest.raises(write.OutputBusy, match=r"if no build is running, delete .*out/\.dbgen\.lock"):
        write.lock_output(tmp_path / "out")
    lock.release()
    assert list((tmp_path / "out").iterdir()) == []


def test_a_build_that_got_the_lock_of_a_removed_file_locks_again(tmp_path, monkeypatch):
    """Between opening the lock file and locking it, the previous build may have finished and
    removed it: the lock then guards nothing, and a third build could lock a new file."""
    out = tmp_path / "out"
    out.mkdir()
    real_open = os.open
    opened = []

    def open_then_lose_the_race(path, *args):
        fd = real_open(path, *args)
        if not opened and str(path).endswith(write.LOCK_NAME):
            os.unlink(path)  # the previous build removes the file we just opened
        opened.append(path)
        return fd

    monkeypatch.setattr(os, "open", open_then_lose_the_race)
    lock = write.lock_output(out)
    assert len(opened) == 2 and (out / write.LOCK_NAME).exists()
    lock.release()


# --- the CLI: real signals, a real second build -----------------------------------------------------


def dbgen_process(*args: str, cwd: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "DBGEN_DEBUG"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.Popen([sys.executable, "-m", "codegen", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def dbgen(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    process = dbgen_process(*args, cwd=cwd)
    stdout, stderr = process.communicate(timeout=120)
    assert "Traceback" not in stderr, stderr
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def built_project(tmp_path_factory) -> Path:
    """specs/ with two small examples, built into out/ once (a build is a subprocess: ~2 s)."""
    root = tmp_path_factory.mktemp("built")
    (root / "specs").mkdir()
    for name in ("square", "exp"):
        shutil.copy(EXAMPLES / f"{name}.yaml", root / "specs")
    assert dbgen("build", "specs", "-o", "out", cwd=root).returncode == 0
    return root


@pytest.fixture
def project(built_project, tmp_path) -> Path:
    """A private copy of ``built_project`` to change."""
    shutil.copytree(built_project, tmp_path, dirs_exist_ok=True)
    return tmp_path


def wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow)])
def test_a_signalled_build_exits_with_one_line_and_leaves_the_output_as_it_was(project, signum, code):
    (project / "specs" / "endless.yaml").write_text(ENDLESS)
    before = snapshot(project / "out")
    build = dbgen_process("build", "specs", "-o", "out", "--time-limit", "0", "--size-limit", "0", cwd=project)
    wait_for(project / "out" / write.LOCK_NAME)  # taken before generation: the build is under way
    time.sleep(0.3)  # past taking the lock, into generation (which cannot finish)

    second = dbgen("build", "specs", "-o", "out", cwd=project)
    assert second.returncode == 2
    assert second.stderr.count("\n") == 1, second.stderr
    assert "another dbgen build" in second.stderr and "out" in second.stderr and "-o" in second.stderr

    build.send_signal(signum)
    _, stderr = build.communicate(timeout=60)
    assert build.returncode == code, stderr
    assert stderr.count("\n") == 1 and "interrupted" in stderr and "Traceback" not in stderr, stderr
    assert snapshot(project / "out") == before


@pytest.mark.slow
def test_a_first_build_interrupted_leaves_no_output_folder(project):
    (project / "specs" / "endless.yaml").write_text(ENDLESS)
    build = dbgen_process("build", "specs", "-o", "fresh/out", "--time-limit", "0", "--size-limit", "0", cwd=project)
    wait_for(project / "fresh" / "out" / write.LOCK_NAME)
    time.sleep(0.3)
    build.send_signal(signal.SIGTERM)
    _, stderr = build.communicate(timeout=60)
    assert build.returncode == 143, stderr
    assert not (project / "fresh").exists()


# The CLI with a SIGTERM (or an internal error) arriving at the second rename of the swap.
AT_SECOND_RENAME = """
import os, signal, sys
import codegen.cli
real, calls = os.replace, []
def replace(source, target):
    calls.append(target)
    if len(calls) == 2:
        {action}
    real(source, target)
os.replace = replace
sys.argv = ["dbgen", "build", "specs", "-o", "out"]
codegen.cli.run()
"""


# Runs the CLI with a finder that notes, when torch is first imported, whether the SIGTERM handler
# then in place is HeldSignals' (which holds the signal until the import is done).
TORCH_IMPORT_WATCH = """
import signal, sys
from codegen import cli, signals

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and "torch" not in sys.modules:
            handler = signal.getsignal(signal.SIGTERM)
            held = getattr(handler, "__func__", None) is signals.HeldSignals._note
            print("torch imported with signals held" if held else "torch imported with signals live", file=sys.stderr)
        return None

sys.meta_path.insert(0, Watch())
sys.argv = ["dbgen", *sys.argv[1:]]
cli.run()
"""


@pytest.mark.parametrize("command", [
    ("build", "specs", "-o", "fresh"),  # exp.yaml names native: torch.exp, resolved while checking the spec
    pytest.param(("bench", "specs/square.yaml", "--size", "64", "--repeats", "1", "--orders", "1"), marks=pytest.mark.slow),
    pytest.param(("graph", "specs/square.yaml", "-o", "square.svg"), marks=[
        pytest.mark.slow,
        pytest.mark.skipif(shutil.which("dot") is None, reason="dbgen graph needs Graphviz's dot (CI installs it)")]),
])
def test_torch_is_imported_with_sigterm_held(project, command):
    """A SIGTERM landing inside torch's import was lost (the build ran on, 2 times in 12 under load)
    or aborted the process: every path by which dbgen imports torch holds the signals meanwhile."""
    env = {k: v for k, v in os.environ.items() if k != "DBGEN_DEBUG"}
    done = subprocess.run([sys.executable, "-c", TORCH_IMPORT_WATCH, *command], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "torch imported with signals held" in done.stderr, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("action, code, message", [
    ("signal.raise_signal(signal.SIGTERM)", 143, "interrupted by SIGTERM"),
    ("raise RuntimeError('simulated bug')", 3, "internal error"),
])
def test_the_cli_rolls_back_a_swap_stopped_half_way(project, action, code, message):
    for name in ("square", "exp"):  # both specs change: four files and __init__.py
        spec = project / "specs" / f"{name}.yaml"
        spec.write_text(spec.read_text().replace("doc: ", "doc: Changed. "))
    before = snapshot(project / "out")
    env = {k: v for k, v in os.environ.items() if k != "DBGEN_DEBUG"}
    result = subprocess.run([sys.executable, "-c", AT_SECOND_RENAME.format(action=action)], cwd=project, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == code, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert snapshot(project / "out") == before
    assert dbgen("build", "specs", "-o", "out", cwd=project).returncode == 0  # and nothing blocks the next one


# --- prune, check, links ----------------------------------------------------------------------------


@pytest.mark.slow
def test_prune_removes_only_generated_orphans_and_follows_no_link(project):
    out, outside = project / "out", project / "outside"
    outside.mkdir()
    (outside / "linked.py").write_text(generated("LINKED = 1\n"))
    (outside / "folder").mkdir()
    (outside / "folder" / "gen.py").write_text(generated("IN_LINKED_FOLDER = 1\n"))
    shutil.copy(EXAMPLES / "cube.yaml", project / "specs")
    assert dbgen("build", "specs", "-o", "out", cwd=project).returncode == 0
    (project / "specs" / "cube.yaml").unlink()  # its files, recorded in the manifest: the only orphans
    shutil.copy(out / "square.py", out / "copy_of_square.py")  # the user's copy: never the build's
    (out / "handwritten.py").write_text("VALUE = 1\n")
    (out / "notes.txt").write_text(generated("not Python\n"))
    (out / ".hidden.py").write_text(generated("HIDDEN = 1\n"))
    (out / "link.py").symlink_to(outside / "linked.py")
    (out / "linked_folder").symlink_to(outside / "folder", target_is_directory=True)
    leftover = out / f"{write.TEMP_PREFIX}killed"  # what a killed build leaves
    leftover.mkdir()
    (leftover / "square.py").write_text(generated("STAGED = 1\n"))
    outside_before = snapshot(outside)

    check = dbgen("check", "specs", "-o", "out", cwd=project)
    assert check.returncode == 1
    assert [line for line in check.stderr.splitlines() if ": " in line and "differ" not in line] == \
        ["out/__init__.py: stale", "out/cube.py: orphaned", "out/tests/test_cube.py: orphaned"]

    pruned = dbgen("build", "specs", "-o", "out", "--prune", cwd=project)
    assert pruned.returncode == 0, pruned.stderr
    assert "2 orphan(s) removed" in pruned.stdout
    assert not (out / "cube.py").exists() and not leftover.exists()
    for kept in ("handwritten.py", "notes.txt", ".hidden.py", "link.py", "linked_folder", "copy_of_square.py"):
        assert (out / kept).is_symlink() or (out / kept).exists(), kept
    assert (out / "link.py").is_symlink() and (out / "linked_folder").is_symlink()
    assert snapshot(outside) == outside_before
    assert dbgen("check", "specs", "-o", "out", cwd=project).returncode == 0


@pytest.mark.parametrize("link", ["tests", "square.py"])
def test_build_never_writes_through_a_link(project, link):
    out, outside = project / "out", project / "outside"
    shutil.move(out / link, outside)  # the target, generated, now lives outside, linked from out
    (out / link).symlink_to(outside)
    spec = project / "specs" / "square.yaml"  # a build would rewrite square.py and tests/test_square.py
    spec.write_text(spec.read_text().replace("doc: ", "doc: Changed. "))
    before, outside_before = snapshot(out), snapshot(outside) if outside.is_dir() else outside.read_bytes()
    result = dbgen("build", "specs", "-o", "out", cwd=project)
    assert result.returncode == 2
    assert f"out/{link}:1: is a symbolic link" in result.stderr
    assert snapshot(out) == before
    assert (snapshot(outside) if outside.is_dir() else outside.read_bytes()) == outside_before


# --- the body hash: telling a file dbgen wrote from one edited by hand ------------------------------


def test_a_sealed_file_verifies_and_any_edit_of_its_body_is_seen():
    sealed = provenance.seal(generated("A = 1\n\n\ndef f():\n    return A\n"))
    _, _, third, body = sealed.split("\n", 3)
    assert third.startswith(provenance.BODY_HASH_PREFIX) and body == "A = 1\n\n\ndef f():\n    return A\n"
    assert provenance.sealed_header(sealed) == HEADER.rstrip("\n")
    assert provenance.header_lines(sealed) == HEADER.rstrip("\n")
    edits = [sealed + "# appended\n", sealed.replace("A = 1", "A = 2"), sealed.replace("return A", "return  A"),
             sealed[:-1], sealed.replace(third, third[:-1] + ("0" if third[-1] != "0" else "1"))]
    for edited in edits:
        assert provenance.sealed_header(edited) is None, edited
    assert provenance.sealed_header(generated("A = 1\n")) is None  # no body hash: not verified
    assert provenance.seal(sealed.replace(third + "\n", "")) == sealed  # deterministic


def test_edited_by_hand_only_for_a_sealed_file_of_dbgens(tmp_path):
    sealed = provenance.seal(generated("A = 1\n"))
    cases = {"pristine.py": (sealed, False), "edited.py": (sealed + "B = 2\n", True),
             "unsealed.py": (generated("A = 1\n") + "B = 2\n", False),  # a 0.3.0 file: nothing recorded
             "foreign.py": ("# dbgen-body-sha256: 0\n\n\nA = 1\n", False)}
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        assert provenance.edited_by_hand(tmp_path / name) is expected, name
    assert provenance.edited_by_hand(tmp_path / "missing.py") is False


def test_commit_names_the_hand_edited_files_it_rewrites(tmp_path):
    files = {"a.py": provenance.seal(generated("A = 1\n")), "b.py": provenance.seal(generated("B = 1\n"))}
    out = make_output(tmp_path, {"a.py": files["a.py"] + "# edit\n", "b.py": provenance.seal(generated("B = 0\n"))})
    done = write.commit(out, files)
    assert done.written == ["a.py", "b.py"] and done.hand_edited == ["a.py"]
    assert contents(out)["a.py"] == files["a.py"]


def test_orphans_in_a_tests_folder_outside_the_output(tmp_path):
    """Files keyed '../tests/...' land beside the output; one the manifest records that a build no
    longer writes is an orphan there, the user's own tests beside or below it never are."""
    out = tmp_path / "out"
    files = {"a.py": generated("A = 1\n"), "../tests/gen/test_dbgen_a.py": generated("T = 1\n")}
    before = {**files, "../tests/gen/test_dbgen_gone.py": generated("T = 0\n")}
    assert write.commit(out, before, tests="../tests/gen").written == sorted(before)
    assert (tmp_path / "tests" / "gen" / "test_dbgen_a.py").read_text() == files["../tests/gen/test_dbgen_a.py"]
    (tmp_path / "tests" / "gen" / "test_mine.py").write_text("def test_mine(): pass\n")
    (tmp_path / "tests" / "gen" / "deeper").mkdir()
    (tmp_path / "tests" / "gen" / "deeper" / "test_other.py").write_text(generated("T = 2\n"))
    assert write.orphaned_files(out, files) == ["../tests/gen/test_dbgen_gone.py"]
    assert write.stale_files(out, files) == [("../tests/gen/test_dbgen_gone.py", "orphaned")]
    assert write.commit(out, files, prune=True).removed == ["../tests/gen/test_dbgen_gone.py"]
    assert sorted(p.name for p in (tmp_path / "tests" / "gen").rglob("*.py")) == [
        "test_dbgen_a.py", "test_mine.py", "test_other.py"]
    assert write.shown("out", "../tests/gen/test_dbgen_a.py") == "tests/gen/test_dbgen_a.py"
