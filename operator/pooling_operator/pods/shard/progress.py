"""Progress of one shard, published for the operator to aggregate into the HiddenStateJob's status.

The payload is compact JSON under data key ``shard-<I>`` of the job's progress ConfigMap:
``{"state", "done", "failed", "bytes", "total", "updated", "tokens", "hiddenSize", "valueBytes"}`` with state one of running, succeeded,
failed, budget_exceeded, dataset_unreadable; key, fields and states are api/shard_contract's. A
PoolingJob's records add ``lines`` (the dataset's non-blank lines, api/pooling_job_contract.PROGRESS_LINES)
and may say ``checked`` (its preflight).
Writes happen at most every ``interval`` seconds while running and once at the end. A failed write is
logged and never stops the shard: progress is a view, the manifest is the record.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from pooling_operator.api.clock import rfc3339
from pooling_operator.api.pooling_job_contract import PROGRESS_LINES
from pooling_operator.api.shard_contract import (
    PROGRESS_BYTES,
    PROGRESS_DONE,
    PROGRESS_FAILED,
    PROGRESS_HIDDEN_SIZE,
    PROGRESS_STATE,
    PROGRESS_TOKENS,
    PROGRESS_TOTAL,
    PROGRESS_UPDATED,
    PROGRESS_VALUE_BYTES,
    RUNNING,
    progress_key,
)

log = logging.getLogger(__name__)

# (key, value) -> written. The production sink is k8s.progress.ProgressConfigMap.write.
Sink = Callable[[str, str], Awaitable[None]]


@dataclass
class Counts:
    total: int = 0
    done: int = 0
    failed: int = 0
    bytes: int = 0
    tokens: int = 0  # prompt tokens of the done samples (what the storage estimate projects from)
    hidden_size: int = 0  # 0 until known (the flag, or the first file)
    value_bytes: int = 0
    lines: int | None = None  # the dataset's non-blank lines (a PoolingJob's records only)


def payload(state: str, counts: Counts, now: datetime | None = None) -> str:
    updated = rfc3339(now)
    doc = {PROGRESS_STATE: state, PROGRESS_DONE: counts.done, PROGRESS_FAILED: counts.failed,
           PROGRESS_BYTES: counts.bytes, PROGRESS_TOTAL: counts.total, PROGRESS_UPDATED: updated,
           PROGRESS_TOKENS: counts.tokens, PROGRESS_HIDDEN_SIZE: counts.hidden_size,
           PROGRESS_VALUE_BYTES: counts.value_bytes}
    if counts.lines is not None:
        doc[PROGRESS_LINES] = counts.lines
    return json.dumps(doc, separators=(",", ":"))


class Reporter:
    """Throttled progress writes to a sink (None: reporting disabled)."""

    def __init__(self, shard: int, sink: Sink | None, counts: Counts, *, interval: float = 5.0,
                 write_timeout: float = 15.0) -> None:
        self.key = progress_key(shard)
        self._sink = sink
        self._counts = counts
        self._interval = interval
        self._write_timeout = write_timeout
        self._last = -float("inf")
        self._inflight: asyncio.Task[None] | None = None

    async def _write(self, state: str) -> None:
        if self._sink is None:
            return
        try:
            await asyncio.wait_for(self._sink(self.key, payload(state, self._counts)), self._write_timeout)
        except Exception as exc:  # never let reporting stop the shard
            log.warning("Could not report progress %s of shard %s: %s: %s", state, self.key, type(exc).__name__, exc)

    def tick(self) -> None:
        """Report ``running`` if the interval has passed and no write is under way; never waits."""
        if self._sink is None:
            return
        now = time.monotonic()
        if now - self._last < self._interval or (self._inflight and not self._inflight.done()):
            return
        self._last = now
        self._inflight = asyncio.get_running_loop().create_task(self._write(RUNNING))

    async def final(self, state: str) -> None:
        """The last word: waits for any write under way so the final one lands after it."""
        if self._inflight is not None:
            await asyncio.wait([self._inflight])
        await self._write(state)
