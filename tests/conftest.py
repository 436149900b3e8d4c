"""Fixtures shared by the project's tests (helpers live in helpers.py)."""

from __future__ import annotations

import os
import re

import build_cache
import pytest
from helpers import build_spec
from hypothesis import HealthCheck, settings

# Hypothesis profiles for the property and fuzz tests. `ci` (the default) is derandomized, so every
# run tries the same examples, and small; `quick` (what `make test` sets) is `ci` at a tenth of the
# examples, for the fast loop, while `make test-all` runs `ci` in full; `long`
# (DBGEN_HYPOTHESIS_PROFILE=long) is random and 20x larger, for on-demand bug hunting. Each test
# scales its own budget by max_examples / 100. No database: xdist workers share nothing on disk.
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=100, derandomize=True, database=None, deadline=None,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("quick", settings.get_profile("ci"), max_examples=10)
settings.register_profile("long", max_examples=2000, database=None, deadline=None,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.load_profile(os.environ.get("DBGEN_HYPOTHESIS_PROFILE", "ci"))

if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist runs one worker per core: torch's own thread pool in each would oversubscribe
    # the cores (the tensors here are small; threads only add contention).
    import torch

    torch.set_num_threads(1)


_cache_folder = None


# A test file whose text matches this draws examples by the hypothesis profile (directly, or
# through random_trees' or helpers' budget): its tests run again at the full budget in
# `make test-rest`, after `make test`'s tenth. A file's text, not a test's: a superset is safe.
_BUDGETED = re.compile(r"hypothesis|random_trees|scaled\(|run_shard\(|settings\.default")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items):
    """The ``budgeted`` marker on every test of a file that draws examples by the profile."""
    budgeted: dict[str, bool] = {}
    for item in items:
        path = str(item.path)
        if path not in budgeted:
            budgeted[path] = bool(_BUDGETED.search(item.path.read_text(encoding="utf-8")))
        if budgeted[path]:
            item.add_marker(pytest.mark.budgeted)


def pytest_configure(config):
    """The session's build cache (build_cache.py): made once by the controlling process, shared by
    the xdist workers, installed in each."""
    global _cache_folder
    _cache_folder = build_cache.start_session()
    build_cache.install()


def pytest_unconfigure(config):
    if _cache_folder is None:
        build_cache.save_stats()  # an xdist worker's figures, for the controller's summary
    build_cache.end_session(_cache_folder)


def pytest_terminal_summary(terminalreporter):
    if _cache_folder is not None:
        terminalreporter.write_line(build_cache.summary())


@pytest.fixture(autouse=True)
def _build_cache_unless_fresh(request):
    """Tests marked ``fresh_build`` derive every spec they build (the build itself is under test)."""
    fresh = request.node.get_closest_marker("fresh_build") is not None
    build_cache.enabled(not fresh)
    yield
    build_cache.enabled(True)


@pytest.fixture
def build(tmp_path):
    """Build a spec given as keyword arguments and return the imported generated module."""
    return lambda limits=None, **spec: build_spec(tmp_path, limits, **spec)
