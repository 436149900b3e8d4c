"""No derivative formula divides by a value the function does not divide by,
and every formula a plan prints, at every level of every strategy, is stable.

SymPy differentiates x**p (p a param) into p*x**p/x: 0*inf = NaN at x = 0, where autograd through
x**p gives 0 (the NequIP/MACE polynomial cutoff at r = 0). And a nested level used to differentiate
SymPy's raw derivative, whose stabilised form keeps exp(2/x) times a vanishing factor: NaN in float32
near the ends of a switch function (SchNetPack), where autograd is finite.
"""

from __future__ import annotations

import pytest
import torch
from helpers import derivative_chain

STRATEGIES = ("save_inputs", "save_outputs", "intermediates", "nested")
POINTS = [0.0, 1e-3, 0.5, 1.0]


def _chain(fn, order, dtype=torch.float64, points=POINTS):
    x = torch.tensor(points, dtype=dtype, requires_grad=True)
    return [level if k == 0 else level[0] for k, level in enumerate(derivative_chain(fn, [x], order, seed=3))]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("p", [6.0, 2.5])
def test_a_power_with_a_param_exponent_matches_autograd_at_zero(build, strategy, p):
    """x**p at orders 1-3, at the default p = 6 and at p = 2.5 (whose third derivative is -inf at 0, as
    autograd's): equal to autograd through x**p, NaN nowhere."""
    module = build(name="cutoff", expr="x**p", inputs=["x"], params={"p": 6.0}, domain={"x": [0, 1]},
                   order=3, strategy=strategy)
    got = _chain(lambda x: module.cutoff(x, p=p), 3)
    want = _chain(lambda x: x**p, 3)
    for order, (g, w) in enumerate(zip(got, want)):
        assert not torch.isnan(g).any(), f"order {order}: {g}"
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12, msg=lambda m, o=order: f"order {o}: {m}")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_forward_mode_of_a_power_is_finite_at_zero(build, strategy):
    module = build(name="cutoff", expr="x**p * (1 + x)", inputs=["x"], params={"p": 4.0}, order=2,
                   domain={"x": [0, 1]}, strategy=strategy)
    x = torch.tensor(POINTS, dtype=torch.float64)
    _, tangent = torch.func.jvp(module.cutoff, (x,), (torch.ones_like(x),))
    _, want = torch.func.jvp(lambda x: x**4.0 * (1 + x), (x,), (torch.ones_like(x),))
    torch.testing.assert_close(tangent, want, rtol=1e-10, atol=1e-12)


SWITCH = "exp(-1/(1 - x)) / (exp(-1/x) + exp(-1/(1 - x)))"
NEAR_THE_ENDS = [0.005, 0.01, 0.02, 0.5, 0.98, 0.99, 0.995]


def _switch(x):
    return torch.exp(-1 / (1 - x)) / (torch.exp(-1 / x) + torch.exp(-1 / (1 - x)))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_switch_function_is_finite_in_float32_near_its_ends(build, strategy):
    """Every order up to 3 in float32 is finite and within float32's reach of the float64 reference
    (autograd through the switch in float64) near x = 0 and x = 1."""
    module = build(name="switch", expr=SWITCH, inputs=["x"], domain={"x": [0.01, 0.99]}, order=3,
                   strategy=strategy)
    got = _chain(module.switch, 3, torch.float32, NEAR_THE_ENDS)
    want = _chain(_switch, 3, torch.float64, NEAR_THE_ENDS)
    for order, (g, w) in enumerate(zip(got, want)):
        assert torch.isfinite(g).all(), f"order {order}: {g}"
        torch.testing.assert_close(g.double(), w, rtol=1e-3, atol=1e-6 * max(1.0, float(w.detach().abs().max())),
                                   msg=lambda m, o=order: f"order {o}: {m}")
