"""The cost model behind ``auto``: the estimated time of second-order work (W3) per strategy.

A candidate plan's cost is the time, in units of one tensor product, of the elementwise kernels that
``torch.autograd.grad(..., create_graph=True)`` followed by a second ``grad`` runs through it:
forward, the first backward, and the second-order work. For a single-level strategy the
second-order work is autograd differentiating the backward's torch ops, plus the backward run
once more when it reads an output of forward (the output's own cotangent flows back into it).
``nested`` (from order 2) is costed by ``nested_second_order_cost``: each level it runs at W3
evaluates its formulas once (sums folded, values passed down), plus a Function call's overhead. In
a fused build (spec ``fuse``) ``fused_second_order_cost`` costs every candidate: a nested level is
one fused kernel, costed by the tensors it reads and writes and the functions it computes.

Weights are the measured time of one op relative to a product of two tensors (CPU, 2**20 float32
elements, one thread, torch 2.13: ``python tools/op_weights.py`` measures them again). An op with
a scalar operand reads one tensor instead of two, hence about 0.7. The language's functions carry
their weights in the registry (``language/registry.py``); the nodes dbgen writes itself, here.
"""

from __future__ import annotations

import sympy

from ..derive.branches import Guard, Masked
from ..derive.symbolic import SumTerm
from ..language.registry import REGISTRY

# One kernel's time relative to ``a * b``, and the time of autograd's backward for it.
# Functions: (forward, backward); the backward of most is one fused kernel (tanh_backward,
# sigmoid_backward, ...) or a product with a saved value. The language's functions have theirs in
# the registry (language/registry.py); these are the nodes dbgen writes itself (derivatives, rewrites).
INTERNAL_WEIGHTS = {
    "sign": (0.7, 0.0),  # abs' derivative
    "logaddexp": (4.8, 6.0), "hypot": (3.3, 4.0), "Max": (1.0, 2.0),
    # 1 - y**2 of a tanh, fused with its product into tanh_backward (rewrite.Sech2)
    "Sech2": (0.2, 2.5),
    # the generated module's _norm(x, y, z) (rewrite.Norm): 1.5 and 2.3 times two hypots, measured on
    # a loaded machine (2**20 float32, one thread): rough
    "Norm": (10.0, 18.0),
}
# By SymPy class name, as nodes are looked up. sqrt, whose call SymPy writes x**(1/2), is costed as
# a power (FAST_EXPONENTS) and has no entry here.
FUNCTION_WEIGHTS = {
    **{f.sympy: f.weight for f in REGISTRY.values() if f.weight is not None and f.sympy != "Pow"},
    **INTERNAL_WEIGHTS,
}
UNKNOWN_FUNCTION = (2.0, 3.0)
TENSOR_OP = 1.0        # a * b, a + b, a / b
SCALAR_OP = 0.7        # 2 * a, 1 - a, a**2, a**3, 1 / a, sqrt(a)
GENERAL_POWER = 7.3    # a**6, a**(-7), a**1.5: std::pow per element
FAST_EXPONENTS = {2, 3, -1, -2, sympy.S.Half, -sympy.S.Half}
# Branches (branches.py), on a random mask: torch.where's CPU kernel branches per element
WHERE = 8.3            # torch.where(mask, a, b); autograd's backward of it is a where per branch
COMPARE = 1.3          # x > 0, a < b: a bool mask
MASK_PRODUCT = 2.3     # a * mask (bool), and its backward g * mask
MASK_NUMBERS = 1.3     # mask.to(dtype)
LOGICAL = 0.1          # mask & mask, ~mask: a byte per element


# Fused kernels (torch.compile, inductor on CPU): one function's compute beyond the kernel's memory
# traffic, relative to ``a * b`` in eager mode. Inductor evaluates them with SLEEF, not ATen's
# MKL VML kernels: cheap for exp, sigmoid and sqrt, dear for tanh, softplus and erfc (measured,
# 2**20 float32, one thread, torch 2.13: ``python tools/op_weights.py --fused``).
FUSED_INTERNAL_WEIGHTS = {"sign": 0.0, "logaddexp": 3.6, "hypot": 2.0, "Max": 0.0, "Sech2": 0.0}
FUSED_FUNCTION_WEIGHTS = {
    **{f.sympy: f.fused_weight for f in REGISTRY.values() if f.fused_weight is not None and f.sympy != "Pow"},
    **FUSED_INTERNAL_WEIGHTS,
}
FUSED_UNKNOWN_FUNCTION = 3.0
FUSED_GENERAL_POWER = 5.5  # a non-integer exponent; inductor multiplies out integer ones
PASS = 1 / 3  # one tensor read or written: a * b reads two and writes one


def block_cost(exprs, scalars, folded: bool = False) -> tuple[float, float]:
    """(time to evaluate ``exprs``, time of autograd's backward through them), in product units.

    ``scalars`` are the symbols printed as Python floats (params): ops on them alone are free.
    ``folded``: sums are printed folded (``torch.addcmul``, ``torch.add(alpha=)``; printer.py).
    """
    forward = backward = 0.0
    seen = set()
    for expr in exprs:
        for node in sympy.preorder_traversal(expr):
            if node in seen or not node.args or node.free_symbols <= scalars:
                continue
            seen.add(node)  # a repeated subexpression is a CSE temporary: computed once
            f, b = _node_cost(node, scalars)
            if folded and isinstance(node, sympy.Add):
                f -= _folding_saving(node, scalars)
            forward, backward = forward + f, backward + b
    return forward, backward


