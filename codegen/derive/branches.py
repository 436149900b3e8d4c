"""Piecewise functions made NaN-free at every order (docs/guide/specs.md, Piecewise functions).

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

``mask`` then writes each formula about to be printed with a choice between a guarded value and 0
(``soft_unit_step`` and its derivatives, ELU's second derivative) as ``Masked(value, taken)``,
printed ``value * (x > 0)``: the value is finite where it is not taken, so the product is the
choice, and a product with a mask costs about a quarter of ``torch.where`` on CPU, whose kernel
branches per element (8.3 products on a random mask, 1.2 on a sorted one; ``tools/op_weights.py``).
A product of such a mask (or of a choice with a branch of 0) and a factor that overflows at moderate
arguments stays a choice (``_zero_where_chosen``): 0 * inf would be NaN where the truth is 0.
"""

from __future__ import annotations

import sympy
from sympy.codegen import cfunctions
from sympy.functions.elementary.piecewise import ExprCondPair
from sympy.logic.boolalg import Boolean
from sympy.printing.precedence import PRECEDENCE

from ..errors import SpecErrors
from ..language import functions
from ..language.formula import formula
from ..language.registry import REGISTRY

# Safe points tried first, the same value for every input of a branch: they read well in the
# generated code (torch.where(x > 0, x, 1.0)); then the domain grid.
_NICE = (1.0, 0.5, 2.0, -1.0, -0.5, -2.0, 0.25, 4.0, -0.25, -4.0, 0.1, 10.0, -10.0, 0.0)


class Guard(sympy.Function):
    """Guard(x, taken, safe): ``x`` where ``taken`` holds, else ``safe`` (``torch.where``)."""

    nargs = 3
    side = None  # ClampBelow's and ClampAbove's torch.clamp keyword
    recomputed = False  # a where is passed down to later levels; a clamp is recomputed (symbolic.reused_calls)

    def _eval_derivative(self, symbol):
        return self.args[0].diff(symbol)

    def _eval_is_real(self):
        return self.args[0].is_real


class ClampBelow(Guard):
    """A guard whose ``taken`` is x <= k or x < k and ``safe`` is k: ``torch.clamp(x, max=k)``.

    The kind is a class, not read off ``taken`` when printed: CSE may have made ``taken`` a mask
    temporary by then (``x_gt_0``), and the cost model sees the same CSE'd formulas."""

    side = "max"
    recomputed = True


class ClampAbove(Guard):
    """A guard whose ``taken`` is x >= k or x > k and ``safe`` is k: ``torch.clamp(x, min=k)``."""

    side = "min"
    recomputed = True


def clamp_side(x: sympy.Expr, taken, k: sympy.Expr) -> str | None:
    """"max" where ``taken`` is x <= k or x < k, "min" where it is x >= k or x > k, else None."""
    if not isinstance(taken, sympy.core.relational.Relational) or taken.rel_op not in ("<", "<=", ">", ">="):
        return None
    if taken.rhs == x:
        taken = taken.reversed
    if taken.lhs != x or taken.rhs != k:
        return None
    return "max" if taken.rel_op in ("<", "<=") else "min"


_CLAMPS = {"max": ClampBelow, "min": ClampAbove}


def _guarded_input(x: sympy.Symbol, taken, safe: sympy.Expr) -> Guard:
    """The guard of ``x``: a clamp where ``safe`` is the bound ``taken`` puts on it."""
    return _CLAMPS.get(clamp_side(x, taken, safe), Guard)(x, taken, safe)


