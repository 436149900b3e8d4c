"""Random expressions over the whole language, as hypothesis strategies: trees, their text, their
values in float64 and torch, and the specs and cases built from them (test_properties.py and the
other property tests draw from here).
"""

from __future__ import annotations

import ast
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from hypothesis import event, reject, settings
from hypothesis import strategies as st

from codegen import language
from codegen.errors import SpecErrors
from codegen.language import CONSTANT_NAMES

# The functions of one formula everywhere, special functions included; the piecewise forms (where,
# min, max, clamp, relu) enter the trees as the PIECES below, and are tested by tests/unit/derive/test_branches.py.
FUNCTION_ARITY = {name: n for name, n in language.FUNCTION_ARITY.items() if name not in language.PIECEWISE_FUNCTIONS}
from helpers import (
    build_spec,
    derivative_chain,
    import_path,
    sample,
)

R = 1.5  # inputs are drawn from [-R, R]
CAP = 20.0  # a subexpression whose value could exceed this in size is squashed
MARGIN = 0.2  # how far from a singularity (0 for log/sqrt/1/u, +-1 for asin, ...) an argument stays
RTOL, ATOL = 1e-6, 1e-8  # float64; ATOL is scaled by the size of each order's largest derivative
STRATEGIES = ("auto", "save_inputs", "save_outputs", "intermediates", "nested")
INPUT_NAMES = ("x", "y", "z", "out", "grad_x", "level")  # with names the generated code uses itself
PARAM_NAMES = ("a", "k", "output", "t0")
REGRESSIONS = Path(__file__).resolve().parent / "regressions"
INF = math.inf


