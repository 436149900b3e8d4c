"""Runnable examples of the documentation (README.md and docs/*.md), run in a temporary project.

A fenced block is an example when the line before it is a marker:

- ``<!-- docs-test: run -->`` before a ``sh`` block: its ``dbgen ...`` lines are run, in order
  (the ``pip`` and ``pytest`` lines are left to the reader);
- ``<!-- docs-test: run -->`` before a ``python`` block: the code runs in a fresh interpreter in
  the project (``run compile`` marks one that uses torch.compile);
- ``<!-- docs-test: expect PATH -->``: the project's file PATH must hold exactly the block's text
  after the commands before it.

A python block runs after every ``sh`` example above it on its page; on a page without one, the
specs it imports (``from generated import a, b``) are copied from the repository's specs/ (with
the Python files there, the implementations of the examples' externs) and built first, as a user
would after ``dbgen build``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import helpers

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKED_BLOCK = re.compile(
    r"^<!-- docs-test: (?P<action>run|expect)(?: (?P<argument>\S+))? -->\n"
    r"```(?P<language>\w+)\n(?P<text>.*?)^```$",
    re.DOTALL | re.MULTILINE,
)
TIMEOUT_S = 600


@dataclass(frozen=True)
class Example:
    document: Path
    line: int
    action: str  # run | expect
    argument: str | None  # expect: a path; run: "compile" or None
    language: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.document.relative_to(ROOT).as_posix()}:{self.line}"


def examples(document: Path) -> list[Example]:
    text = document.read_text(encoding="utf-8")
    return [
        Example(document, text.count("\n", 0, match.start()) + 1, match["action"], match["argument"],
                match["language"], match["text"])
        for match in MARKED_BLOCK.finditer(text)
    ]


def all_examples() -> list[Example]:
    return [example for document in DOCUMENTS for example in examples(document)]


def runnable_python() -> list[Example]:
    return [e for e in all_examples() if e.action == "run" and e.language == "python"]


def dbgen_commands(shell: str) -> list[list[str]]:
    """The ``dbgen`` command lines of a shell block, as argument lists (comments dropped)."""
    commands = [shlex.split(line, comments=True) for line in shell.splitlines()]
    return [words for words in commands if words and words[0] == "dbgen"]


def run_dbgen(words: list[str], project: Path) -> None:
    """A page's ``dbgen ...`` line in ``project``, as the other tests run the command
    (helpers.run_dbgen: this checkout's codegen, whatever dbgen is installed)."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    done = helpers.run_dbgen(words[1:], project, environment, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{shlex.join(words)} exited {done.returncode}:\n{done.stdout}{done.stderr}"


def check_expected(example: Example, project: Path) -> None:
    path = project / example.argument
    assert path.is_file(), f"{example.id}: the commands above it did not write {example.argument}"
    assert path.read_text(encoding="utf-8") == example.text, f"{example.id}: {example.argument} differs from the page"


def imported_specs(code: str) -> list[str]:
    return [name.strip() for names in re.findall(r"^from generated import (.+)$", code, re.MULTILINE)
            for name in names.split(",")]


def _earlier(example: Example) -> list[Example]:
    return [e for e in examples(example.document) if e.line < example.line]


def setup_commands(example: Example) -> tuple[tuple[str, ...], ...]:
    """The dbgen commands that make ``example``'s project: those of the shell examples above it
    on its page, or a build of the specs that the page's runnable blocks import (one build serves
    the whole page)."""
    shell = [e for e in _earlier(example) if e.action == "run" and e.language == "sh"]
    if shell:
        return tuple(tuple(words) for e in shell for words in dbgen_commands(e.text))
    page = [e for e in examples(example.document) if e.action == "run" and e.language == "python"]
    names = sorted({name for e in page for name in imported_specs(e.text)})
    return (("copy-specs", *names), ("dbgen", "build", "specs", "-o", "generated", "-q"))


def make_project(commands: tuple[tuple[str, ...], ...], project: Path) -> None:
    project.mkdir(parents=True)
    for words in commands:
        if words[0] == "copy-specs":
            (project / "specs").mkdir()
            for name in words[1:]:
                (project / "specs" / f"{name}.yaml").write_text((ROOT / "specs" / f"{name}.yaml").read_text())
            for kernel in (ROOT / "specs").glob("*.py"):  # the examples' extern implementations
                (project / "specs" / kernel.name).write_text(kernel.read_text())
        else:
            run_dbgen(list(words), project)


def prepare_project(example: Example, project: Path, made: dict[tuple, Path]) -> None:
    """Make ``project`` what a reader has before ``example``: a copy of a project that the same
    commands made before (kept in ``made``), else a new one; then check the files the page shows."""
    commands = setup_commands(example)
    if commands not in made:
        made[commands] = project.parent / f"made-{len(made)}"
        make_project(commands, made[commands])
    shutil.copytree(made[commands], project)
    for expected in (e for e in _earlier(example) if e.action == "expect"):
        check_expected(expected, project)


def run_python(example: Example, project: Path) -> str:
    """Run the block in a fresh interpreter in ``project`` (where ``generated`` is the project's)."""
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", example.text], cwd=project, capture_output=True, text=True,
                          env=environment, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{example.id} failed:\n{done.stdout}{done.stderr}"
    return done.stdout
