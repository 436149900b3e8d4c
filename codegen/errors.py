"""Errors a user can act on: each names the spec file and line."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Problem:
    """One problem in one spec file, printed as ``PATH:LINE: message``."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return _one_line(f"{self.path}:{self.line}: {self.message}")


def _one_line(text: str) -> str:
    """``text`` with line breaks and other unprintable characters (from a spec's keys or values)
    escaped, so that every problem is exactly one line of output."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


class SpecErrors(Exception):
    """Raised with every problem found, so that a build reports them all at once."""

    def __init__(self, problems: list[Problem]):
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = sorted(problems)


def did_you_mean(word: str, choices) -> str:
    """A ' (did you mean 'x'?)' hint, or '' when nothing is close."""
    import difflib

    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
