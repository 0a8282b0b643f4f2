"""A shard's share of the storage budget: estimate each file before asking for it, never exceed the share.

Bytes count from the manifest (what is already on disk) plus reservations for requests in flight. A
request whose estimate does not fit waits while others are in flight (their files may come in smaller
than reserved); when nothing is in flight and it still does not fit, the budget is exhausted and the
shard stops taking new samples.
"""

from __future__ import annotations

import asyncio

from pooling_operator.api.quantity import binary_quantity

# The safetensors header of a hidden-states file is about 200 bytes (two tensors, padded to 8); this
# bounds it with room for a __metadata__ entry.
HEADER_ALLOWANCE = 1024
TOKEN_ID_BYTES = 8


def estimate_file_bytes(tokens: int, layers: int, hidden_size: int, dtype_bytes: int) -> int:
    """An upper bound of one sample's file size: hidden states, int64 token ids and the header."""
    return tokens * layers * hidden_size * dtype_bytes + tokens * TOKEN_ID_BYTES + HEADER_ALLOWANCE


def tokens_upper_bound(prompt: str) -> int:
    """A prompt's token count can not exceed its UTF-8 bytes (byte-level BPE and SentencePiece with byte
    fallback spend at least one byte per token) plus a few special tokens. Used only when the server
    cannot count for us."""
    return len(prompt.encode("utf-8")) + 8


class Budget:
    """Reservations against a byte limit (None: unlimited)."""

    def __init__(self, limit: int | None, used: int) -> None:
        self.limit = limit
        self.used = used
        self.reserved = 0
        self.exhausted = False
        self._changed = asyncio.Condition()

    def fits(self, estimate: int) -> bool:
        return self.limit is None or self.used + self.reserved + estimate <= self.limit

    async def reserve(self, estimate: int) -> bool:
        """Reserve ``estimate`` bytes; False (and exhausted from then on) when it can never fit."""
        async with self._changed:
            while not self.exhausted:
                if self.fits(estimate):
                    self.reserved += estimate
                    return True
                if self.reserved == 0:
                    self.exhausted = True
                    self._changed.notify_all()
                    break
                await self._changed.wait()
            return False

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` bytes now, or never: False when they do not fit, and exhausted from then on (no new
        work starts; work already under way may still reserve what fits). For sizes known exactly."""
        if self.fits(size):
            self.reserved += size
            return True
        self.exhausted = True
        return False

    async def settle(self, reserved: int, written: int) -> None:
        """Turn a reservation into ``written`` bytes on disk (0 when the sample produced no file)."""
        async with self._changed:
            self.reserved -= reserved
            self.used += written
            self._changed.notify_all()


def human_bytes(n: int) -> str:
    """For logs: 512B, 1.5KiB, 25.5MiB (api/quantity's binary quantity, in bytes)."""
    return f"{binary_quantity(n)}B"
