"""``dbgen graph SPEC -o FILE.svg``: the autograd graph of a generated Function, as a picture.

The spec is built into a temporary folder and its module imported; the function runs on inputs
from the spec's domain, ``torch.autograd.grad(..., create_graph=True)`` is taken ORDER-1 times,
and torchviz draws the graph of every tensor computed, as the pictures of PyTorch's tutorial
"Double Backward with Custom Functions" do. The generated Functions appear as their autograd
nodes: ``SinhBackward``; for ``nested``, ``CubeBackward``, ``CubeLevel1Backward``, ... (the
classes of the levels are ``Cube``, ``CubeLevel1``, ...). The tensors each one saved are the
orange boxes, labelled with their names in the generated code.

torchviz (``pip install torchviz``, or dbgen's viz extra) and Graphviz's ``dot`` program are needed only here.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import sys
import tempfile
from pathlib import Path

from ..build.files import _atomic_write

FORMATS = ("svg", "png")
MAX_GRAPH_ORDER = 8
SAMPLES = 5  # points per input: the graph's shape does not depend on it, only the tensor sizes shown
INSTALL_VIZ = "pip install torchviz (or dbgen's viz extra)"
INSTALL_DOT = "apt install graphviz (Debian, Ubuntu), brew install graphviz (macOS), or https://graphviz.org/download/"
MISSING_DOT = f"graph needs Graphviz's 'dot' program, which is not on PATH; install it: {INSTALL_DOT}"


class GraphError(Exception):
    """A problem the user can fix (missing tool, wrong file name or order): exit 2 with this line."""


def picture_format(output: Path) -> str:
    """'svg' or 'png', from the output file's suffix."""
    suffix = output.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        example = output.with_suffix(".svg").as_posix()  # the user's own name, with a suffix that works
        raise GraphError(f"{output.as_posix()}: the picture's file name must end in .svg or .png, e.g. -o {example}")
    return suffix


def check_tools() -> None:
    """torchviz and Graphviz's ``dot`` are optional dependencies: say how to install what is missing."""
    from ..signals import import_torch

    import_torch()  # torchviz imports it; a signal inside torch's import would be lost
    try:
        import torchviz  # noqa: F401
    except ImportError as exc:
        if exc.name in (None, "torchviz"):
            raise GraphError(f"graph needs the torchviz package; install it with: {INSTALL_VIZ}") from None
        # torchviz 0.0.3 imports distutils, which Python 3.12 dropped; setuptools provides it again
        raise GraphError(f"torchviz cannot be imported: {exc}; install it with: {INSTALL_VIZ} "
                         "(or pip install setuptools)") from None
    if shutil.which("dot") is None:
        raise GraphError(MISSING_DOT)


def draw(spec_path: Path, output: Path, order: int, bounds=None) -> str:
    """Write the picture of the graph at ``order`` (1: the value's graph) and return the spec's name."""
    if not 1 <= order <= MAX_GRAPH_ORDER:
        raise GraphError(f"--order must be from 1 to {MAX_GRAPH_ORDER}, not {order}; "
                         "e.g. --order 2 for the first derivative's graph")
    fmt = picture_format(output)
    check_tools()
    with tempfile.TemporaryDirectory(prefix="dbgen-graph-") as folder:
        spec, module = _build(spec_path, Path(folder), bounds)
        try:
            tensors = _derivative_tensors(getattr(module, spec.name), spec, order)
            saved = saved_names(Path(module.__file__).read_text(encoding="utf-8"))
            picture = _render(tensors, saved, fmt)
        finally:
            sys.modules.pop(module.__name__, None)
    output.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(output, picture)  # temporary file + rename: a failed run leaves no half picture
    return spec.name


def _build(spec_path: Path, folder: Path, bounds):
    """Generate the spec into ``folder`` and import its module (raises SpecErrors for a bad spec)."""
    from .. import limits
    from ..build import pipeline, write

    (spec,) = pipeline.load_specs([spec_path])
    write.write_files(folder, pipeline.generate(spec_path, limits=bounds or limits.DEFAULT))
    name = f"_dbgen_graph_{spec.name}"
    module_spec = importlib.util.spec_from_file_location(name, folder / f"{spec.name}.py")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return spec, module


