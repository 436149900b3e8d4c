"""Test helpers: build a spec into a temporary folder, import the result, and an independent
reference (autograd through the composed expression) to compare derivatives of every order with."""

from __future__ import annotations

import importlib.util
import itertools
import os
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from codegen.build import pipeline, write
from codegen.errors import SpecErrors

_counter = itertools.count()


def build_spec(tmp_path: Path, limits=None, **spec) -> object:
    """Write ``spec`` as YAML, build it into tmp_path/out (within ``limits``: codegen.limits.Limits,
    None for the default), and import the generated module."""
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / f"{spec['name']}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    out = tmp_path / "out"
    files = pipeline.generate(spec_dir / f"{spec['name']}.yaml", root=tmp_path,
                              **({"limits": limits} if limits is not None else {}))
    write.write_files(out, files)
    return import_path(out / f"{spec['name']}.py")


def calls_externals(spec_path: Path) -> bool:
    """Whether the spec calls SciPy's functions or its own externs: it is then generated nested
    only, and has no formula in torch ops to compare with."""
    return bool(pipeline.external_calls(pipeline.load_spec(spec_path, spec_path.name)))


def import_path(path: Path):
    name = f"dbgen_test_module_{next(_counter)}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


def derivative_chain(fn, inputs, order, seed, params=None):
    """[value, grads of order 1, ..., grads of order ``order``], each level contracted with the same
    fixed random cotangents whatever ``fn`` is, so that every mixed partial takes part (a vector-valued
    function's value is its tuple of outputs, each with its own cotangent)."""
    params = params or {}
    generator = torch.Generator().manual_seed(seed)
    value = fn(*inputs, **params)
    chain = [value]
    scalar = sum((v * torch.randn(v.shape, generator=generator, dtype=torch.float64).to(v.dtype)).sum()
                 for v in (value if isinstance(value, tuple) else (value,)))
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
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m, level=level, index=index: f"order {level}, input {index}: {m}")


def sample(shape, lo, hi, seed, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    x = lo + (hi - lo) * torch.rand(shape, generator=generator, dtype=torch.float64)
    return x.to(dtype).requires_grad_()


# DimeNet's Bessel basis: 8 outputs, 3 to 10 s a build (its fused build, every candidate: 10 s)
HEAVY_EXAMPLES = frozenset({"bessel_basis"})


def strategy_matrix(names, strategies, fixed: dict | None = None) -> list:
    """``pytest.param(name, strategy)`` for every pair, those outside the fast budget marked slow.

    ``strategies`` is one list for every name, or a function of the name giving its own list.
    ``make test`` runs each name under one strategy, in turn (the n-th name under the n-th of its
    strategies, so every strategy is run by some names: auto, which picks one of the others, among
    them) and ``make test-all`` runs every pair: the strategy matrix, budgeted (issues 13, 30).
    ``fixed`` sets ``make test``'s strategy for a name whose turn would fall on a build of several
    seconds (None: none, the name runs in ``make test-all`` only)."""
    import pytest

    fixed = fixed or {}
    params = []
    for index, name in enumerate(names):
        choices = list(strategies(name) if callable(strategies) else strategies)
        fast = fixed[name] if name in fixed else choices[index % len(choices)]
        for strategy in choices:
            marks = () if strategy == fast else (pytest.mark.slow,)
            params.append(pytest.param(name, strategy, marks=marks, id=f"{name}-{strategy}"))
    return params


def run_shard(check, shard: int, shards: int, examples: int, **strategies) -> None:
    """Run the property ``check`` (a function of the drawn ``strategies``' values) on ``shard``'s
    part (of ``shards``) of an ``examples`` budget: ``given(**strategies)`` at examples / shards
    examples, seeded by the shard under a derandomized profile (ci, quick), so that the parts draw
    different examples (a derandomized seed comes from the test function, the same for every part),
    and random like the rest under ``long``. One test of many examples as parametrized parts, so
    that pytest-xdist can run them on different workers."""
    from hypothesis import given, seed, settings

    test = settings(max_examples=max(1, examples // shards))(given(**strategies)(check))
    if settings.default.derandomize:
        test = seed(shard)(test)
    test()


def budget(values, ids=None, share: int = 2) -> list:
    """``pytest.param`` of each value, all but one in ``share`` (the first, then every share-th)
    marked slow: ``make test`` runs that share of a long list of like cases, ``make test-all`` all
    of them."""
    import pytest

    values = list(values)
    ids = list(ids) if ids is not None else [None] * len(values)
    return [pytest.param(*(v if isinstance(v, tuple) else (v,)), id=i, marks=(pytest.mark.slow,) if n % share else ())
            for n, (v, i) in enumerate(zip(values, ids))]


# How the tests run the ``dbgen`` command. ``inprocess`` (the default, in make test and make
# test-all): ``cli.run()`` in the test's own process with the argument list, working folder,
# environment and standard streams swapped in and the signal handlers put back after; the same code
# from the entry point on, without the ~2 s each fresh Python spends starting and importing torch
# and SymPy. ``subprocess`` (DBGEN_TEST_CLI=subprocess, on demand): ``python -m codegen`` in a fresh
# process for every call, as users run it. Either way each command also runs once in a fresh
# process beside its in-process run, with the same result (test_cli.py's
# test_each_command_in_a_fresh_process_does_what_it_does_in_the_tests_own), and calls that need a
# process of their own (signals, umask, a second build holding the lock, import checks) take one.
CLI_MODE = os.environ.get("DBGEN_TEST_CLI", "inprocess")


def run_dbgen(args, cwd: Path, env: dict | None = None, timeout: float = 300,
              mode: str | None = None) -> subprocess.CompletedProcess:
    """``dbgen ARGS`` in ``cwd`` with environment ``env`` (the whole environment; None: this one),
    the way ``mode`` says (inprocess or subprocess; None: CLI_MODE)."""
    env = dict(os.environ if env is None else env)
    if (mode or CLI_MODE) == "inprocess":
        return _run_dbgen_in_process(list(args), cwd, env)
    return subprocess.run([sys.executable, "-m", "codegen", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _run_dbgen_in_process(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    import contextlib
    import io
    import signal

    from codegen import cli

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    code: int = 0
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.argv = ["dbgen", *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.run()
            except SystemExit as stop:
                if isinstance(stop.code, str):  # sys.exit("text"): Python prints it and exits 1
                    err.write(stop.code + "\n")
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return subprocess.CompletedProcess(["dbgen", *args], code, out.getvalue(), err.getvalue())


def build_problems(tmp_path: Path, text: str) -> list[str]:
    """The problems building the spec ``text`` (as f.yaml in ``tmp_path``) reports, each as the
    user sees it (the domain check runs in the build, on the guarded formula); [] if it builds."""
    path = tmp_path / "f.yaml"
    path.write_text(text)
    try:
        pipeline.generate(path, root=tmp_path)
    except SpecErrors as errors:
        return [str(p) for p in errors.problems]
    return []
