"""Stage 6: safe, deterministic writes, the build lock, and the staleness check.

A file is dbgen's when its first line is the ``@generated`` header and it is a regular file (not
a symbolic link); nothing else in an output folder is ever overwritten or deleted.

A build changes its output all or nothing (``commit``):

1. stage: every new content is written to a hidden folder ``OUT/.dbgen-tmp-XXXX/`` (inside the
   output, so on its file system) and flushed to disk; the output is untouched.
2. swap: each changed file is hard-linked into that folder as a backup, then the staged file is
   renamed over it (``os.replace``, atomic); a pruned file is renamed into the folder. A final
   name therefore always holds a complete file, the old one or the new one.
3. on an exception, or SIGINT/SIGTERM (held back during these steps and checked between them),
   every step done is undone from the backups, in reverse; the signal is then delivered.

A multi-file swap cannot be atomic against SIGKILL or a power cut: the output may then hold some
files old and some new (each complete) and a leftover ``.dbgen-tmp-*`` folder, which ``check``
ignores and the next build deletes; that build (which sees the mix as stale) makes it whole.

Two builds into one folder: ``lock_output`` holds ``OUT/.dbgen.lock`` (``fcntl.flock``, released by
the kernel if the process dies; where there is no ``fcntl``, a file created exclusively).

What a build owns: ``OUT/.dbgen-manifest.json`` (``Manifest``), written by every CLI build after
its swap, lists the files it wrote (relative to OUT, ``../`` for a tests folder beside it) with the
sha256 of each one's body as written, the tests folder, and the folders builds created. ``check``
and ``--prune`` take as orphans the manifest's files that a build no longer writes, and the
generated files found where a build of OUT writes (OUT, less any folder holding a manifest of its
own: another build's output; a tests folder's top level), less another output's test files (their
``_PATH`` leads elsewhere) and the tests' shared files that another output's tests still use. An
orphan changed since dbgen wrote it is listed but never deleted; so is one found without a manifest
(OUT of a dbgen before manifests): a build owns exactly the files its manifest records, and a copy
of a generated file the user put in OUT carries dbgen's header too. Neither is recorded.
"""

from __future__ import annotations

import ast
import errno
import json
import os
import posixpath
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..errors import Problem, SpecErrors
from ..provenance import (
    HEADER_PREFIX,
    body_digest,
    edited_by_hand,
    sealed_header,
    written_digest,
)
from ..signals import HeldSignals

LOCK_NAME = ".dbgen.lock"
TEMP_PREFIX = ".dbgen-tmp-"
MANIFEST_NAME = ".dbgen-manifest.json"
MANIFEST_FORMAT = 1
# The files of a tests folder that depend on no spec: one copy serves every output whose tests share
# the folder (--tests-out), whichever build wrote it last (they differ only in the spec path of line 1).
SHARED_TEST_FILES = ("conftest.py", "_dbgen_checks.py")

try:
    import fcntl
except ImportError:  # not POSIX (Windows): the lock is a file created exclusively
    fcntl = None

if TYPE_CHECKING:  # typing.Self is Python 3.11's; annotations are not evaluated
    from typing import Self


def shown(out: str, rel: str) -> str:
    """How messages name the output file ``rel`` (relative to OUT, possibly through '..')."""
    return posixpath.normpath(f"{out}/{rel}")


def is_generated(path: Path) -> bool:
    """True for a regular file that starts with dbgen's header. A symbolic link never is: removing
    or replacing it would act on something outside what dbgen wrote."""
    if path.is_symlink():
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.readline().startswith(HEADER_PREFIX)
    except OSError:
        return False


def refuse_foreign(out: Path, files: dict[str, str], shown_out: str) -> None:
    """Stop before writing anything if a target exists that dbgen did not write, or a target or
    a folder on its way is a symbolic link (a write would land outside the output)."""
    problems = []
    for rel in sorted(files):
        link = _link_on_the_way(out, rel)
        if link is not None:
            problems.append(Problem(shown(shown_out, link), 1, "is a symbolic link; dbgen never writes through or "
                                    "replaces one; remove it or choose another -o"))
        elif (out / rel).exists() and not is_generated(out / rel):
            problems.append(Problem(shown(shown_out, rel), 1, "exists and was not written by dbgen; move it away or "
                                    "choose another -o"))
        else:
            owner = _other_output(out, rel)
            if owner is not None:
                problems.append(Problem(shown(shown_out, rel), 1, (
                    f"tests the module of another output ({owner}) that shares this tests folder; a spec of "
                    "the same name in two outputs needs a tests folder each: give this build another --tests-out")))
    if problems:
        raise SpecErrors(sorted(set(problems)))


