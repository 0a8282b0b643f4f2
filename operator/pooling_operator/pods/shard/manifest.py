"""A shard's output folder: file names, the manifest, resume, and the group-committed manifest writer.

Layout under ``<output>``::

    shard-<I>/<name>.safetensors   one file per finished sample
    shard-<I>/manifest.jsonl       one line per finished sample: id, file, tokens, bytes, sha256
    shard-<I>/failed.jsonl         one line per failed sample of the latest run: id, line, reason
    shard-<I>/_SUCCESS             JSON counts, written last
    .staging/shard-<I>/            vLLM's shared_storage_path for this shard

Names and fields are api/shard_contract's (vllm.args.storage_path builds the staging path from them).
``file`` in the manifest is relative to the manifest's folder. A sample is finished only once its
manifest line is on disk; the file is renamed into place before that line is written, so after a crash
a file may exist without its line (an orphan, removed on resume) but a line never points at a
missing or partial file unless the volume lost data (then the line is dropped and the sample redone).

A write that fails part way (the volume is full: ENOSPC) is cut back to the last whole line before the
error goes on, and every temporary file of a failed atomic write is removed, so a full volume leaves the
same consistent folder a crash would, minus the debris.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from pooling_operator.api.shard_contract import (
    FAILED_FIELDS,
    FAILED_LOG,
    MANIFEST,
    MANIFEST_FIELDS,
    SAMPLE_SUFFIX,
    SUCCESS_MARKER,
    shard_folder,
)
from pooling_operator.pods.shard.files import DISK, TMP_SUFFIX, fsync_path, replace_atomically, write_all
from pooling_operator.vllm.args import storage_path

log = logging.getLogger(__name__)

# Keeps names well under the 255-byte limit of common filesystems, with room for the hash and suffix.
MAX_NAME = 120
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class ShardPaths:
    output: Path
    shard: int

    @property
    def folder(self) -> Path:
        return self.output / shard_folder(self.shard)

    @property
    def staging(self) -> Path:
        """vLLM's shared_storage_path for this shard, exactly as the Job's vLLM container gets it."""
        return Path(storage_path(str(self.output)).replace("$(JOB_COMPLETION_INDEX)", str(self.shard)))

    @property
    def manifest(self) -> Path:
        return self.folder / MANIFEST

    @property
    def failed(self) -> Path:
        return self.folder / FAILED_LOG

    @property
    def success(self) -> Path:
        return self.folder / SUCCESS_MARKER


def file_name(sample_id: str) -> str:
    """A safe, distinct file name for a sample id.

    Ids made only of letters, digits, ``.``, ``_`` and ``-`` (not starting with a dot) keep their name;
    any other id is cleaned and suffixed with a hash of the original, so two ids that clean to the same
    text still get different files. The manifest keeps the original id.
    """
    safe = _UNSAFE.sub("_", sample_id)
    if safe == sample_id and not safe.startswith(".") and len(safe) <= MAX_NAME:
        return safe + SAMPLE_SUFFIX
    digest = hashlib.sha256(sample_id.encode("utf-8")).hexdigest()[:16]
    return f"{safe.lstrip('.')[:MAX_NAME]}-{digest}{SAMPLE_SUFFIX}"


@dataclass(frozen=True)
class Entry:
    id: str
    file: str
    tokens: int
    bytes: int
    sha256: str

    def line(self) -> builtins.bytes:  # builtins: the field ``bytes`` shadows the type here
        doc = {field: getattr(self, field) for field in MANIFEST_FIELDS}
        return (json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


class Line(Protocol):
    """Anything the ManifestWriter appends: its ``line()`` is one or more whole JSON lines."""

    def line(self) -> bytes: ...


E = TypeVar("E")


def parse_entry(raw: bytes) -> Entry | None:
    try:
        doc = json.loads(raw)
        entry = Entry(**{field: doc[field] for field in MANIFEST_FIELDS})
    except (ValueError, KeyError, TypeError):
        return None
    ok = (
        isinstance(entry.id, str) and isinstance(entry.file, str) and isinstance(entry.sha256, str)
        and isinstance(entry.tokens, int) and isinstance(entry.bytes, int)
        and "/" not in entry.file and entry.file.endswith(SAMPLE_SUFFIX)
    )
    return entry if ok else None


@dataclass
class Resumed:
    entries: dict[str, Entry]
    torn: int = 0  # unreadable lines dropped (a torn last line after a crash, normally)
    missing: int = 0  # lines whose file is gone or has another size: those samples are redone
    orphans: int = 0  # files without a line, removed
    staged: int = 0  # leftovers in the staging folder, removed

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.entries.values())


def read_manifest(path: Path, parse: Callable[[bytes], E | None] = parse_entry) -> tuple[list[E], int, int | None]:  # type: ignore[assignment]
    """(entries, unreadable line count, truncate_at); ``parse`` reads one line (None: unreadable).

    ``truncate_at`` is the byte length of the good prefix when the unreadable lines are all at the end
    (a torn last line after a crash, normally), so cutting them off loses nothing; None otherwise.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0, None
    entries: list[E] = []
    bad = 0
    good_prefix = 0
    position = 0
    for raw in data.splitlines(keepends=True):
        position += len(raw)
        entry = parse(raw) if raw.endswith(b"\n") else None
        if entry is None:
            bad += 1
            continue
        entries.append(entry)
        if bad:
            good_prefix = -1  # a good line after a bad one: only a rewrite can drop the bad one
        else:
            good_prefix = position
    return entries, bad, (good_prefix if bad and good_prefix >= 0 else None)


