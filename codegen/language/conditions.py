"""SymPy's Piecewise, kept from rewriting long conditions into conjunctive normal form and from
re-evaluating itself without end on comparisons with floats on both sides.

When two neighbouring branches of a Piecewise become equal (a derivative makes several branches 0),
SymPy joins their conditions and distributes and over or (``distribute_and_over_or``). That is
exponential in the condition's alternations: the conditions of a choice on a choice
(``max(min(x, y), min(y, z))``, whose if-then-elses ``expr._without_ite`` writes with and, or and
not) grew past a minute of CPU time before the first derivative was done, and the spec was refused.
Above ``MAX_DISTRIBUTED_NODES`` nodes the joined condition is kept as it is: the same truth
table, written the way the branches gave it. Below it SymPy's form is taken where it is no longer.

Piecewise also puts each condition in a canonical form (``_canonical_coeff``) and builds itself
again while that changes anything. With floats on both sides that form is not stable:
``0.9*x > -0.1*x`` becomes ``0.1*x > -0.9*x`` and back at every call, and the recursion never
ends (``max(q*x, (q - 1)*x)`` at q = 0.9, a quantile loss: RecursionError, an internal error).
``stable_canonical`` moves such a comparison to one side, ``1.0*x > 0``, whose form is stable.
"""

from __future__ import annotations

import sympy
from sympy.functions.elementary import piecewise

# Conditions of up to this many nodes are distributed as SymPy does (those of every bundled
# example and of where/clamp/relu on one input); the nested choices' run to hundreds
MAX_DISTRIBUTED_NODES = 80
_SYMPYS_DISTRIBUTION = piecewise.distribute_and_over_or
_SYMPYS_CANONICAL = piecewise._canonical_coeff


def distributed_if_short(condition: sympy.Basic) -> sympy.Basic:
    """``condition`` in conjunctive normal form where it has at most ``MAX_DISTRIBUTED_NODES``
    nodes and that form is no longer; else unchanged (logically the same: the normal form of
    a clamp of a max ran to 40 clauses of a condition of 12 comparisons)."""
    size = _nodes_up_to(condition, MAX_DISTRIBUTED_NODES + 1)
    if size > MAX_DISTRIBUTED_NODES:
        return condition
    distributed = _SYMPYS_DISTRIBUTION(condition)
    return distributed if _nodes_up_to(distributed, size + 1) <= size else condition


def _nodes_up_to(expr: sympy.Basic, most: int) -> int:
    """The nodes of ``expr``'s tree, counted up to ``most``: a size that costs no more than the
    bound (count_ops walked the joined conditions of a nested choice for 10 s of a 45 s build)."""
    for count, _node in enumerate(sympy.preorder_traversal(expr), start=1):
        if count >= most:
            return most
    return count


def stable_canonical(relation: sympy.Basic) -> sympy.Basic:
    """SymPy's canonical form of ``relation`` where applying it again leaves it as it is; else
    the canonical form of the comparison moved to one side (``lhs - rhs > 0``)."""
    once = _SYMPYS_CANONICAL(relation)
    if not once.is_Relational or _SYMPYS_CANONICAL(once) == once:
        return once
    return _SYMPYS_CANONICAL(relation.func(relation.lhs - relation.rhs, 0))


def install() -> None:
    """Make Piecewise's argument collapse use ``distributed_if_short`` and ``stable_canonical``;
    idempotent. The change is to two names in SymPy's piecewise module, which only that
    collapse reads."""
    piecewise.distribute_and_over_or = distributed_if_short
    piecewise._canonical_coeff = stable_canonical
