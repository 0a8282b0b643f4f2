"""A PoolingJob shard's output folder: part files, their manifest lines, and resume.

Layout under ``<output>/shard-<I>/`` (names and fields: api/pooling_job_contract)::

    part-<NNNNNN>.safetensors   one file per batch: one tensor ``vectors`` [rows, dim] in the vector dtype
    manifest.jsonl              one line per finished input: id, file, row, rows, tokens, bytes
    failed.jsonl, _SUCCESS, run.json   as a HiddenStateJob's shard (manifest.py, record.py)

A part file is written by hand (no numpy, torch or safetensors at runtime): the 8-byte little-endian header
length, the JSON header ``{"vectors": {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}`` padded with
spaces to a multiple of 8, then the bytes exactly as vLLM sent them. It is written under a temporary name,
flushed, renamed into place and the folder flushed, and only then are its manifest lines appended (in row
order, one write): an input is finished once its line is on disk. So after a crash a part file may have no
lines (removed on resume) or only its first lines (a torn append: the part is kept for the lines that made
it, and the inputs whose lines did not are redone into a new part), but a line never names a missing,
partial or shorter file unless the volume lost data (then the line is dropped and the input redone).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from pooling_operator.api.pooling_job_contract import (
    MANIFEST_FIELDS,
    PART_SUFFIX,
    VECTORS,
    part_index,
    part_name,
)
from pooling_operator.pods.shard.files import TMP_SUFFIX, fsync_dir, move_into_place, remove, write_new
from pooling_operator.pods.shard.manifest import ShardPaths, read_manifest, repair_manifest
from pooling_operator.pods.shard.tensors import DTYPE_BYTES, InvalidFile, header_length, parse_header

ALIGNMENT = 8  # safetensors aligns the data that follows its header to 8 bytes


@dataclass(frozen=True)
class VectorEntry:
    """One finished input: its rows ``[row, row + rows)`` of part file ``file``."""

    id: str
    file: str
    row: int
    rows: int
    tokens: int
    bytes: int  # the part file's size (what resume checks)

    def line(self) -> builtins.bytes:  # builtins: the field ``bytes`` shadows the type here
        doc = {name: getattr(self, name) for name in MANIFEST_FIELDS}
        return (json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


@dataclass(frozen=True)
class PartLines:
    """A part file's manifest lines, appended together (ManifestWriter takes anything with ``line()``)."""

    entries: tuple[VectorEntry, ...]

    def line(self) -> bytes:
        return b"".join(e.line() for e in self.entries)


def parse_vector_entry(raw: bytes) -> VectorEntry | None:
    try:
        doc = json.loads(raw)
        entry = VectorEntry(**{name: doc[name] for name in MANIFEST_FIELDS})
    except (ValueError, KeyError, TypeError):
        return None
    ints = (entry.row, entry.rows, entry.tokens, entry.bytes)
    ok = (
        isinstance(entry.id, str) and isinstance(entry.file, str)
        and all(isinstance(n, int) and not isinstance(n, bool) for n in ints)
        and entry.row >= 0 and entry.rows >= 1 and entry.tokens >= 0 and entry.bytes > 0
        and "/" not in entry.file and part_index(entry.file) is not None
    )  # fmt: skip
    return entry if ok else None


def part_header(dtype: str, rows: int, dim: int, metadata: dict[str, str] | None = None) -> bytes:
    """The first bytes of a part file: header length and JSON header, padded so the data is 8-aligned.
    ``dtype`` is safetensors' name (F32, F16, BF16)."""
    size = rows * dim * DTYPE_BYTES[dtype]
    doc: dict[str, object] = {VECTORS: {"dtype": dtype, "shape": [rows, dim], "data_offsets": [0, size]}}
    if metadata:
        doc["__metadata__"] = metadata
    header = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    header += b" " * (-(8 + len(header)) % ALIGNMENT)
    return struct.pack("<Q", len(header)) + header


@dataclass(frozen=True)
class PartShape:
    dtype: str
    rows: int
    dim: int
    bytes: int