class Masked(sympy.Function):
    """Masked(value, taken): ``value`` where ``taken`` holds, else 0, for a ``value`` that is finite
    where ``taken`` does not hold; printed as the product ``value * (taken)``."""

    nargs = 2
    precedence = PRECEDENCE["Mul"]
    recomputed = True  # a product, recomputed where needed rather than saved (symbolic.reused_calls)
    # a number, as its value is: SymPy derives commutativity from the args, and the condition's is
    # None, so a Mul kept Masked apart as a matrix-like factor and never cancelled M**2 * M**-1
    # (the derivative of M**2 printed as M**2 / M: 0/0 = NaN where the branch is not taken)
    is_commutative = True

    @classmethod
    def eval(cls, value, taken):
        if value == 0 or taken == sympy.false:
            return sympy.S.Zero
        if taken == sympy.true:
            return value
        if value.is_Number and value != 1:
            return value * cls(sympy.S.One, taken)  # one mask, shared by every multiple of it
        return None

    def _eval_derivative(self, symbol):
        value, taken = self.args
        return Masked(value.diff(symbol), taken)  # 0 on the boundary, as Piecewise's derivative

    def _eval_is_real(self):
        return self.args[0].is_real


def mask(expr: sympy.Expr, inputs) -> sympy.Expr:
    """``expr`` with each choice between one guarded value and zeros ``Masked`` (module docstring).

    A value qualifies when it reads every input only through guards of its own branch (they hold
    the safe point where the branch is not taken), so it is finite there. An unguarded branch, a
    polynomial, may overflow where it is not taken (x**8 at x = 1e5 in float32): 0 * inf is NaN,
    so it stays a ``torch.where``.
    """
    inputs = frozenset(inputs)
    masked = expr.replace(lambda e: isinstance(e, sympy.Piecewise), lambda e: _masked(e, inputs))
    return masked.replace(lambda e: e.is_Mul, lambda e: _zero_where_chosen(e, inputs))


def _zero_where_chosen(product: sympy.Mul, inputs) -> sympy.Expr:
    """``product`` of a factor that is 0 where a condition holds and factors that may overflow there
    (``exp(y)`` beside ``clamp(x, -1, 1)``'s derivative): 0 chosen there, so that 0 * inf is not
    NaN where the truth (and autograd's ``where``) is 0; the other factors stay a product. A
    product without both kinds of factor is returned as it is."""
    grows = {f: _grows(f, inputs) for f in product.args}
    zero = next((f for f in product.args if isinstance(f, Masked) or _choice_with_zero(f, inputs)), None)
    if zero is None or not any(grows.values()):
        return product
    growing = sympy.Mul(*(f for f in product.args if f is not zero and grows[f]))
    kept = sympy.Mul(*(f for f in product.args if f is not zero and not grows[f]))
    if isinstance(zero, Masked):
        value, taken = zero.args
        return kept * sympy.Piecewise((value * growing, taken), (0, True))
    pieces = [(arg.expr, arg.cond) for arg in zero.args]
    zero_where = sympy.Or(*(taken for (value, _), taken in zip(pieces, taken_conditions(pieces)) if value == 0))
    rest = sympy.Piecewise(*((value, cond) for value, cond in pieces if value != 0), (0, True))
    return kept * sympy.Piecewise((0, zero_where), (growing * rest, True))


def _choice_with_zero(factor: sympy.Expr, inputs) -> bool:
    """Whether ``factor`` is a choice on the inputs with a branch of 0."""
    return (isinstance(factor, sympy.Piecewise) and any(arg.expr == 0 for arg in factor.args)
            and bool(factor.free_symbols & inputs))


def _grows(factor: sympy.Expr, inputs) -> bool:
    """Whether ``factor`` holds a function of the inputs that overflows at moderate arguments
    (exp(89) in float32), outside the guards that keep a branch's inputs at a safe point."""
    return any(isinstance(node, _GROWING) and node.free_symbols & inputs and not node.has(Guard)
               for node in sympy.preorder_traversal(factor))


