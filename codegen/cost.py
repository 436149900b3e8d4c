"""The cost model behind ``auto``: the estimated time of second-order work (W3) per strategy.

A candidate plan's cost is the time, in units of one tensor product, of the elementwise kernels that
``torch.autograd.grad(..., create_graph=True)`` followed by a second ``grad`` runs through it:
forward, the first backward, and the second-order work. For a single-level strategy the
second-order work is autograd differentiating the backward's torch ops, plus the backward run
once more when it reads an output of forward (the output's own cotangent flows back into it).
(``auto`` weighs only single-level strategies: see ``plan.AUTO_CANDIDATES``.)

Weights are the measured time of one op relative to a product of two tensors (CPU, 2**20 float32
elements, one thread, torch 2.13: ``python tools/op_weights.py`` measures them again). An op with
a scalar operand reads one tensor instead of two, hence about 0.7.
"""

from __future__ import annotations

import sympy

# One kernel's time relative to ``a * b``, and the time of autograd's backward for it.
# Functions: (forward, backward); the backward of most is one fused kernel (tanh_backward,
# sigmoid_backward, ...) or a product with a saved value.
FUNCTION_WEIGHTS = {
    "exp": (0.8, 1.0), "log": (0.9, 1.0), "log1p": (2.5, 1.7), "expm1": (3.5, 1.0), "sqrt": (0.7, 1.0),
    "sin": (1.4, 2.4), "cos": (1.4, 2.4), "tan": (1.5, 2.0), "asin": (1.5, 3.0), "acos": (1.5, 3.0),
    "atan": (1.3, 2.0), "atan2": (4.3, 6.0), "sinh": (3.9, 5.0), "cosh": (4.0, 5.0), "tanh": (1.1, 1.0),
    "asinh": (8.0, 3.0), "acosh": (8.0, 3.0), "atanh": (2.0, 2.0), "erf": (1.9, 3.0), "erfc": (2.1, 3.0),
    "sigmoid": (1.4, 1.0), "softplus": (4.6, 1.0), "Abs": (0.7, 2.0), "sign": (0.7, 0.0),
    "logaddexp": (4.8, 6.0), "hypot": (3.3, 4.0), "Max": (1.0, 2.0),
}
UNKNOWN_FUNCTION = (2.0, 3.0)
TENSOR_OP = 1.0        # a * b, a + b, a / b
SCALAR_OP = 0.7        # 2 * a, 1 - a, a**2, a**3, 1 / a, sqrt(a)
GENERAL_POWER = 7.3    # a**6, a**(-7), a**1.5: std::pow per element
FAST_EXPONENTS = {2, 3, -1, -2, sympy.S.Half, -sympy.S.Half}


def block_cost(exprs, scalars) -> tuple[float, float]:
    """(time to evaluate ``exprs``, time of autograd's backward through them), in product units.

    ``scalars`` are the symbols printed as Python floats (params): ops on them alone are free.
    """
    forward = backward = 0.0
    seen = set()
    for expr in exprs:
        for node in sympy.preorder_traversal(expr):
            if node in seen or not node.args or node.free_symbols <= scalars:
                continue
            seen.add(node)  # a repeated subexpression is a CSE temporary: computed once
            f, b = _node_cost(node, scalars)
            forward, backward = forward + f, backward + b
    return forward, backward


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
    if isinstance(node, sympy.Function):
        return FUNCTION_WEIGHTS.get(type(node).__name__, UNKNOWN_FUNCTION)
    return 0.0, 0.0


def second_order_cost(function, scalars) -> float:
    """The estimated W3 time of a single-level Function: forward, its backward, autograd's
    backward of that, and the backward once more if it reads an output (module docstring)."""
    forward, _ = block_cost(function.forward.values, scalars)
    backward, traced = block_cost(function.backward.values, scalars)
    outputs = {sympy.Symbol(name, real=True) for name in function.outputs}
    rerun = backward if function.backward.reads & outputs else 0.0
    return forward + backward + traced + rerun
