"""Where generated tests go and what each tests folder and package holds besides the modules: the
layout (``--tests-out``), the package's ``__init__.py`` and the tests' shared files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import posixpath
from pathlib import Path

from .. import __version__
from ..provenance import header, seal, sealed_header
from ..spec import (
    DEFAULT_LINE_LENGTH,
)

CHECKS_FILE = "_dbgen_checks.py"  # the generated tests' shared checks, one per tests folder


@dataclasses.dataclass(frozen=True)
class TestsLayout:
    """Where the generated tests go, relative to the output (OUT), and what makes pytest's default
    import mode (prepend) collect them beside a user's own tests of the same name.

    Inside OUT (the default OUT/tests): package markers (``__init__.py``) from OUT down to the
    folder, so that pytest names a test ``OUT.tests.test_NAME`` (OUT's own package: nothing is
    shadowed) instead of a bare ``test_NAME`` that clashes with the user's ``tests/test_NAME.py``.
    Outside OUT: no marker (the folder's name would become a top-level package, ``generated`` for
    ``tests/generated``, shadowing the real one), and basenames of their own, ``test_dbgen_NAME.py``.
    """

    folder: str = "tests"  # the tests' folder from OUT: normalized, '/' separators
    back: str = ".."  # OUT from the tests' folder

    @property
    def inside(self) -> bool:
        return not (self.folder == ".." or self.folder.startswith("../"))

    def test_file(self, name: str) -> str:
        return self.path(f"test_{name}.py" if self.inside else f"test_dbgen_{name}.py")

    def path(self, file_name: str) -> str:
        return posixpath.normpath(f"{self.folder}/{file_name}")

    def markers(self) -> list[str]:
        """The ``__init__.py`` files that make each folder from OUT (excluded) to the tests a package."""
        if not self.inside or self.folder == ".":
            return []
        parts = self.folder.split("/")
        return ["/".join([*parts[:end], "__init__.py"]) for end in range(1, len(parts) + 1)]

    def module_path(self, name: str) -> str:
        """The test files' ``_PATH`` expression: the module ``name``.py found from the test file, every
        folder name in it a string literal (data, whatever characters the name holds)."""
        parts = [p for p in self.back.split("/") if p != "."]
        ups = 0
        while parts and parts[0] == "..":
            ups, parts = ups + 1, parts[1:]
        base = "pathlib.Path(__file__).resolve()" + (".parent.parent" if ups == 1 else f".parents[{ups}]")
        return " / ".join([base, *(_string_literal(p) for p in [*parts, f"{name}.py"])])


def _string_literal(text: str) -> str:
    """``text`` as a Python string literal in double quotes, as ruff writes one: quotes, backslashes
    and what is not printable (line breaks, control characters, a non-UTF-8 name's surrogates)
    escaped."""
    return '"' + "".join("\\" + c if c in '\\"' else c if c.isprintable() else repr(c)[1:-1] for c in text) + '"'


DEFAULT_LAYOUT = TestsLayout()


def tests_layout(out: Path, tests: Path | None) -> TestsLayout:
    """The layout of tests in the folder ``tests`` for the output ``out`` (both as given, relative
    to the working directory or absolute); None: OUT/tests."""
    if tests is None:
        return DEFAULT_LAYOUT
    out_abs, tests_abs = os.path.abspath(out), os.path.abspath(tests)
    return TestsLayout(Path(os.path.relpath(tests_abs, out_abs)).as_posix(), Path(os.path.relpath(out_abs, tests_abs)).as_posix())


def _package_files(names: list[str], shown: str, layout: TestsLayout, reuse_from: Path | None,
                   line_length: int = DEFAULT_LINE_LENGTH) -> dict[str, str]:
    """OUT/__init__.py, and the tests' conftest.py, shared checks and package markers. Their headers
    hash only what they depend on (the set of names, the version), so that editing one spec
    rewrites that spec's files only; they are read back when up to date (rendering imports SymPy,
    0.6 s: most of an unchanged rebuild)."""
    init_digest = hashlib.sha256(
        f"dbgen {__version__}{_width_key(line_length)}\n{chr(10).join(sorted(names))}\n".encode()).hexdigest()
    support_digest = _support_digest(line_length)
    wanted = {"__init__.py": (init_digest, lambda: render_init(names, shown, init_digest, line_length)),
              layout.path("conftest.py"): (support_digest,
                                           lambda: render_support("conftest.py", shown, support_digest, line_length)),
              layout.path(CHECKS_FILE): (support_digest,
                                         lambda: render_support("dbgen_checks.py", shown, support_digest, line_length))}
    for marker in layout.markers():
        wanted[marker] = (support_digest,
                          lambda: render_support("tests_init.py", shown, support_digest, line_length))
    files = {}
    for rel, (digest, render) in wanted.items():
        kept = _reusable(reuse_from / rel, header(shown, digest)) if reuse_from else None
        files[rel] = kept if kept is not None else render()
    return files


def _support_digest(line_length: int = DEFAULT_LINE_LENGTH) -> str:
    """The header digest of the tests' files that depend on no spec: the version (and the line
    length) decide them."""
    return hashlib.sha256(f"dbgen {__version__} tests support{_width_key(line_length)}\n".encode()).hexdigest()


def _width_key(line_length: int) -> str:
    """What a line length adds to a package file's digest: nothing at the default, so that default
    builds keep their digests."""
    return "" if line_length == DEFAULT_LINE_LENGTH else f" line-length {line_length}"


def render_init(names: list[str], specs_path: str, digest: str, line_length: int = DEFAULT_LINE_LENGTH) -> str:
    from ..emit.render import render_init as render

    return seal(render(names, specs_path, digest, line_length))


def render_support(template: str, specs_path: str, digest: str,
                   line_length: int = DEFAULT_LINE_LENGTH) -> str:
    """A file of the generated tests' that depends on no spec (``templates/NAME.jinja``)."""
    from ..emit.render import render_support as render

    return seal(render(template, specs_path, digest, line_length))


def _reusable(path: Path, expected_header: str) -> str | None:
    """The text of ``path`` if it starts with ``expected_header`` and its body hash matches, else None."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return text if sealed_header(text) == expected_header else None
