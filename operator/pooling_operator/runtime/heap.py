"""The cyclic garbage collector while the caches fill, and the filled stores kept out of its way.

The stores hold every watched object as parsed JSON: dicts and lists of strings and numbers, which refcounting
frees and which never form a cycle. CPython's cyclic collector still tracks each of those containers and walks
all of them in every full collection, and a full collection runs each time the tracked objects have grown by a
quarter: while a restart lists 10,000 services' objects (each object dozens of containers), most of what the
profile put under the parse was those walks (bench/README.md, "The restart at 10,000 and the collector";
`bench/reconcile/parse_cost.py`).

So while the informers' first lists fill the stores the collector is held (`hold`); once every kind is listed
(`settle`) one full collection frees whatever cycles the start made, and `gc.freeze` moves every object alive
then, the stores' and the process's own long-lived ones, to the permanent generation that collections skip.
Refcounting frees a frozen object as any other when the store drops it; only a frozen object that later becomes
part of a cycle would stay (parsed JSON never does). Objects stored after that are collected as usual.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)


class Heap:
    """Holds the collector from `hold` to `settle` (or `release`, when the caches never filled)."""

    def __init__(self) -> None:
        self._held = False

    def hold(self) -> None:
        if gc.isenabled():
            gc.disable()
            self._held = True

    def settle(self) -> None:
        if not self._held:
            return
        started = time.monotonic()
        freed = gc.collect()
        gc.freeze()
        self.release()
        log.info("The collector resumes: %d objects frozen out of its walks (%d freed first, %.2fs)",
                 gc.get_freeze_count(), freed, time.monotonic() - started)  # fmt: skip

    def release(self) -> None:
        if self._held:
            self._held = False
            gc.enable()
