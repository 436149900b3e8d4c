"""The spec model: the frozen ``Spec`` and ``Extern`` a build reads, the keys and their limits.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Problem

MAX_SPEC_BYTES = 64 * 1024
# The generated code's line length where the project sets none: ruff's and Black's default.
DEFAULT_LINE_LENGTH = 88
MAX_ORDER = 8
MAX_INPUTS = 8
MAX_PARAMS = 16
MAX_OUTPUTS = 64
MAX_DOC_CHARS = 500
MAX_NAME_CHARS = 100  # the name is a file name (test_NAME.py) on every platform
STRATEGIES = ("auto", "save_inputs", "save_outputs", "intermediates", "nested")
DEFAULT_DOMAIN = (-2.0, 2.0)

KEYS = ("name", "expr", "inputs", "order", "params", "strategy", "domain", "doc", "native", "fuse", "outputs", "stack",
        "extern", "cpp")
EXTERN_KEYS = ("impl", "args", "derivatives")
MAX_EXTERNS = 16
# and exactly one of FORMULA_KEYS: expr (one output) or outputs (a vector-valued function)
REQUIRED_KEYS = ("name", "inputs", "order")
FORMULA_KEYS = ("expr", "outputs")


@dataclass(frozen=True)
class Extern:
    """A function the spec declares under ``extern:`` (docs/guide/externals.md): computed by
    ``impl`` (``module:callable``, imported by the generated module when first called), with
    one derivative formula per argument (None: the argument must be a number or a param)."""

    name: str
    impl: str
    args: tuple[str, ...]
    derivatives: tuple[str | None, ...]

    @property
    def module(self) -> str:
        return self.impl.split(":")[0]


@dataclass(frozen=True)
class Spec:
    """One validated spec file. ``lines`` maps each key to the line it stands on, and each output
    of a vector-valued spec to its own (``outputs.NAME``).

    A spec has either ``expr`` (one output) or ``outputs`` (name, expression text, in the spec's
    order), never both: ``expr`` is "" for a vector-valued spec. ``formulas`` gives either kind as
    (name, expression) pairs."""

    path: str
    name: str
    expr: str
    inputs: tuple[str, ...]
    order: int
    params: tuple[tuple[str, float], ...] = ()
    strategy: str = "auto"
    domain: tuple[tuple[str, tuple[float, float]], ...] = ()
    doc: str = ""
    native: str | None = None
    fuse: bool = False
    # the Functions also as C++ autograd code, the op torch.ops.dbgen.NAME (docs/guide/deployment.md)
    cpp: bool = False
    # the inputs whose domain the spec sets (the others have DEFAULT_DOMAIN): the generated tests
    # probe far outside the domain only for the others, so an explicit [-2, 2] is respected
    explicit_domain: tuple[str, ...] = ()
    # a build option, like fuse: the project's line length (config.line_length), which the
    # generated code is wrapped and formatted to
    line_length: int = DEFAULT_LINE_LENGTH
    # a vector-valued function (docs/guide/specs.md): (name, expression text), in the spec's order;
    # empty for a spec with expr
    outputs: tuple[tuple[str, str], ...] = ()
    # with outputs: return one tensor, the outputs stacked along a new last dimension
    stack: bool = False
    # functions the spec declares (docs/guide/externals.md), in the spec's order
    externs: tuple[Extern, ...] = ()
    lines: tuple[tuple[str, int], ...] = field(default=(), compare=False)

    def line_of(self, key: str) -> int:
        lines = dict(self.lines)
        if key == "expr" and key not in lines and "outputs" in lines:
            key = "outputs"  # a problem of "the formula" of a vector-valued spec: its outputs line
        return lines.get(key, 1)

    def problem(self, key: str, message: str) -> Problem:
        return Problem(self.path, self.line_of(key), message)

    def bounds(self, name: str) -> tuple[float, float]:
        """Input ``name``'s domain: the spec's, else the default (a Spec made in code may leave it empty)."""
        return dict(self.domain).get(name, DEFAULT_DOMAIN)

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.params)

    @property
    def is_vector(self) -> bool:
        """Whether the spec gives ``outputs`` (a vector-valued function) instead of ``expr``."""
        return bool(self.outputs)

    @property
    def formulas(self) -> tuple[tuple[str, str], ...]:
        """(name, expression text) of each output: the outputs, or the spec's name and its expr."""
        return self.outputs if self.outputs else ((self.name, self.expr),)

    def canonical(self) -> dict:
        """Everything that determines the generated code, in a stable form. A spec with expr keeps
        exactly the keys it had before outputs existed, so the digests of earlier builds hold."""
        formula = ({"outputs": [[n, e] for n, e in self.outputs], "stack": self.stack} if self.outputs
                   else {"expr": self.expr})
        return {
            "name": self.name,
            **formula,
            "inputs": list(self.inputs),
            "order": self.order,
            "params": [[n, v] for n, v in self.params],
            "strategy": self.strategy,
            "domain": [[n, list(b)] for n, b in self.domain],
            "doc": self.doc,
            "native": self.native,
            "fuse": self.fuse,
            "explicit_domain": list(self.explicit_domain),
            # only when set: the default keeps the digests (and headers) of earlier builds
            **({"extern": [[e.name, e.impl, list(e.args), list(e.derivatives)] for e in self.externs]}
               if self.externs else {}),
            **({} if self.line_length == DEFAULT_LINE_LENGTH else {"line_length": self.line_length}),
            **({"cpp": True} if self.cpp else {}),
        }

    def digest(self, version: str, rewrite: bool = True) -> str:
        """sha256 of the canonical spec, the generator version and its options: the staleness key."""
        key = {"spec": self.canonical(), "dbgen": version, **({} if rewrite else {"rewrite": False})}
        text = json.dumps(key, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


def display_path(path: Path, root: Path | None = None) -> str:
    """The path as users see it in messages and headers: relative to ``root``, '/' separators."""
    root = root or Path.cwd()
    try:
        rel = Path(path).resolve().relative_to(root.resolve())
    except ValueError:
        import os

        rel = Path(os.path.relpath(Path(path).resolve(), root.resolve()))
    return rel.as_posix()
