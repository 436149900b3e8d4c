"""What a level computes, as blocks of statements: CSE over its results, with power ladders and
values computed on demand; its outputs and its forward-mode (jvp) block, which both strategies share.
"""

from __future__ import annotations

from dataclasses import replace

import sympy

from ..derive import symbolic
from ..derive.rewrite import (
    factored,
    smooth_norms,
)
from .model import Block, FunctionPlan, Result
from .naming import Namer, _describe, _symbol, _symbols


def _forward_mode(results: list[Result], raw, inputs, namer: Namer, known, exact: bool, stable):
    """Tangent names, the jvp block (output tangents, in terms of saved values) and what it saves.

    ``raw`` holds the results' formulas as written, which are differentiated, then stabilised.
    """
    local = Namer(namer.taken)
    tangents = tuple(local.fresh(f"tangent_{x}") for x in inputs)
    products = symbolic.jvp(list(raw), list(inputs), _symbols(tangents))
    products = [symbolic.in_terms_of(stable(p), known, exact=exact) for p in products]
    names = [local.fresh(f"tangent_{r.name}") for r in results]
    used = set().union(*(p.free_symbols for p in products))
    candidates = (*(str(x) for x in inputs), *(r.name for r in results))
    saved = tuple(name for name in candidates if _symbol(name) in used)
    block = _block([Result(n, p, grad_of=tangents[0]) for n, p in zip(names, products)], taken=local.taken,
                   differentiated=True)
    return tangents, block, saved


def _output(name: str, expr: sympy.Expr, inputs) -> Result:
    return Result(name, expr, broadcast=not set(inputs) <= expr.free_symbols)


def _block(results: list[Result], taken, inline: bool = False, differentiated: bool = False) -> Block:
    """CSE over the results, with temporaries named after what they hold.

    ``inline``: the results are printed where they are used, so none claims a temporary's name.
    ``differentiated``: autograd differentiates the block (a single level's backward, a jvp,
    nested's last backward), so its norms are written smooth (``rewrite.smooth_norms``).
    """
    smooth = smooth_norms if differentiated else (lambda expr: expr)
    replacements, reduced = symbolic.common_subexpressions([factored(smooth(r.expr)) for r in results])
    namer = Namer({*taken, *(r.name for r in results)})
    # A temporary that is itself a plain result (no reduction, no broadcast) takes the result's name.
    claimed = {}
    for r, e in zip(results, reduced):
        if not inline and e in dict(replacements) and e not in claimed and r.grad_of is None and not r.broadcast:
            claimed[e] = r.name
    names: dict[sympy.Symbol, sympy.Symbol] = {}
    temporaries = []
    for symbol, value in replacements:
        value = value.xreplace(names)
        if symbol in claimed:
            name = claimed[symbol]
        else:
            base = _describe(value)
            name = namer.fresh(base, numbered=base == "t")
        names[symbol] = _symbol(name)
        temporaries.append((name, value))
    return Block(
        temporaries=tuple(temporaries),
        results=tuple(
            Result(r.name, e.xreplace(names), r.grad_of, r.broadcast) for r, e in zip(results, reduced)
        ),
    )


def _with_power_ladders(fn: FunctionPlan, params, taken) -> FunctionPlan:
    """``fn`` with integer powers of each tensor computed from shared products (``_power_ladder``)."""
    def ladder(block: Block | None) -> Block | None:
        return None if block is None else _power_ladder(block, params, taken)

    return replace(fn, forward=ladder(fn.forward), backward=ladder(fn.backward), jvp=ladder(fn.jvp))


def _power_ladder(block: Block, params, taken) -> Block:
    """Integer powers (|n| >= 4) of a tensor, built by squaring and multiplying shared temporaries.

    torch.pow with an exponent other than 2, 3, -1 or -2 costs about seven memory passes on CPU
    (measured, 2**20 float32): r**-13 and r**-7 next to r**-12 and r**-6 (lennard_jones) become
    one reciprocal, one cube and four products of temporaries.
    """
    ladders = symbolic.power_ladders(block.values, params)
    if not ladders:
        return block
    namer = Namer({*taken, *(name for name, _ in block.temporaries), *(r.name for r in block.results)})
    # A temporary that already holds a power of the ladder becomes its step, under its own name,
    # rather than an alias of a fresh one (z_pow2 = z_pow2_1).
    held = {value: _symbol(name) for name, value in block.temporaries}
    symbols = {power: held.get(power) or _symbol(namer.fresh(_describe(power))) for power, _, _ in ladders}
    named = {**symbols, **{dummy: symbols[power] for power, dummy, _ in ladders}}
    # A step's arguments, not the step itself, are renamed: the step r**3 is the power r**3.
    definitions = {symbols[power]: step.func(*(a.xreplace(named) for a in step.args)) for power, _, step in ladders}
    temporaries = [
        (_symbol(name), value.xreplace(symbols)) for name, value in block.temporaries if _symbol(name) not in definitions
    ]
    results = tuple(replace(r, expr=r.expr.xreplace(symbols)) for r in block.results)
    ordered = _on_demand(temporaries, definitions, [r.expr for r in results])
    return Block(temporaries=tuple((str(s), v) for s, v in ordered), results=results)


def _on_demand(temporaries, definitions: dict, uses) -> list:
    """``temporaries`` in order, each new ``definitions`` entry placed just before its first use."""
    ordered, placed = [], set()

    def place(symbols):
        for symbol in sorted(symbols, key=str):
            if symbol in definitions and symbol not in placed:
                placed.add(symbol)
                place(definitions[symbol].free_symbols)
                ordered.append((symbol, definitions[symbol]))

    for symbol, value in temporaries:
        place(value.free_symbols)
        ordered.append((symbol, value))
    for expr in uses:
        place(expr.free_symbols)
    return ordered
