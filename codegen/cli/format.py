"""How the ``dbgen`` command shows its arguments and its usage errors.

Help is click's plain layout (the app sets ``rich_markup_mode=None``): an option shows its
metavar (``--jobs N``), a flag none. Arguments appear in usage lines and under "Arguments" as
click writes them: ``SPEC...`` when required, ``[SPECS]...`` when optional.

A usage error (an unknown option, a bad or missing value, a missing argument) is one line on
stderr, ``dbgen: what is wrong; see 'dbgen COMMAND --help'``, with exit 2, like every other
error a user can cause; click would print the usage, a hint and the error on three lines.
"""

from __future__ import annotations

import sys

import typer
from typer.core import TyperCommand, TyperGroup

PROG = "dbgen"  # the name in usage lines, also under `python -m codegen`, as every message calls it
# click's exception classes: typer vendors click in recent versions, so take them from typer itself
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def argument_label(param) -> str:
    """``SPEC`` or ``SPECS...`` (several), from the argument's metavar."""
    return (param.metavar or param.name.upper()) + ("..." if param.nargs != 1 else "")


def argument_usage(param) -> str:
    """``SPEC...`` (required) or ``[SPECS]...`` (optional), as click writes usage lines."""
    name = param.metavar or param.name.upper()
    shown = name if param.required else f"[{name}]"
    return shown + ("..." if param.nargs != 1 else "")


def usage_error_line(error) -> str:
    """click's message on one line, and where to read more."""
    message = " ".join(error.format_message().split()).rstrip(".")
    message = message[:1].lower() + message[1:]  # 'Missing argument' -> 'missing argument', as dbgen's own
    ctx = getattr(error, "ctx", None)
    where = ctx.command_path if ctx is not None else PROG
    return f"{PROG}: {message}; see '{where} --help'"


class DbgenCommand(TyperCommand):
    """A command whose usage line and Arguments section use the arguments' metavars."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        arguments = [argument_usage(p) for p in self.get_params(ctx) if p.param_type_name == "argument"]
        return [self.options_metavar, *arguments] if self.options_metavar else arguments

    def format_options(self, ctx, formatter) -> None:
        params = self.get_params(ctx)
        arguments = [(argument_label(p), p.help or "")
                     for p in params if p.param_type_name == "argument"]
        options = [record for p in params if p.param_type_name == "option"
                   for record in [p.get_help_record(ctx)] if record is not None]
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class DbgenGroup(TyperGroup):
    """The app: usage errors as one ``dbgen:`` line (exit 2); help for no arguments, as before."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            result = super().main(args, PROG, complete_var, standalone_mode=False, **extra)
        except _CLICK_ERROR as error:
            if not standalone_mode:
                raise
            sys.exit(_report(error))
        if not standalone_mode:
            return result
        sys.exit(result if isinstance(result, int) else 0)  # typer.Exit(n) comes back as n


def _report(error) -> int:
    from .. import console

    if type(error).__name__ == "NoArgsIsHelpError":  # `dbgen` alone: the help, as click prints it
        error.show()
    else:
        console.Console().error(usage_error_line(error))
    return error.exit_code
