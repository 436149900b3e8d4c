"""Stage 1, spec: a YAML spec file -> a validated, frozen ``Spec``.

``load`` reads a file and checks the keys against each other, ``fields`` reads each key,
``nodes`` composes the YAML safely (line marks kept) and ``model`` holds what a build reads;
``schema`` writes the JSON schema editors check specs with, ``config`` reads [tool.dbgen] and
``native`` resolves a spec's ``native`` op.
"""

from .load import load_spec, load_text, native_problems
from .model import (
    DEFAULT_DOMAIN,
    DEFAULT_LINE_LENGTH,
    KEYS,
    STRATEGIES,
    Extern,
    Spec,
    display_path,
)

__all__ = [
    "DEFAULT_DOMAIN", "DEFAULT_LINE_LENGTH", "KEYS", "STRATEGIES", "Extern", "Spec", "display_path", "load_spec",
    "load_text", "native_problems",
]