def _other_output(out: Path, rel: str) -> str | None:
    """The folder of the output whose module the existing generated test file ``out/rel`` tests,
    where that is not ``out`` (two outputs sharing --tests-out, each with a spec of one name);
    else None."""
    text = _generated_text(out, rel) if posixpath.basename(rel).startswith("test_") else None
    if text is None:
        return None
    tested = tested_folder(out / rel, text)
    if tested is None or tested == Path(os.path.realpath(out)) or not tested.is_dir():
        return None
    return os.path.relpath(tested)


def _link_on_the_way(out: Path, rel: str) -> str | None:
    """The first part of ``rel`` (a folder or the file) that is a symbolic link under ``out``."""
    parts = rel.split("/")
    for end in range(1, len(parts) + 1):
        if (out.joinpath(*parts[:end])).is_symlink():
            return "/".join(parts[:end])
    return None


# --- the lock ------------------------------------------------------------------------------------


class OutputBusy(Exception):
    """Another build holds the output's lock."""


class OutputLock:
    """An acquired build lock on an output folder (see ``lock_output``)."""

    def __init__(self, out: Path, fd: int, created: list[Path]):
        self.out, self._fd, self._created = out, fd, created

    def release(self) -> None:
        """Drop the lock file, and the folders the lock created if the build left them empty."""
        path = self.out / LOCK_NAME
        if fcntl is not None:
            # Unlinked while still locked: a build that opened this file meanwhile sees, once it
            # gets the lock, that the name no longer leads to it, and starts over (_flock).
            path.unlink(missing_ok=True)
            os.close(self._fd)
        else:
            os.close(self._fd)
            path.unlink(missing_ok=True)
        _remove_empty(self._created)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock_output(out: Path) -> OutputLock:
    """Lock ``out`` against other builds (creating it if needed) and delete what killed builds left
    there. Raises ``OutputBusy`` at once, rather than waiting, when another build holds it."""
    created = _make_dirs(out)
    try:
        fd = _flock(out / LOCK_NAME) if fcntl is not None else _exclusive_create(out / LOCK_NAME)
    except BaseException:
        _remove_empty(created)
        raise
    lock = OutputLock(out, fd, created)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # named in the message another build prints
        _delete_leftovers(out)
    except BaseException:
        lock.release()
        raise
    return lock


