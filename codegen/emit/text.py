"""Text the emitter lays out: the Jinja environment, wrapped docstrings, ruff's formatting.
"""

from __future__ import annotations

import functools
import subprocess
import textwrap
from pathlib import Path

import jinja2

from ..spec import DEFAULT_LINE_LENGTH

MAX_DOC_FORMULA = 300


def template_dir() -> Path:
    """Templates ship inside the wheel as codegen/templates; in a checkout they are ../templates."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "templates"
    return packaged if packaged.is_dir() else package.parent / "templates"


@functools.cache
def _environment() -> jinja2.Environment:
    """One environment per process: it keeps the templates compiled (compiling them took about as
    long as planning a small spec)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["docstring"] = docstring_text
    env.filters["wrapped"] = _wrapped_filter
    env.filters["repr"] = repr
    return env


@jinja2.pass_context
def _wrapped_filter(context, text: str, indent: int = 0, first: int = 0, hanging: int = 0) -> str:
    """``text`` as docstring lines that fit the render's ``line_length``: the template puts the
    first line at column ``indent`` after ``first`` characters (the opening quotes); the lines after
    it get ``indent`` + ``hanging`` spaces."""
    return "\n".join(wrap_text(docstring_text(text), context["line_length"], indent, first, hanging))


def wrap_text(text: str, width: int, indent: int = 0, first: int = 0, hanging: int = 0) -> list[str]:
    """``text`` broken at spaces into lines of at most ``width`` columns, the first without its
    indentation (the template writes it), the rest indented. Blank lines separate paragraphs.
    A formula breaks before its outermost ``+`` and ``-`` where that fits. A word longer than a
    line is broken: a docstring line must fit whatever it holds."""
    outer = _wrap(_outer_spaces_only(text), width, indent, first, hanging, break_words=False)
    if all(len(line) <= width for line in outer):
        return [line.replace(_KEPT_SPACE, " ") for line in outer]
    return _wrap(text, width, indent, first, hanging)


_KEPT_SPACE = "\x00"  # a space inside parentheses, where a formula is not broken


def _outer_spaces_only(text: str) -> str:
    depth, kept = 0, []
    for char in text:
        depth += (char in "([") - (char in ")]")
        kept.append(_KEPT_SPACE if char == " " and depth > 0 else char)
    return "".join(kept)


def _wrap(text: str, width: int, indent: int, first: int, hanging: int, break_words: bool = True) -> list[str]:
    lines: list[str] = []
    for number, paragraph in enumerate(text.split("\n\n")):
        if number:
            lines.append("")
        lead = " " * (indent + first) if not lines else " " * indent
        wrapped = textwrap.wrap(" ".join(paragraph.split()), width=width, initial_indent=lead,
                                subsequent_indent=" " * (indent + hanging), break_on_hyphens=False,
                                break_long_words=break_words)
        lines += wrapped or [""]
    lines[0] = lines[0][indent + first:]
    return lines


def fits(text: str, width: int, indent: int, hanging: int) -> bool:
    """Whether ``text`` wraps at spaces into lines of at most ``width`` columns (no word broken)."""
    lines = textwrap.wrap(text, width=width, initial_indent=" " * indent, subsequent_indent=" " * (indent + hanging),
                          break_on_hyphens=False, break_long_words=False)
    return all(len(line) <= width for line in lines)


def docstring_text(text: str) -> str:
    """Text that cannot end or escape a triple-quoted docstring."""
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


@functools.lru_cache(maxsize=64)
def ruff_formatted(code: str, line_length: int = DEFAULT_LINE_LENGTH) -> str:
    """``code`` as ``ruff format`` with its default settings and ``line_length`` writes it.

    Kept for the process (a pure function of its arguments): every output a process builds has the
    same tests support files (conftest, the shared checks), each formatted once instead of once a
    build; a formatting run is a ruff process of about 5 ms.

    Users check the generated files into projects that run ruff (or Black, whose style ruff's
    follows): they must pass ``ruff format --check`` unchanged. The ruff version is bounded in the
    dependencies to one minor release, within which its style does not change, so that output
    stays byte-identical.
    """
    from ruff.__main__ import find_ruff_bin

    command = [find_ruff_bin(), "format", "--isolated", "--line-length", str(line_length),
               "--stdin-filename", "generated.py", "-"]
    result = subprocess.run(command, input=code, capture_output=True, text=True, encoding="utf-8", check=False)
    if result.returncode != 0:
        raise RuntimeError(f"ruff format refused the generated code: {result.stderr.strip()}")
    return result.stdout
