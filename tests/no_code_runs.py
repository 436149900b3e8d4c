"""A guard for tests that feed the loader hostile text: ``nothing_runs`` refuses eval/exec, code
objects, sympify of text and subprocesses while its block runs (test_fuzz.py and the spec tests
use it).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import os
import subprocess
import sys
import types
from unittest import mock

import sympy
import sympy.parsing.sympy_parser

import codegen.language.expr  # noqa: F401 - imported here, as importing compiles code, which the guard refuses


class _CodeRun(AssertionError):
    pass


def _module_file(source, filename=None) -> bool:
    """Whether ``source`` is a module being imported from a .py file (SymPy imports some of its
    modules lazily, and importlib compiles and execs them), never text from a spec."""
    name = source.co_filename if isinstance(source, types.CodeType) else filename
    return isinstance(name, str) and name.endswith(".py") and os.path.isfile(name)


@contextlib.contextmanager
def nothing_runs():
    """eval/exec, compile to code objects, sympify/parse_expr of text, os.system and subprocesses
    refuse while the block runs; compile to an AST (the parser's) and imports of modules stay allowed."""

    def refuse(name, unless=lambda *args: False):
        def refused(*args, **kwargs):
            if unless(*args):
                return real[name](*args, **kwargs)
            raise _CodeRun(f"{name} called with {args!r:.200}")
        return refused

    real = {"eval": builtins.eval, "exec": builtins.exec, "compile": builtins.compile}
    real_sympify = sympy.sympify

    def ast_only_compile(source, filename, mode, flags=0, *args, **kwargs):
        if not flags & ast.PyCF_ONLY_AST and not _module_file(source, filename):
            refuse("compile")(source)
        return real["compile"](source, filename, mode, flags, *args, **kwargs)

    def sympify_no_text(value, *args, **kwargs):
        if isinstance(value, str):
            refuse("sympify")(value)
        return real_sympify(value, *args, **kwargs)

    patches = [
        mock.patch.object(builtins, "eval", refuse("eval", unless=_module_file)),
        mock.patch.object(builtins, "exec", refuse("exec", unless=_module_file)),
        mock.patch.object(builtins, "compile", ast_only_compile),
        mock.patch.object(sympy, "sympify", sympify_no_text),
        mock.patch.object(sys.modules["sympy.core.sympify"], "sympify", sympify_no_text),
        mock.patch.object(sympy, "parse_expr", refuse("parse_expr")),
        mock.patch.object(sympy.parsing.sympy_parser, "parse_expr", refuse("parse_expr")),
        mock.patch.object(os, "system", refuse("os.system")),
        mock.patch.object(subprocess, "Popen", refuse("subprocess.Popen")),
    ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield
