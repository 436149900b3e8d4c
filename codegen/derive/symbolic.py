"""Derivatives, vector-Jacobian products, rewrites in terms of saved values, and CSE.

Everything here is pure SymPy: no torch, no code text. Derivatives are taken almost everywhere,
as autograd takes them (the derivative of sign(u) is 0, not a Dirac delta).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy
from sympy.codegen import cfunctions

from .. import limits


def clean(expr: sympy.Expr) -> sympy.Expr:
    """Drop the distributions SymPy produces at measure-zero points, and the derivative of sign
    (autograd's convention: 0), and take real and imaginary parts of real values: every value the
    generated code computes is a real tensor, but SymPy cannot always prove it (the derivatives of
    abs(x**asin(x/4)) keep Derivative(re(...)) and Derivative(sign(...)) otherwise)."""
    if expr.has(sympy.DiracDelta):
        expr = expr.replace(lambda e: isinstance(e, sympy.DiracDelta), lambda e: sympy.S.Zero)
    if expr.has(sympy.re, sympy.im):
        expr = expr.replace(sympy.re, lambda u: u).replace(sympy.im, lambda u: sympy.S.Zero).doit()
    if expr.has(sympy.Derivative):  # of sign(u), for a u SymPy cannot prove real: 0 almost everywhere
        expr = expr.replace(lambda e: isinstance(e, sympy.Derivative) and isinstance(e.expr, sympy.sign),
                            lambda e: sympy.S.Zero)
    return merge_powers(expr)


def merge_powers(expr: sympy.Expr) -> sympy.Expr:
    """Each product's powers of one base as one power: p*x**p/x -> p*x**(p - 1), and a division
    by a factor of a power's base taken into the power: p*(x/r)**p/x -> p*(x/r)**(p - 1)/r.

    SymPy differentiates x**p into p*x**p/x, which is 0*inf = NaN at x = 0 where autograd (and
    the merged form) gives 0: no derivative may divide by a value the function does not divide
    by. SymPy merges numeric exponents itself but leaves x**p * x**-1 apart (equal only for
    x != 0), and (x/r)**p, whose derivative is p*(x/r)**p/x, apart from x. Where the power
    multiplies a sum holding the division, x**u*(log(x) + u/x), the product is distributed first.
    A merged power is NaN only where the function's own power is (x**(p - 1) at x < 0 with p not
    whole, as x**p); the other factors a merge brings in (1/r) are the base's own.
    """
    if not expr.has(sympy.Pow):
        return expr
    return expr.replace(lambda e: e.is_Mul and _splits_a_power(e), _merged_product)


def _open_powers(factors) -> list:
    """The factors B**e with e not a whole number: SymPy keeps these apart from B's factors."""
    return [f for f in factors if f.is_Pow and not f.exp.is_Integer]


def _divisors(term: sympy.Expr) -> list:
    """The factors s**-k of ``term`` with k a positive number."""
    return [f for f in sympy.Mul.make_args(term) if f.is_Pow and f.exp.is_Number and f.exp < 0]


def _absorbs(power: sympy.Pow, divisor: sympy.Pow) -> bool:
    """True when ``power`` takes ``divisor`` in: the same base with a symbolic exponent (summed),
    or a product base that holds the divisor's base (``_absorbed``)."""
    if power.base == divisor.base:
        return not power.exp.is_Number
    return _absorbed(power, divisor) is not None


def _absorbed(power: sympy.Pow, divisor: sympy.Pow) -> sympy.Expr | None:
    """B**e * s**-k as B**(e - n) * B**n * s**-k for B = s**m * c (m > 0) and n = ceil(k/m): the
    whole power B**n multiplies out into c**n * s**(n*m - k), which divides by s no more. None
    where B does not hold s, or where e is a number below n: B**(e - n) would then divide by B,
    inf*0 = NaN where c is 0 and the product itself is finite ((x*y)**0.5/x at y = 0)."""
    held = _held_power(power.base, divisor.base)
    if held is None:
        return None
    n = sympy.ceiling(-divisor.exp / held)
    if power.exp.is_Number and power.exp < n:
        return None
    return sympy.Pow(power.base, power.exp - n) * sympy.Pow(power.base, n) * divisor


def _held_power(base: sympy.Expr, factor: sympy.Expr) -> sympy.Expr | None:
    """m > 0 where the product ``base`` has ``factor``**m among its factors, else None."""
    if not base.is_Mul:
        return None
    for part in base.args:
        b, m = part.as_base_exp()
        if b == factor and m.is_Number and m > 0:
            return m
    return None


def _divides_absorbably(term: sympy.Expr, powers) -> bool:
    return any(_absorbs(p, d) for d in _divisors(term) for p in powers)


