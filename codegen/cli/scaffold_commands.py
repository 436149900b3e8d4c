"""``dbgen new`` and ``dbgen schema``: a new spec from a formula, the JSON schema for editors.
"""

from __future__ import annotations

from pathlib import Path

import typer

from .. import console
from .app import _build_hint, _configured_specs_folder, _io, command

NEW_DOMAIN_OPT = typer.Option(
    [], "--domain", metavar="INPUT=LOW,HIGH",
    help="Where an input's values lie (the build checks every order is finite there; default -2,2); repeat per input.",
)


@command()
def new(
    name: str = typer.Argument(..., metavar="NAME", help="The function's name, lower snake_case; the file is NAME.yaml."),
    expr: str = typer.Option(..., "--expr", metavar="EXPR", help="The formula, e.g. 'x * tanh(softplus(x))'; ** is power."),
    inputs: str = typer.Option(..., "--inputs", metavar="NAMES", help="The input names in call order, comma-separated: x,y."),
    order: int = typer.Option(2, "--order", metavar="N", help="Highest derivative order written out and verified (1 to 8)."),
    params: list[str] = typer.Option([], "--params", metavar="NAME=NUMBER", help="Constants as NAME=NUMBER, comma-separated or repeated."),
    strategy: str | None = typer.Option(
        None, "--strategy", metavar="STRATEGY", help="auto (the default), save_inputs, save_outputs, intermediates or nested."
    ),
    domain: list[str] = NEW_DOMAIN_OPT,
    doc: str | None = typer.Option(None, "--doc", metavar="TEXT", help="A one-line description for the docstring."),
    output: Path | None = typer.Option(
        None, "-o", "--output", metavar="PATH",
        help="A folder, or a .yaml path. Default: specs in pyproject.toml (tool.dbgen), else specs/.",
    ),
) -> None:
    """Write a new spec file, checked as build checks it; never overwrites one.

    Its first line points editors at the spec schema: the nearest
    dbgen-spec.schema.json in its folder or above, else one written beside it.

    Example: dbgen new swish --expr 'x * sigmoid(beta * x)' --inputs x --params beta=1.0 --domain x=-8,8
    """
    from ..spec import config
    from ..tools import scaffold

    try:
        new_spec = scaffold.NewSpec(name, expr, scaffold.parse_inputs(inputs), order,
                                    scaffold.parse_params(params), strategy, doc, scaffold.parse_domain(domain))
        target = scaffold.target_path(name, output, _configured_specs_folder())
        written = _io(target, lambda: scaffold.create(new_spec, target))
    except (scaffold.NewSpecError, config.ConfigError) as exc:
        for line in getattr(exc, "lines", [f"dbgen: {exc}"]):
            console.Console().error(line)
        raise typer.Exit(2) from None
    say = console.Console()
    if written.schema is not None:
        say.result(f"dbgen: wrote {written.schema.as_posix()} (the JSON Schema editors check specs with)")
    shown = written.spec.as_posix()
    say.result(f"dbgen: wrote {shown}; next: dbgen show {shown}, then {_build_hint(written.spec)}")


@command()
def schema(
    output: Path | None = typer.Option(
        None, "-o", "--output", metavar="FILE", help="Write the schema to this file instead of printing it."
    ),
) -> None:
    """Print the JSON Schema (draft 2020-12) of spec files, for editors.

    A spec whose first line is
    # yaml-language-server: $schema=dbgen-spec.schema.json
    is checked against it as you type (VS Code's YAML extension, ...).

    Example: dbgen schema -o specs/dbgen-spec.schema.json
    """
    from ..spec.schema import schema_text

    if output is None:
        typer.echo(schema_text(), nl=False)
        return
    _io(output, lambda: output.write_text(schema_text(), encoding="utf-8"))
    console.Console().result(f"dbgen: schema written to {output.as_posix()}")
