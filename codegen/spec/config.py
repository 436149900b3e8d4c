"""``[tool.dbgen]`` in pyproject.toml: defaults for ``build`` and ``check``.

The nearest pyproject.toml from the current folder upward is the project's (the first one found
ends the search, as for other Python tools). Its ``[tool.dbgen]`` table may set:

    [tool.dbgen]
    specs = "specs"        # the SPECS argument (or a list: ["specs", "more/specs"])
    output = "generated"   # -o / --output
    tests = "tests/dbgen"  # --tests-out: where the generated tests go (default OUTPUT/tests)
    jobs = 2               # build --jobs
    fuse = false           # --fuse / --no-fuse
    cpp = false            # --cpp / --no-cpp: every spec also as a C++ op (docs/guide/deployment.md)

Paths are relative to the folder holding pyproject.toml, and so are the spec paths written into
generated headers: a configured build writes the same files from any subfolder. Options given on
the command line win over the table. Without SPECS and without a table, SPECS is ``specs/`` (where
``dbgen new`` writes specs).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import did_you_mean
from . import DEFAULT_LINE_LENGTH

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (the dependency is declared for it)
    import tomli as tomllib

PYPROJECT = "pyproject.toml"
DEFAULT_OUTPUT = "generated"
DEFAULT_SPECS = "specs"
# ruff refuses a line-length above this
MAX_LINE_LENGTH = 320
# key -> (expected Python type, what the message calls it); specs may also be a list of paths
KEYS = {"specs": (str, "a path in quotes"), "output": (str, "a path in quotes"),
        "tests": (str, "a path in quotes"),
        "jobs": (int, "a whole number of at least 1"), "fuse": (bool, "true or false"),
        "cpp": (bool, "true or false")}


class ConfigError(Exception):
    """A problem in pyproject.toml or a missing setting: exit 2 with this one line."""


@dataclass(frozen=True)
class Settings:
    """What build/check run with. ``root`` is the configured project's folder (None: no table);
    ``tests`` the generated tests' folder (None: OUTPUT/tests)."""

    specs: tuple[Path, ...]
    output: Path
    jobs: int
    fuse: bool
    root: Path | None
    tests: Path | None = None
    line_length: int = DEFAULT_LINE_LENGTH
    cpp: bool = False  # the project's ruff/Black line length (``line_length``)


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml in ``start`` (default: the current folder) or a folder above it."""
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        path = candidate / PYPROJECT
        if path.is_file():
            return path
    return None


def read_table(path: Path) -> dict | None:
    """The validated ``[tool.dbgen]`` table of ``path``, or None when it has none."""
    shown = _shown(path)
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read it: {exc.strerror}; check its permissions") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{shown}: invalid TOML: {exc}; fix the file") from None
    table = document.get("tool", {}).get("dbgen") if isinstance(document.get("tool"), dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        example = '[tool.dbgen] then specs = "specs"'
        raise ConfigError(f"{shown}: [tool.dbgen] must be a table of settings, e.g. {example}")
    _validate(table, shown)
    return table


def _validate(table: dict, shown: str) -> None:
    for key, value in table.items():
        if key not in KEYS:
            hint = did_you_mean(key, KEYS)
            raise ConfigError(f"{shown}: [tool.dbgen] unknown key '{key}'{hint}; the keys are: {', '.join(KEYS)}")
        kind, described = KEYS[key]
        if key == "specs" and isinstance(value, list) and value:  # several paths, each checked as one
            for item in value:
                _validate({key: item}, shown)
            continue
        wrong_type = not isinstance(value, kind) or (kind is int and isinstance(value, bool))
        if wrong_type or (kind is int and value < 1) or (kind is str and not value.strip()):
            raise ConfigError(f"{shown}: [tool.dbgen] {key} must be {described}, not {value!r}; fix it in {shown}")


def load(start: Path | None = None) -> tuple[Path | None, dict]:
    """The configured project's folder and its validated table; (None, {}) without a table."""
    pyproject = find_pyproject(start)
    table = read_table(pyproject) if pyproject else None
    return (pyproject.parent, table) if table is not None else (None, {})