def _splits_a_power(mul: sympy.Expr) -> bool:
    factors = sympy.Mul.make_args(mul)
    powers = _open_powers(factors)
    return bool(powers) and any(
        _divides_absorbably(f, powers) or (f.is_Add and any(_divides_absorbably(t, powers) for t in f.args))
        for f in factors
    )


def _merged_product(mul: sympy.Expr) -> sympy.Expr:
    factors = sympy.Mul.make_args(mul)
    powers = _open_powers(factors)
    for index, factor in enumerate(factors):
        if factor.is_Add and any(_divides_absorbably(t, powers) for t in factor.args):
            rest = sympy.Mul(*factors[:index], *factors[index + 1:])
            return sympy.Add(*(merge_powers(rest * term) for term in factor.args))
    return _into_product_bases(_same_bases_merged(factors))


def _same_bases_merged(factors) -> list:
    """The factors with each symbolic power's base and its other powers as one power."""
    bases = {f.base for f in factors if f.is_Pow and not f.exp.is_Number}
    exponents: dict[sympy.Expr, list[sympy.Expr]] = {}
    others = []
    for factor in factors:
        if factor.is_Pow and factor.base in bases:
            exponents.setdefault(factor.base, []).append(factor.exp)
        else:
            others.append(factor)
    return [*others, *(sympy.Pow(base, sympy.Add(*found)) for base, found in exponents.items())]


def _into_product_bases(factors: list) -> sympy.Expr:
    """Each division the product has by a factor of a power's product base taken into that power.

    Only the divisions present at the start are taken in: a merge brings in the base's other
    factors (1/r of x/r), which another power's base may hold in turn ((r/x)**q), and taking
    those in as well would not end.
    """
    product = sympy.Mul(*factors)
    for divisor in _divisors(product):
        current = sympy.Mul.make_args(product)
        power = next((p for p in _open_powers(current) if _absorbed(p, divisor) is not None), None)
        if power is not None and divisor in current:
            rest = list(current)
            rest.remove(power)
            rest.remove(divisor)
            product = sympy.Mul(*rest, _absorbed(power, divisor))
    return product


def vjp(outputs: list[sympy.Expr], cotangents: list[sympy.Symbol], wrt: list[sympy.Symbol]) -> list[sympy.Expr]:
    """For each variable v in ``wrt``: sum_j cotangent_j * d(output_j)/dv."""
    return [
        clean(sympy.Add(*(c * sympy.diff(out, v) for c, out in zip(cotangents, outputs))))
        for v in wrt
    ]


def by_monomial(expr: sympy.Expr, symbols: frozenset) -> dict[sympy.Expr, sympy.Expr]:
    """``expr`` as {monomial: coefficient}, the monomials products of ``symbols`` (1 for the part free
    of them) and the coefficients free of them, expanded over ``symbols`` only.

    A derivative formula is linear in each level's cotangents (grad_r, grad_theta, ...): its
    coefficient of each is one output's derivative, which a rewrite can see whole only apart from
    the others' (1/r - x**2/r**3 for grad_r, lost in one sum over a common denominator with
    grad_theta's). Where ``symbols`` sit inside a call or power, that subexpression is a coefficient
    of 1 as it stands.
    """
    if not expr.free_symbols & symbols:
        return {sympy.S.One: expr}
    if expr in symbols:
        return {expr: sympy.S.One}
    if expr.is_Add:
        terms: dict = {}
        for arg in expr.args:
            for monomial, coefficient in by_monomial(arg, symbols).items():
                terms[monomial] = terms.get(monomial, 0) + coefficient
        return terms
    if expr.is_Mul:
        product = {sympy.S.One: sympy.S.One}
        for arg in expr.args:
            pairs = itertools.product(product.items(), by_monomial(arg, symbols).items())
            product = {}
            for (m, c), (n, d) in pairs:
                product[m * n] = product.get(m * n, 0) + c * d
        return product
    return {sympy.S.One: expr}


def jvp(outputs: list[sympy.Expr], inputs: list[sympy.Symbol], tangents: list[sympy.Symbol]) -> list[sympy.Expr]:
    """For each output: sum_i d(output)/d(input_i) * tangent_i (the forward-mode derivative)."""
    return [
        clean(sympy.Add(*(t * sympy.diff(out, v) for v, t in zip(inputs, tangents))))
        for out in outputs
    ]


