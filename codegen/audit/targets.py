"""What ``dbgen audit`` audits: the ``torch.autograd.Function`` subclasses a target names.

A target is ``package.module:Class``, ``path/to/file.py:Class``, a module (``package.module``) or a
file (``path/to/file.py``); a module or file stands for every Function subclass defined in it.
Auditing imports the target: nothing of it runs beyond what importing it runs (code the user
already runs), until the dynamic checks call the Functions themselves.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..write import HEADER_PREFIX
from .static import source_place


class TargetError(Exception):
    """A target that cannot be resolved, with what to do."""


class NoFunctionError(TargetError):
    """A module or file that defines no Function: skipped among other targets."""


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
        path = Path(where)
        if not path.is_file():
            raise TargetError(f"{where}: no such file")
        name = "dbgen_audit_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.resolve().parent))  # its own imports of its siblings
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - the user's code: report, do not crash
            raise TargetError(f"{where}: importing it raised {type(exc).__name__}: {exc}") from None
        finally:
            sys.path.remove(str(path.resolve().parent))
        return module
    try:
        return importlib.import_module(where)
    except ImportError as exc:
        raise TargetError(f"{where}: cannot import it ({exc}); give a module on sys.path or a .py file") from None
    except Exception as exc:  # noqa: BLE001 - the user's code
        raise TargetError(f"{where}: importing it raised {type(exc).__name__}: {exc}") from None


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