def _folding_saving(add: sympy.Add, scalars) -> float:
    """What folding saves on a sum (``symbolic.SumTerm``): for each tensor term but the first, a
    product's last multiplication and its coefficient's (addcmul), or a scaled tensor's coefficient."""
    terms = [SumTerm.of(term, lambda part: not part.free_symbols <= scalars) for term in add.args]
    savings = [t.saved_products * TENSOR_OP + t.saved_scalings * SCALAR_OP for t in terms if t.factors]
    return sum(savings) - min(savings, default=0.0)


def _node_cost(node: sympy.Expr, scalars) -> tuple[float, float]:
    if isinstance(node, (sympy.Add, sympy.Mul)):
        tensors = sum(1 for a in node.args if not a.free_symbols <= scalars)
        has_scalar = tensors < len(node.args)
        ops = tensors - 1 + has_scalar
        forward = (tensors - 1) * TENSOR_OP + has_scalar * SCALAR_OP
        backward = 0.0 if isinstance(node, sympy.Add) else tensors * TENSOR_OP * (1 + (tensors > 2))
        return forward, backward if ops else 0.0
    if isinstance(node, sympy.Pow):
        fast = node.exp in FAST_EXPONENTS
        forward = SCALAR_OP if fast else GENERAL_POWER
        return forward, 2 * SCALAR_OP + (0.0 if fast else GENERAL_POWER)
    if isinstance(node, (sympy.Piecewise, Guard, Masked)):
        return _branch_cost(node, scalars)
    if isinstance(node, sympy.Function):
        return FUNCTION_WEIGHTS.get(type(node).__name__, UNKNOWN_FUNCTION)
    if isinstance(node, sympy.core.relational.Relational):
        return COMPARE, 0.0
    if isinstance(node, (sympy.And, sympy.Or, sympy.Not)):
        return LOGICAL, 0.0
    return 0.0, 0.0


def _branch_cost(node: sympy.Expr, scalars) -> tuple[float, float]:
    if isinstance(node, Masked):
        return (MASK_PRODUCT, MASK_PRODUCT) if not node.args[0].free_symbols <= scalars else (MASK_NUMBERS, 0.0)
    if isinstance(node, Guard):  # a clamp's backward is a where on its mask, as a where's
        return (SCALAR_OP if node.side else WHERE), WHERE
    choices = len(node.args) - 1  # a choice on params is made in Python: the condition holds no tensor
    if all(arg.cond.free_symbols <= scalars for arg in node.args):
        return 0.0, 0.0
    tensor_branches = sum(1 for arg in node.args if not arg.expr.free_symbols <= scalars)
    return choices * WHERE, tensor_branches * WHERE


def second_order_cost(function, scalars) -> float:
    """The estimated W3 time of a single-level Function: forward, its backward, autograd's
    backward of that, and the backward once more if it reads an output (module docstring)."""
    forward, _ = block_cost(function.forward.values, scalars)
    backward, traced = block_cost(function.backward.values, scalars)
    outputs = {sympy.Symbol(name, real=True) for name in function.outputs}
    rerun = backward if function.backward.reads & outputs else 0.0
    return forward + backward + traced + rerun


def fused_kernel_cost(block, scalars) -> float:
    """The time of ``block`` as one fused kernel: each tensor it reads or writes once, plus the
    compute of its functions and general powers (arithmetic hides behind the memory traffic)."""
    defined = {sympy.Symbol(name, real=True) for name, _ in block.temporaries}
    reads = block.reads - defined - set(scalars)
    compute = 0.0
    seen = set()
    for expr in block.values:
        for node in sympy.preorder_traversal(expr):
            if node in seen or node.free_symbols <= scalars:
                continue
            seen.add(node)
            if isinstance(node, sympy.Function):
                compute += FUSED_FUNCTION_WEIGHTS.get(type(node).__name__, FUSED_UNKNOWN_FUNCTION)
            elif isinstance(node, sympy.Pow) and not node.exp.is_Integer and node.exp not in FAST_EXPONENTS:
                compute += FUSED_GENERAL_POWER
    return (len(reads) + len(block.results)) * PASS + compute


# A nested level's own cost beyond its formulas: a Function call, its autograd node and the values
# it returns. Fitted to dbgen bench (W3, 2**20 float32, one thread) on the twelve examples: the
# median of what each needs for the model to match the measured nested / save_inputs ratio.
LEVEL_OVERHEAD = 1.0


def _second_order_kernels(functions) -> list:
    """The blocks a nested plan runs at second order: levels 0 and 1, then level 2's forward, or
    level 1's backward when there are only two levels."""
    return [functions[0].forward, functions[1].forward,
            functions[1].backward if len(functions) == 2 else functions[2].forward]


def nested_second_order_cost(functions, scalars) -> float:
    """The estimated W3 time of an eager nested plan: each level it runs evaluates its formulas
    once, folded, with values passed down instead of recomputed; nothing is differentiated by
    autograd, but each level costs a Function call (``LEVEL_OVERHEAD``)."""
    kernels = _second_order_kernels(functions)
    return sum(block_cost(kernel.values, scalars, folded=True)[0] + LEVEL_OVERHEAD for kernel in kernels)


def fused_second_order_cost(functions, scalars) -> float:
    """The estimated W3 time of a fused build. Nested (two levels or more): every level W3 runs is
    one fused kernel, the last level's backward included. A single level: its forward is fused,
    its backward stays eager (autograd differentiates it) and is costed as in ``second_order_cost``."""
    if len(functions) == 1:
        function = functions[0]
        eager_forward, _ = block_cost(function.forward.values, scalars)
        return second_order_cost(function, scalars) - eager_forward + fused_kernel_cost(function.forward, scalars)
    return sum(fused_kernel_cost(kernel, scalars) for kernel in _second_order_kernels(functions))
