"""Piecewise's joined conditions: SymPy's normal form where it is short, the condition as it is
where the normal form would grow (codegen/language/conditions.py)."""

from __future__ import annotations

import itertools

import sympy
from sympy.functions.elementary import piecewise

from codegen.language import conditions, functions  # functions installs the rules

x, y, z, w = sympy.symbols("x y z w", real=True)


def _truth_table_equal(a, b) -> bool:
    relations = sorted(a.atoms(sympy.core.relational.Relational) | b.atoms(sympy.core.relational.Relational),
                       key=sympy.default_sort_key)
    for values in itertools.product([True, False], repeat=len(relations)):
        assignment = dict(zip(relations, values))
        if bool(a.xreplace(assignment)) != bool(b.xreplace(assignment)):
            return False
    return True


def test_the_rules_are_installed_where_piecewise_reads_them():
    assert piecewise.distribute_and_over_or is conditions.distributed_if_short
    assert piecewise._canonical_coeff is conditions.stable_canonical


def test_a_short_condition_takes_the_normal_form_where_it_is_no_longer():
    condition = sympy.And(sympy.Or(x > 0, y > 0), sympy.Or(x > 0, sympy.And(y > 0, z > 0)))
    assert conditions.distributed_if_short(condition) == sympy.And(sympy.Or(x > 0, y > 0), sympy.Or(x > 0, z > 0))


def test_a_condition_whose_normal_form_grows_is_kept_with_the_same_truth_table():
    atoms = [x > 0, y > 0, z > 0, w > 0, x > y, y > z, z > w, w > x]
    condition = sympy.Or(*(sympy.And(a, b) for a, b in zip(atoms[::2], atoms[1::2])))
    kept = conditions.distributed_if_short(condition)
    normal = conditions._SYMPYS_DISTRIBUTION(condition)
    assert sympy.count_ops(normal) > sympy.count_ops(condition)
    assert kept == condition and _truth_table_equal(kept, normal)


def test_a_comparison_with_floats_on_both_sides_has_a_stable_form():
    """SymPy's form of 0.9*x > -0.1*x flips at every call (0.1*x > -0.9*x and back), and Piecewise
    rebuilt itself until the recursion limit: a quantile loss at q = 0.9 was an internal error."""
    relation = sympy.Float(0.9) * x > sympy.Float(-0.1) * x
    stable = conditions.stable_canonical(relation)
    assert conditions.stable_canonical(stable) == stable
    assert stable.subs(x, 1) == relation.subs(x, 1) and stable.subs(x, -1) == relation.subs(x, -1)
    choice = functions.CONSTRUCTORS["max"](sympy.Float(0.9) * x, sympy.Float(-0.1) * x)
    assert choice.subs(x, 2) == sympy.Float(1.8) and choice.subs(x, -2) == sympy.Float(0.2)
    assert conditions.stable_canonical(x > y) == (x > y)  # a stable form is SymPy's, as it was
