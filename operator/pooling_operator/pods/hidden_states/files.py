"""The files the hidden-states connector writes: wait for them, check them without torch, hash them.

vLLM's ExampleHiddenStatesConnector answers the request with the file's path before the file exists: it
holds an exclusive flock on ``<file>.lock`` (created before the answer) until ``save_file`` returns. A
reader takes a shared flock on the same lock, as vLLM's own ``load_hidden_states`` does, and then reads
a complete file. The file is safetensors: an 8-byte little-endian header length, a JSON header naming
each tensor's dtype, shape and byte range, then the bytes. It must hold exactly ``hidden_states``
``[tokens, layers, hidden]`` in the model dtype and ``token_ids`` int64 ``[tokens]``.

The file-system primitives are pods/shard/files.py, the safetensors header pods/shard/tensors.py.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pooling_operator.pods.shard.files import DISK, remove
from pooling_operator.pods.shard.tensors import DTYPE_BYTES, InvalidFile, Tensor, header_length, parse_header

HIDDEN_STATES = "hidden_states"


TOKEN_IDS = "token_ids"


FLOAT_DTYPES = ("F16", "BF16", "F32")


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
            digest = hashlib.file_digest(f, "sha256").hexdigest()
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
