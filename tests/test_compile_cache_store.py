"""The compile-cache store (pods/compile_cache/store.py): an entry is whole or absent; a half-written, corrupt or
foreign entry is a miss that never fails a start; one writer per key at a time."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from pooling_operator.pods.compile_cache.store import LOCK_STALE_SECONDS, MANIFEST, check, restore, save

KEY = "k" * 16


def vllm_root(tmp_path: Path, tag: str = "a") -> Path:
    root = tmp_path / f"vllm-{tag}"
    graph = root / "torch_compile_cache" / "3f2a9c" / "rank_0_0" / "backbone"
    graph.mkdir(parents=True)
    (graph / "cache_key_factors.json").write_text(json.dumps({"tag": tag}))
    (graph / "artifact_compile_range_1_256").write_bytes(os.urandom(4096))
    return root


def test_saved_then_restored_byte_for_byte(tmp_path: Path) -> None:
    store, source = tmp_path / "store", vllm_root(tmp_path)
    assert save(store, KEY, source) == "saved 2 files"
    assert check(store / KEY, KEY) is None and sorted(p.name for p in store.iterdir()) == [KEY]  # no tmp, no lock
    into = tmp_path / "pod-2"
    assert restore(store, KEY, into)
    for f in source.rglob("*"):
        if f.is_file():
            assert (into / f.relative_to(source)).read_bytes() == f.read_bytes()
    assert save(store, KEY, vllm_root(tmp_path, "b")) == "present"  # the first writer's entry stays


@pytest.mark.parametrize(("damage", "words"), [
    (lambda e: (e / MANIFEST).unlink(), "no manifest"),
    (lambda e: next(p for p in e.rglob("artifact*")).write_bytes(b"truncated"), "corrupt"),
    (lambda e: (e / MANIFEST).write_text(json.dumps({"key": "other", "files": {}})), "a foreign entry"),
    (lambda e: (e / MANIFEST).write_text("{not json"), "no manifest"),
])
def test_a_half_written_corrupt_or_foreign_entry_is_a_miss_and_is_replaced(tmp_path: Path, damage, words: str,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    store, source = tmp_path / "store", vllm_root(tmp_path)
    save(store, KEY, source)
    damage(store / KEY)
    assert words in (check(store / KEY, KEY) or "")
    into = tmp_path / "pod"
    with caplog.at_level("INFO"):
        assert restore(store, KEY, into) is False
    assert "miss" in caplog.text and not into.exists()  # nothing half-copied: vLLM compiles from scratch
    assert save(store, KEY, source) == "saved 2 files" and check(store / KEY, KEY) is None


def test_a_missing_store_or_a_failing_copy_never_fails_a_start(tmp_path: Path) -> None:
    assert restore(tmp_path / "absent", KEY, tmp_path / "pod") is False
    store = tmp_path / "store"
    save(store, KEY, vllm_root(tmp_path))
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the pod's cache root's parent should be")
    assert restore(store, KEY, blocked / "vllm") is False  # the copy fails (as root too): a miss, not a raise
    assert blocked.read_text().startswith("a file")  # and nothing was written in its place


def test_one_writer_per_key_and_a_stale_lock_is_taken_over(tmp_path: Path) -> None:
    store, source = tmp_path / "store", vllm_root(tmp_path)
    store.mkdir()
    lock = store / f".lock-{KEY}"
    lock.mkdir()
    assert save(store, KEY, source) == "locked by another pod" and not (store / KEY).exists()
    old = time.time() - LOCK_STALE_SECONDS - 1
    os.utime(lock, (old, old))
    assert save(store, KEY, source) == "saved 2 files" and not lock.exists()


def test_nothing_to_save_from_an_empty_root(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert save(tmp_path / "store", KEY, tmp_path / "empty") == "nothing to save"
