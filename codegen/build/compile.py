"""``dbgen build --compile``: each written module's C++ op (``cpp: true``) compiled ahead of time.

A module compiles its op on first import (``_load_op``) and, where it cannot, warns and runs its
Python Functions. Here each is imported in a fresh process with that warning made an error, so a
deployment step learns of a failed compile at build time, with the compiler's message, and gets
the path of each library a C++ program loads.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

OP_MARKER = '\n_OP_SOURCE = r"""'  # a module with a C++ op (module.py.jinja)
_IMPORT = """
import importlib.util, sys, warnings
warnings.simplefilter("error", UserWarning)
spec = importlib.util.spec_from_file_location("dbgen_compiled_module", sys.argv[1])
module = importlib.util.module_from_spec(spec)
try:
    spec.loader.exec_module(module)
except UserWarning as warning:
    sys.exit(str(warning))
print(module.OP_LIBRARY)
"""


@dataclass(frozen=True)
class Compiled:
    """One module's op: ``library`` its path, or ``error`` why it could not be built."""

    module: str
    library: str | None = None
    error: str | None = None


def modules_with_ops(out: Path, files: dict[str, str]) -> list[str]:
    """The written modules (relative paths in ``out``) that hold a C++ op, in order."""
    return sorted(rel for rel, text in files.items() if rel.endswith(".py") and "/" not in rel and OP_MARKER in text)


def compile_ops(out: Path, modules: list[str], timeout: float = 900) -> list[Compiled]:
    """Import each module in a fresh process, which compiles its op (or loads the cached one).

    Args:
        out: the output folder.
        modules: module paths relative to ``out`` (``modules_with_ops``).
        timeout: seconds for each module's compile.

    Returns:
        One ``Compiled`` per module, in order.
    """
    results = []
    for rel in modules:
        try:
            run = subprocess.run([sys.executable, "-c", _IMPORT, str(out / rel)], capture_output=True, text=True,
                                 timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            results.append(Compiled(rel, error=f"the compile took more than {timeout:g} s"))
            continue
        if run.returncode == 0:
            results.append(Compiled(rel, library=run.stdout.strip().splitlines()[-1]))
        else:
            lines = (run.stderr or run.stdout).strip().splitlines() or [f"exit {run.returncode}"]
            results.append(Compiled(rel, error=lines[-1]))
    return results
