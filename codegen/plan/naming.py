"""Readable names for a plan's temporaries: a short name that keeps the formula's meaning
(``x_sq``, ``diff_a_b``), else a numbered one.
"""

from __future__ import annotations

import keyword
import re

import sympy

from ..derive import branches
from ..language.formula import oriented

# Module-level names of the generated code. Its helpers (_broadcast, _fused, ...) need no entry:
# they start with "_", which no spec name and no Namer name does.
_MODULE_NAMES = {"torch", "math", "ctx", "ORDER", "STRATEGY", "FUSE"}


class Namer:
    """Hands out Python names that collide with nothing already taken."""

    def __init__(self, taken):
        self.taken = set(taken)

    def fresh(self, base: str, numbered: bool = False) -> str:
        base = re.sub(r"\W", "_", base).strip("_") or "t"
        if base[0].isdigit() or keyword.iskeyword(base):  # not a Python name
            base = f"v_{base}"
        candidates = (f"{base}{i}" for i in range(10**6)) if numbered else _suffixed(base)
        name = next(c for c in candidates if c not in self.taken)
        self.taken.add(name)
        return name


def temporary_names(taken):
    """``name_for(expr)``: fresh names, from what they hold, for temporaries the printer adds
    (``TorchPrinter.name_for``), avoiding ``taken`` and the module's names."""
    namer = Namer({*taken, *_MODULE_NAMES})

    def name_for(value: sympy.Expr) -> str:
        base = _describe(value)
        return namer.fresh(base, numbered=base == "t")

    return name_for


def _suffixed(base: str):
    yield base
    for i in range(1, 10**6):
        yield f"{base}_{i}"


# A temporary's name is at most this long: a longer description is replaced by its outline.
MAX_NAME = 24
# An argument named inside another name (tanh_<arg>) is at most this long, else its outline.
MAX_PART = 14
# A symbol named inside another name is whole up to this long: the cotangents' and tangents' own
# names (tangent_grad2_x, grad_grad_out) are read as a whole or misread
MAX_SYMBOL_PART = 18


def _describe(value: sympy.Expr) -> str:
    """A short name for a temporary, from what it holds: exp_x, tanh_softplus_x, x_pow3, neg_x,
    then, where that is too long, its outline by the outermost operation and short forms of its
    arguments (tanh_prod, one_minus_tanh, sum_x_y, prod_x_sigmoid); 't' (numbered) only when
    nothing describes it."""
    for text in (_describe_rec(value, depth=0), _outline(value)):
        if text and len(text) <= MAX_NAME:
            return text
    return "t"


_RELATION_WORDS = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


def _describe_rec(value: sympy.Expr, depth: int) -> str | None:
    if depth > 3:
        return None
    if value.is_Symbol:
        return value.name
    if isinstance(value, branches.Guard):  # the input, or a safe value where the branch is not taken
        inner = _describe_rec(value.args[0], depth + 1)
        return f"safe_{inner}" if inner else None
    if isinstance(value, branches.Masked):  # a value where its branch is taken, else 0
        return f"masked_{_part(value.args[0], depth)}"
    if isinstance(value, sympy.core.relational.Relational):
        lhs, op, rhs = oriented(value)  # as the printers write it
        left, right = (_describe_rec(side, depth + 1) or _signed_constant(side) or ("bound" if side.is_Float else None)
                       for side in (lhs, rhs))
        word = _RELATION_WORDS[op]
        return f"{left}_{word}_{right}" if left and right else None
    if isinstance(value, sympy.Function) and len(value.args) == 1:
        inner = _describe_rec(value.args[0], depth + 1)
        return f"{type(value).__name__.lower()}_{inner}" if inner else None
    if value.is_Pow and value.exp.is_Integer:
        inner = _describe_rec(value.base, depth + 1)
        n = int(value.exp)
        if inner is None:
            return None
        return f"inv_{inner}" if n == -1 else f"{inner}_pow{n}".replace("pow-", "pow_neg")
    if value.is_Mul and len(value.args) == 2 and value.args[0] == -1:
        inner = _describe_rec(value.args[1], depth + 1)
        return f"neg_{inner}" if inner else None
    return None


