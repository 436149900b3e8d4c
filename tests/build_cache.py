"""A session-wide cache of builds: each spec is derived once per test session, whichever tests build it.

Generation is deterministic: a spec's files depend only on the spec (its canonical form, which its
digest hashes), the path it is shown by, the options (rewrite, the limits) and the generator's own
source. So ``pipeline._generate_noting`` (one spec -> its module, its test file, auto's notes and
the accuracy warnings) is wrapped by ``install``: a result is kept on disk under that key, in a
folder every pytest-xdist worker of the session shares, and a second build of the same spec, in
any test file and any worker, reads it back instead of running SymPy again. Only whole results are
kept: a refused spec (its problems carry line numbers; a time limit's refusal depends on the
machine's load) is derived again each time.

What is left uncached:
- tests marked ``fresh_build``: those where the build itself is what is tested (that the examples
  build within the default time limit, how long a build takes);
- the CLI run in a process of its own (``make test-all``'s subprocess mode, and calls that need a
  process whatever the mode): the path users take, end to end.

``DBGEN_TEST_BUILD_CACHE=DIR`` keeps the cache in DIR across sessions (``make test`` sets
``.pytest_cache/dbgen-builds``): builds are kept in a folder named by a digest of ``codegen/``,
``templates/`` and the versions of SymPy, mpmath, torch and ruff, so a changed generator never
reads an old build, and the folders of other generators are removed when a session starts. Unset,
the cache lives in a temporary folder removed when the session ends.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from codegen import __version__
from codegen.build import pipeline

ROOT = Path(__file__).resolve().parent.parent
ENV = "DBGEN_TEST_BUILD_CACHE"
_SESSION_ENV = "DBGEN_TEST_BUILD_CACHE_SESSION"  # the session's folder, handed to xdist workers
_enabled = True
_stats = {"hits": 0, "misses": 0, "seconds": 0.0}


def start_session() -> Path | None:
    """The cache folder for this session, made by the controlling process (workers inherit it
    through the environment); None where a worker or an enclosing session has already made it."""
    if os.environ.get(_SESSION_ENV):
        return None
    if os.environ.get(ENV):
        kept = Path(os.environ[ENV]).resolve()  # tests change the working folder
        folder = kept / _generator_digest()[:16]
        for other in kept.glob("*") if kept.is_dir() else ():
            if other != folder:  # another generator's builds: never read again
                shutil.rmtree(other, ignore_errors=True)
    else:
        folder = Path(tempfile.mkdtemp(prefix="dbgen-builds-")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[_SESSION_ENV] = str(folder)
    return folder


def end_session(folder: Path | None) -> None:
    """Remove the session's temporary folder (a folder given by DBGEN_TEST_BUILD_CACHE is kept)."""
    if folder is not None:
        os.environ.pop(_SESSION_ENV, None)
        if not os.environ.get(ENV):
            shutil.rmtree(folder, ignore_errors=True)


def install() -> None:
    """Wrap ``pipeline._generate_noting`` (once per process) with the cache."""
    if not getattr(pipeline._generate_noting, "cached", False):
        pipeline._generate_noting = _cached(pipeline._generate_noting)


def enabled(flag: bool) -> None:
    """Turn the cache on or off for what follows (off for tests marked ``fresh_build``)."""
    global _enabled
    _enabled = flag


def stats() -> dict[str, float]:
    """This process's hits, misses and seconds spent deriving so far."""
    return dict(_stats)


def save_stats() -> None:
    """Leave this process's figures in the session's folder, for ``summary`` (a worker's end)."""
    folder = os.environ.get(_SESSION_ENV)
    if folder and Path(folder).is_dir():
        (Path(folder) / f"stats-{os.getpid()}.json.tmp").write_text(json.dumps(_stats))


def summary() -> str:
    """One line on the session's cache: every process's hits, misses and seconds spent deriving."""
    folder = Path(os.environ.get(_SESSION_ENV, ""))
    saved = list(folder.glob("stats-*.json.tmp")) if folder.is_dir() else []
    figures = [json.loads(path.read_text()) for path in saved]
    total = {key: sum(f[key] for f in [*figures, _stats]) for key in _stats}
    for path in saved:
        path.unlink()
    return (f"dbgen build cache: {total['hits']} builds read back, {total['misses']} derived "
            f"in {total['seconds']:.0f} s ({folder})")


def _cached(generate):
    @functools.wraps(generate)
    def generate_noting(spec, rewrite, limits):
        folder = os.environ.get(_SESSION_ENV)
        if not _enabled or not folder:
            return generate(spec, rewrite, limits)
        path = Path(folder) / f"{_key(spec, rewrite, limits)}.json"
        kept = _read(path)
        if kept is not None:
            _stats["hits"] += 1
            return kept
        _stats["misses"] += 1
        start = time.perf_counter()
        try:
            result = generate(spec, rewrite, limits)  # a refusal raises: nothing is kept
        finally:
            _stats["seconds"] += time.perf_counter() - start
        _write(path, result)
        return result

    generate_noting.cached = True
    return generate_noting


def _key(spec, rewrite: bool, limits) -> str:
    text = json.dumps([spec.digest(__version__, rewrite), spec.path, repr(limits), _generator_digest()])
    return hashlib.sha256(text.encode()).hexdigest()


@functools.cache
def _generator_digest() -> str:
    """sha256 of the generator's source, its templates and the versions of the packages its output
    depends on: a build is only reused by the same generator."""
    from importlib.metadata import version

    digest = hashlib.sha256(json.dumps([version(p) for p in ("sympy", "mpmath", "torch", "ruff")]).encode())
    for path in sorted([*(ROOT / "codegen").rglob("*.py"), *(ROOT / "templates").rglob("*")]):
        if path.is_file():
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _read(path: Path):
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return kept["files"], tuple(kept["notes"]), tuple(kept["warnings"])


def _write(path: Path, result) -> None:
    files, notes, warnings = result
    text = json.dumps({"files": files, "notes": list(notes), "warnings": list(warnings)})
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)  # atomic: another worker reads a whole result or none
