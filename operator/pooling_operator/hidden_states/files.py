"""The files the hidden-states connector writes: wait for them, check them without torch, hash them.

vLLM's ExampleHiddenStatesConnector answers the request with the file's path before the file exists: it
holds an exclusive flock on ``<file>.lock`` (created before the answer) until ``save_file`` returns. A
reader takes a shared flock on the same lock, as vLLM's own ``load_hidden_states`` does, and then reads
a complete file. The file is safetensors: an 8-byte little-endian header length, a JSON header naming
each tensor's dtype, shape and byte range, then the bytes. It must hold exactly ``hidden_states``
``[tokens, layers, hidden]`` in the model dtype and ``token_ids`` int64 ``[tokens]``.

Every write the driver makes to the output volume goes through ``DISK`` (write, fsync, rename, replace),
the one seam where tests make the volume fill up (ENOSPC) at an exact point; ``out_of_space`` tells such
an error from any other.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import shutil
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

HIDDEN_STATES = "hidden_states"
TOKEN_IDS = "token_ids"
# What safetensors itself accepts as a header (100 MB); ours are a few hundred bytes.
MAX_HEADER_BYTES = 100_000_000
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}
FLOAT_DTYPES = ("F16", "BF16", "F32")


# The errors of a volume with no room left: the filesystem is full, or the writer's quota is used up.
OUT_OF_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
COPY_CHUNK = 1 << 20


def out_of_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in OUT_OF_SPACE_ERRNOS


class Disk:
    """The system calls that put bytes or names on the output volume. Production uses the os functions;
    tests replace one on the ``DISK`` instance to fail it (``monkeypatch.setattr(DISK, "rename", ...)``)."""

    write = staticmethod(os.write)
    fsync = staticmethod(os.fsync)
    rename = staticmethod(os.rename)
    replace = staticmethod(os.replace)


DISK = Disk()


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written: a short write is retried, so a full volume raises ENOSPC."""
    view = memoryview(data)
    while view:
        n = DISK.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]