def _outline(value: sympy.Expr, depth: int = 0) -> str | None:
    """The name of ``value`` by its outermost operation and short forms of its arguments."""
    if isinstance(value, sympy.Piecewise):  # its pieces are (value, condition) pairs, not arguments
        return "choice"
    if isinstance(value, sympy.Function):
        name = type(value).__name__.lower()
        if len(value.args) > 2:  # a polynomial's coefficients (Horner) would read as c_c_c
            return name
        full = "_".join([name, *(_part(arg, depth) for arg in value.args)])
        return full if len(full) <= MAX_NAME else name
    if value.is_Pow:
        return _power_name(value.base, value.exp, depth)
    if value.is_Add:
        constant, terms = value.as_coeff_Add()
        if not terms.is_Add and constant != 0:
            return _shifted(terms, constant, depth)
        terms = [term for term in sympy.Add.make_args(value) if not term.is_Number]
        difference = _difference(terms) if constant == 0 else None
        if difference:
            return _joined("diff", [_part(term, depth) for term in difference])
        return _joined("sum", [_part(term, depth) for term in terms])
    if value.is_Mul:
        coefficient, factors = value.as_coeff_Mul()
        parts = [_part(factor, depth) for factor in sympy.Mul.make_args(factors)]
        name = parts[0] if len(parts) == 1 else _joined("prod", parts)
        if coefficient == -1:
            return f"neg_{name}"
        scaled = f"scaled_{name}"
        return name if coefficient == 1 or len(scaled) > MAX_NAME else scaled
    return _constant(value)


def _difference(terms: list[sympy.Expr]) -> tuple[sympy.Expr, sympy.Expr] | None:
    """(a, b) where ``terms`` are a and -b, so that a - b is named diff_a_b (not sum_a_neg_b)."""
    if len(terms) != 2:
        return None
    negated = [term.as_coeff_Mul()[0] == -1 for term in terms]
    if negated.count(True) != 1:
        return None
    minuend, subtrahend = (terms[1], terms[0]) if negated[0] else terms
    return minuend, -subtrahend


def _part(value: sympy.Expr, depth: int) -> str:
    """A short form of an argument: its name or description if short, else its outline if short,
    else its outermost operation. A symbol keeps its whole name up to MAX_SYMBOL_PART characters
    (the first word of tangent_grad2_x, 'tangent', named its product with x prod_tangent_x), a
    longer one its first word."""
    if value.is_Symbol:
        return value.name if len(value.name) <= MAX_SYMBOL_PART else value.name.split("_")[0]
    if depth < 3:
        for text in (_describe_rec(value, depth=1), _constant(value), _outline(value, depth + 1)):
            if text and len(text) <= MAX_PART:
                return text
    if isinstance(value, sympy.Function):
        return type(value).__name__.lower()
    if value.is_Pow:
        return "sqrt" if value.exp == sympy.S.Half else "rsqrt" if value.exp == -sympy.S.Half else "pow"
    if value.is_Add:
        return "sum"
    if value.is_Mul:
        return "prod"
    return "c"


def _power_name(base: sympy.Expr, exp: sympy.Expr, depth: int) -> str:
    inner = _part(base, depth)
    if exp == sympy.S.Half:
        return f"sqrt_{inner}"
    if exp == -sympy.S.Half:
        return f"rsqrt_{inner}"
    if exp == -1:
        return f"inv_{inner}"
    if exp.is_Integer:
        return f"{inner}_pow{int(exp)}".replace("pow-", "pow_neg")
    return f"{inner}_pow"


def _shifted(term: sympy.Expr, constant: sympy.Expr, depth: int) -> str:
    """c + t as t_plus_1, 1 - t as one_minus_t."""
    coefficient, rest = term.as_coeff_Mul()
    number = _constant(abs(constant)) or "c"
    if coefficient == -1 and constant == 1:
        return f"one_minus_{_part(rest, depth)}"
    if coefficient == -1:  # c - rest: a name must not start with a digit
        return f"neg_{_part(rest, depth)}_plus_{number}"
    sign = "plus" if constant > 0 else "minus"
    return f"{_part(term, depth)}_{sign}_{number}"


def _joined(kind: str, parts: list[str]) -> str:
    """sum_x_y, prod_x_sigmoid: every part when they fit, else the first."""
    full = "_".join([kind, *parts])
    return full if len(full) <= MAX_NAME else f"{kind}_{parts[0]}"


def _constant(value: sympy.Expr) -> str | None:
    """A name for a number without tensors: 2, half, pi, sqrt_2; None for a float."""
    if value.is_Integer:
        return str(abs(int(value)))
    if value == sympy.S.Half:
        return "half"
    if value is sympy.pi:
        return "pi"
    if value is sympy.E:
        return "e"
    return None


def _signed_constant(value: sympy.Expr) -> str | None:
    name = _constant(value)
    return f"neg{name}" if name and value.is_negative else name


def _symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, real=True)


def _symbols(names) -> list[sympy.Symbol]:
    return [_symbol(n) for n in names]
