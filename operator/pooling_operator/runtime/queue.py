"""A keyed work queue, as client-go's: a key waits at most once, is never worked on by two workers at once, and a
key added while it is being worked on runs once more afterwards. Delayed adds (retries with backoff, checks due
later) sit in a heap until due. Pure asyncio: no I/O, and a cost per key only while the key is queued.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._ready: deque[K] = deque()  # FIFO of keys waiting
        self._queued: set[K] = set()  # keys in _ready
        self._active: set[K] = set()  # keys a worker holds
        self._again: set[K] = set()  # keys added while active: re-queued when done
        self._later: list[tuple[float, int, K]] = []  # (due, tiebreak, key)
        self._due: dict[K, float] = {}  # earliest due time per delayed key
        self._seq = itertools.count()
        self._changed = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        return len(self._queued) + len(self._active) + len(self._again)

    @property
    def delayed(self) -> int:
        return len(self._due)

    def is_delayed(self, key: K) -> bool:
        return key in self._due

    def add(self, key: K, *, first: bool = False) -> None:
        """Queue the key (at the front with `first`: a resource never reconciled yet should not wait behind
        the re-reconciles its neighbours' own writes cause)."""
        if key in self._active:
            self._again.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            if first:
                self._ready.appendleft(key)
            else:
                self._ready.append(key)
            self._idle.clear()
            self._changed.set()

    def add_after(self, key: K, delay: float) -> None:
        """Add the key once `delay` seconds have passed (the earliest of several requests wins)."""
        if delay <= 0:
            self.add(key)
            return
        due = self._clock() + delay
        if self._due.get(key, float("inf")) <= due:
            return
        self._due[key] = due
        heapq.heappush(self._later, (due, next(self._seq), key))
        self._changed.set()

    def discard(self, key: K) -> None:
        """The key's object is gone: drop its delayed adds (a queued add runs and finds nothing)."""
        self._due.pop(key, None)
        self._again.discard(key)

    def _promote(self) -> float | None:
        """Move due keys to the ready list; returns seconds until the next one is due."""
        now = self._clock()
        while self._later:
            due, _, key = self._later[0]
            if self._due.get(key) != due:
                heapq.heappop(self._later)  # superseded or discarded
                continue
            if due > now:
                return due - now
            heapq.heappop(self._later)
            del self._due[key]
            self.add(key)
        return None

    async def get(self) -> K:
        """The next key to work on; the caller must call `done(key)` after."""
        while True:
            wait = self._promote()
            if self._ready:
                key = self._ready.popleft()
                self._queued.discard(key)
                self._active.add(key)
                return key
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), wait)
            except TimeoutError:
                pass

    def done(self, key: K) -> None:
        self._active.discard(key)
        if key in self._again:
            self._again.discard(key)
            self.add(key)
        if not self._ready and not self._active:
            self._idle.set()

    async def join(self) -> None:
        """Wait until no key is queued or being worked on (delayed keys do not count)."""
        await self._idle.wait()

    async def serve(self, worker: Callable[[K], Awaitable[None]], concurrency: int,
                    after: Callable[[], None] | None = None) -> None:
        """Run `concurrency` workers forever; a worker's exception is the worker's to handle. `after` runs once
        each key is done (the runtime's queue-depth gauge: without it the last key stayed counted once idle)."""

        async def loop() -> None:
            while True:
                key = await self.get()
                try:
                    await worker(key)
                finally:
                    self.done(key)
                    if after is not None:
                        after()

        await asyncio.gather(*(loop() for _ in range(concurrency)))
