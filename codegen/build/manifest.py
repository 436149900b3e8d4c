"""What a build owns, and what is stale or orphaned.

``OUT/.dbgen-manifest.json`` (``Manifest``), written by every CLI build after its swap, lists the
files it wrote (relative to OUT, ``../`` for a tests folder beside it) with the sha256 of each
one's body as written, the tests folder, and the folders builds created. ``check`` and
``--prune`` take as orphans the manifest's files that a build no longer writes, and the generated
files found where a build of OUT writes (OUT, less any folder holding a manifest of its own:
another build's output; a tests folder's top level), less another output's test files (their
``_PATH`` leads elsewhere) and the tests' shared files that another output's tests still use. An
orphan changed since dbgen wrote it is listed but never deleted; so is one found without a
manifest (OUT of a dbgen before manifests): a build owns exactly the files its manifest records,
and a copy of a generated file the user put in OUT carries dbgen's header too. Neither is
recorded.
"""

from __future__ import annotations

import ast
import json
import os
import posixpath
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..provenance import (
    HEADER_PREFIX,
    body_digest,
    sealed_header,
    written_digest,
)
from ..signals import HeldSignals
from .files import (
    TEMP_PREFIX,
    _file_mode,
    _holds,
    _link_on_the_way,
    _make_dirs,
    is_generated,
)

MANIFEST_NAME = ".dbgen-manifest.json"
MANIFEST_FORMAT = 1
# The files of a tests folder that depend on no spec: one copy serves every output whose tests share
# the folder (--tests-out), whichever build wrote it last (they differ only in the spec path of line 1).
SHARED_TEST_FILES = ("conftest.py", "_dbgen_checks.py")


# --- the manifest: what a build owns ---------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    """``OUT/.dbgen-manifest.json``: what the builds of OUT own. ``files``: each file written (relative
    to OUT, '/' separators, ``../`` for a tests folder beside it) -> the sha256 of its body as
    written (``written_digest``), orphans kept included; ``tests``: the tests folder of the last
    build, relative to OUT; ``folders``: those builds created that still exist (a prune that
    empties one removes it)."""

    tests: str
    files: dict[str, str]
    folders: tuple[str, ...] = ()

    def text(self) -> str:
        data = {"format": MANIFEST_FORMAT, "generator": f"dbgen {__version__}", "tests": self.tests,
                "files": dict(sorted(self.files.items())), "folders": sorted(set(self.folders))}
        return json.dumps(data, indent=2) + "\n"  # ASCII: any file name, a non-UTF-8 one too


def read_manifest(out: Path) -> Manifest | None:
    """OUT's manifest; None where there is none (an output of a dbgen without manifests, 0.11 and
    earlier, or one written by ``write_files``) or it cannot be read. Entries that are not plain
    relative paths of dbgen's files (outside OUT: only a tests folder's) are left out: a manifest
    never reaches other files."""
    path = out / MANIFEST_NAME
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        return None
    tests, files, folders = data.get("tests"), data.get("files"), data.get("folders", [])
    if not isinstance(tests, str) or not isinstance(files, dict) or not isinstance(folders, list):
        return None
    owned = {rel: digest for rel, digest in files.items() if _owned_path(rel) and isinstance(digest, str)}
    return Manifest(tests, owned, tuple(f for f in folders if _relative_path(f)))


def _relative_path(rel) -> bool:
    return (isinstance(rel, str) and rel not in ("", ".") and "\0" not in rel and not os.path.isabs(rel)
            and posixpath.normpath(rel) == rel)


def _owned_path(rel) -> bool:
    if not _relative_path(rel) or not rel.endswith(".py"):
        return False
    name = posixpath.basename(rel)
    return not rel.startswith("../") or name.startswith("test_") or name in SHARED_TEST_FILES


def _record(out: Path, manifest: Manifest) -> None:
    """Write ``manifest`` unless OUT holds it already: after the swap, whole (a rename), through a
    staging folder (what a killed build leaves there, the next one deletes: ``_delete_leftovers``).
    A build killed before it leaves the previous manifest, which the next build brings up to date."""
    data = manifest.text().encode("utf-8")
    target = out / MANIFEST_NAME
    if _holds(target, data):
        return
    _make_dirs(out)
    with HeldSignals():  # a signal is delivered once the manifest is whole
        staging = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=out))
        try:
            with open(staging / MANIFEST_NAME, "xb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(staging / MANIFEST_NAME, _file_mode(target))
            os.replace(staging / MANIFEST_NAME, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


# --- the staleness check and orphans -------------------------------------------------------------


def stale_files(out: Path, files: dict[str, str]) -> list[tuple[str, str]]:
    """(relative path, 'stale' | 'missing' | 'orphaned') for every difference from a fresh build."""
    report = []
    for rel in sorted(files):
        target = out / rel
        if not target.is_file():
            report.append((rel, "missing"))
        elif not _up_to_date(out, rel, files[rel]):
            report.append((rel, "stale"))
    report += [(rel, "orphaned") for rel in orphaned_files(out, files)]
    return report


def _up_to_date(out: Path, rel: str, text: str) -> bool:
    """``out/rel`` holds ``text``; or, for a file of a tests folder beside OUT that every output
    whose tests share the folder writes (``SHARED_TEST_FILES``), holds it as another such build
    wrote it: intact, and the same but for the spec path on line 1."""
    target = out / rel
    if _holds(target, text.encode("utf-8")):
        return True
    if not rel.startswith("../") or posixpath.basename(rel) not in SHARED_TEST_FILES or target.is_symlink():
        return False
    try:
        current = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    first, _, rest = current.partition("\n")
    return (rest == text.partition("\n")[2] and first.startswith(f"{HEADER_PREFIX} {__version__} from ")
            and sealed_header(current) is not None)


@dataclass(frozen=True)
class Orphans:
    """The generated files of OUT's that a build would not write (module docstring)."""

    removable: list[str]  # as dbgen wrote them: check lists them, --prune deletes them
    edited: list[str]  # changed since dbgen wrote them: check lists them, --prune keeps them
    recorded: dict[str, str]  # each one's body hash as written, kept in the manifest while it stays
    unrecorded: list[str] = field(default_factory=list)  # found with no manifest: listed, kept, not recorded

    @property
    def all(self) -> list[str]:
        return sorted([*self.removable, *self.edited, *self.unrecorded])

    @property
    def kept(self) -> list[str]:
        """The orphans ``--prune`` keeps: the user decides."""
        return sorted([*self.edited, *self.unrecorded])