def read_part(path: Path) -> PartShape | None:
    """A part file's tensor, checked as the driver wrote it (one 2-D ``vectors`` tiling the data exactly);
    None when the file is missing or is not such a file."""
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = header_length(f.read(8), size)
            tensors = parse_header(f.read(n), size - 8 - n)
    except (FileNotFoundError, InvalidFile):
        return None
    t = tensors.get(VECTORS)
    if set(tensors) != {VECTORS} or t is None or len(t.shape) != 2:
        return None
    return PartShape(t.dtype, t.shape[0], t.shape[1], size)


def write_part(folder: Path, index: int, header: bytes, data: bytes) -> int:
    """Write part ``index`` atomically and durably (temporary name, fsync, rename, folder fsync) through
    files.DISK; its size. Nothing of it is left when this raises (ENOSPC at any step)."""
    target = folder / part_name(index)
    tmp = target.with_name(target.name + TMP_SUFFIX)
    try:
        write_new(tmp, [header, data])
        move_into_place(str(tmp), target, TMP_SUFFIX)
        fsync_dir(folder)
    except BaseException:
        remove(tmp)
        remove(target)
        raise
    return len(header) + len(data)


@dataclass
class ResumedVectors:
    entries: dict[str, VectorEntry]
    next_part: int = 0  # above every part index seen (in the folder or the manifest)
    dim: int | None = None  # the kept parts' vector dimension
    sizes: dict[str, int] = field(default_factory=dict)  # kept part file -> bytes
    torn: int = 0  # unreadable manifest lines dropped (a torn last line after a crash, normally)
    missing: int = 0  # lines whose part is gone, of another size or dtype, or too short: those inputs are redone
    orphans: int = 0  # part files without a kept line, removed
    leftovers: int = 0  # temporary files removed

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values())


def resume_vectors(paths: ShardPaths, dtype: str) -> ResumedVectors:
    """Bring a shard's folder to a consistent state and return what is already done.

    Keeps manifest lines whose part file exists with the recorded size, holds ``dtype`` (safetensors' name:
    a run asking for another dtype redoes the shard rather than mixing dtypes) and has the lines' rows (the
    last line wins for a repeated id); truncates a torn last line, or rewrites the manifest atomically when
    lines had to go from the middle; removes part files no kept line names and temporary files.
    """
    paths.folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        paths.success.unlink()  # the shard is not done until this run says so
    lines, bad, truncate_at = read_manifest(paths.manifest, parse_vector_entry)
    shapes: dict[str, PartShape | None] = {}
    kept: dict[str, VectorEntry] = {}
    missing = 0
    seen = [part_index(e.file) or 0 for e in lines]
    for entry in lines:
        if entry.file not in shapes:
            shapes[entry.file] = read_part(paths.folder / entry.file)
        shape = shapes[entry.file]
        if shape is None or shape.bytes != entry.bytes or shape.dtype != dtype or entry.row + entry.rows > shape.rows:
            missing += 1
            kept.pop(entry.id, None)
            continue
        kept[entry.id] = entry
    named = {e.file for e in kept.values()}
    result = ResumedVectors(kept, torn=bad, missing=missing)
    for name in named:
        shape = shapes[name]
        assert shape is not None
        result.sizes[name] = shape.bytes
        result.dim = shape.dim
    # Debris first: it frees space on a volume that filled up, before the manifest may need a rewrite.
    for child in paths.folder.iterdir():
        stem = child.name.removesuffix(TMP_SUFFIX)
        index = part_index(stem)
        if index is not None:
            seen.append(index)
        if child.name.endswith(TMP_SUFFIX):
            remove(child)
            result.leftovers += 1
        elif child.name.endswith(PART_SUFFIX) and child.name not in named:
            remove(child)
            result.orphans += 1
    result.next_part = max(seen, default=-1) + 1
    repair_manifest(paths.manifest, len(lines), bad, missing, truncate_at, list(kept.values()))
    return result
