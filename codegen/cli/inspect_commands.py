"""``dbgen show`` and ``dbgen graph``: a spec's plan in words, its autograd graph as a picture.
"""

from __future__ import annotations

from pathlib import Path

import typer

from .. import console, limits
from .app import SIZE_LIMIT_OPT, TIME_LIMIT_OPT, _io, _one_spec_file, _run, command


@command()
def show(
    spec: list[Path] = typer.Argument(..., metavar="SPEC", help="Spec files."),
    latex: bool = typer.Option(False, "--latex", help="Write formulas in LaTeX instead of unicode text."),
    time_limit: float = TIME_LIMIT_OPT,
    size_limit: int = SIZE_LIMIT_OPT,
) -> None:
    """Print what build would generate for each spec, for a person to read.

    The formula and its derivatives, the strategy and why, and for each
    generated Function its shared subexpressions, what it computes, saves
    and returns, and its operation counts. Writes nothing.

    Example: dbgen show specs/sinh.yaml (add --latex for LaTeX formulas)
    """
    from ..tools.show import show_text

    for path in spec:
        _one_spec_file(path, "show")
    bounds = limits.Limits(seconds=time_limit, size=size_limit)
    reports = [_run(lambda path=path: show_text(path, latex=latex, bounds=bounds), writes=False) for path in spec]
    typer.echo("\n".join(reports), nl=False)


@command()
def graph(
    spec: Path = typer.Argument(..., metavar="SPEC", help="One spec file."),
    output: Path = typer.Option(..., "-o", "--output", metavar="FILE", help="The picture to write: a .svg or .png file."),
    order: int = typer.Option(
        2, "--order", metavar="N",
        help="Take N-1 gradients with create_graph=True (1: the value's graph; 2: the first derivative's).",
    ),
    time_limit: float = TIME_LIMIT_OPT,
    size_limit: int = SIZE_LIMIT_OPT,
) -> None:
    """Draw the autograd graph of a generated function and its derivatives.

    Builds the spec into a temporary folder, runs it on inputs from its
    domain and draws the graph as the torchviz pictures of PyTorch's
    double-backward tutorial do. Needs the torchviz package (the viz extra
    of dbgen) and Graphviz's dot program (apt or brew install graphviz).

    Example: dbgen graph specs/cube.yaml -o cube.svg --order 3
    """
    from ..tools.graph import GraphError, draw

    _one_spec_file(spec, "graph")
    try:
        bounds = limits.Limits(seconds=time_limit, size=size_limit)
        name = _io(output, lambda: _run(lambda: draw(spec, output, order, bounds)))
    except GraphError as exc:
        console.Console().error(f"dbgen: {exc}")
        raise typer.Exit(2) from None
    console.Console().result(f"dbgen: graph of {name} (order {order}) written to {output.as_posix()}")