def scaled(examples: int) -> int:
    """A test's own budget, scaled by the profile (ci: 100 -> as written; long: 2000 -> 20x)."""
    return max(1, examples * settings.default.max_examples // 100)


# Expression trees with value bounds ------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    """One node: op is 'num', 'name', 'const', 'neg', '+', '-', '*', '/', '**' or a function name.

    lo and hi bound the node's value for inputs in [-R, R] and params at their defaults (they are
    NaN for trees read back from text, which only need evaluating)."""

    op: str
    args: tuple[Node, ...] = ()
    value: object = None  # the number, or the name
    lo: float = math.nan
    hi: float = math.nan

    @property
    def size(self) -> float:
        return max(abs(self.lo), abs(self.hi))


def _sigmoid(u: float) -> float:
    return 1 / (1 + math.exp(-u)) if u >= 0 else math.exp(u) / (1 + math.exp(u))


def _softplus(u: float) -> float:
    return max(u, 0.0) + math.log1p(math.exp(-abs(u)))


# Functions monotone on their (margin-reduced) domain: the interval of f(u) is f at u's ends.
_INCREASING = {
    "exp": math.exp, "expm1": math.expm1, "sinh": math.sinh, "atan": math.atan, "asinh": math.asinh,
    "tanh": math.tanh, "erf": math.erf, "sigmoid": _sigmoid, "softplus": _softplus, "log": math.log,
    "log1p": math.log1p, "sqrt": math.sqrt, "asin": math.asin, "atanh": math.atanh, "acosh": math.acosh,
    "tan": math.tan,
}
_DECREASING = {"erfc": math.erfc, "acos": math.acos}
# Where each function's argument must lie, and the wrapper that puts an argument there.
_DOMAINS = {
    "exp": (-5, 5, "small"), "expm1": (-5, 5, "small"), "sinh": (-5, 5, "small"), "cosh": (-5, 5, "small"),
    "log": (MARGIN, INF, "positive"), "sqrt": (MARGIN, INF, "positive"), "log1p": (-1 + MARGIN, INF, "positive"),
    "asin": (-0.8, 0.8, "unit"), "acos": (-0.8, 0.8, "unit"), "atanh": (-0.8, 0.8, "unit"),
    "tan": (-1.2, 1.2, "unit"), "acosh": (1 + MARGIN, INF, "above_one"),
}
# Special functions: where each argument must lie, and their values by torch (bounds by sampling).
_SPECIAL_DOMAINS = {
    "lgamma": (MARGIN, INF, "positive"), "digamma": (MARGIN, INF, "positive"),
    "polygamma": (MARGIN, INF, "positive"), "erfinv": (-0.8, 0.8, "unit"),
    "bessel_y0": (MARGIN, INF, "positive"), "bessel_y1": (MARGIN, INF, "positive"),
    "modified_bessel_k0": (MARGIN, INF, "positive"), "modified_bessel_k1": (MARGIN, INF, "positive"),
    "scaled_modified_bessel_k0": (MARGIN, INF, "positive"), "scaled_modified_bessel_k1": (MARGIN, INF, "positive"),
    "i0": (-2, 2, "small"), "i1": (-2, 2, "small"), "modified_bessel_i0": (-2, 2, "small"),
    "modified_bessel_i1": (-2, 2, "small"),
}
_SPECIAL_VALUES = {
    "lgamma": torch.lgamma, "digamma": torch.digamma, "polygamma": lambda u: torch.polygamma(1, u),
    "erfinv": torch.erfinv, "sinc": torch.sinc, "i0": torch.special.i0, "i0e": torch.special.i0e,
    "i1": torch.special.i1, "i1e": torch.special.i1e, "modified_bessel_i0": torch.special.i0,
    "modified_bessel_i1": torch.special.i1,
    **{name: getattr(torch.special, name) for name in (
        "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0", "modified_bessel_k1",
        "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0")},
}
assert set(_INCREASING) | set(_DECREASING) | {"sin", "cos", "cosh", "abs", "atan2", "xlogy"} | set(_SPECIAL_VALUES) == set(
    FUNCTION_ARITY)


def num(value) -> Node:
    return Node("num", value=value, lo=float(value), hi=float(value))


def neg(u: Node) -> Node:
    return Node("neg", (u,), lo=-u.hi, hi=-u.lo)


def binary(op: str, a: Node, b: Node) -> Node:
    """a op b; for '/' b must not contain 0, for '**' see power()."""
    if op == "+":
        lo, hi = a.lo + b.lo, a.hi + b.hi
    elif op == "-":
        lo, hi = a.lo - b.hi, a.hi - b.lo
    elif op in ("*", "/"):
        other = (b.lo, b.hi) if op == "*" else (1 / b.hi, 1 / b.lo)
        corners = [p * q for p in (a.lo, a.hi) for q in other]
        lo, hi = min(corners), max(corners)
    else:
        raise ValueError(op)
    return Node(op, (a, b), lo=lo, hi=hi)


def power(base: Node, exponent: Node) -> Node:
    """base**exponent: an integer number exponent (base away from 0 when negative), or any
    exponent with a base of at least MARGIN, where the power is monotone in each argument."""
    n = exponent.value if exponent.op == "num" and isinstance(exponent.value, int) else None
    if n is not None:
        ends = [base.lo, base.hi] if n >= 0 else [1 / base.hi, 1 / base.lo]
        values = [e ** abs(n) for e in ends]
        crosses_zero = ends[0] < 0 < ends[1] and abs(n) % 2 == 0
        lo, hi = (0.0 if crosses_zero else min(values)), max(values)
    else:
        corners = [b**e for b in (base.lo, base.hi) for e in (exponent.lo, exponent.hi)]
        lo, hi = min(corners), max(corners)
    return Node("**", (base, exponent), lo=lo, hi=hi)


def call(name: str, *args: Node) -> Node:
    """name(*args); each argument must already lie in the function's domain."""
    if name in _INCREASING or name in _DECREASING:
        (u,) = args
        f = _INCREASING.get(name) or _DECREASING[name]
        ends = sorted((f(u.lo), f(u.hi)))
        lo, hi = ends
    elif name in ("sin", "cos"):
        lo, hi = -1.0, 1.0
    elif name == "cosh":
        (u,) = args
        top = max(math.cosh(u.lo), math.cosh(u.hi))
        lo, hi = (1.0 if u.lo <= 0 <= u.hi else min(math.cosh(u.lo), math.cosh(u.hi))), top
    elif name == "abs":
        (u,) = args
        lo, hi = (u.lo, u.hi) if u.lo > 0 else (-u.hi, -u.lo)
    elif name == "atan2":
        lo, hi = -math.pi, math.pi
    elif name == "xlogy":
        x, y = args
        corners = [p * math.log(q) for p in (x.lo, x.hi) for q in (y.lo, y.hi)]
        lo, hi = min(corners), max(corners)
    elif name in _SPECIAL_VALUES:
        lo, hi = _sampled_bounds(_SPECIAL_VALUES[name], args[-1])
    else:
        raise ValueError(name)
    return Node(name, args, lo=lo, hi=hi)


