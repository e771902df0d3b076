"""The cache folder stays under its size limit: whole entries go, least recently used first (entries of
older versions included), the ones in use stay, and a pruned entry is rebuilt on the next use."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from _kineto import SAMPLES

from stallscope.analyzer.load import cache
from stallscope.analyzer.load.cachekeys import cache_home, cache_limit_bytes, prune
from stallscope.analyzer.load.loader import load_file

SAMPLE = SAMPLES / "item_in_loop.pt.trace.json.gz"
OTHER = SAMPLES / "input_bound.pt.trace.json.gz"


def entry(kind: str, name: str, size: int, age_s: float) -> Path:
    folder = cache_home() / kind / name
    folder.mkdir(parents=True)
    (folder / "data").write_bytes(b"x" * size)
    then = time.time() - age_s
    os.utime(folder, (then, then))
    return folder


def test_least_recently_used_entries_go_first() -> None:
    # GIVEN 4 entries of 1000 bytes: an old version's, two models and an answer, used at different times
    old = entry("models-v1", "a", 1000, age_s=900)
    stale = entry(f"models-v{cache.CACHE_VERSION}", "b", 1000, age_s=600)
    answer = entry("answers-v1", "c", 1000, age_s=300)
    fresh = entry(f"models-v{cache.CACHE_VERSION}", "d", 1000, age_s=120)
    index = cache.cache_root() / "index"
    index.mkdir()
    # WHEN the cache is pruned to 2000 bytes
    removed = prune(limit=2000)
    # THEN the two least recently used entries are gone, whatever their version or kind
    assert removed == [old, stale]
    assert answer.is_dir() and fresh.is_dir() and index.is_dir()


def test_entries_in_use_are_never_evicted() -> None:
    # GIVEN an entry written 10 s ago, over a zero limit
    recent = entry("answers-v1", "e", 5000, age_s=10)
    # THEN it stays: another process may be reading it
    assert prune(limit=0) == [] and recent.is_dir()


def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STALLSCOPE_CACHE_MB", "1.5")
    assert cache_limit_bytes() == 1536 * 1024
    monkeypatch.setenv("STALLSCOPE_CACHE_MB", "lots")
    assert cache_limit_bytes() == 4096 << 20


def test_loading_keeps_the_cache_under_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a model cached long ago
    first = load_file(SAMPLE, use_cache=True)
    cache.wait()
    (old,) = [p for p in cache.cache_root().iterdir() if p.name != "index"]
    then = time.time() - 3600
    os.utime(old, (then, then))
    # WHEN another trace is cached with a limit that holds only one model
    size = sum(f.stat().st_size for f in old.iterdir())
    monkeypatch.setenv("STALLSCOPE_CACHE_MB", str(size * 1.5 / (1 << 20)))
    load_file(OTHER, use_cache=True)
    cache.wait()
    # THEN the old model was evicted and the new one kept
    (kept,) = [p for p in cache.cache_root().iterdir() if p.name != "index"]
    assert kept != old and not old.exists()
    # AND the evicted trace is rebuilt on its next load, to the same model
    again = load_file(SAMPLE, use_cache=True)
    assert len(again.events) == len(first.events) and again.steps == first.steps


def test_a_used_entry_counts_as_recent() -> None:
    # GIVEN a cached model last used an hour ago
    load_file(SAMPLE, use_cache=True)
    cache.wait()
    (folder,) = [p for p in cache.cache_root().iterdir() if p.name != "index"]
    then = time.time() - 3600
    os.utime(folder, (then, then))
    # WHEN it is loaded from the cache
    load_file(SAMPLE, use_cache=True)
    # THEN it is marked as just used
    assert time.time() - folder.stat().st_mtime < 60
