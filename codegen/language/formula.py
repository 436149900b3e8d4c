"""The spec's expression language written back from SymPy: ``formula(expr)`` is ``expr`` as a user
writes it in a spec, for docstrings, ``dbgen show`` and messages.

A leaf of the pipeline: the branches, the domain check, the render and show read it, and it imports
nothing of dbgen's but the registry of the language's functions (``registry.py``), which names the
SymPy classes the language spells otherwise (``Abs`` is ``abs``). Nodes that dbgen adds to SymPy
print through their own ``_sympystr`` or the ``_print_X`` methods here (matched by class name, as
SymPy's printers do).
"""

from __future__ import annotations

import sympy
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter

from .registry import REGISTRY


def _is_series(expr: sympy.Expr) -> bool:
    """Whether ``expr`` is series.py's polynomial branch itself (not a choice that holds one): its
    ``Horner`` node says so (``taylor_branch``), read here without importing the stage that makes it."""
    is_horner = any(getattr(type(node), "taylor_branch", False) for node in sympy.preorder_traversal(expr))
    return is_horner and not expr.has(sympy.Piecewise)


class LanguagePrinter(StrPrinter):
    """SymPy -> the spec's expression language, for docstrings and messages: branches as
    ``where(cond, a, b)`` and guarded inputs as the inputs (branches.py)."""

    def _print_Piecewise(self, expr):
        *pieces, (last, _) = [(arg.expr, arg.cond) for arg in expr.args]
        code = self._print(last)
        if any(_is_series(value) for value, _ in pieces):
            return code  # series.removable's split: the user wrote the formula, not its Taylor branch
        for value, cond in reversed(pieces):
            code = f"where({self._print(cond)}, {self._print(value)}, {code})"
        return code

    def _print_Guard(self, expr):
        return self._print(expr.args[0])

    _print_ClampBelow = _print_ClampAbove = _print_Guard  # branches.Guard's clamps

    def _print_Masked(self, expr):
        value, taken = expr.args
        return f"where({self._print(taken)}, {self._print(value)}, 0)"

    def _print_sign(self, expr):
        """sign is not in the language (abs' derivative is, and 0 at 0, as torch's)."""
        u = self._print(expr.args[0])
        return f"where({u} > 0, 1, where({u} < 0, -1, 0))"

    def _print_Sech2(self, expr):
        return f"(1 - {self.parenthesize(expr.args[0]**2, PRECEDENCE['Add'])})"

    def _print_polygamma(self, expr):
        n, arg = expr.args
        return f"digamma({self._print(arg)})" if n == 0 else f"polygamma({n}, {self._print(arg)})"

    def _print_SpecialFunctionBase(self, expr):
        """A language function by its name; a derivative's family by the generated module's."""
        return f"{type(expr).language or type(expr).runtime}({', '.join(self._print(a) for a in expr.args)})"

    def _print_And(self, expr):
        return " and ".join(self.parenthesize(arg, PRECEDENCE["And"]) for arg in expr.args)

    def _print_Or(self, expr):
        return " or ".join(self.parenthesize(arg, PRECEDENCE["Or"]) for arg in expr.args)

    def _print_Not(self, expr):
        return f"not {self.parenthesize(expr.args[0], PRECEDENCE['Not'])}"

    def _print_Relational(self, expr):
        lhs, op, rhs = oriented(expr)
        return f"{self._print(lhs)} {op} {self._print(rhs)}"


def _by_name(name: str):
    """The ``_print_X`` of a SymPy class that the language names ``name``."""
    def print_call(self, expr):
        return f"{name}({', '.join(self._print(arg) for arg in expr.args)})"

    return print_call


# A language function whose SymPy class has another name (registry.py: Abs is abs, loggamma is
# lgamma) is written by the language's; SymPy's printers look a method up by the class name,
# ``_print_<ClassName>``. Not an alias (modified_bessel_i0 is written i0), nor a class printed
# by its own method (sqrt's Pow, the piecewise ones' Piecewise, digamma's polygamma).
for _function in REGISTRY.values():
    if (_function.name != _function.sympy and _function.alias_of is None
            and not hasattr(LanguagePrinter, f"_print_{_function.sympy}")):
        setattr(LanguagePrinter, f"_print_{_function.sympy}", _by_name(_function.name))


_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def oriented(relation: sympy.core.relational.Relational, first=None) -> tuple[sympy.Expr, str, sympy.Expr]:
    """A comparison's sides and operator as dbgen prints it: the side with more operations first.

    SymPy keeps a condition in whichever order it was built or canonicalised in, so one condition
    came out as ``delta > abs(x - y)`` where the spec wrote ``abs(x - y) < delta``, and as
    ``abs_diff_x_y < delta`` once CSE had named the abs. Every printer and the mask's name read
    this order instead, so that a condition has one spelling wherever it stands.

    Args:
        relation: the comparison.
        first: where both sides have as many operations, a test of the side to put first (the
            torch printer's: the tensor, so that ``abs_diff_x_y < delta`` reads as the spec); None
            keeps the order SymPy has.

    Returns:
        (left side, operator, right side).
    """
    lhs, rhs = relation.lhs, relation.rhs
    left, right = _operations(lhs), _operations(rhs)
    flip = right > left or (right == left and first is not None and first(rhs) and not first(lhs))
    if flip:
        return rhs, _FLIPPED[relation.rel_op], lhs
    return lhs, relation.rel_op, rhs


def _operations(side: sympy.Expr) -> int:
    """The operations a side of a comparison reads; none for a constant (-1, pi/2), which stays last."""
    return 0 if side.is_number else sympy.count_ops(side)


def formula(expr: sympy.Expr) -> str:
    """``expr`` as a user writes it in a spec."""
    return LanguagePrinter().doprint(expr)
