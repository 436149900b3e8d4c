"""The file operations writes are made of: what counts as dbgen's file, folders made and removed,
files written atomically with their mode, leftovers of a killed build deleted.

A file is dbgen's when its first line is the ``@generated`` header and it is a regular file (not
a symbolic link); nothing else in an output folder is ever overwritten or deleted.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tempfile
from pathlib import Path

from ..provenance import (
    HEADER_PREFIX,
)

TEMP_PREFIX = ".dbgen-tmp-"


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


def _link_on_the_way(out: Path, rel: str) -> str | None:
    """The first part of ``rel`` (a folder or the file) that is a symbolic link under ``out``."""
    parts = rel.split("/")
    for end in range(1, len(parts) + 1):
        if (out.joinpath(*parts[:end])).is_symlink():
            return "/".join(parts[:end])
    return None


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


def _holds(target: Path, data: bytes) -> bool:
    return target.is_file() and not target.is_symlink() and target.read_bytes() == data


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
