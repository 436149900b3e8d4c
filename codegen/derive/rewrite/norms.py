"""Norms and ratios: sech**2, hypot and sqrt of sums of squares as norms, comparisons with zero,
ratios of norms kept bounded.
"""

from __future__ import annotations

import functools

import sympy
from sympy.codegen.cfunctions import hypot
from sympy.codegen.rewriting import ReplaceOptim, optimize
from sympy.printing.precedence import PRECEDENCE


def _one_minus_square(add):
    """(c, u) when ``add`` is c*(1 - u**2) with c = +-1, else None."""
    if len(add.args) != 2:
        return None
    for constant, square in (add.args, add.args[::-1]):
        c = constant
        coefficient, power = square.as_coeff_Mul()
        if c in (1, -1) and coefficient == -c and power.is_Pow and power.exp == 2:
            return c, power.base
    return None


class Sech2(sympy.Function):
    """Sech2(y) = 1 - y**2 for y = tanh(u), a rounded tanh: sech(u)**2, the derivative of tanh(u).

    Times a tensor the printer writes it as torch's fused ``tanh_backward(g, y)``, one kernel where
    ``g*(1 - y)*(1 + y)`` takes four, and what autograd itself runs for tanh (its derivatives are
    torch ops too). For a rounded y, 1 - y*y is within 1.5 times the error of (1 - y)*(1 + y): y's
    own rounding dominates both near |y| = 1. Alone it prints as that product.
    """

    nargs = 1
    recomputed = True  # a product, recomputed where needed rather than passed down (symbolic.reused_calls)

    @classmethod
    def eval(cls, y):
        return 1 - y**2 if y.is_Number else None

    def _eval_derivative(self, symbol):
        (y,) = self.args
        return -2 * y * y.diff(symbol)

    def _eval_is_real(self):
        return self.args[0].is_real


def _tanh_square(add):
    """(c, tanh(u)) when ``add`` is c*(1 - tanh(u)**2), else None."""
    found = _one_minus_square(add)
    return found if found is not None and isinstance(found[1], sympy.tanh) else None


# 1 - tanh(u)**2 -> Sech2(tanh(u)): printed with its cotangent as torch's tanh_backward.
sech2_opt = ReplaceOptim(
    lambda e: e.is_Add and _tanh_square(e) is not None,
    lambda e: _tanh_square(e)[0] * Sech2(_tanh_square(e)[1]),
)

# 1 - u**2 -> (1 - u)*(1 + u): exact near u = +-1, where asin, acos and atanh need it most. Not for
# u = Ratio(x, r) (in_ratios), itself rounded: 1 - u loses as much as 1 - u**2, a kernel dearer.
difference_of_squares_opt = ReplaceOptim(
    lambda e: e.is_Add and _one_minus_square(e) is not None and not isinstance(_one_minus_square(e)[1], Ratio),
    lambda e: _one_minus_square(e)[0] * sympy.Mul(1 - _one_minus_square(e)[1], 1 + _one_minus_square(e)[1],
                                                   evaluate=False),
)


def _squares(base):
    """(a, b, ...) when ``base`` is a sum of squares a**2 + b**2 + ..., else None."""
    if not base.is_Add:
        return None
    roots = []
    for term in base.args:
        if not (term.is_Pow and term.exp == 2):
            return None
        roots.append(term.base)
    return tuple(roots)


# sqrt(a**2 + b**2) -> hypot(a, b), sqrt(a**2 + b**2 + c**2) -> hypot(hypot(a, b), c), and odd
# powers of them: a**2 overflows before the result does, and torch.hypot's backward divides by
# the norm once where autograd through sqrt divides the sum by its root (a distance's third
# derivative is inf at a norm of 1e-150). Two kernels for three squares, where the sum takes six.
hypot_opt = ReplaceOptim(
    lambda e: e.is_Pow and e.exp.is_Rational and e.exp.q == 2 and _squares(e.base) is not None,
    lambda e: functools.reduce(hypot, _squares(e.base)) ** (2 * e.exp),
)