def partial_derivatives(expr: sympy.Expr, inputs: tuple[sympy.Symbol, ...], order: int, limit: int):
    """(multi-index, derivative) pairs in order of total degree, at most ``limit`` of them.

    Returns the pairs and how many more exist beyond ``limit``.
    """
    shown: list[tuple[tuple[sympy.Symbol, ...], sympy.Expr]] = []
    cache: dict[tuple, sympy.Expr] = {(): expr}
    total = 0
    for degree in range(1, order + 1):
        for combo in itertools.combinations_with_replacement(range(len(inputs)), degree):
            total += 1
            if len(shown) >= limit:
                continue
            parent = cache[combo[:-1]]
            derivative = clean(sympy.diff(parent, inputs[combo[-1]]))
            limits.check(degree, [derivative])  # stops a spec whose derivatives blow up
            cache[combo] = derivative
            shown.append((tuple(inputs[i] for i in combo), derivative))
    return shown, total - len(shown)


class expm1(cfunctions.expm1):
    """exp(u) - 1 whose derivative is expm1(u) + 1, not exp(u): differentiated again, the
    difference of two of them stays a difference of expm1s (exact near 0) instead of exp(u) - exp(-u)."""

    def fdiff(self, argindex=1):
        return expm1(self.args[0]) + 1


def exp_form(expr: sympy.Expr) -> sympy.Expr:
    """sinh and cosh written through expm1(u) and expm1(-u), so forward and derivative share them.

    This is the tutorial's ``Sinh``: the derivative cosh(u) has no value in common with sinh(u),
    but (expm1(u) + expm1(-u))/2 + 1 and (expm1(u) - expm1(-u))/2 share both. The tutorial writes
    exp(u) and exp(-u), whose difference cancels near u = 0 (sinh(1e-17) came out 0, every bit lost
    as the accuracy oracle counts them); expm1's do not: they have opposite signs there.
    """
    def through_expm1(e):
        (u,) = e.args
        sign = 1 if isinstance(e, sympy.sinh) else -1
        return (expm1(u) - sign * expm1(-u)) / 2 + (0 if sign == 1 else 1)

    return expr.replace(lambda e: isinstance(e, (sympy.sinh, sympy.cosh)), through_expm1)


def in_terms_of(expr: sympy.Expr, known: list[tuple[sympy.Symbol, sympy.Expr]], exact: bool = True) -> sympy.Expr:
    """Rewrite ``expr`` to use the symbols of values already computed.

    ``known`` pairs a symbol with the expression whose value it holds. Exact replacement finds
    the values as they stand; ``exact=False`` lets SymPy's ``subs`` also find powers of them
    (1/x**2 in terms of y = 1/x is y**2), which is safe for one value but, across several, can
    trade exp(x) for 1/exp(-x).
    """
    expr = expr.xreplace({value: symbol for symbol, value in known if not value.is_Atom})
    if not exact:
        for symbol, value in sorted(known, key=lambda pair: -sympy.count_ops(pair[1])):
            if not value.is_Atom:
                expr = _without_new_divisions(expr, expr.subs(value, symbol))
    return expr


def denominators(expr: sympy.Expr) -> set[sympy.Expr]:
    """The bases that ``expr`` divides by: those of powers with a negative number as exponent."""
    return {node.base for node in sympy.preorder_traversal(expr)
            if node.is_Pow and node.exp.is_Number and node.exp < 0}


def _without_new_divisions(before: sympy.Expr, after: sympy.Expr) -> sympy.Expr:
    """``after`` unless it divides by something ``before`` does not: subs finds x**(p - 1) in
    terms of y = x**p as y/x, which is NaN at x = 0 where x**(p - 1) is 0."""
    return after if denominators(after) <= denominators(before) else before


def calls_on(expr: sympy.Expr, inputs) -> bool:
    """True when computing ``expr`` calls a function of an input (work worth saving, not redoing)."""
    inputs = set(inputs)
    return any(
        isinstance(node, sympy.Function) and node.free_symbols & inputs for node in sympy.preorder_traversal(expr)
    )


def shared_values(forwards: list[sympy.Expr], derivatives: list[sympy.Expr], inputs) -> tuple[sympy.Expr, ...]:
    """The function calls of ``forwards`` whose values their derivatives reuse (the tutorial's exp(x)).

    A forward value itself is never one: it is saved as an output (``reused_calls``).
    """
    return reused_calls(list(forwards), derivatives, inputs, whole=False)


def reused_calls(formulas: list[sympy.Expr], later: list[sympy.Expr], inputs, whole: bool = True):
    """The function calls computed by ``formulas`` that the ``later`` formulas use again.

    Candidates are the calls that depend on an input (a whole formula too, with ``whole``), but
    not those as cheap as a product (a clamp or a mask, ``recomputed`` in branches.py): a saved
    tensor costs memory. Larger ones are taken first, and a smaller one is kept only if the later
    formulas still need it once the larger kept ones are replaced (softplus(x) is not kept for mish
    when tanh(softplus(x)) is).
    """
    inputs = set(inputs)
    candidates = {
        node for formula in formulas for node in sympy.preorder_traversal(formula)
        if isinstance(node, sympy.Function) and node.free_symbols & inputs and (whole or node not in formulas)
        and not getattr(node, "recomputed", False)
    }
    ordered = sorted(candidates, key=lambda v: (-sympy.count_ops(v), sympy.default_sort_key(v)))
    remaining = list(later)
    kept = []
    for index, value in enumerate(ordered):
        if any(d.has(value) for d in remaining):
            kept.append(value)
            marker = sympy.Dummy(f"shared{index}")
            remaining = [d.xreplace({value: marker}) for d in remaining]
    return tuple(sorted(kept, key=lambda v: (sympy.count_ops(v), sympy.default_sort_key(v))))