def _sampled_bounds(function, u: Node) -> tuple[float, float]:
    """The function's range over u's interval, from 257 points, widened by a tenth: for capping sizes."""
    values = function(torch.linspace(u.lo, u.hi, 257, dtype=torch.float64))
    lo, hi = float(values.min()), float(values.max())
    return lo - 0.1 * (hi - lo) - 0.1, hi + 0.1 * (hi - lo) + 0.1


# Wrappers that move any argument into a domain; each is valid for every argument.
def _positive(u: Node, choice: int) -> Node:
    """Within [MARGIN, 5]."""
    options = [
        lambda: binary("+", num(2), call("sin", u)),
        lambda: binary("+", num(2), call("cos", u)),
        lambda: call("exp", call("tanh", u)),
        lambda: binary("+", call("softplus", u), num(0.5)),
        lambda: binary("+", num(1), power(u, num(2))),
    ]
    return options[choice % (len(options) if u.size <= 2 else len(options) - 1)]()


def _unit(u: Node, choice: int) -> Node:
    """Within [-0.8, 0.8]."""
    options = [
        lambda: binary("/", call("tanh", u), num(2)),
        lambda: binary("/", call("sin", u), num(2)),
        lambda: binary("/", call("erf", u), num(2)),
        lambda: binary("-", call("sigmoid", u), num(0.5)),
        lambda: binary("/", call("atan", u), num(2)),
    ]
    return options[choice % len(options)]()


def _small(u: Node, choice: int) -> Node:
    """Within [-2, 2]."""
    options = [lambda: call("sin", u), lambda: call("atan", u), lambda: binary("*", num(2), call("tanh", u)),
               lambda: call("cos", u), lambda: call("erf", u)]
    return options[choice % len(options)]()


