"""The vector-valued examples against references that are not their own formulas.

- ``spherical_harmonics``: e3nn's evaluation (the direction first, then polynomials in it;
  e3nn/o3/_spherical_harmonics.py at commit 2aa7f58, transcribed in benchmarks/functions.py),
  values and every derivative order, differentiated by autograd;
- ``bessel_basis``: PyTorch Geometric's DimeNet layers (torch_geometric/nn/models/dimenet.py,
  ``Envelope`` and ``BesselBasisLayer``, transcribed below), which scale the same functions by rc
  instead of sqrt(2/rc);
- ``cartesian_to_spherical``: the round trip back to (x, y, z), and first derivatives in closed form.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from helpers import derivative_chain, import_path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "generated"
sys.path.insert(0, str(ROOT))  # benchmarks/ is not installed
from benchmarks.functions import e3nn_spherical_harmonics


def _module(name: str):
    return import_path(GENERATED / f"{name}.py")


def _assert_levels_close(actual, expected, rtol=1e-10, atol=1e-12):
    for order, (got, want) in enumerate(zip(actual, expected, strict=True)):
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m, o=order, i=index: f"order {o}, {i}: {m}")


def _vectors(count: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    directions = torch.randn(count, 3, generator=generator, dtype=torch.float64)
    radii = 10.0 ** (torch.rand(count, 1, generator=generator, dtype=torch.float64) * 4 - 2)  # 0.01 to 100
    return [c.contiguous().requires_grad_() for c in (directions * radii).unbind(-1)]


def test_spherical_harmonics_are_e3nns_to_third_order():
    """Order 2 is the spec's; the third comes from autograd through its differentiable backward."""
    module = _module("spherical_harmonics")
    inputs = _vectors(200)
    _assert_levels_close(derivative_chain(module.spherical_harmonics, inputs, 3, seed=0),
                         derivative_chain(e3nn_spherical_harmonics, inputs, 3, seed=0),
                         rtol=1e-9, atol=1e-10)


def test_spherical_harmonics_have_e3nns_component_normalization():
    """Each of the 2l + 1 components of degree l has mean square 1 over the sphere, so their sum is
    2l + 1 at every point (e3nn's normalization='component')."""
    module = _module("spherical_harmonics")
    values = torch.stack(module.spherical_harmonics(*_vectors(1000, seed=1)), dim=-1).detach()
    for degree, (start, stop) in enumerate([(0, 1), (1, 4), (4, 9)]):
        torch.testing.assert_close(values[:, start:stop].pow(2).sum(-1), torch.full((1000,), 2.0 * degree + 1,
                                   dtype=torch.float64), rtol=1e-12, atol=1e-12)


def pyg_dimenet_basis(r: torch.Tensor, rc: float, count: int = 8, exponent: int = 5) -> tuple[torch.Tensor, ...]:
    """torch_geometric/nn/models/dimenet.py: BesselBasisLayer(num_radial, cutoff, envelope_exponent)
    with its initial frequencies n * pi, and Envelope(exponent), p = exponent + 1."""
    p = exponent + 1
    a, b, c = -(p + 1) * (p + 2) / 2, p * (p + 2), -p * (p + 1) / 2
    d = r / rc
    envelope = (1.0 / d + a * d ** (p - 1) + b * d**p + c * d ** (p + 1)) * (d < 1.0).to(d.dtype)
    return tuple(envelope * torch.sin(n * math.pi * d) for n in range(1, count + 1))


@pytest.mark.parametrize("rc", [5.0, 3.2])
def test_bessel_basis_is_pytorch_geometrics_dimenet_basis_scaled(rc):
    """The spec's sqrt(2/rc) where PyG's layer has rc: the same functions and derivatives otherwise,
    zero from the cutoff on."""
    module = _module("bessel_basis")
    generator = torch.Generator().manual_seed(3)
    r = (0.3 + (rc + 1.0) * torch.rand(300, generator=generator, dtype=torch.float64)).requires_grad_()
    scale = math.sqrt(2 / rc) / rc

    def scaled_reference(r):
        return tuple(scale * value for value in pyg_dimenet_basis(r, rc))

    _assert_levels_close(derivative_chain(module.bessel_basis, [r], 2, seed=0, params={"rc": rc}),
                         derivative_chain(scaled_reference, [r], 2, seed=0))
    beyond = torch.stack(module.bessel_basis(torch.tensor([rc, rc + 0.5], dtype=torch.float64), rc=rc))
    assert bool((beyond == 0).all())


def test_cartesian_to_spherical_round_trips_with_closed_form_derivatives():
    module = _module("cartesian_to_spherical")
    x, y, z = _vectors(100, seed=4)
    r, theta, phi = module.cartesian_to_spherical(x, y, z)
    back = (r * torch.sin(theta) * torch.cos(phi), r * torch.sin(theta) * torch.sin(phi), r * torch.cos(theta))
    for got, want in zip(back, (x, y, z)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    rho2 = x**2 + y**2
    expected = {
        "r": (x / r, y / r, z / r),
        "theta": (x * z / (torch.sqrt(rho2) * r**2), y * z / (torch.sqrt(rho2) * r**2), -torch.sqrt(rho2) / r**2),
        "phi": (-y / rho2, x / rho2, torch.zeros_like(z)),
    }
    for name, output in zip(("r", "theta", "phi"), (r, theta, phi)):
        grads = torch.autograd.grad(output.sum(), (x, y, z), retain_graph=True, materialize_grads=True)
        for got, want in zip(grads, expected[name]):
            torch.testing.assert_close(got, want.detach(), rtol=1e-12, atol=1e-14)
