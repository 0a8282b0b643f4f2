"""One breaker for the API server being away, shared by every worker.

Each resource backs off on its own (1, 2, 4 ... 60 s), so with the API server down the operator's request
rate grew with the number of resources (bench/chaos: 48 requests a second for 100 services). When a request
fails because the API server cannot be reached (no connection, 502/503/504), the breaker opens: workers
send nothing and put their keys back until it is time for one probe; the probe's success closes it, its
failure doubles the pause (1 s up to `MAX_PAUSE_SECONDS`). Requests already in flight when it opened do not
count again. Pure: the clock is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

UNREACHABLE = frozenset({0, 502, 503, 504})  # statuses that say the API server, not the object, is the problem
MAX_PAUSE_SECONDS = 8.0  # also the longest the operator waits to notice that the API server is back
WAIT_FOR_PROBE_SECONDS = 1.0  # a key that finds a probe under way looks again after this


@dataclass
class Breaker:
    pause: float = 0.0  # 0: closed
    until: float = 0.0
    probing: bool = False

    def wait(self, now: float) -> float:
        """Seconds to hold back before sending (0: go). When open and due, the caller becomes the one probe."""
        if self.pause == 0.0:
            return 0.0
        if self.probing:
            return WAIT_FOR_PROBE_SECONDS
        if now < self.until:
            return self.until - now
        self.probing = True
        return 0.0

    def failed(self, status: int, now: float) -> None:
        """A request failed with `status`: 'unreachable' opens the breaker, or doubles its pause when it was the
        probe that failed; any other answer came from the API server, so a probe that got one closes it."""
        if status not in UNREACHABLE:
            if self.probing:
                self.succeeded()
            return
        if self.open and not self.probing:
            return  # sent before the breaker opened: that outage is counted already
        self.pause = min(MAX_PAUSE_SECONDS, max(1.0, self.pause * 2))
        self.until = now + self.pause
        self.probing = False

    def succeeded(self) -> None:
        self.pause, self.until, self.probing = 0.0, 0.0, False

    @property
    def open(self) -> bool:
        return self.pause > 0.0
