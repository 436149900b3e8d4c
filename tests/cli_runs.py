"""The ``dbgen`` command run as users run it, for the tests of the CLI and of users' projects.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import run_dbgen

from codegen.build.write import MANIFEST_NAME as MANIFEST

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "specs"


def dbgen(*args: str, cwd: Path, env: dict | None = None, umask: int | None = None) -> subprocess.CompletedProcess:
    """Run ``dbgen ARGS`` in ``cwd`` (helpers.run_dbgen: a fresh process, or in this one under
    ``make test``; always a process of its own with a ``umask``); a failing run must not show a
    traceback."""
    if umask is None:
        result = run_dbgen(args, cwd, _env(env), timeout=120)
    else:
        result = subprocess.run([sys.executable, "-m", "codegen", *args], cwd=cwd, env=_env(env), capture_output=True,
                                text=True, timeout=120, preexec_fn=lambda: os.umask(umask), check=False)
    if result.returncode != 0:
        assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DBGEN_DEBUG"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # importing generated code must not add files to the trees compared
    env.update(extra or {})
    return env


def files_under(root: Path) -> set[str]:
    """The files under ``root`` but the build's manifest (tests/unit/build/test_manifest.py tests it)."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != MANIFEST}