def _flock(path: Path) -> int:
    for _ in range(10):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputBusy(_busy_message(path, stale_hint=False)) from None
        try:
            if _same_file(os.fstat(fd), os.stat(path, follow_symlinks=False)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the build we waited for removed this file; lock the new one
    raise OutputBusy(_busy_message(path, stale_hint=False))


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _exclusive_create(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise OutputBusy(_busy_message(path, stale_hint=True)) from None


def _busy_message(path: Path, stale_hint: bool) -> str:
    try:
        pid = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        pid = ""
    who = f"another dbgen build (process {pid})" if pid.isdigit() else "another dbgen build"
    out = path.parent.as_posix()
    message = f"{out}: {who} is writing this folder; wait for it to finish, or build into another folder with -o"
    if stale_hint:  # an exclusively created file outlives a killed build
        message += f"; if no build is running, delete {out}/{LOCK_NAME}"
    return message


def _make_dirs(folder: Path) -> list[Path]:
    """Create ``folder`` and missing parents; return those created, outermost first."""
    missing = []
    while not folder.exists() and not folder.is_symlink():
        missing.append(folder)
        folder = folder.parent
    created = []
    for path in reversed(missing):
        try:
            path.mkdir()
        except BaseException:
            _remove_empty(created)
            raise
        created.append(path)
    return created


def _remove_empty(created: list[Path]) -> None:
    """Remove the folders in ``created`` (outermost first) that are still empty, innermost first."""
    for path in reversed(created):
        try:
            path.rmdir()
        except OSError:
            return


def _delete_leftovers(out: Path) -> None:
    """Staging folders of builds that were killed (the lock says none is running)."""
    for path in sorted(out.glob(TEMP_PREFIX + "*")):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


# --- all-or-nothing writes -------------------------------------------------------------------------


@dataclass(frozen=True)
class Commit:
    """What a build changed: files written and orphans removed, and the orphans it found."""

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    hand_edited: list[str] = field(default_factory=list)  # among ``written``: files edited by hand
    edited_orphans: list[str] = field(default_factory=list)  # among ``orphans``: changed since written, kept
    unrecorded_orphans: list[str] = field(default_factory=list)  # among ``orphans``: in no manifest, kept


def write_files(out: Path, files: dict[str, str]) -> list[str]:
    """Write the files whose content changed, all or nothing. Returns those written."""
    return commit(out, files).written


def commit(out: Path, files: dict[str, str], prune: bool = False, tests: str | None = None) -> Commit:
    """Make ``out`` hold ``files``, all or nothing (module docstring).

    Args:
        out: the output folder (created if missing).
        files: relative path -> text (``pipeline.generate``'s result).
        prune: also delete the orphans that are as dbgen wrote them (``find_orphans``), then the
            folders this leaves empty: inside ``out`` any, outside it those a build created.
        tests: the build's tests folder relative to ``out`` (``TestsLayout.folder``): given (the
            CLI always gives it), the manifest is brought up to date; None writes none (a caller
            writing plain files).

    Returns:
        A ``Commit``: the files written, those pruned, and the orphans kept (edited by hand, or in
        no manifest).

    Raises:
        OSError: a write that failed; every step done was undone first.
        signals.Interrupted: SIGINT or SIGTERM during the swap; every step done was undone first.
    """
    manifest = read_manifest(out)
    if tests is not None and (out / MANIFEST_NAME).is_dir() and not (out / MANIFEST_NAME).is_symlink():
        raise IsADirectoryError(errno.EISDIR, "is a folder, not dbgen's manifest", str(out / MANIFEST_NAME))
    changed = [rel for rel in sorted(files) if not _up_to_date(out, rel, files[rel])]
    hand_edited = [rel for rel in changed if edited_by_hand(out / rel)]  # before they are replaced
    found = find_orphans(out, files, manifest)
    removing = found.removable if prune else []
    made: list[Path] = []
    if changed or removing:
        created = _make_dirs(out)
        try:
            with HeldSignals() as held:
                made = _stage_and_swap(out, {rel: files[rel].encode("utf-8") for rel in changed}, removing, held)
        except BaseException:
            _remove_empty(created)
            raise
    folders = manifest.folders if manifest is not None else ()
    if prune:
        _remove_emptied(out, removing, folders)
    if tests is not None:
        owned = {**{rel: d for rel, d in found.recorded.items() if rel not in removing},
                 **{rel: written_digest(text) for rel, text in files.items()}}
        made_here = [Path(os.path.relpath(folder, out)).as_posix() for folder in made]
        kept = sorted(f for f in {*folders, *made_here} if (out / f).is_dir() and not (out / f).is_symlink())
        _record(out, Manifest(tests, owned, tuple(kept)))
    return Commit(written=changed, removed=removing, orphans=found.all, hand_edited=hand_edited,
                  edited_orphans=found.edited, unrecorded_orphans=found.unrecorded)


def _holds(target: Path, data: bytes) -> bool:
    return target.is_file() and not target.is_symlink() and target.read_bytes() == data


def _stage_and_swap(out: Path, new: dict[str, bytes], removing: list[str], held: HeldSignals) -> list[Path]:
    """The swap; returns the folders it created for new files."""
    staging = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=out))
    done: list[tuple] = []  # the journal of the swap, undone in reverse on failure
    try:
        staged = {rel: _stage(staging / f"new{i}", out / rel, data, held) for i, (rel, data) in enumerate(new.items())}
        for i, (rel, source) in enumerate(staged.items()):
            _swap_in(out, rel, source, staging / f"old{i}", done)
            held.check()
        for i, rel in enumerate(removing):
            os.replace(out / rel, staging / f"pruned{i}")
            done.append(("removed", out / rel, staging / f"pruned{i}"))
            held.check()
    except BaseException:
        _undo(done)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return [step[1] for step in done if step[0] == "folder"]


