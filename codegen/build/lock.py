"""The build lock: ``lock_output`` holds ``OUT/.dbgen.lock`` (``fcntl.flock``, released by the
kernel if the process dies; where there is no ``fcntl``, a file created exclusively), so that two
builds into one folder take turns.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .files import _delete_leftovers, _make_dirs, _remove_empty

LOCK_NAME = ".dbgen.lock"

try:
    import fcntl
except ImportError:  # not POSIX (Windows): the lock is a file created exclusively
    fcntl = None

if TYPE_CHECKING:  # typing.Self is Python 3.11's; annotations are not evaluated
    from typing import Self


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