def _masked(piecewise: sympy.Piecewise, inputs) -> sympy.Expr:
    pieces = [(arg.expr, arg.cond) for arg in piecewise.args]
    nonzero = [(value, taken) for (value, _), taken in zip(pieces, taken_conditions(pieces)) if value != 0]
    if len(nonzero) != 1 or not nonzero[0][1].free_symbols & inputs:
        return piecewise
    value, taken = nonzero[0]
    if not value.free_symbols & inputs:
        return value * Masked(sympy.S.One, taken)  # an indicator: the mask as a number, times the value
    own_guards = {g: sympy.Dummy() for g in value.atoms(Guard) if g.args[1] == taken}
    if not own_guards or value.xreplace(own_guards).free_symbols & inputs:
        return piecewise
    return Masked(value, taken)


# Functions that overflow at moderate arguments: a product of a mask with them may be 0 * inf
_GROWING = (sympy.exp, sympy.cosh, sympy.sinh, sympy.gamma, cfunctions.expm1)


def unguarded(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each guarded input the input again (for formulas shown to people)."""
    if expr.has(Masked):
        expr = expr.replace(lambda e: isinstance(e, Masked), lambda e: sympy.Piecewise((e.args[0], e.args[1]), (0, True)))
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
    masked = sum(value != 0 for value, _ in pieces) == 1
    return sympy.Piecewise(*[(_guard_branch(value, taken, inputs, spec, masked), cond)
                             for (value, cond), taken in zip(pieces, taken_conditions(pieces))])


def taken_conditions(pieces) -> list:
    """Where each branch of ``Piecewise(*pieces)`` is the one taken: its condition and no earlier one."""
    taken, earlier = [], sympy.false
    for _, cond in pieces:
        taken.append(sympy.And(cond, sympy.Not(earlier)))
        earlier = sympy.Or(earlier, cond)
    return taken


def _guard_branch(value: sympy.Expr, taken, inputs, spec, masked: bool) -> sympy.Expr:
    """``value`` with its inputs guarded; not when it is finite wherever its inputs are, unless it
    is the one nonzero branch (``masked``), whose guards let it print as a product with its mask."""
    used = sorted(value.free_symbols & inputs, key=lambda s: s.name)
    if not used or taken == sympy.true or (not masked and _finite_everywhere(value, used)):
        return value
    safe = safe_point(value, used, spec, taken)
    return value.xreplace({s: _guarded_input(s, taken, v) for s, v in zip(used, safe)})


def _sympy_class(name: str) -> type:
    """The SymPy class of that name: SymPy's own (its subclasses included, such as the language's
    erfc), else the language's (sigmoid)."""
    return getattr(sympy, name, None) or getattr(functions, name)


# Functions that are finite, and so are all their derivatives, wherever their argument is finite:
# the language's marked ``entire`` in the registry, and sign (abs' derivative).
_ENTIRE = (*(_sympy_class(f.sympy) for f in REGISTRY.values() if f.entire), sympy.sign)


# Nodes that are finite where each of their values is: a choice (its conditions are never values)
# and its guards. An inner min or max of polynomials (min(max(x, 0), max(y, min(x, y)))) is then
# finite everywhere, not guarded again with the outer branch's condition: guards within guards
# made 65,452 operations of that formula's 140 and its build ran past every time limit.
_CHOICES = (sympy.Piecewise, ExprCondPair, Boolean, Guard, Masked)


def _finite_everywhere(value: sympy.Expr, used) -> bool:
    """Whether ``value`` is built from the inputs by sums, products, whole powers, ``_ENTIRE``
    functions and choices among such values: finite with its derivatives wherever the inputs are
    (up to overflow, as a polynomial)."""
    for node in sympy.preorder_traversal(value):
        if not node.free_symbols & set(used) or node.is_Symbol or node.is_Add or node.is_Mul:
            continue
        if isinstance(node, _CHOICES):
            continue
        if node.is_Pow and node.exp.is_Integer and node.exp >= 0:
            continue
        if not isinstance(node, _ENTIRE):
            return False
    return True


