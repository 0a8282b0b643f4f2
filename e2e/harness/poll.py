"""Polling: the harness's one wait loop. ``wait_for`` polls a check until it holds or a deadline passes,
with a growing interval; a check raises ``Fatal`` when waiting longer cannot help, and a missed deadline
raises ``Timeout``. Everything in e2e/ that waits for a cluster, a process or a file uses it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Timeout(AssertionError):
    """A condition polled by ``wait_for`` did not hold before its deadline."""


class Fatal(RuntimeError):
    """Raised by a ``wait_for`` check when waiting longer cannot help; it propagates at once."""


def wait_for(
    check: Callable[[], T],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    max_interval: float = 1.0,
    alive: Callable[[], None] | None = None,
) -> T:
    """Poll ``check`` until it returns a truthy value (returned) or ``timeout`` seconds pass.

    Exceptions raised by ``check`` count as "not yet" and the last one is reported on timeout.
    ``alive`` is called each round and should raise when waiting is pointless (a process died).
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if alive:
            alive()
        try:
            result = check()
            if result:
                return result
            last = result
        except Fatal:
            raise
        except Exception as exc:  # any failure means "not yet"
            last = exc
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)  # poll period, not synchronisation: the deadline decides
        interval = min(interval * 1.5, max_interval)