class Norm(sympy.Function):
    """Norm(a, b, c, ...) = sqrt(a**2 + b**2 + c**2 + ...): hypot(hypot(a, b), c) in a formula that
    autograd differentiates (``smooth_norms``).

    torch.hypot's backward divides by its value: through hypot(hypot(a, b), c) at a = b = 0 the
    inner one sends 0/0, so the second derivative of a distance is NaN on every axis (where it is
    1/|c|). Printed as the generated module's ``_norm``, which scales the components by the norm
    (held constant: the norm is the same at every scale) and so is smooth wherever it is not 0, and
    no square underflows or overflows. About 1.5 times the time of the two hypot kernels, 2.3 times
    with its backward (cost.py), in the formulas that autograd differentiates only.
    """

    def fdiff(self, argindex=1):
        return self.args[argindex - 1] / self

    def _eval_is_real(self):
        return all(arg.is_real for arg in self.args) or None

    def _eval_is_nonnegative(self):
        return all(arg.is_real for arg in self.args) or None

    def _torchcode(self, printer, **kwargs):  # printer.TorchPrinter
        call = "_norm"
        if not printer.is_tensor(self):  # params only: a number
            printer.uses_math, call = True, "math.hypot"
        return f"{call}({', '.join(printer._print(arg) for arg in self.args)})"

    def _sympystr(self, printer) -> str:  # formula.LanguagePrinter, as the spec writes a norm
        return f"sqrt({printer._print(sympy.Add(*(arg**2 for arg in self.args)))})"