@dataclass(frozen=True)
class SumTerm:
    """One term of a sum: a float coefficient (numbers and params) times tensor factors.

    A sum is folded (printer.py: ``torch.addcmul``, ``torch.add(alpha=)``) by printing its first
    term as it is and folding each other term in; folding a term saves its last product and its
    coefficient's multiplication (the cost model weighs the same savings, cost.py).
    """

    expr: sympy.Expr
    coefficient: sympy.Expr
    factors: tuple[sympy.Expr, ...]

    @classmethod
    def of(cls, term: sympy.Expr, is_tensor) -> SumTerm:
        parts = sympy.Mul.make_args(term)
        return cls(term, sympy.Mul(*(p for p in parts if not is_tensor(p))), tuple(p for p in parts if is_tensor(p)))

    @property
    def saved_products(self) -> int:
        """1 for a product of tensors, whose last multiplication addcmul takes over."""
        return int(len(self.factors) >= 2)

    @property
    def saved_scalings(self) -> int:
        """1 where a coefficient multiplication moves into addcmul's value or add's alpha (+-t needs none)."""
        return int(self.coefficient not in ((1,) if self.saved_products else (1, -1)))

    @property
    def saving(self) -> int:
        """Kernels saved by folding this term in rather than printing it first."""
        return self.saved_products + self.saved_scalings


def common_subexpressions(exprs: list[sympy.Expr]):
    """SymPy's CSE with canonical ordering, so output does not depend on hashing.

    A condition used twice (``x > 0`` in a guard and in the choice it guards) is a temporary like
    any other: one mask, computed once and saved once by autograd. The printer reads a mask's
    definition where it needs a tensor the condition compares (printer.py ``_tensor_of``)."""
    return sympy.cse(exprs, symbols=sympy.numbered_symbols("_cse"), order="canonical")


def power_ladders(exprs: list[sympy.Expr], scalars) -> list[tuple[sympy.Pow, sympy.Dummy, sympy.Expr]]:
    """Steps that build every integer power (|n| >= 4) of a tensor in ``exprs`` from shared products.

    Returns ``(power, dummy, step)`` triples in the order they must run: ``step`` computes
    ``power`` as a square, a cube, a reciprocal or a product of the base and earlier steps'
    dummies (symbols, so that SymPy does not fold them back into one power). Bases made only of
    ``scalars`` (params, printed as Python floats) are left alone. Smaller powers of a laddered
    base (r**2, r**-1) join its ladder so that nothing is computed twice.
    """
    scalars = set(scalars)
    powers = sorted(
        {p for e in exprs for p in sympy.preorder_traversal(e) if _integer_power(p) and not p.free_symbols <= scalars},
        key=sympy.default_sort_key,
    )
    bases = {p.base for p in powers if abs(int(p.exp)) >= 4}
    steps: dict[sympy.Expr, tuple[sympy.Dummy, sympy.Expr]] = {}
    for power in powers:
        if power.base in bases:
            _ladder_step(power.base, int(power.exp), steps)
    return [(power, dummy, step) for power, (dummy, step) in steps.items()]


def _integer_power(node) -> bool:
    return isinstance(node, sympy.Pow) and node.exp.is_Integer and abs(int(node.exp)) >= 2


def _ladder_step(base: sympy.Expr, n: int, steps: dict) -> sympy.Dummy:
    """The dummy for base**n, adding the steps it needs (torch special-cases x**2, x**3 and 1/x)."""
    power = sympy.Pow(base, n)
    if power in steps:
        return steps[power][0]
    if n in (-1, 2, 3):
        step = power
    elif n < 0:
        inverse = _ladder_step(base, -1, steps)
        m = -n
        if m in (2, 3):
            step = inverse**m
        elif m % 2 == 0:
            step = _ladder_step(base, -(m // 2), steps) ** 2
        else:
            step = _ladder_step(base, -(m - 1), steps) * inverse
    elif n % 2 == 0:
        step = _ladder_step(base, n // 2, steps) ** 2
    else:
        step = _ladder_step(base, n - 1, steps) * base
    steps[power] = (sympy.Dummy(f"pow{n}"), step)
    return steps[power][0]