def _stage(path: Path, target: Path, data: bytes, held: HeldSignals) -> Path:
    with open(path, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    # A new file gets the mode any new file would get (a rewrite keeps the one it had), not the
    # 0600 of a temporary file, so that others can read and import it.
    os.chmod(path, _file_mode(target))
    held.check()
    return path


def _swap_in(out: Path, rel: str, source: Path, backup: Path, done: list) -> None:
    target = out / rel
    for folder in _make_dirs(target.parent):
        done.append(("folder", folder))
    if target.exists():
        _keep_copy(target, backup)
        os.replace(source, target)
        done.append(("replaced", target, backup))
    else:
        os.replace(source, target)
        done.append(("created", target))


def _keep_copy(target: Path, backup: Path) -> None:
    """``backup`` is the old file: a hard link (the very same file) where the file system allows."""
    try:
        os.link(target, backup)
    except OSError:
        shutil.copy2(target, backup)


def _undo(done: list) -> None:
    for step in reversed(done):
        if step[0] in ("replaced", "removed"):
            os.replace(step[2], step[1])
        elif step[0] == "created":
            step[1].unlink(missing_ok=True)
        else:
            _remove_empty([step[1]])


def _atomic_write(target: Path, data: bytes) -> None:
    """One file written through a temporary file and a rename (for single files outside builds)."""
    mode = _file_mode(target)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _file_mode(target: Path) -> int:
    """The permission bits for ``target``: its current ones, else 0666 less the umask."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0o022)
        os.umask(umask)
        return 0o666 & ~umask


# --- the manifest: what a build owns ---------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    """``OUT/.dbgen-manifest.json``: what the builds of OUT own. ``files``: each file written (relative
    to OUT, '/' separators, ``../`` for a tests folder beside it) -> the sha256 of its body as
    written (``written_digest``), orphans kept included; ``tests``: the tests folder of the last
    build, relative to OUT; ``folders``: those builds created that still exist (a prune that
    empties one removes it)."""

    tests: str
    files: dict[str, str]
    folders: tuple[str, ...] = ()

    def text(self) -> str:
        data = {"format": MANIFEST_FORMAT, "generator": f"dbgen {__version__}", "tests": self.tests,
                "files": dict(sorted(self.files.items())), "folders": sorted(set(self.folders))}
        return json.dumps(data, indent=2) + "\n"  # ASCII: any file name, a non-UTF-8 one too


def read_manifest(out: Path) -> Manifest | None:
    """OUT's manifest; None where there is none (an output of a dbgen without manifests, 0.11 and
    earlier, or one written by ``write_files``) or it cannot be read. Entries that are not plain
    relative paths of dbgen's files (outside OUT: only a tests folder's) are left out: a manifest
    never reaches other files."""
    path = out / MANIFEST_NAME
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        return None
    tests, files, folders = data.get("tests"), data.get("files"), data.get("folders", [])
    if not isinstance(tests, str) or not isinstance(files, dict) or not isinstance(folders, list):
        return None
    owned = {rel: digest for rel, digest in files.items() if _owned_path(rel) and isinstance(digest, str)}
    return Manifest(tests, owned, tuple(f for f in folders if _relative_path(f)))


def _relative_path(rel) -> bool:
    return (isinstance(rel, str) and rel not in ("", ".") and "\0" not in rel and not os.path.isabs(rel)
            and posixpath.normpath(rel) == rel)


def _owned_path(rel) -> bool:
    if not _relative_path(rel) or not rel.endswith(".py"):
        return False
    name = posixpath.basename(rel)
    return not rel.startswith("../") or name.startswith("test_") or name in SHARED_TEST_FILES


def _record(out: Path, manifest: Manifest) -> None:
    """Write ``manifest`` unless OUT holds it already: after the swap, whole (a rename), through a
    staging folder (what a killed build leaves there, the next one deletes: ``_delete_leftovers``).
    A build killed before it leaves the previous manifest, which the next build brings up to date."""
    data = manifest.text().encode("utf-8")
    target = out / MANIFEST_NAME
    if _holds(target, data):
        return
    _make_dirs(out)
    with HeldSignals():  # a signal is delivered once the manifest is whole
        staging = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=out))
        try:
            with open(staging / MANIFEST_NAME, "xb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(staging / MANIFEST_NAME, _file_mode(target))
            os.replace(staging / MANIFEST_NAME, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


# --- the staleness check and orphans -------------------------------------------------------------


def stale_files(out: Path, files: dict[str, str]) -> list[tuple[str, str]]:
    """(relative path, 'stale' | 'missing' | 'orphaned') for every difference from a fresh build."""
    report = []
    for rel in sorted(files):
        target = out / rel
        if not target.is_file():
            report.append((rel, "missing"))
        elif not _up_to_date(out, rel, files[rel]):
            report.append((rel, "stale"))
    report += [(rel, "orphaned") for rel in orphaned_files(out, files)]
    return report


def _up_to_date(out: Path, rel: str, text: str) -> bool:
    """``out/rel`` holds ``text``; or, for a file of a tests folder beside OUT that every output
    whose tests share the folder writes (``SHARED_TEST_FILES``), holds it as another such build
    wrote it: intact, and the same but for the spec path on line 1."""
    target = out / rel
    if _holds(target, text.encode("utf-8")):
        return True
    if not rel.startswith("../") or posixpath.basename(rel) not in SHARED_TEST_FILES or target.is_symlink():
        return False
    try:
        current = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    first, _, rest = current.partition("\n")
    return (rest == text.partition("\n")[2] and first.startswith(f"{HEADER_PREFIX} {__version__} from ")
            and sealed_header(current) is not None)


@dataclass(frozen=True)
class Orphans:
    """The generated files of OUT's that a build would not write (module docstring)."""

    removable: list[str]  # as dbgen wrote them: check lists them, --prune deletes them
    edited: list[str]  # changed since dbgen wrote them: check lists them, --prune keeps them
    recorded: dict[str, str]  # each one's body hash as written, kept in the manifest while it stays
    unrecorded: list[str] = field(default_factory=list)  # found with no manifest: listed, kept, not recorded

    @property
    def all(self) -> list[str]:
        return sorted([*self.removable, *self.edited, *self.unrecorded])

    @property
    def kept(self) -> list[str]:
        """The orphans ``--prune`` keeps: the user decides."""
        return sorted([*self.edited, *self.unrecorded])


