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


MAX_SUGGESTED_CHARS = 100


def did_you_mean(word: str, choices) -> str:
    """A ' (did you mean 'x'?)' hint, or '' when nothing is close (see ``close_match``)."""
    close = close_match(word, choices)
    return f" (did you mean '{close}'?)" if close else ""


def close_match(word: str, choices) -> str | None:
    """The choice ``word`` is most likely a typo of, or None.

    A typo is at most one edit (a letter added, dropped, changed, or two neighbours swapped) per
    three letters of ``word``, at least one, ignoring case; and a word of up to four letters must
    keep its first letter, because short names that differ there are different words, not typos
    (min is not sin, max is not tan). The closest choice wins; ties go to the alphabetically first.
    Words longer than ``MAX_SUGGESTED_CHARS`` get no suggestion.
    """
    if len(word) > MAX_SUGGESTED_CHARS:
        return None  # not a name anyone types: no typo of one, and the work stays bounded
    lowered = word.lower()
    allowed = max(1, len(word) // 3)
    best: tuple[int, str] | None = None
    for choice in sorted(choices):
        if len(word) <= 4 and choice[:1].lower() != lowered[:1]:
            continue
        if abs(len(word) - len(choice)) > allowed:
            continue  # at least that many edits: skipped unmeasured, which bounds the work on long words
        distance = edit_distance(lowered, choice.lower())
        if distance <= allowed and (best is None or distance < best[0]):
            best = (distance, choice)
    return best[1] if best else None


def edit_distance(a: str, b: str) -> int:
    """Edits (insert, delete, substitute, swap of neighbours) that turn ``a`` into ``b``."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            cost = current[j - 1] + 1, previous[j] + 1, previous[j - 1] + (ca != cb)
            value = min(cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                value = min(value, previous2[j - 2] + 1)
            current.append(value)
        previous2, previous = previous, current
    return previous[-1]
