"""Fixtures shared by the project's tests (helpers live in helpers.py)."""

from __future__ import annotations

import pytest

from helpers import build_spec


@pytest.fixture
def build(tmp_path):
    """Build a spec given as keyword arguments and return the imported generated module."""
    return lambda **spec: build_spec(tmp_path, **spec)
