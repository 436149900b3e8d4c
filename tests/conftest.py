"""Fixtures shared by the project's tests (helpers live in helpers.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from helpers import build_spec

# Hypothesis profiles for the property and fuzz tests. `ci` (the default) is derandomized, so every
# run tries the same examples, and small; `quick` (what `make test` sets) is `ci` at a quarter of the
# examples, for the fast loop, while `make test-all` runs `ci` in full; `long`
# (DBGEN_HYPOTHESIS_PROFILE=long) is random and 20x larger, for on-demand bug hunting. Each test
# scales its own budget by max_examples / 100. No database: xdist workers share nothing on disk.
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=100, derandomize=True, database=None, deadline=None,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("quick", settings.get_profile("ci"), max_examples=25)
settings.register_profile("long", max_examples=2000, database=None, deadline=None,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.load_profile(os.environ.get("DBGEN_HYPOTHESIS_PROFILE", "ci"))

if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist runs one worker per core: torch's own thread pool in each would oversubscribe
    # the cores (the tensors here are small; threads only add contention).
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def build(tmp_path):
    """Build a spec given as keyword arguments and return the imported generated module."""
    return lambda **spec: build_spec(tmp_path, **spec)
