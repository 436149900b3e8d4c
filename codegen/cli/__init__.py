"""The ``dbgen`` command, a thin shell over build/ and the tools.

``app`` holds the Typer app, the shared options and ``run``; each ``*_command(s)`` module adds its
commands to the app when imported, in the order ``dbgen --help`` lists them.
"""

# Imported in the order ``dbgen --help`` lists the commands: each registers its own on import.
from . import build_commands, measure_commands, audit_command, inspect_commands, scaffold_commands  # noqa: I001
from .app import app, run

__all__ = ["app", "audit_command", "build_commands", "inspect_commands", "measure_commands", "run",
           "scaffold_commands"]