def orphaned_files(out: Path, files: dict[str, str]) -> list[str]:
    """The orphans (``find_orphans``) of a build of ``files`` into ``out``, edited ones included."""
    return find_orphans(out, files, read_manifest(out)).all


def find_orphans(out: Path, files: dict[str, str], manifest: Manifest | None) -> Orphans:
    """OUT's generated files that a build of ``files`` would not write: those ``manifest`` records;
    without one (OUT of a dbgen before manifests), the generated ``.py`` files found under OUT and
    at the top of a tests folder beside it that ``files`` writes into, all ``unrecorded`` (never
    removable: nothing tells them from a user's copy). Never:
    hidden names, symbolic links or what lies behind them, a folder holding a manifest of its own
    (another build's output), a test file whose ``_PATH`` leads to another output's module, nor a
    tests folder's shared file (``SHARED_TEST_FILES``) while another output's tests, or a kept
    orphan, beside it still use it."""
    recorded = manifest.files if manifest is not None else {}
    # with a manifest, only what it records: a copy of a generated file the user made (exp_backup.py,
    # sub/cube.py) carries dbgen's header but was never this build's to report or delete
    found = _found_generated(out, files, recorded) if manifest is None else []
    candidates = sorted({*(rel for rel in recorded if rel not in files), *found})
    home = Path(os.path.realpath(out))
    mine: dict[str, tuple[str, bool]] = {}  # rel -> (body hash as written, edited since)
    for rel in candidates:
        text = _generated_text(out, rel)
        if text is None:
            continue  # gone, replaced by a file that is not dbgen's, or behind a link
        if posixpath.basename(rel).startswith("test_"):
            tested = tested_folder(out / rel, text)
            if tested is not None and tested != home:
                continue  # another output's test, in a tests folder the two share
        digest = recorded.get(rel) or written_digest(text)
        mine[rel] = (digest, body_digest(text) != digest)
    for rel in [r for r in mine if posixpath.basename(r) in SHARED_TEST_FILES]:
        if _still_used(out, posixpath.dirname(rel), mine):
            del mine[rel]
    if manifest is None:  # nothing proves them this build's: a copy carries dbgen's header too
        return Orphans(removable=[], edited=[], recorded={}, unrecorded=sorted(mine))
    return Orphans(removable=[rel for rel, (_, edited) in mine.items() if not edited],
                   edited=[rel for rel, (_, edited) in mine.items() if edited],
                   recorded={rel: digest for rel, (digest, _) in mine.items()})


def _found_generated(out: Path, files: dict[str, str], recorded: dict[str, str]) -> list[str]:
    """The ``.py`` files (not yet known to be generated) under OUT and at the top of the tests
    folders beside it, less ``files``."""
    found = []
    for folder, subfolders, names in os.walk(out) if out.is_dir() else ():
        subfolders[:] = sorted(d for d in subfolders
                               if not d.startswith(".") and not os.path.lexists(os.path.join(folder, d, MANIFEST_NAME)))
        for name in sorted(names):
            rel = Path(folder, name).relative_to(out).as_posix()
            if name.endswith(".py") and not name.startswith(".") and rel not in files:
                found.append(rel)
    for folder in sorted({posixpath.dirname(rel) for rel in [*files, *recorded] if rel.startswith("../")}):
        where = out / folder
        if not where.is_dir() or os.path.lexists(where / MANIFEST_NAME):
            continue
        found += [f"{folder}/{path.name}" for path in sorted(where.glob("*.py"))
                  if not path.name.startswith(".") and f"{folder}/{path.name}" not in files]
    return found


def _generated_text(out: Path, rel: str) -> str | None:
    """The text of ``out/rel`` when it is a generated file reached through no symbolic link."""
    path = out / rel
    if _link_on_the_way(out, rel) is not None or not path.is_file() or not is_generated(path):
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _still_used(out: Path, folder: str, mine: dict[str, tuple[str, bool]]) -> bool:
    """Whether the tests folder ``folder`` holds a generated test that a prune keeps."""
    for path in sorted((out / folder).glob("test_*.py")):
        rel = posixpath.join(folder, path.name)
        if rel in mine and not mine[rel][1]:
            continue  # an orphan of this build's, deleted with the shared files
        if is_generated(path):
            return True
    return False


def tested_folder(test_file: Path, text: str) -> Path | None:
    """The folder (resolved) of the module a generated test file tests, read from its line
    ``_PATH = pathlib.Path(__file__).resolve().parents[N] / "..." / "NAME.py"`` without running
    anything; None for a file without such a line."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and [getattr(t, "id", None) for t in statement.targets] == ["_PATH"]:
            module = _path_value(statement.value, Path(os.path.realpath(test_file)))
            return Path(os.path.realpath(module.parent)) if module is not None else None
    return None


def _path_value(node: ast.AST, file: Path) -> Path | None:
    """The value of a ``_PATH`` expression: ``pathlib.Path(__file__).resolve()``, ``.parent``,
    ``.parents[N]`` and ``/ "name"``; None for anything else."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left = _path_value(node.left, file)
        right = node.right
        if left is None or not (isinstance(right, ast.Constant) and isinstance(right.value, str)):
            return None
        return left / right.value
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = _path_value(node.value, file)
        return inner.parent if inner is not None else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        inner = _path_value(node.value.value, file)
        index = node.slice.value if isinstance(node.slice, ast.Constant) else None
        if inner is None or type(index) is not int or not 0 <= index < len(inner.parents):
            return None
        return inner.parents[index]
    if (isinstance(node, ast.Call) and not node.args and not node.keywords and isinstance(node.func, ast.Attribute)
            and node.func.attr == "resolve" and ast.unparse(node.func.value) == "pathlib.Path(__file__)"):
        return file
    return None


def _remove_emptied(out: Path, removed: list[str], created: tuple[str, ...]) -> None:
    """After a prune: the bytecode Python cached for the removed files, then each empty folder,
    innermost first, among those on the way to them (inside ``out`` any, outside it those a
    build ``created``) and those builds ``created`` (emptied since by others: a tests folder that
    another output's tests shared). Best effort: a folder that cannot be removed stays."""
    folders = set(created)
    for rel in removed:
        folder = posixpath.dirname(rel)
        _remove_bytecode(out / folder, posixpath.basename(rel)[: -len(".py")])
        while folder not in ("", ".") and posixpath.basename(folder) != "..":
            if not folder.startswith("../") or folder in created:
                folders.add(folder)
            folder = posixpath.dirname(folder)
    for folder in sorted(folders, key=lambda f: (-f.count("/"), f)):
        path = out / folder
        if path.is_dir() and not path.is_symlink():
            try:
                path.rmdir()
            except OSError:
                pass  # not empty: something else lives there


def _remove_bytecode(folder: Path, stem: str) -> None:
    """``folder/__pycache__/STEM.*.pyc`` (what importing a removed file cached), and the cache
    folder if that empties it."""
    cache = folder / "__pycache__"
    if cache.is_symlink() or not cache.is_dir():
        return
    for path in cache.iterdir():
        if path.name.startswith(f"{stem}.") and path.suffix == ".pyc" and path.is_file() and not path.is_symlink():
            try:
                path.unlink()
            except OSError:
                pass
    try:
        cache.rmdir()
    except OSError:
        pass
