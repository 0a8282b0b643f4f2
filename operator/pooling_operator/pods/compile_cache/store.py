"""The compile-cache store: one folder per key on a shared volume, written whole or not at all.

- An entry is ``<store>/<key>/`` holding vLLM's cache root as one pod left it, plus ``MANIFEST`` (the key and
  every file's sha256), written last inside a temporary folder ``<store>/.tmp-<key>-<random>/`` that is then
  renamed to ``<key>``: a reader sees a whole entry or none.
- ``restore`` copies an entry into a pod's own cache root (an emptyDir) when its manifest names this key and
  every file matches; a missing, half-written (no manifest), corrupt or foreign entry is a miss, said in the
  log, and vLLM compiles: restore never fails a start.
- ``save`` (after vLLM answered /health: its compile is done) writes the entry when none is there, holding
  ``<store>/.lock-<key>`` (created with mkdir, atomic) so at most one pod writes a key at a time; a lock older
  than LOCK_STALE_SECONDS is taken over (its writer died). A corrupt entry is replaced.

Compiled artifacts are code vLLM runs: a store serves one service (docs/fast-start.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

MANIFEST = "MANIFEST"
LOCK_STALE_SECONDS = 600.0


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): _sha256(p) for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def check(entry: Path, key: str) -> str | None:
    """None when `entry` is a whole entry of `key`, else why not (a miss)."""
    if not entry.is_dir():
        return "no entry"
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except (OSError, ValueError):
        return "no manifest (half-written or not ours)"
    if not isinstance(manifest, dict) or manifest.get("key") != key:
        return f"a foreign entry (key {manifest.get('key') if isinstance(manifest, dict) else '?'!r})"
    want = manifest.get("files")
    if not isinstance(want, dict):
        return "a manifest without files"
    got = {k: v for k, v in _files(entry).items() if k != MANIFEST}
    bad = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
    return f"corrupt: {len(bad)} file(s) differ, e.g. {bad[0]}" if bad else None


def restore(store: Path, key: str, into: Path) -> bool:
    """Copy the entry of `key` into `into`; True on a hit. Never raises: a failure is a miss."""
    entry = store / key
    try:
        problem = check(entry, key)
        if problem is not None:
            log.info("compile cache miss for %s: %s; vLLM compiles", key, problem)
            return False
        # Copied beside `into` first, checked, then moved in: a restore cut short leaves vLLM an empty root, never
        # a partial one.
        staging = into.parent / f".{into.name}.restore-{uuid.uuid4().hex[:8]}"
        try:
            shutil.copytree(entry, staging, symlinks=False, ignore=shutil.ignore_patterns(MANIFEST))
            want = json.loads((entry / MANIFEST).read_text())["files"]
            if _files(staging) != want:
                log.info("compile cache miss for %s: the entry changed while it was copied; vLLM compiles", key)
                return False
            if into.exists():
                shutil.rmtree(into)
            os.rename(staging, into)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        log.info("compile cache hit for %s: restored %s", key, into)
        return True
    except Exception as exc:
        log.warning("compile cache restore of %s failed (%s: %s); vLLM compiles", key, type(exc).__name__, exc)
        return False


def _lock(store: Path, key: str) -> Path | None:
    lock = store / f".lock-{key}"
    try:
        lock.mkdir()
        return lock
    except FileExistsError:
        try:
            age = time.time() - lock.stat().st_mtime
        except OSError:
            return None
        if age < LOCK_STALE_SECONDS:
            return None
        log.info("taking over a stale lock of %s (%.0f s old)", key, age)
        shutil.rmtree(lock, ignore_errors=True)
        try:
            lock.mkdir()
            return lock
        except FileExistsError:
            return None


def save(store: Path, key: str, source: Path) -> str:
    """Write the entry of `key` from `source` unless a whole one is there; returns what happened."""
    entry = store / key
    if check(entry, key) is None:
        return "present"
    if not source.is_dir() or not any(p.is_file() for p in source.rglob("*")):
        return "nothing to save"
    store.mkdir(parents=True, exist_ok=True)
    lock = _lock(store, key)
    if lock is None:
        return "locked by another pod"
    tmp = store / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
    try:
        if check(entry, key) is None:  # another pod saved it between our look and our lock: theirs stays
            return "present"
        shutil.copytree(source, tmp, symlinks=False)
        files = _files(tmp)
        (tmp / MANIFEST).write_text(json.dumps({"key": key, "files": files}, sort_keys=True))
        if entry.exists():  # a corrupt or foreign one: moved aside first, then dropped
            trash = store / f".trash-{key}-{uuid.uuid4().hex[:8]}"
            os.rename(entry, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.rename(tmp, entry)
        return f"saved {len(files)} files"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(lock, ignore_errors=True)