def _away_from_zero(u: Node, choice: int) -> Node:
    if u.lo >= MARGIN or u.hi <= -MARGIN:
        return u
    positive = _positive(u, choice // 2)
    return positive if choice % 2 else neg(positive)


def _into(u: Node, lo: float, hi: float, kind: str, choice: int) -> Node:
    """u itself when it already lies in [lo, hi], else u wrapped into it."""
    if lo <= u.lo and u.hi <= hi:
        return u
    if kind == "above_one":
        return binary("+", num(1), _positive(u, choice))
    return {"positive": _positive, "unit": _unit, "small": _small}[kind](u, choice)


# Branches: where(u > c, f(u), other), f singular where the branch is not taken (exp(-1/(u - c))
# overflows for u < c, log(u - c + 0.5) has no value for u <= c - 0.5, lgamma has poles there), or
# f(u) * (u > c), a condition as a 0/1 indicator. text (u, c) -> (f's text, f in torch ops).
PIECES = {
    "soft_step": ("exp(-1 / ({u} - {c}))", lambda t, c: torch.exp(-1 / (t - c))),
    "log": ("log({u} - {c} + 0.5)", lambda t, c: torch.log(t - c + 0.5)),
    "sqrt": ("sqrt({u} - {c} + 0.5)", lambda t, c: torch.sqrt(t - c + 0.5)),
    "recip": ("1 / ({u} - {c} + 0.5)", lambda t, c: 1 / (t - c + 0.5)),
    "lgamma": ("lgamma({u} - {c} + 0.5)", lambda t, c: torch.lgamma(t - c + 0.5)),
    "indicator": ("({u} - {c})**2", lambda t, c: (t - c) ** 2),
}


def piece(name: str, u: Node, c: float, other: Node) -> Node:
    """where(u > c, f(u), other), or f(u) * (u > c) for the indicator; u within [-2, 2]."""
    taken = torch.linspace(max(u.lo, c), u.hi, 257, dtype=torch.float64)[1:] if u.hi > c else None
    lows, highs = [other.lo if name != "indicator" else 0.0], [other.hi if name != "indicator" else 0.0]
    if taken is not None and len(taken):
        values = PIECES[name][1](taken, c)
        lows.append(float(values.min()))
        highs.append(float(values.max()))
    args = (u,) if name == "indicator" else (u, other)
    return Node("piece", args, value=(name, c), lo=min(lows) - 0.1, hi=max(highs) + 0.1)


def _piece_text(node: Node) -> str:
    (name, c), u = node.value, text(node.args[0])
    branch = PIECES[name][0].format(u=u, c=c)
    if name == "indicator":
        return f"(({branch}) * ({u} > {c}))"
    return f"where({u} > {c}, {branch}, {text(node.args[1])})"


def _evaluate_piece(node: Node, env) -> torch.Tensor:
    """The branch on safe values where it is not taken (u replaced by c + 1 there: the double where
    users write by hand), so that the reference's own gradients are not NaN."""
    (name, c), u = node.value, evaluate(node.args[0], env)
    taken = u > c
    branch = PIECES[name][1](torch.where(taken, u, c + 1.0), c)
    other = evaluate(node.args[1], env) if name != "indicator" else torch.zeros_like(branch)
    return torch.where(taken, branch, other)


# Hypothesis strategies --------------------------------------------------------------------------

NUMBERS = st.sampled_from([1, 2, 0.5, 3, 0, 1e-3, 2.5, 1.25])
CHOICES = st.integers(0, 9)
# Calls weigh most (the language is mostly its functions); "leaf" first, so that failures shrink to it.
KINDS = st.sampled_from(["leaf", "call", "+", "call", "*", "call", "-", "/", "call", "**", "neg", "piece"])
FUNCTIONS = st.sampled_from(sorted(FUNCTION_ARITY))


@st.composite
def leaves(draw, names: dict[str, tuple[float, float]]) -> Node:
    """An input or param (with its interval), a number, pi or E."""
    kind = draw(st.sampled_from(["name", "num", "name", "const", "name"]))
    if kind == "name":
        name = draw(st.sampled_from(sorted(names)))
        return Node("name", value=name, lo=names[name][0], hi=names[name][1])
    if kind == "const":
        name = draw(st.sampled_from(CONSTANT_NAMES))
        value = {"pi": math.pi, "E": math.e}[name]
        return Node("const", value=name, lo=value, hi=value)
    return num(draw(NUMBERS))


@st.composite
def trees(draw, names: dict[str, tuple[float, float]], depth: int) -> Node:
    kind = draw(KINDS) if depth > 0 else "leaf"
    if kind == "leaf":
        return draw(leaves(names))
    sub = trees(names, depth - 1)
    choice = draw(CHOICES)
    if kind == "neg":
        node = neg(draw(sub))
    elif kind == "call":
        name = draw(FUNCTIONS)
        node = _call_in_domain(name, [draw(sub) for _ in range(FUNCTION_ARITY[name])], choice)
    elif kind == "/":
        node = binary("/", draw(sub), _away_from_zero(draw(sub), choice))
    elif kind == "**":
        node = _power_in_domain(draw(sub), draw(st.integers(-3, 4) | sub), choice)
    elif kind == "piece":
        u = draw(sub)
        if not _varies(u):  # a constant condition: the untaken branch's singular value is the spec's
            name = draw(st.sampled_from(sorted(n for n, (lo, hi) in names.items() if lo < hi)))
            u = binary("+", u, Node("name", value=name, lo=names[name][0], hi=names[name][1]))
        node = piece(draw(st.sampled_from(sorted(PIECES))), _small(u, choice), draw(st.sampled_from([0, 0.5, -0.5])),
                     draw(sub))
    else:
        node = binary(kind, draw(sub), draw(sub))
    return node if node.size <= CAP else _small(node, choice)


def _call_in_domain(name: str, args: list[Node], choice: int) -> Node:
    if name == "abs":
        return call("abs", _away_from_zero(args[0], choice))
    if name == "atan2":
        y, x = args
        # one argument kept positive: atan2 is smooth away from y = 0, x <= 0, and from the origin
        if choice % 2:
            return call("atan2", y, _into(x, MARGIN, INF, "positive", choice // 2))
        return call("atan2", _into(y, MARGIN, INF, "positive", choice // 2), x)
    if name == "xlogy":
        x, y = args
        return call("xlogy", x, _into(y, MARGIN, INF, "positive", choice))
    if name == "polygamma":  # the order is a literal: 1 here, as _SPECIAL_VALUES computes it
        return call("polygamma", num(1), _into(args[-1], MARGIN, INF, "positive", choice))
    if name in _DOMAINS or name in _SPECIAL_DOMAINS:
        lo, hi, kind = _DOMAINS.get(name) or _SPECIAL_DOMAINS[name]
        return call(name, _into(args[0], lo, hi, kind, choice))
    return call(name, args[0])


def _power_in_domain(base: Node, exponent, choice: int) -> Node:
    if isinstance(exponent, int):
        if exponent < 0:
            base = _away_from_zero(base, choice)
        if base.size ** abs(exponent) > CAP**2:
            base = _small(base, choice)
        return power(base, num(exponent))
    # a real exponent: a base of at least MARGIN, an exponent within [-2, 2]
    return power(_into(base, MARGIN, 5, "positive", choice), _into(exponent, -2, 2, "small", choice))


def text(node: Node) -> str:
    """The expression in dbgen's language, every operation parenthesized."""
    if node.op in ("num", "name", "const"):
        return str(node.value)
    if node.op == "neg":
        return f"(-{text(node.args[0])})"
    if node.op == "piece":
        return _piece_text(node)
    if node.op in ("+", "-", "*", "/", "**"):
        a, b = node.args
        return f"({text(a)} {node.op} {text(b)})"
    return f"{node.op}({', '.join(text(arg) for arg in node.args)})"


# The independent reference: the tree evaluated in torch ops, differentiated by autograd ----------

def _softplus_torch(u):
    return torch.logaddexp(u, torch.zeros_like(u))  # exact, unlike F.softplus's threshold


TORCH_FUNCTIONS = {
    "exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos,
    "atan": torch.atan, "atan2": torch.atan2, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh,
    "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh, "erf": torch.erf, "erfc": torch.erfc,
    "sigmoid": torch.sigmoid, "softplus": _softplus_torch, "abs": torch.abs,
}
# The special functions torch has exact derivatives of are torch ops; the others are mpmath's, with
# every derivative (the generated tests' checks.special): independent of the generated module.
CHECKS = import_path(Path(__file__).resolve().parent.parent / "generated" / "tests" / "_dbgen_checks.py")
TORCH_FUNCTIONS.update(
    lgamma=torch.lgamma, digamma=torch.digamma, polygamma=lambda n, u: torch.polygamma(int(n), u),
    erfinv=torch.erfinv, xlogy=torch.xlogy,
    modified_bessel_i0=functools.partial(CHECKS.special, "i0"), modified_bessel_i1=functools.partial(CHECKS.special, "i1"),
    **{name: functools.partial(CHECKS.special, name) for name in _SPECIAL_VALUES if name in CHECKS._MPMATH},
)
assert set(TORCH_FUNCTIONS) == set(FUNCTION_ARITY)


def evaluate(node: Node, env: dict[str, torch.Tensor]) -> torch.Tensor:
    if node.op == "num":
        return torch.tensor(float(node.value), dtype=torch.float64)
    if node.op == "name":
        return env[node.value]
    if node.op == "const":
        return torch.tensor({"pi": math.pi, "E": math.e}[node.value], dtype=torch.float64)
    if node.op == "piece":
        return _evaluate_piece(node, env)
    args = [evaluate(arg, env) for arg in node.args]
    if node.op == ">":
        return args[0] > args[1]
    if node.op == "where":  # read back from text: values only, where the untaken branch may be NaN
        return torch.where(*args)
    if node.op == "*" and args[1].dtype == torch.bool:  # an indicator read back from text
        return torch.where(args[1], args[0], 0.0)
    if node.op == "neg":
        return -args[0]
    if node.op in ("+", "-", "*", "/", "**"):
        a, b = args
        if node.op == "**" and node.args[1].op == "num" and isinstance(node.args[1].value, int):
            return a ** node.args[1].value  # an integer power of a negative base is real
        return {"+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.div, "**": torch.pow}[node.op](a, b)
    return TORCH_FUNCTIONS[node.op](*args)


def from_text(source: str) -> Node:
    """A tree (without bounds) read back from expression text, for the regression specs."""

    def walk(n: ast.AST) -> Node:
        if isinstance(n, ast.Constant):
            return Node("num", value=n.value)
        if isinstance(n, ast.Name):
            return Node("const" if n.id in CONSTANT_NAMES else "name", value=n.id)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            return Node("neg", (walk(n.operand),)) if isinstance(n.op, ast.USub) else walk(n.operand)
        if isinstance(n, ast.BinOp):
            ops = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
            return Node(ops[type(n.op)], (walk(n.left), walk(n.right)))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            return Node(n.func.id, tuple(walk(arg) for arg in n.args))
        if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], ast.Gt):
            return Node(">", (walk(n.left), walk(n.comparators[0])))
        raise ValueError(f"not in the language: {ast.dump(n)}")

    return walk(ast.parse(source, mode="eval").body)


# One case: a tree, its inputs and params, an order and a strategy -------------------------------

SHAPES = [(3, 4), (4,), (3, 1)]  # broadcast together: gradients are reduced back to each shape


@dataclass(frozen=True)
class Case:
    tree: Node
    inputs: tuple[str, ...]
    params: dict[str, float] = field(default_factory=dict)
    order: int = 1
    strategy: str = "auto"
    domain: dict[str, tuple[float, float]] = field(default_factory=dict)

    def spec(self, name: str = "prop") -> dict:
        spec = {"name": name, "expr": text(self.tree), "inputs": list(self.inputs), "order": self.order,
                "strategy": self.strategy, "domain": {n: list(self.bounds(n)) for n in self.inputs}}
        return {**spec, "params": dict(self.params)} if self.params else spec

    def bounds(self, name: str) -> tuple[float, float]:
        return self.domain.get(name, (-R, R))


def _max_order(strategy: str, inputs: int) -> int:
    """Orders up to 4; nested writes every mixed partial of every level out symbolically, which
    grows as inputs**order, so it gets fewer orders with more inputs (3 inputs at order 4: ~12 s)."""
    return {1: 4, 2: 3, 3: 2}[inputs] if strategy == "nested" else 4


@st.composite
def cases(draw, max_depth: int = 3) -> Case:
    inputs = tuple(draw(st.lists(st.sampled_from(INPUT_NAMES), min_size=1, max_size=3, unique=True)))
    param_names = draw(st.lists(st.sampled_from(PARAM_NAMES), max_size=2, unique=True))
    params = {p: draw(st.sampled_from([1.5, -0.5, 2.0, 0.25, -2.0])) for p in param_names}
    names = {**{n: (-R, R) for n in inputs}, **{p: (v, v) for p, v in params.items()}}
    tree = draw(trees(names, draw(st.integers(1, max_depth))))
    strategy = draw(st.sampled_from(STRATEGIES))
    order = draw(st.integers(1, _max_order(strategy, len(inputs))))
    return Case(tree, inputs, params, order, strategy)


# The property ----------------------------------------------------------------------------------

def _inputs(case: Case, seed: int) -> list[torch.Tensor]:
    return [sample(SHAPES[i], *case.bounds(n), seed=seed + i) for i, n in enumerate(case.inputs)]


def reference(case: Case):
    """The tree in torch ops; + 0 * (sum of inputs) keeps every input in the graph and the value at
    the broadcast shape even where the expression does not use them all."""
    params = {name: torch.tensor(value, dtype=torch.float64) for name, value in case.params.items()}

    def fn(*inputs):
        value = evaluate(case.tree, {**dict(zip(case.inputs, inputs)), **params})
        return value + 0 * sum(inputs)

    return fn


def assert_orders_match(module, case: Case, seed: int = 0) -> None:
    """Every order up to case.order against autograd through the tree, contracted with the same
    random cotangents; the tolerance is relative, with an absolute floor scaled by each order's size."""
    inputs = _inputs(case, seed)
    expected = derivative_chain(reference(case), inputs, case.order, seed=seed + 7)
    for level, grads in enumerate(expected):
        for tensor in (grads,) if level == 0 else grads:
            assert torch.isfinite(tensor).all(), f"test bug: the reference is not finite at order {level}: {case}"
    actual = derivative_chain(module.prop, inputs, case.order, seed=seed + 7)
    rtol, atol = (1e-5, 1e-6) if _uses(case.tree, INEXACT_IN_TORCH) else (RTOL, ATOL)
    for level, (got, want) in enumerate(zip(actual, expected)):
        got, want = ((got,), (want,)) if level == 0 else (got, want)
        scale = max(1.0, max(float(w.detach().abs().max()) for w in want))
        for index, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape, f"order {level}, input {index}: shape {tuple(g.shape)} != {tuple(w.shape)}"
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol * scale,
                                       msg=lambda m, i=index, o=level: f"order {o}, input {i} of {case.spec()}: {m}")


# torch's float64 bessel_j0/j1/y0/y1 are off by up to 8.5e-7 (codegen/language/special.py)
INEXACT_IN_TORCH = {"bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1"}


def _varies(node: Node) -> bool:
    """Whether the tree holds an input (params are names with a single value)."""
    return (node.op == "name" and node.lo < node.hi) or any(_varies(arg) for arg in node.args)


def _uses(node: Node, names) -> bool:
    return node.op in names or any(_uses(arg, names) for arg in node.args)


def build_or_reject(folder: Path, case: Case):
    """The built module; a spec over dbgen's limit on symbolic work (a documented, clean refusal
    that deep trees at order 4 can reach) is rejected as an example instead."""
    try:
        return build_spec(folder, **case.spec())
    except SpecErrors as errors:
        if all("symbolic work exceeded" in problem.message for problem in errors.problems):
            event("over the symbolic-work limit")
            reject()
        raise