def _derivative_tensors(function, spec, order: int) -> dict[str, object]:
    """name -> tensor: the inputs, the value, each derivative up to ``order`` - 1, and the cotangents.

    Each level is the gradient of the previous one's sum (all-ones cotangents), taken with
    create_graph=True, so the next level, and the picture, see how it was computed. The
    cotangents are named too: generated Functions save them, and the picture shows saved tensors.
    """
    import torch

    inputs = {name: torch.linspace(lo, hi, SAMPLES, dtype=torch.float64, requires_grad=True)
              for name, (lo, hi) in spec.domain}
    value = function(*inputs.values())
    if spec.outputs and not spec.stack:  # a vector-valued spec: each output by its name
        level = dict(zip((name for name, _ in spec.outputs), value))
    else:
        level = {"out": value}
    tensors = {**inputs, **level}
    for k in range(1, order):
        level = {name: t for name, t in level.items() if t.requires_grad}
        if not level:
            break  # the derivative is constant: there is no deeper graph to draw
        cotangents = {f"cotangent of {name}": torch.ones_like(t) for name, t in level.items()}
        grads = torch.autograd.grad(tuple(level.values()), tuple(inputs.values()), tuple(cotangents.values()),
                                    create_graph=True, allow_unused=True, materialize_grads=True)
        prefix = "grad" if k == 1 else f"grad{k}"
        level = {f"{prefix}_{name}": g for name, g in zip(inputs, grads)}
        tensors.update({**cotangents, **level})
    return tensors


def saved_names(source: str) -> dict[str, tuple[str, ...]]:
    """Autograd node name ('MishBackward') -> the names its Function saves for backward, in order,
    read from the generated module's ``ctx.save_for_backward(...)`` (in the class or a base)."""
    classes = {node.name: node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}

    def saved(name: str):
        node = classes.get(name)
        if node is None:
            return None
        for call in ast.walk(node):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                    and call.func.attr == "save_for_backward":
                return tuple(ast.unparse(arg) for arg in call.args)
        bases = (saved(base.id) for base in node.bases if isinstance(base, ast.Name))
        return next((found for found in bases if found is not None), None)

    return {f"{name}Backward": names for name in classes if (names := saved(name)) is not None}


def _graph_nodes(tensors: dict[str, object]) -> list[object]:
    """Every autograd node the picture shows, from the tensors' grad_fn down."""
    nodes, seen, todo = [], set(), [t.grad_fn for t in tensors.values() if t.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        nodes.append(node)
        todo += [next_node for next_node, _ in getattr(node, "next_functions", ())]
    return nodes


_SAVED_EDGE = re.compile(r"\t(\S+) -> (\S+) \[dir=none\]")


def _label_saved(dot, tensors: dict[str, object], saved: dict[str, tuple[str, ...]]) -> None:
    """Name the orange boxes: torchviz draws a custom Function's saved tensors unlabelled (each
    access of ``saved_tensors`` makes new tensor objects, so no label can be attached by id).
    It draws them in saving order, each linked to its node by an undirected edge: the i-th such
    edge of a node is its i-th saved name. A box that is also a named tensor keeps that name."""
    nodes = {str(id(node)): node for node in _graph_nodes(tensors) if type(node).__name__ in saved}
    named = {str(id(t)) for t in tensors.values()}
    counts: dict[str, int] = {}
    for line in list(dot.body):
        match = _SAVED_EDGE.fullmatch(line.rstrip("\n"))
        if match is None or match.group(2) not in nodes:
            continue
        box, node_id = match.groups()
        index = counts[node_id] = counts.get(node_id, -1) + 1
        node = nodes[node_id]
        names, values = saved[type(node).__name__], node.saved_tensors
        if box not in named and index < min(len(names), len(values)):
            size = ", ".join(str(n) for n in values[index].shape)
            dot.node(box, f"{names[index]}\n ({size})", fillcolor="orange")  # as torchviz writes labels


def _render(tensors: dict[str, object], saved: dict[str, tuple[str, ...]], fmt: str) -> bytes:
    """The picture's bytes; inputs, computed and saved tensors are labelled with their names."""
    import graphviz
    from torchviz import make_dot

    drawn = tuple(t for t in tensors.values() if t.grad_fn is not None)
    dot = make_dot(drawn, params=tensors)
    _label_saved(dot, tensors, saved)
    try:
        return dot.pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise GraphError(MISSING_DOT) from None
    except graphviz.CalledProcessError as exc:
        stderr = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        reason = stderr[-1] if stderr else exc
        raise GraphError(f"Graphviz's dot failed: {reason}; check your Graphviz installation") from None
