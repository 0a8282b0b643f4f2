"""`pooling-operator simulate`: replay a request trace through the service model and an autoscaling policy, in
simulated time. Pure: values in, values out (the CLI in simulate_cli.py reads the files and prints).

The world every policy sees alike:
- Requests arrive as the trace's Poisson process (`trace.arrivals`; the same arrivals for every policy of one
  seed) and are spread uniformly at random over the ready replicas. With none ready they wait at the front end
  until one is, and that wait counts in their latency.
- A replica added at t loads its model until t + `ServiceParams.startup_s`: no capacity and no metrics until
  then. A removed replica takes no new requests and finishes what it holds (it still uses its GPUs and is
  still scraped until then). Scale-down removes loading replicas first, then the most recently ready ones, as
  a ReplicaSet does.
- Prometheus scrapes every ready replica every `scrape_interval` seconds (each at its own phase) and answers
  the service's queries as `promql.Prometheus` describes.
- Every `period` seconds the policy gets the time, the replicas set and ready, and the queries' answers, and
  sets the replica count. The `operator` policy is the operator's own `decide.decide`, fed through the same
  conversion as the operator's Prometheus reader, with the namespace GPU budget when the policy sets one.
- A run starts in a steady state: `simulate` starts with the fewest replicas that meet the target at the first
  row's rate (unless told otherwise), ready, and every autoscaler as if it had just recommended them.

Per policy the result holds: per minute, the p99 of the latency of the requests completed in it (a minute is
missed when that exceeds the target, or when requests have waited at the front end longer than the target at
its end), replica-minutes (replicas set, loading ones included), GPU-minutes (pods that hold GPUs: loading and
draining ones included) and a timeline with one entry per period and one at every change of replicas set or
ready, each with the p99 of the requests completed since the previous entry.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pooling_operator.api.policy import AutoscalingPolicySpec, AutoscalingTargets
from pooling_operator.api.resources import Service
from pooling_operator.api.schema import duration_seconds
from pooling_operator.autoscaling.decide import PERIOD_SECONDS, Budget, Observed, State, decide, signals_from
from pooling_operator.autoscaling.simulator.baselines import Oracle, hpa_queue, keda
from pooling_operator.autoscaling.simulator.promql import Prometheus
from pooling_operator.autoscaling.simulator.routing import Routing, pick
from pooling_operator.autoscaling.simulator.servicemodel import Completion, Replica, ServiceParams
from pooling_operator.autoscaling.simulator.trace import InputError, Trace, arrivals
from pooling_operator.autoscaling.targets import resolve_targets
from pooling_operator.autoscaling.zero import Wake, decide_or_zero
from pooling_operator.autoscaling.zero_state import ZeroState
from pooling_operator.builders.services import scaled_object
from pooling_operator.vllm.memory import gpus_held
from pooling_operator.vllm.metrics import LATENCY_BUCKETS, Queries, service_queries

POLICIES = ("operator", "hpa-queue", "keda", "oracle")
WAKE = "wake"  # the value a service's wake query reads: the front's requests (held or in flight)
DEFAULT_SCRAPE_SECONDS = 15.0



class Policy(Protocol):
    name: str
    period: float

    def start(self, replicas: int) -> None:
        """The run starts at t = 0 with this many replicas ready, in a steady state: an autoscaler that keeps
        a history acts as if it had just recommended them (so its scale-down window does not start empty)."""

    def replicas(self, now: float, current: int, ready: int, values: Mapping[str, float | None]) -> int: ...


@dataclass(frozen=True)
class Setup:
    """Everything about the service a run needs, resolved."""

    params: ServiceParams
    targets: AutoscalingTargets
    queries: Queries
    gpus_per_replica: float = 1.0  # vllm.memory.gpus_held
    scrape_interval: float = DEFAULT_SCRAPE_SECONDS
    seed: int = 0
    initial_replicas: int | None = None  # ready at t = 0; `run` defaults to minReplicas (at least 1)
    routing: Routing = "even"  # how arrivals reach ready replicas (ROUTINGS)
    zero: bool = False  # minReplicas 0 with a wake query: the operator may go to zero (autoscaling/zero.py)
    idle_seconds: int | None = None  # scaleToZero.idleSeconds

    @property
    def p99_target(self) -> float:
        assert self.targets.p99_seconds is not None
        return self.targets.p99_seconds

    @property
    def budget_replicas(self) -> int | None:
        """The replicas the namespace's GPU budget allows this service (alone in its namespace)."""
        budget = self.budget(0)
        return None if budget is None else budget.replicas(0)

    def budget(self, current: int) -> Budget | None:
        """The namespace's GPU budget with this service's `current` replicas its only holder, as the operator's loop
        builds it for a service alone in its namespace."""
        limit = self.targets.max_gpus_per_namespace
        if limit is None or self.gpus_per_replica <= 0:
            return None
        return Budget(limit, current * self.gpus_per_replica, self.gpus_per_replica)

    @property
    def max_replicas(self) -> int:
        budget = self.budget_replicas
        return self.targets.effective_max if budget is None else min(self.targets.effective_max, budget)


class Operator:
    """The operator's autoscaler: `decide.decide` on the signals its Prometheus reader would build."""

    name = "operator"
    period = float(PERIOD_SECONDS)

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.named = setup.queries.named()
        self.state = State()
        self.zero = ZeroState()

    def start(self, replicas: int) -> None:
        self.state = State(recommendations=((0.0, replicas),))

    def replicas(self, now: float, current: int, ready: int, values: Mapping[str, float | None]) -> int:
        s = self.setup
        # The start-up the operator learns from the pods (status.startup), here the model's own.
        observed = Observed(replicas=current, ready=ready, startup_seconds=s.params.startup_s)
        signals = signals_from({k: v for k, v in values.items() if k != WAKE}, self.named)
        if s.zero:  # the front's requests, held or in flight, are the wake query's value
            d = decide_or_zero(now, f"{now:.0f}s", signals, observed, s.targets, self.state, self.zero,
                               Wake(values.get(WAKE)), s.idle_seconds, s.budget(current))  # fmt: skip
            assert d.zero is not None
            self.zero = d.zero.state
        else:
            d = decide(now, signals, observed, s.targets, self.state, budget=s.budget(current))
        self.state = d.state
        return d.desired


@dataclass(frozen=True)
class Entry:
    t: float
    replicas: int
    ready: int
    p99: float | None


@dataclass(frozen=True)
class Minute:
    minute: int
    completed: int
    p99: float | None
    missed: bool


@dataclass(frozen=True)
class Result:
    policy: str
    minutes: tuple[Minute, ...]
    timeline: tuple[Entry, ...]
    replica_minutes: float
    gpu_minutes: float
    max_replicas: int
    completed: int

    @property
    def slo_minutes_missed(self) -> int:
        return sum(m.missed for m in self.minutes)


@dataclass
class _Pod:
    id: int
    replica: Replica
    added_at: float
    next_scrape: float
    removed_at: float | None = None
    gone_at: float | None = None
    last_finish: float = 0.0

    def ready(self, t: float) -> bool:
        return self.replica.ready_at <= t and self.removed_at is None


@dataclass
class _Record:
    """Latencies by minute of completion and since the last timeline entry."""

    target: float
    by_minute: dict[int, list[float]] = field(default_factory=dict)
    since_entry: list[float] = field(default_factory=list)
    completed: int = 0

    def add(self, done: Completion) -> None:
        latency = done.total_latency
        self.by_minute.setdefault(int(done.finish // 60), []).append(latency)
        self.since_entry.append(latency)
        self.completed += 1

    def minute(self, m: int, overdue: bool) -> Minute:
        """Minute m, once it has ended; `overdue`: the front end held a request older than the target at its end."""
        values = self.by_minute.pop(m, [])
        p99 = quantile(values)
        return Minute(m, len(values), p99, (p99 is not None and p99 > self.target) or overdue)


def quantile(values: Sequence[float], q: float = 0.99) -> float | None:
    """Nearest-rank quantile of exact values; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


ORACLE_MINUTES = 2  # minutes of constant load per trial of the oracle's capacity search, after a warm-up
ORACLE_WARMUP_SECONDS = 10.0
ORACLE_BISECTIONS = 10


def replica_rate(params: ServiceParams, mean_tokens: float, p99_target: float, seed: int = 0) -> float:
    """The highest Poisson rate one replica serves with the p99 of every minute within the target: a bisection
    over runs of the service model, each trial with the same random numbers. 0 when even light load misses."""

    def meets(rate: float) -> bool:
        replica = Replica(params, 0.0, seed=seed)
        trace = Trace.constant(rate, mean_tokens, ORACLE_WARMUP_SECONDS + 60.0 * ORACLE_MINUTES)
        minutes: list[list[float]] = [[] for _ in range(ORACLE_MINUTES)]
        for t, tokens in arrivals(trace, random.Random(seed)):
            replica.submit(t, tokens)
        for done in replica.advance(trace.end):  # a backlog that grows shows as latency that grows
            minute = int((done.finish - ORACLE_WARMUP_SECONDS) // 60)
            if 0 <= minute < ORACLE_MINUTES:
                minutes[minute].append(done.total_latency)
        return all(m and (quantile(m) or 0.0) <= p99_target for m in minutes)

    top = params.capacity_rps(mean_tokens)
    lo, hi = top * 0.01, top
    if not meets(lo):
        return 0.0
    for _ in range(ORACLE_BISECTIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo


Placed = Any  # what a `Placement` returns for a pod (a device), handed back when the pod is gone


class Placement(Protocol):
    """Where pods run, for co-tenants (cotenants.py): a pod added is placed, and freed once gone."""

    def place(self, t: float, replica: Replica) -> Placed: ...

    def free(self, t: float, where: Placed) -> None: ...


class ServiceRun:
    """One policy over one service's trace, in steps: `next_time` is when something happens next (a decision, a
    minute's end, a scrape, a replica ready, the end), `step(t)` runs the world up to t and handles what is due
    then; it may be called at any time in between (co-tenants advance in lockstep) without changing the run."""

    def __init__(self, setup: Setup, trace: Trace, policy: Policy, placement: Placement | None = None) -> None:
        self.setup, self.policy, self.placement = setup, policy, placement
        self.end = trace.end
        self._route = random.Random(f"{setup.seed}:route")
        self._phases = random.Random(f"{setup.seed}:scrape")
        self._incoming = arrivals(trace, random.Random(f"{setup.seed}:arrivals"))
        self._prometheus = Prometheus(duration_seconds(setup.targets.window), LATENCY_BUCKETS)
        self._record = _Record(setup.p99_target)
        self.pods: list[_Pod] = []
        self._front: list[tuple[float, int]] = []  # (arrival, tokens) waiting for a ready replica
        self._timeline: list[Entry] = []
        self._minutes: list[Minute] = []
        self._where: dict[int, Placed] = {}
        for _ in range(max(1, setup.targets.min_replicas) if setup.initial_replicas is None else setup.initial_replicas):
            self._add(0.0, 0.0)
        policy.start(len(self.pods))
        self._max_replicas = len(self.pods)
        self._pending = next(self._incoming, None)
        self.t, self._next_tick, self._next_minute = 0.0, 0.0, 60.0
        self._ready_before = -1
        self.done = False

    def _add(self, t: float, ready_at: float) -> None:
        pod_id = len(self.pods)
        replica = Replica(self.setup.params, ready_at, seed=self.setup.seed * 1_000_003 + pod_id)
        self.pods.append(_Pod(pod_id, replica, t, ready_at + self._phases.uniform(0, self.setup.scrape_interval)))
        if self.placement is not None:
            self._where[pod_id] = self.placement.place(t, replica)

    def _gone(self, q: _Pod, at: float) -> None:
        q.gone_at = at
        if self.placement is not None:
            self.placement.free(at, self._where.pop(q.id))

    def _resize(self, t: float, desired: int) -> None:
        live = [q for q in self.pods if q.removed_at is None]
        for _ in range(desired - len(live)):
            self._add(t, t + self.setup.params.startup_s)
        # loading pods first, then the most recently ready; newest first within each
        order = sorted(live, key=lambda q: (q.replica.ready_at <= t, -q.replica.ready_at, -q.id))
        for q in order[: max(0, len(live) - desired)]:
            q.removed_at = t
            if q.replica.ready_at > t:
                self._gone(q, t)

    def _to(self, serving: list[_Pod], t: float) -> _Pod:
        """The replica a request arriving at t goes to (Setup.routing)."""

        def in_flight(q: _Pod) -> int:
            self._advance(q, t)
            return q.replica.in_flight

        return pick(self.setup.routing, self._route, serving, in_flight)

    def _advance(self, q: _Pod, t: float) -> None:
        """What a replica holds at t: run it up to t first (nothing is submitted behind its clock)."""
        for done in q.replica.advance(t):
            self._record.add(done)
            q.last_finish = done.finish

    def next_time(self) -> float:
        t = self.t
        loading = [q.replica.ready_at for q in self.pods if q.removed_at is None and q.replica.ready_at > t]
        scrapes = [q.next_scrape for q in self.pods if q.gone_at is None]
        return min([self._next_tick, self._next_minute, self.end, *loading, *scrapes])

    def step(self, t_next: float) -> None:
        setup, pods, front, record = self.setup, self.pods, self._front, self._record
        serving = [q for q in pods if q.ready(self.t)]
        while self._pending is not None and self._pending[0] < t_next:
            if serving:
                self._to(serving, self._pending[0]).replica.submit(*self._pending)
            else:
                front.append(self._pending)
            self._pending = next(self._incoming, None)
        self.t = t = t_next
        for q in pods:
            if q.gone_at is not None or q.replica.ready_at > t:
                continue
            for done in q.replica.advance(t):
                record.add(done)
                q.last_finish = done.finish
            if q.removed_at is not None and q.replica.in_flight == 0:
                self._gone(q, max(q.removed_at, q.last_finish))
                self._prometheus.gone(q.id, q.gone_at)  # type: ignore[arg-type]
        serving = [q for q in pods if q.ready(t)]
        if front and serving:
            for arrival, tokens in front:
                self._to(serving, t).replica.submit(t, tokens, origin=arrival)
            front.clear()
        if t >= self._next_minute or t >= self.end:  # a minute ends: every request completed in it is recorded
            overdue = bool(front) and t - front[0][0] > setup.p99_target
            self._minutes.append(record.minute(round(self._next_minute / 60) - 1, overdue))
            self._next_minute += 60.0
        if t >= self.end:
            self.done = True
            if self.placement is not None:  # the trace is over: its pods leave their devices to the others
                for q in pods:
                    if q.id in self._where:
                        self.placement.free(self.end, self._where.pop(q.id))
            return
        for q in pods:
            if q.gone_at is None and q.next_scrape <= t:
                self._prometheus.scrape(q.id, t, q.replica.counters)
                q.next_scrape += setup.scrape_interval
        tick = t >= self._next_tick
        if tick:
            current = sum(q.removed_at is None for q in pods)
            values = dict(self._prometheus.evaluate(t))
            # what a front in front of the replicas (the KEDA HTTP add-on's interceptor) counts: requests it holds
            # while none is ready, and those in flight through it
            values[WAKE] = float(len(front) + sum(q.replica.in_flight for q in serving))
            desired = self.policy.replicas(t, current, len(serving), values)
            if desired != current:
                self._resize(t, desired)
                self._max_replicas = max(self._max_replicas, desired)
            self._next_tick += self.policy.period
        ready_now = sum(q.ready(t) for q in pods)
        if tick or ready_now != self._ready_before:
            self._timeline.append(Entry(t, sum(q.removed_at is None for q in pods), ready_now, quantile(record.since_entry)))
            record.since_entry = []
            self._ready_before = ready_now

    def result(self) -> Result:
        end, pods = self.end, self.pods
        gpu_seconds = sum(min(end, q.gone_at if q.gone_at is not None else end) - q.added_at for q in pods)
        replica_seconds = sum(min(end, q.removed_at if q.removed_at is not None else end) - q.added_at for q in pods)
        return Result(
            policy=self.policy.name, minutes=tuple(self._minutes), timeline=tuple(self._timeline),
            replica_minutes=replica_seconds / 60, gpu_minutes=gpu_seconds * self.setup.gpus_per_replica / 60,
            max_replicas=self._max_replicas, completed=self._record.completed,
        )


def run(setup: Setup, trace: Trace, policy: Policy) -> Result:
    """One policy over the whole trace."""
    r = ServiceRun(setup, trace, policy)
    while not r.done:
        r.step(r.next_time())
    return r.result()


def setup_for(resource: Any, policy: AutoscalingPolicySpec | None, params: ServiceParams, *, seed: int = 0,
              scrape_interval: float = DEFAULT_SCRAPE_SECONDS, initial_replicas: int | None = None,
              routing: Routing = "even") -> Setup:
    """The Setup of a parsed resource; InputError when it is not an autoscaled service with a p99 target."""
    if not isinstance(resource, Service):
        raise InputError(f"expected a PoolingService or ScoringService, got {getattr(resource, 'kind', type(resource).__name__)}")
    name = f"{resource.kind}/{resource.metadata.name}"
    if resource.spec.autoscaling is None:
        raise InputError(f"{name} has no spec.autoscaling: there is nothing to simulate")
    targets = resolve_targets(resource, policy)
    if targets.p99_seconds is None:
        raise InputError(f"{name}: the simulation needs a p99 target: set spec.autoscaling.p99Latency or the policy's defaults.p99Latency")
    a = resource.spec.autoscaling
    zero = targets.min_replicas == 0 and a.wake_query(resource.metadata.namespace or "default", resource.metadata.name) is not None
    idle = a.scale_to_zero.idle_seconds if a.scale_to_zero is not None else None
    return Setup(params, targets, service_queries(resource.kind, resource.metadata.namespace, resource.metadata.name, targets.window), gpus_held(resource.spec.resources),
                 scrape_interval, seed, initial_replicas, routing, zero, idle)


def _oracle(setup: Setup, trace: Trace) -> Oracle:
    sizes = sorted({seg.mean_tokens for seg in trace.segments if seg.rate > 0})
    rates = {n: replica_rate(setup.params, n, setup.p99_target, setup.seed) for n in sizes}
    return Oracle(trace, rates, setup.params.startup_s, setup.targets.min_replicas, setup.max_replicas)


def steady_start(setup: Setup, trace: Trace, oracle: Oracle | None = None) -> Setup:
    """The setup with `initial_replicas` set, when it is not: the fewest replicas that meet the target at the first
    row's rate (a steady start)."""
    if setup.initial_replicas is not None:
        return setup
    first = trace.segments[0]
    return replace(setup, initial_replicas=(oracle or _oracle(setup, trace)).need(first.rate, first.mean_tokens))


def simulate(resource: Service, policy: AutoscalingPolicySpec | None, trace: Trace, setup: Setup,
             compare: Sequence[str] = ()) -> dict[str, Result]:
    """Ours, then every policy `compare` names, on the same trace and arrivals. Without `initial_replicas` the
    service starts in a steady state: with the fewest replicas that meet the target at the first row's rate."""
    unknown = [c for c in compare if c not in POLICIES[1:]]
    if unknown:
        raise InputError(f"--compare: unknown policy {unknown[0]!r}; known: {', '.join(POLICIES[1:])}")
    oracle = _oracle(setup, trace)
    setup = steady_start(setup, trace, oracle)
    results = {"operator": run(setup, trace, Operator(setup))}
    for name in dict.fromkeys(compare):
        if name == "hpa-queue":
            chosen: Policy = hpa_queue(setup.targets.min_replicas, setup.targets.effective_max)
        elif name == "keda":
            assert resource.spec.autoscaling is not None
            keda_autoscaling = resource.spec.autoscaling.model_copy(update={"backend": "keda"})
            as_keda = resource.model_copy(update={"spec": resource.spec.model_copy(update={"autoscaling": keda_autoscaling})})
            chosen = keda(scaled_object(as_keda, policy), setup.queries)
        else:
            chosen = oracle
        results[name] = run(setup, trace, chosen)
    return results


def to_json(results: Mapping[str, Result]) -> dict[str, Any]:
    """`{"results": {policy: {...}}}`; the ratio to the oracle's GPU-minutes when the oracle ran."""
    oracle = results.get("oracle")
    out: dict[str, Any] = {}
    for name, r in results.items():
        item: dict[str, Any] = {
            "slo_minutes_missed": r.slo_minutes_missed,
            "minutes": len(r.minutes),
            "gpu_minutes": round(r.gpu_minutes, 3),
            "replica_minutes": round(r.replica_minutes, 3),
            "max_replicas": r.max_replicas,
            "completed": r.completed,
        }
        if oracle is not None:
            item["gpu_minutes_ratio_to_oracle"] = round(r.gpu_minutes / oracle.gpu_minutes, 4) if oracle.gpu_minutes else None
        item["p99_per_minute"] = [_round(m.p99) for m in r.minutes]
        item["timeline"] = [{"t": round(e.t, 3), "replicas": e.replicas, "ready": e.ready, "p99": _round(e.p99)} for e in r.timeline]
        out[name] = item
    return {"results": out}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)
