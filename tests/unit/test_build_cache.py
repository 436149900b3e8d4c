"""The tests' session-wide build cache (build_cache.py): a spec built twice is derived once, to the
same files; anything that changes the output is a different entry; refusals and tests marked
``fresh_build`` are derived every time."""

from __future__ import annotations

import os
from pathlib import Path

import build_cache
import pytest

from codegen import limits
from codegen.build import pipeline
from codegen.errors import SpecErrors

SPEC = "name: cached\nexpr: x * tanh(x)\ninputs: [x]\norder: 1\n"


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """An empty cache folder of the test's own (the session's may hold these specs from a run before)."""
    monkeypatch.setenv("DBGEN_TEST_BUILD_CACHE_SESSION", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()


def _generate(folder: Path, text: str = SPEC, **options) -> dict[str, str]:
    return pipeline.generate(_write(folder, text), root=folder, **options)


def _misses_of(action) -> int:
    before = build_cache.stats()["misses"]
    action()
    return build_cache.stats()["misses"] - before


def test_the_session_has_a_cache_folder_every_test_shares():
    folder = os.environ.get("DBGEN_TEST_BUILD_CACHE_SESSION")
    assert folder and Path(folder).is_dir() and Path(folder).is_absolute()


def test_a_second_build_of_a_spec_anywhere_reads_the_first(tmp_path, own_cache):
    text = SPEC.replace("tanh(x)", "tanh(x) * 1.25")  # a spec no other test builds
    first = {}
    assert _misses_of(lambda: first.update(_generate(tmp_path / "a", text))) == 1
    second = {}
    assert _misses_of(lambda: second.update(_generate(tmp_path / "b", text))) == 0
    assert first == second


@pytest.mark.parametrize("change", ["expr", "path", "limits", "fuse"])
def test_what_changes_the_output_is_another_entry(tmp_path, own_cache, change):
    text = SPEC.replace("tanh(x)", f"tanh(x) * 1.5 + {len(change)}")
    _generate(tmp_path / "first", text)
    again = {
        "expr": lambda: _generate(tmp_path / "second", text.replace("1.5", "1.75")),
        # the same spec shown as deeper/specs/cached.yaml: its headers and messages differ
        "path": lambda: pipeline.generate(_write(tmp_path / "second" / "deeper", text), root=tmp_path / "second"),
        "limits": lambda: _generate(tmp_path / "second", text, limits=limits.Limits(seconds=59, size=49_999)),
        "fuse": lambda: _generate(tmp_path / "second", text, fuse=True),
    }[change]
    assert _misses_of(again) == 1


def _write(folder: Path, text: str) -> Path:
    (folder / "specs").mkdir(parents=True, exist_ok=True)
    (folder / "specs" / "cached.yaml").write_text(text)
    return folder / "specs" / "cached.yaml"


def test_a_refusal_is_derived_every_time(tmp_path, own_cache):
    bad = SPEC.replace("x * tanh(x)", "exp(exp(exp(exp(x))))").replace("order: 1", "order: 6")
    tight = limits.Limits(seconds=60, size=50)
    for attempt in (tmp_path / "a", tmp_path / "b"):
        before = build_cache.stats()
        with pytest.raises(SpecErrors):
            _generate(attempt, bad, limits=tight)
        after = build_cache.stats()
        assert (after["hits"], after["misses"]) == (before["hits"], before["misses"] + 1)


@pytest.mark.fresh_build
def test_a_fresh_build_test_derives_what_the_cache_holds(tmp_path, own_cache):
    text = SPEC.replace("tanh(x)", "tanh(x) * 1.125")
    build_cache.enabled(True)  # as any other test would: the spec is now cached
    _generate(tmp_path / "a", text)
    build_cache.enabled(False)  # as the fixture set it for this test
    before = build_cache.stats()
    assert _generate(tmp_path / "b", text)
    assert build_cache.stats() == before  # neither read nor written (nor timed): derived
