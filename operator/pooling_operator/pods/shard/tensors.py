"""safetensors headers read and checked without torch: an 8-byte little-endian header length, a JSON header
naming each tensor's dtype, shape and byte range, then the bytes (the format both drivers' files use)."""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass

# What safetensors itself accepts as a header (100 MB); ours are a few hundred bytes.
MAX_HEADER_BYTES = 100_000_000


DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}


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