def resume(paths: ShardPaths) -> Resumed:
    """Bring a shard's folder to a consistent state and return what is already done.

    Keeps manifest lines whose file exists with the recorded size (the last line wins for a repeated id);
    truncates a torn last line, or rewrites the manifest atomically when lines had to go from the middle;
    removes files no line names (a crash between the rename and the manifest line) and leftover
    temporary files; empties the staging folder (requests of a previous run nobody will collect).
    """
    paths.folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        paths.success.unlink()  # the shard is not done until this run says so
    lines: list[Entry]  # read_manifest's default parse (parse_entry) reads Entry lines
    lines, bad, truncate_at = read_manifest(paths.manifest)
    kept: dict[str, Entry] = {}
    missing = 0
    for entry in lines:
        try:
            size = (paths.folder / entry.file).stat().st_size
        except FileNotFoundError:
            size = -1
        if size != entry.bytes:
            missing += 1
            kept.pop(entry.id, None)
            continue
        kept[entry.id] = entry
    result = Resumed(kept, torn=bad, missing=missing)
    # Debris first: it frees space on a volume that filled up, before the manifest may need a rewrite. Safe
    # in this order too: a file no kept line names is not named by the old manifest's kept lines either.
    named = {e.file for e in kept.values()}
    for child in paths.folder.iterdir():
        if child.name.endswith(TMP_SUFFIX) or (child.name.endswith(SAMPLE_SUFFIX) and child.name not in named):
            child.unlink()
            result.orphans += child.name.endswith(SAMPLE_SUFFIX)
    if paths.staging.is_dir():
        for child in paths.staging.iterdir():
            if child.is_file():
                child.unlink()
                result.staged += child.name.endswith(SAMPLE_SUFFIX)
    repair_manifest(paths.manifest, len(lines), bad, missing, truncate_at, list(kept.values()))
    return result


def repair_manifest(path: Path, lines: int, bad: int, missing: int, truncate_at: int | None, kept: list[Line]) -> None:
    """After resume has judged a manifest's ``lines`` readable lines: cut off a torn tail when that is all that
    went (``truncate_at``, from read_manifest), else rewrite it atomically with the ``kept`` entries when any
    line went (``bad`` unreadable, ``missing`` stale, or repeated ids: ``lines - missing - len(kept)``)."""
    duplicates = lines - missing - len(kept)
    if truncate_at is not None and not missing and not duplicates:
        os.truncate(path, truncate_at)
        fsync_path(path)
    elif bad or missing or duplicates:
        replace_atomically(path, b"".join(e.line() for e in kept))










class Lines:
    """An append-only file of whole lines. A write that fails (ENOSPC part way through a line, a failed
    fsync) is cut back to the length before it, so the file never keeps a partial line; from then on the
    file refuses more lines with the same error, so nothing is ever appended after a lost one."""

    def __init__(self, path: Path, *, truncate: bool = False) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0)
        self._fd = os.open(path, flags, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._error: OSError | None = None

    def write(self, data: bytes, *, sync: bool) -> None:
        if self._error is not None:
            raise OSError(self._error.errno, f"{self._error.strerror} (an earlier write failed)", str(self.path))
        try:
            write_all(self._fd, data)
            if sync:
                DISK.fsync(self._fd)
        except OSError as exc:
            self._error = exc
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            raise
        self._size += len(data)

    def sync(self) -> None:
        if self._error is None:
            self.write(b"", sync=True)

    def close(self) -> None:
        os.close(self._fd)


class ManifestWriter:
    """Appends manifest lines, each on disk (write + fsync) before ``append`` returns; a failed write
    (ENOSPC) fails every line of its batch and leaves none of them, nor part of one, in the file.

    Lines that arrive while a write is under way are written together with one fsync (group commit),
    so concurrency buys throughput without weakening the guarantee.
    """

    def __init__(self, path: Path, executor: Executor) -> None:
        self._file = Lines(path)
        self._executor = executor
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._flushing = False
        self._task: asyncio.Task[None] | None = None

    async def append(self, entry: Line) -> None:
        """``entry.line()`` may hold several lines: they are written together, in one write."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending.append((entry.line(), future))
        if not self._flushing:
            self._flushing = True
            self._task = loop.create_task(self._flush())
        await future

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    await loop.run_in_executor(self._executor, self._write, b"".join(line for line, _ in batch))
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for _, future in batch:
                    if not future.done():
                        future.set_result(None)
        finally:
            self._flushing = False

    def _write(self, data: bytes) -> None:
        self._file.write(data, sync=True)

    def close(self) -> None:
        self._file.close()


class FailedLog:
    """failed.jsonl of the current run: rewritten from scratch, since every run retries what failed before."""

    def __init__(self, path: Path) -> None:
        self._file = Lines(path, truncate=True)
        self.count = 0

    def add(self, sample_id: str | None, line: int, reason: str) -> None:
        doc = dict(zip(FAILED_FIELDS, (sample_id, line, reason), strict=True))
        self._file.write((json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"), sync=False)
        self.count += 1

    def close(self) -> None:
        try:
            self._file.sync()
        finally:
            self._file.close()
