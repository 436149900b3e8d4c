"""The training steps users run, each built once and then stepped with any variant of its function.

A ``Case`` holds the fixed data and initial parameters of one configuration; ``step(fn)`` runs one
training step with ``fn`` as its elementwise function and returns the loss and the gradients the
optimizer would take (nothing is updated, so every variant and repeat sees the same numbers).

- ``pinn``: a physics-informed network for Burgers' equation u_t + u u_x = nu u_xx, an MLP
  2-64-64-64-1 on collocation points; the residual needs u_x, u_t and u_xx (the activation's
  second derivative), and the loss's gradient in the weights its third.
- ``force``: force matching with a pair potential whose parameters train: energy over a fixed
  neighbour list (built once), forces -dE/dpos with create_graph, a loss on the forces and the
  energy, its gradient in the potential's parameters (mixed second derivatives).
- ``wgan``: a WGAN-GP critic step: the gradient penalty ((|grad_x D(x)| - 1)**2) on interpolates,
  backpropagated into the critic's weights (the activation's second derivative).
- ``sh``: an equivariant potential's step: real spherical harmonics of edge vectors (l <= 2),
  an energy tanh(Y @ W) summed, forces -dE/dvec with create_graph, a loss on them and its
  gradient in W (mixed second derivatives of the nine harmonics).
- ``sweep``: one W3 of the function alone on N elements (``dbgen bench``'s workload), for the
  per-call cost at every size.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from codegen.tools import bench


@dataclass
class Case:
    """One configuration: ``step(fn)`` -> (loss, gradients); ``elements`` is the size of the
    tensors ``fn`` is called on, for the report."""

    workload: str
    function: str
    size: int
    elements: int
    step: Callable[[Callable], tuple[torch.Tensor, tuple[torch.Tensor, ...]]]
    tensors: list[torch.Tensor] = field(default_factory=list)  # its data and parameters

    @property
    def label(self) -> str:
        return f"{self.workload} {self.function} {self.size}"


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _linear(fan_in: int, fan_out: int, dtype, generator) -> list[torch.Tensor]:
    bound = math.sqrt(6 / (fan_in + fan_out))  # Glorot: tanh networks' usual initialisation
    weight = (torch.rand(fan_in, fan_out, generator=generator, dtype=torch.float64) * 2 - 1) * bound
    return [weight.to(dtype).requires_grad_(), torch.zeros(fan_out, dtype=dtype, requires_grad=True)]


def _mlp(widths: list[int], dtype, generator) -> list[torch.Tensor]:
    return [p for a, b in itertools.pairwise(widths) for p in _linear(a, b, dtype, generator)]


def _forward(params: list[torch.Tensor], h: torch.Tensor, act: Callable) -> torch.Tensor:
    layers = list(zip(params[::2], params[1::2]))
    for weight, bias in layers[:-1]:
        h = act(torch.addmm(bias, h, weight))
    weight, bias = layers[-1]
    return torch.addmm(bias, h, weight)


def pinn(function: str, points: int, dtype: torch.dtype, seed: int = 0) -> Case:
    generator = _generator(seed)
    params = _mlp([2, 64, 64, 64, 1], dtype, generator)
    adaptive = function == "adaptive_tanh"
    slope = torch.tensor(1.0, dtype=dtype, requires_grad=True)  # the adaptive tanh's trainable a
    t = torch.rand(points, 1, generator=generator, dtype=torch.float64)
    x = torch.rand(points, 1, generator=generator, dtype=torch.float64) * 2 - 1
    tx = torch.cat([t, x], dim=1).to(dtype).requires_grad_()
    x0 = torch.linspace(-1, 1, 256, dtype=torch.float64)[:, None]
    start = torch.cat([torch.zeros_like(x0), x0], dim=1).to(dtype)  # u(0, x) = -sin(pi x)
    initial = -torch.sin(math.pi * x0).to(dtype)
    nu = 0.01 / math.pi
    trained = params + [slope] * adaptive

    def step(fn):
        act = (lambda h: fn(h, slope)) if adaptive else fn
        u = _forward(params, tx, act)
        (du,) = torch.autograd.grad(u.sum(), tx, create_graph=True)
        u_t, u_x = du[:, :1], du[:, 1:]
        (du_x,) = torch.autograd.grad(u_x.sum(), tx, create_graph=True)
        residual = u_t + u * u_x - nu * du_x[:, 1:]
        loss = residual.pow(2).mean() + (_forward(params, start, act) - initial).pow(2).mean()
        return loss, torch.autograd.grad(loss, trained)

    return Case("pinn", function, points, points * 64, step, [tx, *trained])


def _lattice(atoms: int, spacing: float, dtype, generator) -> torch.Tensor:
    side = round(atoms ** (1 / 3))
    grid = torch.stack(torch.meshgrid(*[torch.arange(side, dtype=torch.float64)] * 3, indexing="ij"), -1)
    jitter = (torch.rand(side**3, 3, generator=generator, dtype=torch.float64) - 0.5) * 0.1
    return (grid.reshape(-1, 3) * spacing + jitter).to(dtype)


POTENTIAL_PARAMS = {  # (true values, starting values) of the trained parameters, in spec order
    "lj": ([1.0, 1.0], [0.8, 0.95]),
    "morse": ([1.0, 2.0, 1.1], [0.8, 1.7, 1.05]),
}
CUTOFF = 2.5


def force(function: str, atoms: int, dtype: torch.dtype, seed: int = 0) -> Case:
    generator = _generator(seed)
    positions = _lattice(atoms, 1.12, dtype, generator).requires_grad_()
    with torch.no_grad():
        distances = torch.cdist(positions.double(), positions.double())
        i, j = torch.triu_indices(len(positions), len(positions), 1)
        keep = distances[i, j] < CUTOFF
        i, j = i[keep], j[keep]  # the neighbour list, built once
    true, start = POTENTIAL_PARAMS[function]
    trained = [torch.tensor(v, dtype=dtype, requires_grad=True) for v in start]
    truth = [torch.tensor(v, dtype=dtype) for v in true]

    def energy_and_forces(fn, params, create_graph):
        r = (positions[i] - positions[j]).norm(dim=-1)
        energy = fn(r, *params).sum()
        (gradient,) = torch.autograd.grad(energy, positions, create_graph=create_graph)
        return energy, -gradient

    reference = _POTENTIALS[function]
    target_energy, target_forces = (t.detach() for t in energy_and_forces(reference, truth, False))

    def step(fn):
        energy, forces = energy_and_forces(fn, trained, True)
        loss = (forces - target_forces).pow(2).mean() + (energy - target_energy).pow(2) / len(positions) ** 2
        return loss, torch.autograd.grad(loss, trained)

    return Case("force", function, atoms, int(keep.sum()), step, [positions, *trained])


_POTENTIALS = {
    "lj": lambda r, eps, sigma: 4 * eps * ((sigma / r) ** 12 - (sigma / r) ** 6),
    "morse": lambda r, d, a, r0: d * (1 - torch.exp(-a * (r - r0))) ** 2 - d,
}


def wgan(function: str, batch: int, dtype: torch.dtype, seed: int = 0) -> Case:
    generator = _generator(seed)
    params = _mlp([32, 128, 128, 1], dtype, generator)
    real = torch.randn(batch, 32, generator=generator, dtype=torch.float64).to(dtype) + 1
    fake = torch.randn(batch, 32, generator=generator, dtype=torch.float64).to(dtype)
    mix = torch.rand(batch, 1, generator=generator, dtype=torch.float64).to(dtype)
    interpolates = (mix * real + (1 - mix) * fake).requires_grad_()

    def step(fn):
        (gradient,) = torch.autograd.grad(_forward(params, interpolates, fn).sum(), interpolates, create_graph=True)
        penalty = (gradient.norm(dim=1) - 1).pow(2).mean()
        loss = _forward(params, fake, fn).mean() - _forward(params, real, fn).mean() + 10 * penalty
        return loss, torch.autograd.grad(loss, params)

    return Case("wgan", function, batch, batch * 128, step, [real, fake, interpolates, *params])


def sh(function: str, edges: int, dtype: torch.dtype, seed: int = 0) -> Case:
    generator = _generator(seed)
    vectors = (torch.randn(edges, 3, generator=generator, dtype=torch.float64) * 1.5).to(dtype).requires_grad_()
    weight = (torch.randn(9, 16, generator=generator, dtype=torch.float64) / 3).to(dtype).requires_grad_()
    target = torch.randn(edges, 3, generator=generator, dtype=torch.float64).to(dtype)

    def step(fn):
        harmonics = torch.stack(fn(*vectors.unbind(-1)), dim=-1)
        energy = torch.tanh(harmonics @ weight).sum()
        (gradient,) = torch.autograd.grad(energy, vectors, create_graph=True)
        loss = (gradient + target).pow(2).mean()  # forces are -gradient
        return loss, torch.autograd.grad(loss, [weight])

    return Case("sh", function, edges, edges, step, [vectors, weight, target])


def sweep(function: str, size: int, dtype: torch.dtype, seed: int = 0) -> Case:
    """One W3 of the function on ``size`` elements: its gradients with create_graph, then theirs.
    The 'loss' is the sum of the second-order gradients (as bench contracts them with cotangents)."""
    from .functions import spec_of

    inputs = bench.make_inputs(spec_of(function), size, dtype, seed)

    def step(fn):
        grads = bench.derivatives(fn, inputs, 2)
        return sum(g.sum() for g in grads), tuple(grads)

    return Case("sweep", function, size, size, step, list(inputs.tensors))


WORKLOADS = {"pinn": pinn, "force": force, "wgan": wgan, "sh": sh, "sweep": sweep}