def orphaned_files(out: Path, files: dict[str, str]) -> list[str]:
    """The orphans (``find_orphans``) of a build of ``files`` into ``out``, edited ones included."""
    return find_orphans(out, files, read_manifest(out)).all


def find_orphans(out: Path, files: dict[str, str], manifest: Manifest | None) -> Orphans:
    """OUT's generated files that a build of ``files`` would not write: those ``manifest`` records;
    without one (OUT of a dbgen before manifests), the generated ``.py`` files found under OUT and
    at the top of a tests folder beside it that ``files`` writes into, all ``unrecorded`` (never
    removable: nothing tells them from a user's copy). Never:
    hidden names, symbolic links or what lies behind them, a folder holding a manifest of its own
    (another build's output), a test file whose ``_PATH`` leads to another output's module, nor a
    tests folder's shared file (``SHARED_TEST_FILES``) while another output's tests, or a kept
    orphan, beside it still use it."""
    recorded = manifest.files if manifest is not None else {}
    # with a manifest, only what it records: a copy of a generated file the user made (exp_backup.py,
    # sub/cube.py) carries dbgen's header but was never this build's to report or delete
    found = _found_generated(out, files, recorded) if manifest is None else []
    candidates = sorted({*(rel for rel in recorded if rel not in files), *found})
    home = Path(os.path.realpath(out))
    mine: dict[str, tuple[str, bool]] = {}  # rel -> (body hash as written, edited since)
    for rel in candidates:
        text = _generated_text(out, rel)
        if text is None:
            continue  # gone, replaced by a file that is not dbgen's, or behind a link
        if posixpath.basename(rel).startswith("test_"):
            tested = tested_folder(out / rel, text)
            if tested is not None and tested != home:
                continue  # another output's test, in a tests folder the two share
        digest = recorded.get(rel) or written_digest(text)
        mine[rel] = (digest, body_digest(text) != digest)
    for rel in [r for r in mine if posixpath.basename(r) in SHARED_TEST_FILES]:
        if _still_used(out, posixpath.dirname(rel), mine):
            del mine[rel]
    if manifest is None:  # nothing proves them this build's: a copy carries dbgen's header too
        return Orphans(removable=[], edited=[], recorded={}, unrecorded=sorted(mine))
    return Orphans(removable=[rel for rel, (_, edited) in mine.items() if not edited],
                   edited=[rel for rel, (_, edited) in mine.items() if edited],
                   recorded={rel: digest for rel, (digest, _) in mine.items()})


