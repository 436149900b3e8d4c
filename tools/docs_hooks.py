"""MkDocs hooks (mkdocs.yml: hooks): reference pages rendered from dbgen itself at build time.

A page holds a marker line such as ``<!-- dbgen:cli -->``; the hook replaces it with text that the
installed dbgen produces, so the CLI reference, the spec schema and the error catalogue can never
fall behind the code. Each renderer is a plain function, tested in tests/end_to_end/test_docs.py.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # mkdocs may run from an environment where dbgen is not installed
    sys.path.insert(0, str(ROOT))

HELP_COLUMNS = "100"

# (title, what to do, spec text): each is built by the real CLI and its stderr shown as it is.
BAD_SPECS = [
    ("A key that is not a spec key", "fix the key (the message suggests one)",
     "name: f\nexpr: x**2\ninptus: [x]\norder: 2\n"),
    ("An operator that is not in the language", "write `**` for powers",
     "name: f\nexpr: x^2\ninputs: [x]\norder: 2\n"),
    ("A function that is not in the language", "use a listed function, or the formula suggested",
     "name: f\nexpr: gelu(x)\ninputs: [x]\norder: 2\n"),
    ("An unknown name", "declare it under `inputs` or `params`, or fix the typo",
     "name: f\nexpr: sinn(x) * k\ninputs: [x]\norder: 2\n"),
    ("An order out of range", "use a whole number from 1 to 8",
     "name: f\nexpr: x**2\ninputs: [x]\norder: 10\n"),
    ("A quoted number", "write numbers unquoted",
     "name: f\nexpr: beta * x\ninputs: [x]\norder: 1\nparams: {beta: '1'}\n"),
    ("A YAML boolean used as a name", "put the name in quotes",
     "name: f\nexpr: x * on\ninputs: [x]\norder: 1\nparams: {on: 1.0}\n"),
    ("A `native` op torch does not define", "fix the name (the message suggests one)",
     "name: f\nexpr: x**2\ninputs: [x]\norder: 2\nnative: torch.squre\n"),
    ("A function not finite on its domain", "set the `domain` the message proposes",
     "name: f\nexpr: log(x)\ninputs: [x]\norder: 2\ndomain: {x: [-1, 1]}\n"),
    ("A reserved name", "rename the spec",
     "name: torch\nexpr: x**2\ninputs: [x]\norder: 2\n"),
    ("Problems of a vector-valued spec",
     "what each message says; each output's expression is checked as `expr` is, on its own line",
     ("name: f\ninputs: [x, y]\norder: 2\noutputs:\n  r: sqrt(x**2 + y**2)\n  y: atan2(y, x)\n"
     "  phi: atan3(y, x)\n  psi: 2 * phi\nstack: 1\n")),
]


def _help_environment() -> dict[str, str]:
    return {"COLUMNS": HELP_COLUMNS, "NO_COLOR": "1", "TERM": "dumb"}


def command_names() -> list[str]:
    """The commands of the typer app, in the order they are defined."""
    import typer.main

    from codegen.cli import app

    return list(typer.main.get_command(app).commands)


def command_help(args: list[str]) -> str:
    """``dbgen ARGS --help`` as a user sees it (100 columns, no colour)."""
    from typer.testing import CliRunner

    from codegen.cli import app

    result = CliRunner().invoke(app, [*args, "--help"], prog_name="dbgen", env=_help_environment())
    if result.exit_code != 0:
        raise RuntimeError(f"dbgen {' '.join(args)} --help exited {result.exit_code}: {result.output}")
    return "\n".join(line.rstrip() for line in result.output.splitlines()).strip("\n")


def cli_reference() -> str:
    """One section per command: its ``--help``, rendered from the typer app."""
    parts = ["## dbgen", "", "```text", command_help([]), "```", ""]
    for name in command_names():
        parts += [f"## dbgen {name}", "", "```text", command_help([name]), "```", ""]
    return "\n".join(parts)


def schema_reference() -> str:
    """The JSON Schema that ``dbgen schema`` prints."""
    from codegen.spec.schema import spec_schema

    return "\n".join(["```json", json.dumps(spec_schema(), indent=2), "```"])


def build_errors(spec_text: str) -> tuple[int, str]:
    """Exit code and stderr of ``dbgen build specs/f.yaml`` on ``spec_text``, in a temporary project."""
    from typer.testing import CliRunner

    from codegen.cli import app

    with tempfile.TemporaryDirectory() as folder:
        here = Path.cwd()
        os.chdir(folder)
        try:
            Path("specs").mkdir()
            Path("specs/f.yaml").write_text(spec_text, encoding="utf-8")
            result = CliRunner().invoke(app, ["build", "specs/f.yaml", "-o", "out"], prog_name="dbgen",
                                        env=_help_environment())
        finally:
            os.chdir(here)
    return result.exit_code, result.stderr.strip()


def error_catalogue() -> str:
    """Each kind of spec problem: the spec, and what ``dbgen build`` prints for it."""
    parts = []
    for title, remedy, spec_text in BAD_SPECS:
        code, stderr = build_errors(spec_text)
        parts += [f"### {title}", "", f"What to do: {remedy}.", "", "```yaml", "# specs/f.yaml",
                  spec_text.rstrip("\n"), "```", "", f"`dbgen build specs/f.yaml` exits {code}:", "",
                  "```text", stderr, "```", ""]
    return "\n".join(parts)


RENDERERS = {
    "<!-- dbgen:cli -->": cli_reference,
    "<!-- dbgen:schema -->": schema_reference,
    "<!-- dbgen:errors -->": error_catalogue,
}


def on_page_markdown(markdown: str, page, config, files) -> str:
    for marker, render in RENDERERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown
