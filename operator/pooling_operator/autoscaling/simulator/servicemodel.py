"""A model of one vLLM pooling server under load, in simulated time: pure, deterministic, no clock.

Used by the what-if simulator (`simulate.py`) and by the tests' metric exporters (a stand-in for vLLM's
`/metrics`), so both see the same server. Fitted on real vLLM 0.32 serving all-MiniLM-L6-v2 on a 2-vCPU box
(shared reference `vllm-captures/load-curve.md`, copied under `tests/data/vllm-captures/`); every number is a
parameter, and `tests/test_servicemodel.py` holds the model to the captures.

The engine runs one batch at a time. At each step boundary the scheduler admits, first come first served,
every request that has reached it, up to `max_num_seqs` requests and `max_num_batched_tokens` tokens; all
requests of the batch finish together at the end of the step, which lasts
`step_base_s + step_per_token_s × tokens` on average (with some jitter). A request arriving mid-step waits for the step to end. The
`vllm:num_requests_waiting` gauge is the backlog the scheduler saw at the last boundary and could not admit
(requests that arrived during the step are invisible to it), so it reads 0 below saturation and
under-counts above it.

Under sustained overload the open connections take CPU from the engine on the measured box: while more than
`overload_in_flight` requests are in the server when a step starts, and new ones keep arriving, the step
lasts `overload_step_factor` times longer. That is why the served rate past saturation (166-191 req/s) is
below both the closed-loop peak (205-213) and the drain rate once arrivals stop (220-250, §4).

Where the model is optimistic: at 90 % of saturation with Poisson arrivals the real server answered at p50
~210 ms / p99 ~0.65 s (its API server queues too); the model's engine-only queue gives far less. Below ~80 %
and past saturation it follows the captures.
"""

from __future__ import annotations

import bisect
import collections
import random
from dataclasses import dataclass, field
from typing import NamedTuple

from pooling_operator.vllm.metrics import ITERATION_TOKEN_BUCKETS, LATENCY_BUCKETS


