"""How dbgen talks to a person: message levels, colour, and a progress line.

Colour only on a terminal, and never when ``NO_COLOR`` is set (https://no-color.org): logs and
pipes get plain text. The progress line goes to stderr and only when stderr is a terminal, so it
never ends up in a CI log or in a file a user redirected output to.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import typer

QUIET, NORMAL, VERBOSE = 0, 1, 2
# Whether stderr's current line holds an unfinished progress line. One terminal line for the whole
# process: any Console (the CLI makes a fresh one per error) clears it before it writes.
_progress = {"shown": False}


def colour_enabled(stream) -> bool:
    """Whether to colour text written to ``stream``."""
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    return _is_terminal(stream)


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # a closed or detached stream
        return False


def level_from_flags(quiet: bool, verbose: bool) -> int:
    """The message level of --quiet / --verbose; both at once is an argument error (exit 2)."""
    if quiet and verbose:
        typer.echo("dbgen: --quiet and --verbose contradict each other; give one of them", err=True)
        raise typer.Exit(2)
    return QUIET if quiet else VERBOSE if verbose else NORMAL


@dataclass
class Console:
    """Messages at a level: errors always, results unless quiet, details only when verbose."""

    level: int = NORMAL

    def result(self, message: str) -> None:
        """The one-line outcome of a command (stdout)."""
        if self.level >= NORMAL:
            self._clear_progress()
            _echo(message, err=False, colour="green")

    def note(self, message: str) -> None:
        """Something the user may want to act on that is not an error (stderr)."""
        if self.level >= NORMAL:
            self._clear_progress()
            _echo(message, err=True, colour="yellow")

    def detail(self, message: str) -> None:
        """A --verbose line (stderr, so that stdout keeps only results)."""
        if self.level >= VERBOSE:
            self._clear_progress()
            _echo(message, err=True, colour=None)

    def error(self, message: str) -> None:
        """A problem; always shown (stderr)."""
        self._clear_progress()
        _echo(message, err=True, colour="red")

    def progress(self, done: int, total: int, name: str) -> None:
        """'[3/12] mish' on one rewritten stderr line, on a terminal, for more than one spec."""
        if self.level != NORMAL or total < 2 or not _is_terminal(sys.stderr):
            return  # verbose prints a line per spec instead; quiet prints nothing
        sys.stderr.write(f"\r\x1b[K[{done}/{total}] {name}")
        sys.stderr.flush()
        _progress["shown"] = True

    def _clear_progress(self) -> None:
        clear_progress()


def clear_progress() -> None:
    """Erase the progress line, if one is shown, so that the next line starts at column 0."""
    if _progress["shown"]:
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()
        _progress["shown"] = False


def _echo(message: str, err: bool, colour: str | None) -> None:
    """Colour the message's prefix ('dbgen:' or 'path:line:'), the part a reader's eye looks for."""
    stream = sys.stderr if err else sys.stdout
    if colour is None or not colour_enabled(stream):
        typer.echo(message, err=err)
        return
    prefix, sep, rest = message.partition(": ")
    styled = typer.style(prefix + sep, fg=colour, bold=True) + rest if sep else typer.style(message, fg=colour)
    typer.echo(styled, err=err, color=True)
