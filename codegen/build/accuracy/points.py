"""Where accuracy is measured: the domain's special values, a sample spread over its magnitudes,
and the thresholds where a formula's branches meet.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

import sympy

from .floats import _from_ordered, _ordered

APPROACH = (2.0**-10, 2.0**-20, 2.0**-30)  # relative distances from a threshold sampled on both sides


def special_values(lo: float, hi: float, thresholds: Sequence[float] = ()) -> list[float]:
    """The ends, 0, and each threshold with its two float neighbours and points approaching it
    (``APPROACH``), where inside [lo, hi]. A formula that vanishes at a cutoff loses most between
    the two: (cos(pi*r/rc) + 1)/2 lost 10 bits beyond its conditioning at rc - 1e-4, which
    neither the neighbours (where the conditioning explains all) nor uniform draws reach."""
    values = [lo, hi] + ([0.0] if lo < 0 < hi else [])
    for t in thresholds:
        values += [t, math.nextafter(t, -math.inf), math.nextafter(t, math.inf)]
        values += [t + sign * (abs(t) or 1.0) * step for step in APPROACH for sign in (-1, 1)]
    return sorted({v for v in values if lo <= v <= hi})


def sample(bounds: Sequence[tuple[float, float]], count: int, seed: int = 0,
           thresholds: Sequence[Sequence[float]] = ()) -> list[tuple[float, ...]]:
    """``count`` points in the box (at least the special values' combinations, up to ``count``):
    half uniform over each input's float bit patterns, half uniform in value, the special values
    first, each beside random values of the other inputs."""
    rng = random.Random(seed)
    marks = [special_values(lo, hi, thresholds[i] if i < len(thresholds) else ()) for i, (lo, hi) in enumerate(bounds)]

    def draw(i: int, by_bits: bool) -> float:
        lo, hi = bounds[i]
        if by_bits:
            return _from_ordered(rng.randint(_ordered(lo), _ordered(hi)))
        return lo + (hi - lo) * rng.random()

    points: list[tuple[float, ...]] = []
    for i, values in enumerate(marks):
        for value in values:
            points.append(tuple(value if j == i else draw(j, len(points) % 2 == 0) for j in range(len(bounds))))
    if len(bounds) > 1:  # the special values together: corners, and 0 in every input at once
        points += list(itertools.islice(itertools.product(*marks), max(0, count // 4)))
    while len(points) < count:
        by_bits = len(points) % 2 == 0
        points.append(tuple(draw(i, by_bits) for i in range(len(bounds))))
    return points


def thresholds(exprs: Sequence[sympy.Expr], symbol: sympy.Symbol) -> list[float]:
    """The values of ``symbol`` at which a comparison in the formulas changes (x < c gives c), where
    the other side is a number (params at their values)."""
    found = []
    for expr in exprs:
        for rel in expr.atoms(sympy.core.relational.Relational):
            for side, other in ((rel.lhs, rel.rhs), (rel.rhs, rel.lhs)):
                if side == symbol and other.is_number:
                    try:
                        found.append(float(other))
                    except TypeError:
                        pass
    return sorted(set(found))