@dataclass(frozen=True)
class ServiceParams:
    """The service model's constants (defaults: real vLLM 0.32, MiniLM, one CPU core).

    - `step_base_s`, `step_per_token_s`: the least-squares fit of the step time over the 12 closed-loop
      levels with c ≥ 2 (load-curve.md §5.2, `service_model_fit` in load-curve.json).
    - `max_num_seqs`, `max_num_batched_tokens`: what the server resolved (load-curve.md, Setup).
    - `server_overhead_s`: inside the server, outside the step (tokenising, ZMQ, output): server e2e mean
      14.6 ms − step 12.1 ms at c = 1 (§5.3). Part of the e2e histogram.
    - `http_overhead_s`: HTTP/JSON around the server: client 19.1 ms − server e2e 14.6 ms at c = 1 (§5.3).
      Seen by clients, not by the e2e histogram.
    - `step_jitter_s`, `step_jitter_per_request_s`: a step lasts a gamma-distributed time whose mean is the
      fit and whose standard deviation is `step_jitter_s + step_jitter_per_request_s × requests`; calibrated
      on the closed-loop client p99s (the fit gives only means; without jitter the model's p99 sits on its
      p50). Zero both for deterministic steps.
    - `overload_step_factor`: calibrated on open-loop.json (not part of the fit): a full batch of 16-token
      requests serves 232 req/s; the six overload runs (110 % and 150 %) served 183 req/s on average while
      arrivals lasted, and 232 / 183 = 1.27. With it the waiting gauge grows as measured at 110 % and 150 %.
    - `overload_in_flight`: steps slow down only with more requests than this in the server at a step's
      start. 64 is the largest closed-loop level, which ran at the fitted speed (load-curve.md §1-2); the
      open-loop runs tipped into overload at hundreds in flight (§4), not at 90 % load (~100 by the client).
    - `startup_s`: model loading, no metrics and no capacity: 42-53 s with a compile cache, 63-70 s without
      (§5.7).
    - `api_s`: the API server's own work per request (HTTP, JSON, tokenising, the response's encoding), done one
      request at a time in its event loop before the engine sees the request: a queue of its own that fills under
      open-loop arrivals long before the engine's does. 0: no such stage (the closed-loop fit's overheads hold it).
    - `api_contention`: seconds a step lasts longer per second of the API server's work that runs during it (the
      two processes share the cores): 0 on a machine with a core to spare for each.
    """

    step_base_s: float = 0.0077
    step_per_token_s: float = 0.000266
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    server_overhead_s: float = 0.0025
    http_overhead_s: float = 0.0045
    step_jitter_s: float = 0.002
    step_jitter_per_request_s: float = 0.0007
    overload_step_factor: float = 1.27
    overload_in_flight: int = 64
    startup_s: float = 60.0
    api_s: float = 0.0
    api_contention: float = 0.0

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be at least 1")
        if min(self.step_base_s, self.step_per_token_s, self.server_overhead_s, self.http_overhead_s,
               self.step_jitter_s, self.step_jitter_per_request_s, self.startup_s, self.overload_in_flight,
               self.api_s, self.api_contention) < 0:
            raise ValueError("times and counts must not be negative")
        if self.step_base_s + self.step_per_token_s <= 0 or self.overload_step_factor < 1:
            raise ValueError("a step must take time (step_base_s + step_per_token_s > 0, overload_step_factor >= 1)")

    def step_seconds(self, tokens: int, overloaded: bool = False) -> float:
        step = self.step_base_s + self.step_per_token_s * tokens
        return step * self.overload_step_factor if overloaded else step

    def batch_size(self, mean_tokens: float) -> int:
        """Requests in a full batch of requests of this size."""
        return max(1, min(self.max_num_seqs, int(self.max_num_batched_tokens // max(1.0, mean_tokens))))

    def capacity_rps(self, mean_tokens: float) -> float:
        """Requests per second one replica serves at saturation with full batches (no overload penalty)."""
        batch = self.batch_size(mean_tokens)
        return batch / self.step_seconds(round(batch * max(1.0, mean_tokens)))


@dataclass
class Histogram:
    """Cumulative Prometheus histogram state: counts per upper bound (the last is +Inf), sum, count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    sum: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # le: the first bound >= value
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[int]:
        out, running = [], 0
        for c in self.counts:
            running += c
            out.append(running)
        return out


class Completion(NamedTuple):
    arrival: float  # when the request reached the server
    finish: float  # when the server answered
    tokens: int
    origin: float | None = None  # when it reached the front end, if it waited there before `arrival`
    scheduled: float | None = None  # when its step started (vLLM's request queue time ends here)
    computed: float | None = None  # when its step ended (vLLM's request inference time ends here)

    @property
    def latency(self) -> float:
        """What the server's e2e histogram records."""
        return self.finish - self.arrival

    @property
    def total_latency(self) -> float:
        """Including any wait at the front end for a ready server."""
        return self.finish - (self.arrival if self.origin is None else self.origin)


@dataclass
class Counters:
    """What one server's /metrics says, as numbers."""

    success: int = 0
    prompt_tokens: int = 0
    waiting: int = 0
    e2e: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    iteration_tokens: Histogram = field(default_factory=lambda: Histogram(tuple(float(b) for b in ITERATION_TOKEN_BUCKETS)))


def _arrival(item: tuple[float, int, float | None, float]) -> float:
    return item[0]


class Replica:
    """One vLLM server from the moment its model is loaded. Feed arrivals in time order with `submit`, then
    `advance` to a time to run every step that ends by then. Arrivals may be submitted ahead of `advance`:
    a step sees only the requests that arrived by its start, so the result does not depend on how submits
    and advances interleave, as long as nothing is submitted for a time already advanced past."""

    def __init__(self, params: ServiceParams, ready_at: float = 0.0, seed: int = 0) -> None:
        self.params = params
        self._rng = random.Random(seed)  # step jitter
        self.ready_at = ready_at
        self.counters = Counters()
        # submitted, not yet in a batch, from _head: (when the engine can see it, tokens, origin, arrival)
        self._queue: list[tuple[float, int, float | None, float]] = []
        self._head = 0
        self._batch: list[tuple[float, int, float | None, float]] = []
        self._api_free = ready_at  # when the API server is next free (params.api_s)
        self._api_work: collections.deque[tuple[float, float]] = collections.deque()  # its work, for contention
        self._step_end: float | None = None
        self._step_tokens = 0
        self._waiting_after = 0
        self._last_start: float | None = None
        self._clock = ready_at
        # How many times longer a step takes than alone: set from outside for time-sliced co-tenants
        # (cotenants.py: the device's busy tenants share its time), read at each step's start.
        self.slowdown = 1.0

    @property
    def in_flight(self) -> int:
        """Requests inside the server: queued and in the running batch."""
        return len(self._queue) - self._head + len(self._batch)

    def submit(self, t: float, tokens: int, origin: float | None = None) -> None:
        """A request reaching the server at t (not before it is ready); `origin` is when it reached the front
        end if it waited there. With `api_s` the API server works on it first, one request at a time."""
        at = max(t, self.ready_at)
        seen = at
        p = self.params
        if p.api_s > 0:
            begin = max(at, self._api_free)
            seen = self._api_free = begin + p.api_s
            if p.api_contention > 0:
                self._api_work.append((begin, seen))
        self._queue.append((seen, max(1, int(tokens)), origin, at))

    def advance(self, t: float) -> list[Completion]:
        """Run the engine up to time t; returns the requests answered in (previous t, t]."""
        done: list[Completion] = []
        while True:
            if self._step_end is not None:
                if self._step_end > t:
                    break
                done += self._finish_step()
                continue
            start = max(self._clock, self._queue[self._head][0]) if self._head < len(self._queue) else None
            if start is None or start > t:
                break
            self._start_step(start)
        self._clock = max(self._clock, t)
        return done

    def _start_step(self, start: float) -> None:
        p = self.params
        queue, head = self._queue, self._head
        if queue[-1][0] <= start:  # the usual case: everything submitted has arrived
            visible_end = len(queue)
        else:
            visible_end = bisect.bisect_right(queue, start, lo=head, key=_arrival)
        arrived_since_last = self._last_start is None or queue[visible_end - 1][0] > self._last_start
        overloaded = visible_end - head > p.overload_in_flight and arrived_since_last
        tokens = 0
        end = head
        limit = min(visible_end, head + p.max_num_seqs)
        while end < limit:
            n = queue[end][1]
            if end > head and tokens + n > p.max_num_batched_tokens:
                break
            tokens += n
            end += 1
        self._batch = queue[head:end]
        self._head = end
        self._waiting_after = visible_end - end
        step = p.step_seconds(tokens, overloaded=overloaded)
        sd = p.step_jitter_s + p.step_jitter_per_request_s * (end - head)
        if sd > 0:
            shape = (step / sd) ** 2
            step = self._rng.gammavariate(shape, step / shape)
        if p.api_contention > 0:  # the API server's work during the step takes the engine's CPU
            step += p.api_contention * self._api_overlap(start, start + step)
        self._step_end = start + step * self.slowdown
        self._step_tokens = tokens
        self._last_start = start
        if end > 4096 and end * 2 > len(queue):  # drop the admitted prefix now and then
            del queue[:end]
            self._head = 0

    def _api_overlap(self, a: float, b: float) -> float:
        """Seconds of the API server's work within [a, b] (steps start in time order: older work is dropped)."""
        work = self._api_work
        while work and work[0][1] <= a:
            work.popleft()
        total = 0.0
        for begin, end in work:
            if begin >= b:
                break
            total += min(end, b) - max(begin, a)
        return total

    def _finish_step(self) -> list[Completion]:
        assert self._step_end is not None
        end = self._step_end
        finish = end + self.params.server_overhead_s
        batch = self._batch
        c = self.counters
        e2e, counts, bounds = c.e2e, c.e2e.counts, c.e2e.bounds
        latencies = 0.0
        for _, _, _, arrival in batch:  # Histogram.observe, inlined: this runs once per request
            counts[bisect.bisect_left(bounds, finish - arrival)] += 1
            latencies += finish - arrival
        e2e.sum += latencies
        e2e.count += len(batch)
        c.success += len(batch)
        c.prompt_tokens += self._step_tokens
        c.iteration_tokens.observe(self._step_tokens)
        c.waiting = self._waiting_after
        self._batch = []
        self._step_end = None
        self._clock = end
        start = self._last_start
        return [Completion(arrival, finish, n, origin, start, end) for _, n, origin, arrival in batch]
