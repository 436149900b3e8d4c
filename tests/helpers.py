"""Test helpers: build a spec into a temporary folder, import the result, and an independent
reference (autograd through the composed expression) to compare derivatives of every order with."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import torch
import yaml

from codegen import pipeline, write

_counter = itertools.count()


def build_spec(tmp_path: Path, **spec) -> object:
    """Write ``spec`` as YAML, build it into tmp_path/out, and import the generated module."""
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / f"{spec['name']}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    out = tmp_path / "out"
    files = pipeline.generate(spec_dir / f"{spec['name']}.yaml", root=tmp_path)
    write.write_files(out, files)
    return import_path(out / f"{spec['name']}.py")


def import_path(path: Path):
    name = f"dbgen_test_module_{next(_counter)}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


def derivative_chain(fn, inputs, order, seed, params=None):
    """[value, grads of order 1, ..., grads of order ``order``], each level contracted with the same
    fixed random cotangents whatever ``fn`` is, so that every mixed partial takes part."""
    params = params or {}
    generator = torch.Generator().manual_seed(seed)
    value = fn(*inputs, **params)
    chain = [value]
    scalar = (value * torch.randn(value.shape, generator=generator, dtype=torch.float64).to(value.dtype)).sum()
    for _ in range(order):
        if scalar.requires_grad:
            grads = torch.autograd.grad(scalar, inputs, create_graph=True, allow_unused=True, materialize_grads=True)
        else:
            grads = tuple(torch.zeros_like(x) for x in inputs)
        chain.append(grads)
        scalar = sum(
            (g * torch.randn(g.shape, generator=generator, dtype=torch.float64).to(g.dtype)).sum() for g in grads
        )
    return chain


def assert_chains_close(actual, expected, rtol=1e-7, atol=1e-10):
    torch.testing.assert_close(actual[0], expected[0], rtol=rtol, atol=atol)
    for level, (got, want) in enumerate(zip(actual[1:], expected[1:]), start=1):
        for index, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape, f"order {level}, input {index}: shape {tuple(g.shape)} != {tuple(w.shape)}"
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m: f"order {level}, input {index}: {m}")


def sample(shape, lo, hi, seed, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    x = lo + (hi - lo) * torch.rand(shape, generator=generator, dtype=torch.float64)
    return x.to(dtype).requires_grad_()
