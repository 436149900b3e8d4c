"""What a generated Function computes, saves and returns: the plan's frozen dataclasses.

The plan is a small tree of frozen dataclasses holding SymPy expressions, already CSE'd and with
readable temporary names; the renderer only prints it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import sympy

from ..language import external
from ..spec import Spec

# Local names of the generated code's own, allocated first so that they avoid the spec's names.
LOCALS = ("inputs", "output", "function", "level", "needed")
COMPILE_SUFFIX = "ForCompile"


@dataclass(frozen=True)
class Result:
    """A value a block returns: an output of forward, or a gradient of backward.

    ``grad_of`` names the variable a gradient belongs to (``None`` for forward outputs).
    ``broadcast`` marks a forward output that does not mention every input, so it must be
    broadcast to all of them. Inside generated Functions every tensor has the inputs' common
    shape: the public function broadcasts the inputs first (as views), and autograd's own
    expand-backward sums each gradient back to its input's shape.
    """

    name: str
    expr: sympy.Expr
    grad_of: str | None = None
    broadcast: bool = False


@dataclass(frozen=True)
class Block:
    """Straight-line code: CSE'd temporaries, then results."""

    temporaries: tuple[tuple[str, sympy.Expr], ...]
    results: tuple[Result, ...]

    @property
    def values(self) -> tuple[sympy.Expr, ...]:
        """Every formula the block computes, temporaries first."""
        return tuple(value for _, value in self.temporaries) + tuple(r.expr for r in self.results)

    @property
    def reads(self) -> set[sympy.Symbol]:
        """The symbols its formulas read (inputs, saved values, cotangents and its own temporaries)."""
        return set().union(*(value.free_symbols for value in self.values))


@dataclass(frozen=True)
class FunctionPlan:
    """One generated ``torch.autograd.Function``."""

    class_name: str
    compile_name: str
    summary: str
    inputs: tuple[str, ...]
    forward: Block
    saved: tuple[str, ...]
    cotangents: tuple[str, ...]
    backward: Block | None
    next_level: str | None
    tangents: tuple[str, ...]
    jvp: Block
    saved_for_forward: tuple[str, ...]
    # intermediates: per gradient, (cotangent, name of d(output)/d(input) in ``backward``) for each
    # cotangent that contributes; cotangents of unused outputs arrive as None and are skipped
    accumulations: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    # intermediates: per gradient whose terms have constant parts in two or more places, (gradient,
    # name of their sum, (cotangent, name of the constant part) for each): summed apart from the rest,
    # then added, as (1 + expm1(x)) - (1 + expm1(-x)) would cancel where x is small (sinh at order 2)
    constant_sums: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = ()
    # nested: the trailing inputs that are values computed by an earlier level (constants to
    # autograd: their gradients are None), and the trailing outputs that are values for later levels
    constants: tuple[str, ...] = ()
    values: tuple[str, ...] = ()
    # nested, a level after the first (not fused): its last argument says which of its gradients the
    # caller's backward pass uses (``_needed_gradients``); the others it leaves out and returns as None
    masked: bool = False

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.forward.results)

    @property
    def blocks(self) -> tuple[Block, ...]:
        """Its code: forward, backward (where it has one) and jvp."""
        return tuple(block for block in (self.forward, self.backward, self.jvp) if block is not None)

    @property
    def differentiable_outputs(self) -> tuple[str, ...]:
        return self.outputs[: len(self.outputs) - len(self.values)]

    @property
    def differentiable_inputs(self) -> tuple[str, ...]:
        return self.inputs[: len(self.inputs) - len(self.constants)]

    @property
    def gradient_of(self) -> tuple[str | None, ...]:
        """For each output, the input of the level before whose gradient it is (None: a value)."""
        return tuple(r.grad_of for r in self.forward.results)


@dataclass(frozen=True)
class ModulePlan:
    """Everything the module and its tests are rendered from."""

    spec: Spec
    exprs: tuple[sympy.Expr, ...]  # one per output of the spec, in order
    strategy: str
    reason: str
    functions: tuple[FunctionPlan, ...]
    derivatives: tuple[tuple[str, tuple[str, ...], sympy.Expr], ...]  # (f or the output's name, index, formula)
    more_derivatives: int
    locals: tuple[tuple[str, str], ...]
    # what auto left out (over a limit) or passed over (the memory bound), also at the end of ``reason``
    notes: tuple[str, ...] = ()

    def local(self, name: str) -> str:
        """The name the generated code uses for its own local ``name`` (inputs, output, ...)."""
        return dict(self.locals)[name]

    @property
    def expr(self) -> sympy.Expr:
        """The formula of a spec with one output (``expr:``)."""
        (expr,) = self.exprs
        return expr

    @property
    def every_formula(self) -> sympy.Expr:
        """The formula, or the outputs' formulas as one sum (unevaluated): finite where each is,
        with each one's conditions."""
        return self.expr if len(self.exprs) == 1 else sympy.Add(*self.exprs, evaluate=False)

    @functools.cached_property
    def externals(self) -> list[type]:
        """The external functions the formulas call (external.py): the module is then nested, and
        its last level's gradients raise when differentiated again."""
        return external.calls(self.exprs)

    @property
    def returned(self) -> int:
        """How many of the entry Function's outputs the public function returns: the spec's
        outputs; the rest are values for backward (intermediates, nested)."""
        return len(self.exprs)

    @property
    def entry(self) -> FunctionPlan:
        return self.functions[0]