def smooth_norms(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each hypot(hypot(a, b), c) as ``Norm(a, b, c)``: for a formula that autograd
    differentiates (a single level's backward, a jvp, nested's last backward). Elsewhere the two
    hypot kernels compute the value, and dbgen's own formulas its derivatives."""
    if not expr.has(hypot):
        return expr
    return expr.replace(_is_nested_hypot, lambda e: Norm(*_hypot_leaves(e)))


def _is_nested_hypot(e) -> bool:
    return isinstance(e, hypot) and any(isinstance(arg, hypot) for arg in e.args)


def _hypot_leaves(norm) -> tuple:
    """a, b, c of hypot(hypot(a, b), c): the values whose squares sum to the norm's square."""
    return tuple(leaf for arg in norm.args for leaf in (_hypot_leaves(arg) if isinstance(arg, hypot) else (arg,)))


def _norm_of(base):
    """The leaves of ``base`` as a frozenset, with 1 for a norm (hypot) and 2 for a sum of their
    squares (its square); else None."""
    if isinstance(base, hypot):
        return frozenset(_hypot_leaves(base)), 1
    roots = _squares(base)
    return (frozenset(roots), 2) if roots and len(roots) > 1 else None


def _norm_power(term, leaves):
    """(rest, k): ``term`` as rest * R**k, R the norm of ``leaves`` (as hypot, or as the sum of
    their squares R**2), rest free of R's powers."""
    rest, k = [], 0
    for factor in sympy.Mul.make_args(term):
        base, exponent = factor.as_base_exp()
        found = _norm_of(base)
        if found and found[0] == leaves and exponent.is_Integer:
            k += found[1] * int(exponent)
        else:
            rest.append(factor)
    return sympy.Mul(*rest), k


def _norm_leaf_sets(add) -> list:
    found = {_norm_of(node.as_base_exp()[0]) for node in sympy.preorder_traversal(add)
             if isinstance(node, (sympy.Pow, sympy.Add, hypot))} - {None}
    return sorted({leaves for leaves, _ in found}, key=sympy.default_sort_key)


NORM_TERMS = 8  # the most terms of a sum norm_squares_opt expands: a level's whole vjp is dearer than it gains


@functools.lru_cache(maxsize=4096)
def _norm_form(add, leaves):
    """``add`` with the powers of the norm R of ``leaves`` reduced by R**2 = a**2 + b**2 + ...,
    term by term over the lowest power of R, where that cancels terms (else None)."""
    if len(add.args) > NORM_TERMS:
        return None
    split = [_norm_power(term, leaves) for term in add.args]
    lowest = min(k for _, k in split)
    if all(k == lowest for _, k in split):
        return None
    square = sympy.Add(*(leaf**2 for leaf in leaves))
    parts, written = {0: [], 1: []}, 0
    for rest, k in split:
        q, odd = divmod(k - lowest, 2)
        expanded = sympy.expand(rest * square**q)
        written += len(sympy.Add.make_args(expanded))
        parts[odd].append(expanded)
    sums = {odd: sympy.Add.make_args(sympy.expand(sympy.Add(*terms))) for odd, terms in parts.items()}
    if sum(len(terms) for terms in sums.values() if terms != (0,)) >= written:
        return None  # nothing cancelled: the sum had no r**2 - x**2 in it
    norms = [node for node in sympy.preorder_traversal(add) if isinstance(node, hypot)
             and frozenset(_hypot_leaves(node)) == leaves]

    def power(j):
        return norms[0] ** j if norms else square ** sympy.Rational(j, 2)

    return sympy.Add(*(term * power(lowest + odd) for odd, terms in sums.items() for term in terms))


def _reduced_norms(add):
    for leaves in _norm_leaf_sets(add):
        reduced = _norm_form(add, leaves)
        if reduced is not None:
            return reduced
    return add


def _has_reducible_norm(add) -> bool:
    return add.is_Add and any(_norm_form(add, leaves) is not None for leaves in _norm_leaf_sets(add))


# 1/r - x**2/r**3 -> (y**2 + z**2)/r**3, r = hypot(hypot(x, y), z) (the same for powers of
# x**2 + y**2 + z**2 = r**2): the terms of a norm's derivatives cancel where one component is much
# the largest (every bit of d2r/dx2 at (0.7, 1e-13, 1e-245)). Term by term, each x*y/r**3 as in_ratios
# writes them (Ratio(x, r)*Ratio(y, r)/r), so that no r**3 underflows.
norm_squares_opt = ReplaceOptim(_has_reducible_norm, _reduced_norms)


def _even_power_roots(total) -> tuple | None:
    """(u, v, ...) when ``total`` is a sum c*u**(2k) + d*v**(2m) + ..., the c, d positive numbers
    (so 0 exactly where every root is); else None."""
    roots = []
    for term in sympy.Add.make_args(total):
        coefficient, power = term.as_coeff_Mul()
        base, exponent = power.as_base_exp()
        if not (coefficient > 0 and exponent.is_even and base.free_symbols and base.is_real):
            return None
        roots.append(base)
    return tuple(roots)


def _zero_comparison(relation) -> tuple | None:
    """(roots, the sum is nonzero) for a comparison of a sum of even powers with 0 that says whether
    it is 0 (s > 0, s != 0, s == 0, s <= 0, either way round); else None."""
    if not isinstance(relation, sympy.core.relational.Relational) or relation.rhs != 0:
        return None
    roots = _even_power_roots(relation.lhs)
    if roots is None or relation.rel_op not in (">", "!=", "==", "<="):
        return None
    return roots, relation.rel_op in (">", "!=")


def _by_roots(relation):
    roots, nonzero = _zero_comparison(relation)
    if nonzero:
        return sympy.Or(*(sympy.Ne(root, 0) for root in roots))
    return sympy.And(*(sympy.Eq(root, 0) for root in roots))


# x**2 + y**2 + z**2 > 0 -> (x != 0) | (y != 0) | (z != 0), and == 0 as all of them 0: the squares
# underflow, so the sum is 0 at a norm of 1e-200 and a guard at 0 takes the branch for the origin
# (JAX-MD's safe norm returned 0 there, not 1e-200, and 0 for its derivatives). 0 < s is s > 0.
zero_comparison_opt = ReplaceOptim(lambda e: _zero_comparison(_canonical_side(e)) is not None,
                                   lambda e: _by_roots(_canonical_side(e)))


def _canonical_side(relation):
    """``relation`` with 0 on the right (0 < s as s > 0), or unchanged."""
    if isinstance(relation, sympy.core.relational.Relational) and relation.lhs == 0 and relation.rhs != 0:
        return relation.reversed
    return relation


class Ratio(sympy.Function):
    """Ratio(a, r) = a/r for a value a that the norm r bounds (|a| <= r): a root of r = hypot(a, b).

    A norm's derivatives divide by its powers: x*y/r**3, whose parts underflow or overflow where the
    value does not (r**3 = 0 at r = 1e-150, where x*y/r**3 is 1e150). As Ratio(x, r)*Ratio(y, r)/r,
    every factor but the last is at most 1, and the last has the size of the value. Printed as one
    division, which CSE cannot split into a product with 1/r.
    """

    nargs = 2
    recomputed = True  # a division, recomputed where needed rather than passed down (symbolic.reused_calls)
    # parenthesized as a factor, g * (x / r) and not g * x / r, also of a product with a sign (whose
    # factors SymPy's printers parenthesize at the precedence of a sum: -g * (x / r))
    precedence = PRECEDENCE["Add"]

    def fdiff(self, argindex=1):
        norm = self.args[1]
        return 1 / norm if argindex == 1 else -self / norm

    def _division(self, printer, separator: str) -> str:
        a, norm = self.args
        mul = PRECEDENCE["Mul"]
        return f"{printer.parenthesize(a, mul, strict=True)}{separator}{printer.parenthesize(norm, mul)}"

    def _torchcode(self, printer) -> str:  # printer.TorchPrinter
        return self._division(printer, " / ")

    def _sympystr(self, printer) -> str:  # formula.LanguagePrinter, as SymPy writes a division
        return self._division(printer, "/")


def _norm_roots(norm) -> set:
    """The values a norm bounds: a, b and c of hypot(hypot(a, b), c), and the inner hypot(a, b)."""
    roots = set()
    for arg in norm.args:
        roots.add(arg)
        if isinstance(arg, hypot):
            roots |= _norm_roots(arg)
    return roots


def _norm_divisions(mul) -> list:
    """The factors r**-j of ``mul``, r a norm (hypot) and j a positive integer."""
    return [f for f in sympy.Mul.make_args(mul)
            if f.is_Pow and isinstance(f.base, hypot) and f.exp.is_Integer and f.exp < 0]


def _root_power(factor, roots):
    """(c, root, k) when ``factor`` is (c*root)**k with c a number and k a positive integer, else
    None: hypot's derivative holds (2*a - 2*b)/2 for the root a - b."""
    base, k = factor.as_base_exp()
    if not (k.is_Integer and k > 0):
        return None
    content, primitive = base.as_content_primitive()
    for sign in (1, -1):
        if sign * primitive in roots:
            return sign * content, sign * primitive, int(k)
    return None


def _pairs_with_a_norm(mul) -> bool:
    """True when ``_over_norms`` changes ``mul``: a root over its norm, or a norm's power below -1."""
    factors = sympy.Mul.make_args(mul)
    return any(division.exp <= -2 or any(_root_power(f, _norm_roots(division.base)) for f in factors)
               for division in _norm_divisions(mul))


def _over_norms(mul):
    """(c*a)**k / r**j -> c**k * Ratio(a, r)**m * a**(k - m) / r**(j - m), m = min(k, j), for each
    root a of r; what is left of 1/r**j, if more than 1/r, as Ratio(1, r)**(j - m).

    In a formula autograd differentiates (a single level's backward), a division by r**2 has the
    backward -g*(v/r**2)/r**2 for the value v: 1/r**4 where the derivative has the size of v/r
    (inf at r = 1e-100 for a Coulomb potential's second derivative). A product with (1/r)**2 has
    backward g*2*(1/r), and the reciprocal's backward g*(1/r)**2: each the size of a derivative.
    """
    factors = list(sympy.Mul.make_args(mul))
    for division in _norm_divisions(mul):
        norm, left = division.base, -int(division.exp)
        roots = _norm_roots(norm)
        for index, factor in enumerate(factors):
            found = _root_power(factor, roots) if left else None
            if found:
                c, root, k = found
                m = min(k, left)
                factors[index] = c**k * Ratio(root, norm) ** m * root ** (k - m)
                left -= m
        factors[factors.index(division)] = norm ** -left if left < 2 else Ratio(1, norm) ** left
    return sympy.Mul(*factors)


over_norm_opt = ReplaceOptim(lambda e: e.is_Mul and _pairs_with_a_norm(e), _over_norms)


def in_ratios(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each norm's roots over its powers as ``Ratio``s, for printing.

    Not one of the ``RULES``: the stable forms keep x/r**3 whole, as the rules and factoring see
    it; this is how the planner evaluates it, (x/r)*(1/r)**2. ``for_differentiation`` undoes it.
    A sum of the squares of a norm's leaves (``norm_squares`` writes y**2/(x**2 + y**2 + z**2)) is
    first that norm squared: the sum underflows at a norm of 1e-160, and y**2/r**2 is Ratio(y, r)**2.
    """
    if not expr.has(hypot):
        return expr
    return optimize(_sums_as_norms(expr), [over_norm_opt])


def _sums_as_norms(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with each sum of the squares of a norm's leaves in it written as that norm squared."""
    norms = {_norm_of(node)[0]: node for node in sympy.preorder_traversal(expr) if isinstance(node, hypot)}

    def is_norms_square(e) -> bool:
        found = _norm_of(e) if e.is_Add else None
        return found is not None and found[0] in norms

    return expr.replace(is_norms_square, lambda add: norms[_norm_of(add)[0]] ** 2)