def safe_point(value: sympy.Expr, used, spec, taken=None) -> tuple[sympy.Expr, ...]:
    """A point of the inputs ``used`` where ``value`` and its partial derivatives up to the spec's
    order are finite (float64, params at their defaults). Where ``taken`` bounds the one input by
    k (x <= k, r < rc): k itself (the guard is then a clamp), else k moved into the taken side by
    a nice step (rc - 1: it follows rc when the params change); else a nice number for all, else
    a point of the domain grid."""
    from . import domain

    inputs = {sympy.Symbol(name, real=True) for name in spec.inputs}
    bound = _bound(taken, used, inputs)
    if bound is not None and _finite_at(value, used[0], bound, spec):
        return (bound,)
    inside = next((point for point in _inside_abs_bound(taken, used, inputs) if _finite_at(value, used[0], point, spec)),
                  None)
    if inside is not None:
        return (inside,)
    candidates = []
    if bound is not None:
        inward = -1 if clamp_side(used[0], taken, bound) == "max" else 1
        moved = [bound + inward * sympy.nsimplify(step) for step in _NICE if step > 0]
        candidates = [(sympy.Float(v) if v.is_Number else v,) for v in moved]
    candidates += [(sympy.Float(v),) * len(used) for v in _NICE]
    candidates += [tuple(sympy.Float(v) for v in point) for point in domain.grid([spec.bounds(s.name) for s in used])]
    formulas = [f for _, f in domain.formulas_at_defaults(value, spec, used)]
    at_defaults = [tuple(float(domain.at_defaults(v, spec)) for v in point) for point in candidates]
    bad = domain.not_finite(formulas, used, at_defaults)
    for index, point in enumerate(candidates):
        if not any(row[index] for row in bad):
            return point
    branch = formula(value)
    raise SpecErrors([spec.problem("expr", f"expr: the branch {branch} is not finite, or a derivative of it up to "
                                           f"order {spec.order}, at any point tried; dbgen needs one to evaluate "
                                           "it where it is not taken. Write the branch so that it is finite "
                                           "somewhere in the domain")])


def _finite_at(value: sympy.Expr, x: sympy.Symbol, bound: sympy.Expr, spec) -> bool:
    """Whether ``value`` and its derivatives are finite at ``x = bound`` exactly: substituted before
    the params take their defaults, so that 1 - r**2/rc**2 is 0 at r = rc (and exp(-1/0) NaN),
    not 1e-16 after rounding rc**-2 (exp(-1e16) = 0: a singular bound taken for a safe point)."""
    from . import domain

    formulas = [domain.at_defaults(f.xreplace({x: bound}), spec) for _, f in domain.with_partials(value, [x], spec.order)]
    return not any(row[0] for row in domain.not_finite(formulas, [x], [(0.0,)]))


def _inside_abs_bound(taken, used, inputs) -> list[sympy.Expr]:
    """Where ``taken`` is abs(x) < k or abs(x) <= k (k of params and numbers): 0 and k/2, inside the
    taken side whatever k is, so the point follows k when the params change. A nice number does
    not: 1.0, safe for exp(-w**2/(w**2 - x**2)) at w = 1.5, is its singularity at w = 1."""
    if len(used) != 1 or not isinstance(taken, sympy.core.relational.Relational):
        return []
    if taken.rel_op in (">", ">="):
        taken = taken.reversed
    (x,) = used
    if taken.rel_op not in ("<", "<=") or taken.lhs != sympy.Abs(x) or taken.rhs.free_symbols & inputs:
        return []
    return [sympy.S.Zero, taken.rhs / 2]


def _bound(taken, used, inputs) -> sympy.Expr | None:
    """k where ``taken`` is x <= k, x < k, x >= k or x > k for the one input x used and k of params
    and numbers alone."""
    if len(used) != 1 or not isinstance(taken, sympy.core.relational.Relational):
        return None
    (x,) = used
    for other in (taken.lhs, taken.rhs):
        if not other.free_symbols & inputs and clamp_side(x, taken, other):
            return other
    return None


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
