"""The nested strategy: a chain of Functions, each the backward of the one before, one per order.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .. import limits
from ..derive import symbolic
from ..derive.rewrite import (
    for_differentiation,
)
from .blocks import _block, _forward_mode, _output
from .model import Block, FunctionPlan, Result
from .naming import Namer, _describe, _symbol, _symbols


@dataclass(frozen=True)
class _Link:
    """One level of the nested chain, before values are passed down."""

    names: tuple[str, ...]  # its differentiable inputs: cotangents of the level before, then that level's inputs
    results: tuple[Result, ...]  # what it computes: the output (level 0), else gradients
    cotangents: tuple[str, ...]
    gradients: tuple[Result, ...]  # its vector-Jacobian product: the next level's results
    local: Namer


@dataclass(frozen=True)
class _Passing:
    """A level's formulas in terms of the values earlier levels computed, the values it receives
    (constants) and the values it computes for later levels."""

    formulas: tuple[sympy.Expr, ...]
    constants: tuple[str, ...]
    values: tuple[Result, ...]


def _nested(classes, outputs, inputs, order, namer: Namer, stable, masked: bool) -> tuple[FunctionPlan, ...]:
    """The tutorial's Cube/CubeBackward chain: level k's backward applies level k+1.

    Level k takes the cotangents of level k-1's outputs and level k-1's inputs, and returns
    their vector-Jacobian product, derived symbolically from level k-1's formulas. A function
    call that a level computes and later levels need again (mish's tanh(softplus(x)), then
    sigmoid(x)) is returned as a non-differentiable extra output and passed down as a constant
    (``_passed_values``): each is computed once. The last level's backward is the product again,
    in differentiable torch ops of its inputs alone: a constant would hide its dependence on x
    from autograd at higher order. ``masked``: levels after the first compute only the gradients
    the running backward pass uses.
    """
    chain = _nested_chain(outputs, inputs, order, namer, stable)
    # jvp is written in the differentiable inputs alone, like the last backward: under reverse-over-
    # forward (torch.func.hessian), autograd records it, and a constant would hide x from it
    forward_modes = [
        _forward_mode(list(link.results), [r.expr for r in link.results], _symbols(link.names), namer, [], True,
                      stable)
        for link in chain
    ]
    passing = _passed_values(chain, inputs, namer, stable)
    value_names = {v.name for passed in passing for v in passed.values}
    functions = []
    for level, (link, passed, (tangents, jvp_block, _)) in enumerate(zip(chain, passing, forward_modes)):
        last = level == order - 1
        printed = [Result(r.name, formula, r.grad_of, r.broadcast) for r, formula in zip(link.results, passed.formulas)]
        printed += list(passed.values)
        if last:
            saved = link.names
        else:
            handed = set(passing[level + 1].constants)
            outputs = (*(r.name for r in link.results), *(v.name for v in passed.values))
            saved = (*link.names, *(n for n in (*passed.constants, *outputs) if n in handed))
        functions.append(
            FunctionPlan(
                class_name=classes[level][0],
                compile_name=classes[level][1],
                summary=_level_summary(level),
                inputs=(*link.names, *passed.constants),
                forward=_block(printed, taken={*link.local.taken, *value_names}),
                saved=saved,
                cotangents=link.cotangents,
                backward=_last_backward(link, stable) if last else None,
                next_level=None if last else classes[level + 1][0],
                tangents=tangents,
                jvp=jvp_block,
                saved_for_forward=saved,
                constants=passed.constants,
                values=tuple(v.name for v in passed.values),
                masked=masked and level > 0 and len(link.results) > 1,  # one gradient: always used
            )
        )
    return tuple(functions)


def _nested_chain(outputs, inputs, order, namer: Namer, stable) -> list[_Link]:
    """Each level's formulas: level k differentiates level k-1's results by its inputs.

    Each level's results are stabilised before the next level differentiates them: the next level
    derives its formulas from what this level prints (sigmoid(w), whose derivatives are sigmoids),
    not from the unstable shapes SymPy's derivative of the raw formula has (exp(-1/(1 - x)) over a
    sum of exponentials, whose next derivative leaves exp(2/(1 - x)) times a vanishing factor).
    They are kept in ``for_differentiation`` form (smooth, as autograd differentiates the printed
    jvp and last backward) and stabilised again where printed (``_passed_values``, ``_forward_mode``).
    """
    names = tuple(str(x) for x in inputs)
    results = tuple(_output(name, for_differentiation(stable(expr)), inputs) for name, expr in outputs)
    chain = []
    for level in range(order):
        cotangents = tuple(_cotangent_name(namer, level + 1, r) for r in results)
        local = Namer(namer.taken)
        products = symbolic.vjp([r.expr for r in results], _symbols(cotangents), _symbols(names))
        limits.check(level + 1, products)  # stops a spec whose derivatives blow up
        products = [for_differentiation(stable(p)) for p in products]
        gradients = tuple(Result(local.fresh(f"grad_{n}"), g, n) for n, g in zip(names, products))
        chain.append(_Link(names, results, cotangents, gradients, local))
        names = (*cotangents, *names)
        results = gradients
    return chain


def _passed_values(chain: list[_Link], inputs, namer: Namer, stable) -> list[_Passing]:
    """Which function calls each level computes for later levels, and which values it receives.

    Level by level: a call among a level's formulas that later levels' formulas use again becomes
    a value of that level and is replaced by its name in the later formulas (larger calls first,
    in one top-down pass). Level 0's outputs are themselves such values when they are calls
    (exp(x), whose derivatives are exp(x)). A value no later level reads in the end is dropped.
    """
    current = [[stable(r.expr) for r in link.results] for link in chain]
    outputs = {}  # level 0's outputs by formula (the first name where two outputs are equal)
    for result, formula in zip(chain[0].results, current[0]):
        outputs.setdefault(formula, result.name)
    found = []  # per level: its values (name, formula in terms of earlier values)
    for level in range(len(chain)):
        later = [f for fs in current[level + 1:] for f in fs]
        named = {}
        for value in symbolic.reused_calls(current[level], later, inputs):
            base = _describe(value)
            is_output = level == 0 and value in outputs
            named[value] = outputs[value] if is_output else namer.fresh(base, numbered=base == "t")
        replacements = {value: _symbol(name) for value, name in named.items()}
        for j in range(level + 1, len(chain)):
            current[j] = [f.xreplace(replacements) for f in current[j]]
        found.append([(name, value) for value, name in named.items() if name not in outputs.values()])
    reads = [
        set().union(*(f.free_symbols for f in current[level]), *(v.free_symbols for _, v in found[level]))
        for level in range(len(chain))
    ]
    passing, earlier = [], []  # earlier: the values computed before a level, level 0's outputs first
    for level in range(len(chain)):
        read_here_or_after, read_after = set().union(*reads[level:]), set().union(*reads[level + 1:])
        constants = tuple(name for name in earlier if _symbol(name) in read_here_or_after)
        values = tuple(Result(name, value) for name, value in found[level] if _symbol(name) in read_after)
        passing.append(_Passing(tuple(current[level]), constants, values))
        earlier += [r.name for r in chain[0].results] * (level == 0) + [name for name, _ in found[level]]
    return passing


def _last_backward(link: _Link, stable) -> Block:
    gradients = [Result(g.name, stable(g.expr), g.grad_of) for g in link.gradients]
    return _block(gradients, taken=link.local.taken, differentiated=True)


def _cotangent_name(namer: Namer, level: int, result: Result) -> str:
    if result.grad_of is None:
        return namer.fresh(f"grad_{result.name}")
    return namer.fresh(f"grad{level}_{result.grad_of}")


def _level_summary(level: int) -> str:
    if level == 0:
        return "Forward value; backward applies the next level (the tutorial's nested pattern)."
    return f"Level {level}: the vector-Jacobian product of level {level - 1}, with explicit symbolic formulas."
