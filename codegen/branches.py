"""Stage 3a: piecewise functions made NaN-free at every order (contract v2, section 1).

``torch.where(x > 0, exp(-1/x), 0)`` evaluates both branches everywhere: at x <= 0 the untaken
branch overflows, and its gradient, multiplied by the 0 that ``where`` sends it, is 0 * inf = NaN
(pytorch/pytorch#52248). The cure is to evaluate each branch only on *safe* inputs where it is
not taken: ``exp(-1/where(x > 0, x, 1.0))``. ``guard`` does that symbolically, once, before
anything is differentiated: in every branch of every ``Piecewise`` whose condition depends on an
input, each input is replaced by ``Guard(input, taken, safe)``, which is the input where the
branch is taken and ``safe`` elsewhere, a point where the branch and its derivatives up to the
spec's order are finite (found in float64 at the params' defaults, like the domain check).

``Guard`` differentiates as its first argument (its derivative is 1): where the branch is taken,
that is exact; elsewhere the enclosing ``Piecewise`` discards the value. So every derivative
SymPy takes, every value a strategy saves and every subexpression CSE shares is computed on
guarded inputs; and autograd, differentiating the printed ``torch.where(taken, x, safe)``,
sends 0 to the untaken side. A condition on params alone selects a branch in Python
(``a if beta != 0 else b``): the other is not evaluated at all, and needs no guard.
"""

from __future__ import annotations

import sympy

from .errors import SpecErrors
from .printer import formula

# Safe points tried first, the same value for every input of a branch: they read well in the
# generated code (torch.where(x > 0, x, 1.0)); then the domain grid.
_NICE = (1.0, 0.5, 2.0, -1.0, -0.5, -2.0, 0.25, 4.0, -0.25, -4.0, 0.1, 10.0, -10.0, 0.0)


class Guard(sympy.Function):
    """Guard(x, taken, safe): ``x`` where ``taken`` holds, else ``safe`` (``torch.where``)."""

    nargs = 3

    def _eval_derivative(self, symbol):
        return self.args[0].diff(symbol)

    def _eval_is_real(self):
        return self.args[0].is_real


def unguarded(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each guarded input the input again (for formulas shown to people)."""
    return expr.replace(lambda e: isinstance(e, Guard), lambda e: e.args[0]) if expr.has(Guard) else expr


def guard(expr: sympy.Expr, spec) -> sympy.Expr:
    """``expr`` with every branch that depends on an input guarded (module docstring)."""
    return _guarded(expr, {sympy.Symbol(name, real=True) for name in spec.inputs}, spec)


def _guarded(expr: sympy.Expr, inputs, spec) -> sympy.Expr:
    if not expr.args or not expr.has(sympy.Piecewise):
        return expr
    args = [_guarded(arg, inputs, spec) for arg in expr.args]
    if not isinstance(expr, sympy.Piecewise):
        return expr.func(*args)
    pieces = [(arg.expr, arg.cond) for arg in args]
    if not any(cond.free_symbols & inputs for _, cond in pieces):
        return sympy.Piecewise(*pieces)  # chosen in Python on params: the other branch never runs
    return sympy.Piecewise(*[(_guard_branch(value, taken, inputs, spec), cond)
                             for (value, cond), taken in zip(pieces, taken_conditions(pieces))])


def taken_conditions(pieces) -> list:
    """Where each branch of ``Piecewise(*pieces)`` is the one taken: its condition and no earlier one."""
    taken, earlier = [], sympy.false
    for _, cond in pieces:
        taken.append(sympy.And(cond, sympy.Not(earlier)))
        earlier = sympy.Or(earlier, cond)
    return taken


def _guard_branch(value: sympy.Expr, taken, inputs, spec) -> sympy.Expr:
    used = sorted(value.free_symbols & inputs, key=lambda s: s.name)
    if not used or taken == sympy.true or value.is_polynomial(*used):
        return value  # a polynomial is finite wherever its inputs are, and so are its derivatives
    safe = safe_point(value, used, spec)
    return value.xreplace({s: Guard(s, taken, sympy.Float(v)) for s, v in zip(used, safe)})


def safe_point(value: sympy.Expr, used, spec) -> tuple[float, ...]:
    """A point of the inputs ``used`` where ``value`` and its partial derivatives up to the spec's
    order are finite (float64, params at their defaults): a nice number for all, else a point of
    the domain grid."""
    from . import domain

    formulas = [f for _, f in domain.formulas_at_defaults(value, spec, used)]
    candidates = [tuple([v] * len(used)) for v in _NICE]
    candidates += domain.grid([spec.bounds(s.name) for s in used])
    bad = domain.not_finite(formulas, used, candidates)
    for index, point in enumerate(candidates):
        if not any(row[index] for row in bad):
            return point
    branch = formula(value)
    raise SpecErrors([spec.problem("expr", f"expr: the branch {branch} is not finite, or a derivative of it up to "
                                           f"order {spec.order}, at any point tried; dbgen needs one to evaluate "
                                           "it where it is not taken. Write the branch so that it is finite "
                                           "somewhere in the domain")])


def boundaries(expr: sympy.Expr, spec) -> dict[str, tuple[float, ...]]:
    """Input name -> the values in its domain where a condition changes, for the conditions that
    compare one input (or its abs) with params and numbers: x > 0, abs(x) <= delta, r < rc (params
    at their defaults). The generated tests check every order on, and either side of, each."""
    from .domain import at_defaults

    inputs = {sympy.Symbol(name, real=True) for name in spec.inputs}
    found: dict[str, set[float]] = {}
    for relation in expr.atoms(sympy.core.relational.Relational):
        for side, other in ((relation.lhs, relation.rhs), (relation.rhs, relation.lhs)):
            symbol, mirrored = (side.args[0], True) if isinstance(side, sympy.Abs) else (side, False)
            if symbol not in inputs or other.free_symbols & inputs:
                continue
            value = float(at_defaults(other, spec))
            lo, hi = spec.bounds(symbol.name)
            for v in {value, -value} if mirrored else {value}:
                if lo <= v <= hi:
                    found.setdefault(symbol.name, set()).add(v)
    return {name: tuple(sorted(values)) for name, values in sorted(found.items())}