def write_new(path: Path, chunks: Iterable[bytes]) -> None:
    """Create (or truncate) ``path`` with ``chunks``, fsync'd; the descriptor is always closed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for chunk in chunks:
            write_all(fd, chunk)
        DISK.fsync(fd)
    finally:
        os.close(fd)


def remove(path: str | Path) -> None:
    """Unlink ``path``; an absent one is fine."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def move_into_place(source: str, target: Path, tmp_suffix: str = ".tmp") -> None:
    """Atomic within one filesystem (rename). Should vLLM's staging folder sit on another filesystem, copy
    to a temporary name beside the target, flush, then rename: the target is never partial. When the copy
    fails (a full volume) the temporary file is removed at once, so the failure frees the space it took."""
    try:
        DISK.rename(source, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    tmp = target.with_name(target.name + tmp_suffix)
    try:
        with open(source, "rb") as src:
            write_new(tmp, iter(lambda: src.read(COPY_CHUNK), b""))
        DISK.rename(tmp, target)
    except BaseException:
        remove(tmp)
        raise
    os.unlink(source)


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the volume holding ``path``."""
    return shutil.disk_usage(path).free


class InvalidFile(Exception):
    """The file is not what was asked for. ``retryable``: a new request may well produce a good one
    (a partial or unreadable write); otherwise the same request would produce the same mismatch."""

    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


@dataclass(frozen=True)
class Tensor:
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class Expectation:
    """What one sample's file must look like."""

    layers: int
    dtype_bytes: int | None  # None: any float (``--dtype-bytes auto`` before the first file has said which)
    hidden_size: int | None = None
    tokens: int | None = None
    token_ids: Sequence[int] | None = None


@dataclass(frozen=True)
class FileFacts:
    tokens: int
    bytes: int
    sha256: str
    dtype: str
    hidden_size: int


def header_length(prefix: bytes, file_size: int) -> int:
    """The JSON header's length from the first 8 bytes, checked against the file's size."""
    if file_size < 8 or len(prefix) < 8:
        raise InvalidFile(f"truncated: {file_size} bytes, shorter than a safetensors header", retryable=True)
    (n,) = struct.unpack("<Q", prefix[:8])
    if n > MAX_HEADER_BYTES:
        raise InvalidFile(f"header length {n} is not plausible", retryable=True)
    if 8 + n > file_size:
        raise InvalidFile(f"truncated: {file_size} bytes, header alone needs {8 + n}", retryable=True)
    return n


def parse_header(header: bytes, data_size: int) -> dict[str, Tensor]:
    """The tensors of a safetensors header; their byte ranges must tile the data exactly."""
    try:
        doc = json.loads(header)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidFile(f"header is not JSON: {exc}", retryable=True) from exc
    if not isinstance(doc, dict):
        raise InvalidFile("header is not a JSON object", retryable=True)
    tensors: dict[str, Tensor] = {}
    for name, info in doc.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            ok = (
                isinstance(dtype, str)
                and isinstance(shape, list)
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
                and all(isinstance(o, int) and not isinstance(o, bool) for o in (begin, end))
            )
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise InvalidFile(f"header entry {name!r} is malformed", retryable=True)
        if dtype not in DTYPE_BYTES:
            raise InvalidFile(f"tensor {name!r} has unknown dtype {dtype}", retryable=False)
        if not 0 <= begin <= end:
            raise InvalidFile(f"tensor {name!r} has byte range [{begin}, {end})", retryable=True)
        if end - begin != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise InvalidFile(f"tensor {name!r}: {end - begin} bytes for shape {shape} of {dtype}", retryable=True)
        tensors[name] = Tensor(dtype, tuple(shape), begin, end)
    position = 0
    for t in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if t.begin != position:
            raise InvalidFile(f"tensor bytes leave a gap or overlap at offset {position}", retryable=True)
        position = t.end
    if position != data_size:
        what = "truncated" if position > data_size else "trailing bytes"
        raise InvalidFile(f"{what}: header describes {position} data bytes, file has {data_size}", retryable=True)
    return tensors


def check_tensors(tensors: dict[str, Tensor], expect: Expectation) -> tuple[int, str, int]:
    """Names, dtypes and shapes against the request: (tokens, hidden dtype, hidden size)."""
    names = sorted(tensors)
    if names != sorted((HIDDEN_STATES, TOKEN_IDS)):
        raise InvalidFile(f"tensors are {names}, expected {HIDDEN_STATES} and {TOKEN_IDS}", retryable=False)
    hs, ids = tensors[HIDDEN_STATES], tensors[TOKEN_IDS]
    if hs.dtype not in FLOAT_DTYPES:
        raise InvalidFile(f"{HIDDEN_STATES} is {hs.dtype}, expected a float ({', '.join(sorted(FLOAT_DTYPES))})",
                          retryable=False)  # fmt: skip
    if expect.dtype_bytes is not None and DTYPE_BYTES[hs.dtype] != expect.dtype_bytes:
        raise InvalidFile(
            f"{HIDDEN_STATES} is {hs.dtype}, expected a {expect.dtype_bytes}-byte float (--dtype-bytes)", retryable=False
        )
    if ids.dtype != "I64":
        raise InvalidFile(f"{TOKEN_IDS} is {ids.dtype}, expected I64", retryable=False)
    if len(hs.shape) != 3 or len(ids.shape) != 1:
        raise InvalidFile(f"shapes {list(hs.shape)} and {list(ids.shape)}, expected [tokens, layers, hidden] and [tokens]",
                          retryable=False)
    tokens, layers, hidden = hs.shape
    if ids.shape[0] != tokens:
        raise InvalidFile(f"{TOKEN_IDS} has {ids.shape[0]} tokens, {HIDDEN_STATES} {tokens}", retryable=False)
    if layers != expect.layers:
        raise InvalidFile(f"{layers} layers, expected {expect.layers}", retryable=False)
    if expect.hidden_size is not None and hidden != expect.hidden_size:
        raise InvalidFile(f"hidden size {hidden}, expected {expect.hidden_size}", retryable=False)
    if expect.tokens is not None and tokens != expect.tokens:
        raise InvalidFile(f"{tokens} tokens, the prompt has {expect.tokens}", retryable=False)
    if tokens == 0:
        raise InvalidFile("no tokens", retryable=False)
    return tokens, hs.dtype, hidden


def wait_for_lock(lock_path: str, deadline: float) -> int | None:
    """Open ``lock_path`` and take a shared flock on it; the fd holds the lock until closed.

    None when there is no lock file (a connector with use_synchronization_lock off): the caller then
    relies on the file's own consistency checks. Polls without blocking so a writer that never lets go
    ends in a bounded time instead of a thread stuck forever.
    """
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    pause = 0.002
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return fd
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
            if time.monotonic() >= deadline:
                raise InvalidFile("the connector still holds the write lock; gave up waiting", retryable=True)
            time.sleep(pause)
            pause = min(pause * 2, 0.025)
    except BaseException:
        os.close(fd)
        raise


def inspect_file(path: str, expect: Expectation, *, lock_timeout: float = 600.0) -> FileFacts:
    """Wait for the connector to finish ``path``, check it, hash it and flush it to disk.

    The shared lock is held while reading so the bytes hashed are the bytes the writer finished. The
    file is fsynced before anyone records it: a manifest line must never outlive the bytes it vouches
    for. Raises InvalidFile.
    """
    lock_fd = wait_for_lock(path + ".lock", time.monotonic() + lock_timeout)
    try:
        try:
            f = open(path, "rb")
        except FileNotFoundError as exc:
            raise InvalidFile("the connector wrote no file", retryable=True) from exc
        with f:
            size = os.fstat(f.fileno()).st_size
            n = header_length(f.read(8), size)
            tensors = parse_header(f.read(n), size - 8 - n)
            tokens, dtype, hidden = check_tensors(tensors, expect)
            f.seek(0)
            digest = hashlib.file_digest(f, "sha256").hexdigest()  # type: ignore[arg-type]
            if expect.token_ids is not None:
                ids = tensors[TOKEN_IDS]
                raw = os.pread(f.fileno(), ids.end - ids.begin, 8 + n + ids.begin)
                stored = struct.unpack(f"<{tokens}q", raw) if len(raw) == ids.end - ids.begin else ()
                if list(stored) != list(expect.token_ids):
                    raise InvalidFile(f"{TOKEN_IDS} differ from the prompt's tokens", retryable=False)
            DISK.fsync(f.fileno())
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    return FileFacts(tokens=tokens, bytes=size, sha256=digest, dtype=dtype, hidden_size=hidden)


def discard(path: str) -> None:
    """Remove a staging file and its lock; absent ones are fine."""
    for p in (path, path + ".lock"):
        remove(p)
