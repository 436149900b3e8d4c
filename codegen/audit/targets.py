"""What ``dbgen audit`` audits: the ``torch.autograd.Function`` subclasses a target names.

A target is ``package.module:Class``, ``path/to/file.py:Class``, a module (``package.module``) or a
file (``path/to/file.py``); a module or file stands for every Function subclass defined in it.
Auditing imports the target: nothing of it runs beyond what importing it runs (code the user
already runs), until the dynamic checks call the Functions themselves. A target that names nothing
(no such file, module or class) is a TargetError, an argument error; one whose import raises or
exits (``sys.exit``) an ImportFailure, reported in its row (``run`` imports in a worker process:
see ``isolation``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..provenance import HEADER_PREFIX
from .static import shown_path, source_place


class TargetError(Exception):
    """A target that cannot be resolved, with what to do."""


class NoFunctionError(TargetError):
    """A module or file that defines no Function: skipped among other targets."""


class ImportFailure(TargetError):
    """A target whose import raised or exited: the code's problem, reported in its row (the other
    targets are still audited), not an argument error. ``label``: the report's short word for it."""

    def __init__(self, message: str, label: str, file: str, line: int):
        super().__init__(message)
        self.label, self.file, self.line = label, file, line


@dataclass(frozen=True)
class Target:
    """One Function to audit: the class, and how the report names it."""

    cls: type
    name: str  # module.Class, or file.py:Class


def resolve(text: str) -> list[Target]:
    """The Functions ``text`` names (TargetError when none)."""
    where, _, attribute = text.rpartition(":") if ":" in text else (text, "", "")
    module = _load(where)
    if attribute:
        cls = getattr(module, attribute, None)
        if cls is None:
            raise TargetError(f"{text}: {where} has no {attribute!r}")
        if not _is_function(cls):
            raise TargetError(f"{text}: {attribute} is not a torch.autograd.Function subclass")
        return [Target(cls, _name(where, cls))]
    found = [Target(cls, _name(where, cls)) for cls in _defined_functions(module)]
    if not found:
        raise NoFunctionError(f"{text}: defines no torch.autograd.Function subclass")
    return found


def _load(where: str):
    """The module at ``where``: a .py file's path, else a module name."""
    if where.endswith(".py"):
        path = Path(where).resolve()  # now: the module may change the current folder as it runs
        if not path.is_file():
            raise TargetError(f"{where}: no such file")
        name = "dbgen_audit_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.parent))  # its own imports of its siblings
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code: report, do not crash
            sys.modules.pop(name, None)
            raise _import_failure(where, str(path), exc) from None
        finally:
            with contextlib.suppress(ValueError):  # the module's code may have taken it out itself
                sys.path.remove(str(path.parent))
        return module
    try:
        return importlib.import_module(where)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name and (where == exc.name
                                                                  or where.startswith(exc.name + ".")):
            raise TargetError(f"{where}: cannot import it ({exc}); give a module on sys.path or a .py "
                              "file") from None
        raise _import_failure(where, _module_file(where), exc) from None  # the module's own import fails
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code
        raise _import_failure(where, _module_file(where), exc) from None


def _import_failure(where: str, file: str, exc: BaseException) -> ImportFailure:
    """What importing ``where`` did instead of defining it: exited (SystemExit) or raised, with the
    line of ``file`` it happened at (0 where the traceback does not pass through it)."""
    line = 0
    frame = exc.__traceback__
    while frame is not None:
        if file and Path(frame.tb_frame.f_code.co_filename).resolve() == Path(file):
            line = frame.tb_lineno
        frame = frame.tb_next
    shown = shown_path(file) if file else where
    if isinstance(exc, SystemExit):
        return ImportFailure(f"importing {where} exits (sys.exit({exc.code!r})): nothing of it can be audited; "
                             "guard the module's script part with `if __name__ == \"__main__\":`",
                             "exits at import", shown, line)
    text = str(exc).strip().splitlines()
    return ImportFailure(f"importing {where} raised {type(exc).__name__}: {text[0] if text else ''}".rstrip(),
                         "raises at import", shown, line)


def _module_file(where: str) -> str:
    """The file of module ``where`` (its import failed: found again without running it), else ''."""
    try:
        spec = importlib.util.find_spec(where)
    except (Exception, SystemExit):  # noqa: BLE001 - its package's import fails too
        return ""
    return str(Path(spec.origin).resolve()) if spec is not None and spec.origin else ""


def _is_function(obj) -> bool:
    import torch

    return isinstance(obj, type) and issubclass(obj, torch.autograd.Function) and obj is not torch.autograd.Function


def _defined_functions(module) -> list[type]:
    """The Function subclasses ``module`` defines (not those it imports), in source order; of a
    module dbgen generated, its public ones (level 0): the levels after it take the values earlier
    levels pass them, and the module's own helpers (_Special, _External) take names."""
    found = [obj for obj in vars(module).values() if _is_function(obj) and obj.__module__ == module.__name__]
    if _generated_by_dbgen(module):
        found = [cls for cls in found if not (cls.__name__.startswith("_") or cls.__name__.endswith("ForCompile")
                                              or re.search(r"Level\d+$", cls.__name__))]
    return sorted(found, key=lambda cls: source_place(cls)[1])


def _generated_by_dbgen(module) -> bool:
    try:
        with open(inspect.getsourcefile(module) or "", encoding="utf-8") as handle:
            return handle.readline().startswith(HEADER_PREFIX)
    except (OSError, TypeError):
        return False


def _name(where: str, cls: type) -> str:
    return f"{where}:{cls.__name__}" if where.endswith(".py") else f"{where}.{cls.__name__}"
