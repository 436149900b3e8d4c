"""The object-like macros the C++ op's headers define, for codegen/spec/cpp_names.py.

    python tools/cpp_macros.py > /tmp/macros.txt

Runs the preprocessor (``c++ -dM -E``, or ``$CXX``) on the op template's includes with torch's
include paths, as ``torch.utils.cpp_extension`` compiles it, and prints each object-like macro
whose name a spec could use (a letter first), sorted, one per line. A value named like one of
them would be replaced by the preprocessor in the op's source. Run from the repository root.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def includes() -> str:
    """The ``#include`` lines of templates/op.cpp.jinja."""
    template = (ROOT / "templates" / "op.cpp.jinja").read_text()
    return "\n".join(line for line in template.splitlines() if line.startswith("#include")) + "\n"


def object_like_macros() -> list[str]:
    """Names of the object-like macros defined after the op's includes (raises if no compiler runs)."""
    import torch
    from torch.utils import cpp_extension

    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "op.cpp"
        source.write_text(includes())
        command = [os.environ.get("CXX", "c++"), "-std=c++17", "-dM", "-E", str(source),
                   f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
                   *(f"-I{path}" for path in cpp_extension.include_paths())]
        defined = subprocess.run(command, check=True, capture_output=True, text=True, timeout=300).stdout
    return sorted(set(re.findall(r"^#define ([A-Za-z][A-Za-z0-9_]*)[ \n]", defined, flags=re.MULTILINE)))


if __name__ == "__main__":
    sys.stdout.write("".join(f"{name}\n" for name in object_like_macros()))
