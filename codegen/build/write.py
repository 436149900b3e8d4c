"""Safe, deterministic writes, all or nothing; the face of the write stage.

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

The lock two builds into one folder take turns on is ``lock``'s; what a build owns, and what is
stale or orphaned, ``manifest``'s; the file operations these are made of, ``files``'. This module
is the write stage's face: ``commit`` and the names the CLI and the pipeline read (``__all__``).
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Problem, SpecErrors
from ..provenance import (
    edited_by_hand,
    written_digest,
)
from ..signals import HeldSignals
from .files import (
    TEMP_PREFIX,
    _file_mode,
    _link_on_the_way,
    _make_dirs,
    _remove_empty,
    is_generated,
    shown,
)
from .lock import LOCK_NAME, OutputBusy, lock_output
from .manifest import (
    MANIFEST_NAME,
    Manifest,
    Orphans,
    _generated_text,
    _record,
    _remove_emptied,
    _up_to_date,
    find_orphans,
    orphaned_files,
    read_manifest,
    stale_files,
    tested_folder,
)

__all__ = [  # the write stage as the CLI, the pipeline and the tests read it
    "LOCK_NAME", "MANIFEST_NAME", "TEMP_PREFIX", "Commit", "Orphans", "OutputBusy", "commit", "find_orphans",
    "lock_output", "orphaned_files", "read_manifest", "refuse_foreign", "shown", "stale_files", "tested_folder",
    "write_files",
]


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