def _found_generated(out: Path, files: dict[str, str], recorded: dict[str, str]) -> list[str]:
    """The ``.py`` files (not yet known to be generated) under OUT and at the top of the tests
    folders beside it, less ``files``."""
    found = []
    for folder, subfolders, names in os.walk(out) if out.is_dir() else ():
        subfolders[:] = sorted(d for d in subfolders
                               if not d.startswith(".") and not os.path.lexists(os.path.join(folder, d, MANIFEST_NAME)))
        for name in sorted(names):
            rel = Path(folder, name).relative_to(out).as_posix()
            if name.endswith(".py") and not name.startswith(".") and rel not in files:
                found.append(rel)
    for folder in sorted({posixpath.dirname(rel) for rel in [*files, *recorded] if rel.startswith("../")}):
        where = out / folder
        if not where.is_dir() or os.path.lexists(where / MANIFEST_NAME):
            continue
        found += [f"{folder}/{path.name}" for path in sorted(where.glob("*.py"))
                  if not path.name.startswith(".") and f"{folder}/{path.name}" not in files]
    return found


def _generated_text(out: Path, rel: str) -> str | None:
    """The text of ``out/rel`` when it is a generated file reached through no symbolic link."""
    path = out / rel
    if _link_on_the_way(out, rel) is not None or not path.is_file() or not is_generated(path):
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _still_used(out: Path, folder: str, mine: dict[str, tuple[str, bool]]) -> bool:
    """Whether the tests folder ``folder`` holds a generated test that a prune keeps."""
    for path in sorted((out / folder).glob("test_*.py")):
        rel = posixpath.join(folder, path.name)
        if rel in mine and not mine[rel][1]:
            continue  # an orphan of this build's, deleted with the shared files
        if is_generated(path):
            return True
    return False


def tested_folder(test_file: Path, text: str) -> Path | None:
    """The folder (resolved) of the module a generated test file tests, read from its line
    ``_PATH = pathlib.Path(__file__).resolve().parents[N] / "..." / "NAME.py"`` without running
    anything; None for a file without such a line."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and [getattr(t, "id", None) for t in statement.targets] == ["_PATH"]:
            module = _path_value(statement.value, Path(os.path.realpath(test_file)))
            return Path(os.path.realpath(module.parent)) if module is not None else None
    return None


def _path_value(node: ast.AST, file: Path) -> Path | None:
    """The value of a ``_PATH`` expression: ``pathlib.Path(__file__).resolve()``, ``.parent``,
    ``.parents[N]`` and ``/ "name"``; None for anything else."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left = _path_value(node.left, file)
        right = node.right
        if left is None or not (isinstance(right, ast.Constant) and isinstance(right.value, str)):
            return None
        return left / right.value
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = _path_value(node.value, file)
        return inner.parent if inner is not None else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        inner = _path_value(node.value.value, file)
        index = node.slice.value if isinstance(node.slice, ast.Constant) else None
        if inner is None or type(index) is not int or not 0 <= index < len(inner.parents):
            return None
        return inner.parents[index]
    if (isinstance(node, ast.Call) and not node.args and not node.keywords and isinstance(node.func, ast.Attribute)
            and node.func.attr == "resolve" and ast.unparse(node.func.value) == "pathlib.Path(__file__)"):
        return file
    return None


def _remove_emptied(out: Path, removed: list[str], created: tuple[str, ...]) -> None:
    """After a prune: the bytecode Python cached for the removed files, then each empty folder,
    innermost first, among those on the way to them (inside ``out`` any, outside it those a
    build ``created``) and those builds ``created`` (emptied since by others: a tests folder that
    another output's tests shared). Best effort: a folder that cannot be removed stays."""
    folders = set(created)
    for rel in removed:
        folder = posixpath.dirname(rel)
        _remove_bytecode(out / folder, posixpath.basename(rel)[: -len(".py")])
        while folder not in ("", ".") and posixpath.basename(folder) != "..":
            if not folder.startswith("../") or folder in created:
                folders.add(folder)
            folder = posixpath.dirname(folder)
    for folder in sorted(folders, key=lambda f: (-f.count("/"), f)):
        path = out / folder
        if path.is_dir() and not path.is_symlink():
            try:
                path.rmdir()
            except OSError:
                pass  # not empty: something else lives there


def _remove_bytecode(folder: Path, stem: str) -> None:
    """``folder/__pycache__/STEM.*.pyc`` (what importing a removed file cached), and the cache
    folder if that empties it."""
    cache = folder / "__pycache__"
    if cache.is_symlink() or not cache.is_dir():
        return
    for path in cache.iterdir():
        if path.name.startswith(f"{stem}.") and path.suffix == ".pyc" and path.is_file() and not path.is_symlink():
            try:
                path.unlink()
            except OSError:
                pass
    try:
        cache.rmdir()
    except OSError:
        pass