def resolve(specs: Path | Sequence[Path] | None, output: Path | None, jobs: int | None, fuse: bool | None,
            start: Path | None = None, tests: Path | None = None, cpp: bool | None = None) -> Settings:
    """Command-line values, else the project's ``[tool.dbgen]``, else dbgen's defaults."""
    root, table = load(start)
    given = (specs,) if isinstance(specs, (str, Path)) else tuple(specs or ())
    configured = table.get("specs")
    if given:
        paths = tuple(Path(p) for p in given)
    elif configured is not None:
        paths = tuple(project_path(root, p) for p in ([configured] if isinstance(configured, str) else configured))
    elif project_path(root, DEFAULT_SPECS).is_dir():  # where dbgen new puts specs
        paths = (project_path(root, DEFAULT_SPECS),)
    else:
        where = _shown(root / PYPROJECT) if root else "a pyproject.toml"
        folder = _folder_with_specs(Path.cwd())
        example = f"dbgen build {folder}/" if folder else "dbgen build SPECS"
        raise ConfigError(f"no SPECS given and no specs/ folder here; name spec files or folders (e.g. {example}), "
                          f'or set specs = "{folder or "specs"}" under [tool.dbgen] in {where}')
    return Settings(
        specs=paths,
        output=output if output is not None else project_path(root, table.get("output", DEFAULT_OUTPUT)),
        jobs=jobs if jobs is not None else table.get("jobs", 1),
        fuse=fuse if fuse is not None else table.get("fuse", False),
        root=root,
        tests=tests if tests is not None else (project_path(root, table["tests"]) if "tests" in table else None),
        line_length=line_length(start),
        cpp=cpp if cpp is not None else table.get("cpp", False),
    )


def _folder_with_specs(here: Path) -> str | None:
    """The first folder here (sorted) holding .yaml/.yml files: the user's own, for a hint."""
    try:
        folders = sorted(p for p in here.iterdir() if p.is_dir() and not p.name.startswith("."))
        return next((p.name for p in folders if any(q.suffix in (".yaml", ".yml") for q in p.iterdir())), None)
    except OSError:
        return None


def project_path(root: Path | None, value: str) -> Path:
    """A configured path, relative to the project's folder, as short as possible from here."""
    if root is None:
        return Path(value)
    return Path(os.path.relpath(root / value, Path.cwd()))


def _shown(path: Path) -> str:
    try:
        return Path(os.path.relpath(path, Path.cwd())).as_posix()
    except ValueError:  # another drive on Windows
        return path.as_posix()


def line_length(start: Path | None = None) -> int:
    """The project's line length: ``line-length`` under ``[tool.ruff]``, else under ``[tool.black]``,
    of the nearest pyproject.toml from ``start`` (default: the current folder); else 88.

    The generated code is formatted and wrapped to it, so that it passes the project's own
    ``ruff format --check`` and ``ruff check`` (E501) unchanged.
    """
    path = find_pyproject(start)
    if path is None:
        return DEFAULT_LINE_LENGTH
    shown = _shown(path)
    try:
        with open(path, "rb") as handle:
            tools = tomllib.load(handle).get("tool", {})
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read it: {exc.strerror}; check its permissions") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{shown}: invalid TOML: {exc}; fix the file") from None
    for tool in ("ruff", "black"):
        table = tools.get(tool) if isinstance(tools, dict) else None
        if isinstance(table, dict) and "line-length" in table:
            value = table["line-length"]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LINE_LENGTH:
                raise ConfigError(f"{shown}: [tool.{tool}] line-length must be a whole number from 1 to "
                                  f"{MAX_LINE_LENGTH}, not {value!r}; fix it in {shown}")
            return value
    return DEFAULT_LINE_LENGTH
