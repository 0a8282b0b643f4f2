"""The loop that drives the decision: one task per namespace, only while this replica leads.

The reconcile tells the autoscaler which services autoscale (`track`) and which stopped or went away
(`untrack`). Each namespace with tracked services gets one task; every `period` seconds it reads every
service's signals and Deployment, decides, and then hands out the namespace's GPU budget
(`limits.maxGPUsPerNamespace`: replicas × GPUs per pod of the owner's spec, summed over the namespace's
autoscaled services; fixed-replica services are not counted) in one pass, so two services growing at once can never overshoot it. Scale-downs are counted first, growth is
granted in name order. A task stops when its namespace has no tracked service left.

Each period also records the GPUs each service's pods hold (what the reconcile's `vllm_pooling_operator_gpus_held`
says: pods that exist × what one holds as placed) and, once per whole window, what they cost per million tokens
(`status.cost`, cost.py).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pooling_operator.api.clock import parse_time, rfc3339
from pooling_operator.api.gpu import ResourcesSpec
from pooling_operator.api.identity import COMPONENTS
from pooling_operator.api.policy import (
    DEFAULT_PROMETHEUS_URL,
    AutoscalingPolicySpec,
    AutoscalingTargets,
    PrometheusSpec,
)
from pooling_operator.api.resources import Service
from pooling_operator.api.schema import duration_seconds
from pooling_operator.autoscaling import cost as costs
from pooling_operator.autoscaling.decide import (
    PERIOD_SECONDS,
    Budget,
    Decision,
    Observed,
    Signals,
    State,
    decide,
)
from pooling_operator.autoscaling.prometheus import Endpoint, PrometheusReader, QueryFailed
from pooling_operator.autoscaling.scale import clear_status, write_scale, write_status
from pooling_operator.autoscaling.targets import resolve_targets
from pooling_operator.autoscaling.zero import Wake, decide_or_zero, remembered
from pooling_operator.autoscaling.zero_state import ZeroState
from pooling_operator.k8s.api import FIELD_MANAGER, KINDS, ApiError, Kube, TransientError
from pooling_operator.k8s.cache import Cache, owning_key, replica_managers
from pooling_operator.status.placement import placement_problem
from pooling_operator.status.services import placed_whole
from pooling_operator.status.startup import typical_seconds
from pooling_operator.vllm.memory import gpus_held
from pooling_operator.vllm.metrics import Queries, matchers, service_queries

log = logging.getLogger(__name__)


def _replicas(deployment: dict[str, Any]) -> int:
    return int(deployment["spec"].get("replicas", 1))


def autoscaled(deployment: dict[str, Any]) -> bool:
    """Its replicas are not set by the operator's apply (which leaves them out exactly when the service
    autoscales): they belong to an autoscaler, ours or KEDA's HPA, or still hold the API server's default.
    Read through `replica_managers`, the one reader of who set spec.replicas, so a Deployment as the cache
    holds it (managedFields projected away) reads the same as one fresh from the API server."""
    return FIELD_MANAGER not in replica_managers(deployment)


def owner_gpus(owner: dict[str, Any] | None) -> float:
    """GPUs one pod holds, from its owner's spec.resources (`gpus_held`, the one function); the default when
    the owner is gone (its children are being collected) or its resources no longer parse."""
    raw = ((owner or {}).get("spec") or {}).get("resources")
    try:
        return gpus_held(ResourcesSpec.model_validate(raw) if raw is not None else None)
    except ValueError:
        name = (owner or {}).get("metadata", {}).get("name")
        log.warning("Counting %s's pods at the default GPUs per pod: its spec.resources does not parse", name)
        return gpus_held(None)


def held_by_autoscaled(deployments: Iterable[dict[str, Any]], owner: Callable[[dict[str, Any]], dict[str, Any] | None]) -> float:
    """GPUs the namespace's autoscaled Deployments hold now: replicas × GPUs per pod of their owner's spec,
    summed; fixed-replica services are left out (the budget bounds what autoscaling adds)."""
    return sum(_replicas(d) * owner_gpus(owner(d)) for d in deployments if autoscaled(d))


@dataclass
class Tracked:
    """One autoscaled service as the autoscaler knows it."""

    uid: str
    kind: str
    namespace: str
    name: str
    gpus: float  # per replica (gpus_held)
    targets: AutoscalingTargets
    queries: Queries
    decides: bool  # backend operator; keda services only count towards the GPU budget
    wake_query: str | None = None  # AutoscalingSpec.wake_query(): the written query, else a front's series
    idle_seconds: int | None = None  # autoscaling.scaleToZero.idleSeconds
    state: State = field(default_factory=State)
    zero: ZeroState = field(default_factory=ZeroState)
    last_scale_time: str | None = None
    price: tuple[Decimal, str] | None = None  # one GPU-hour of its product at its policy's pricing
    created: float | None = None  # metadata.creationTimestamp, epoch seconds
    held: costs.Held | None = None  # the GPUs its pods held, since the first read
    cost: dict[str, Any] | None = None  # status.cost as last written (every status apply carries it)
    cost_end: float | None = None  # the end of the last window reported (or found not watched whole)

    @property
    def may_zero(self) -> bool:
        """minReplicas 0 with a wake signal, decided here (zero.py)."""
        return self.decides and self.targets.min_replicas == 0 and self.wake_query is not None


def _product(resource: Service) -> str | None:
    """The GPU product a service names (spec.resources.gpu.product): what its policy's pricing is keyed by."""
    resources = resource.spec.resources
    gpu = resources.gpu if resources is not None else None
    return gpu.product if gpu is not None else None


def observed(body: dict[str, Any], current: int, ready: int, unschedulable: str | None) -> Observed:
    """What the decision sees of the service beside its metrics: its replicas, where they cannot be placed, and
    the start-up its pods showed (status.startup.typicalSeconds, written by the reconcile)."""
    return Observed(replicas=current, ready=ready, unschedulable=unschedulable, startup_seconds=typical_seconds(body))


@dataclass
class Read:
    """What one tick read for one service."""

    service: Tracked
    body: dict[str, Any]
    current: int
    ready: int
    unschedulable: str | None
    signals: Signals | None
    wake: Wake | None = None  # the wake query's read (a service that may go to zero)
    pods: int = 0  # the Deployment's pods that exist (status.replicas): they hold GPUs, loading or serving


class Autoscaler:
    def __init__(
        self,
        kube: Kube,
        cache: Cache,
        leading: Callable[[], Awaitable[bool]],
        *,
        period: float = PERIOD_SECONDS,
        default_prometheus_url: str = DEFAULT_PROMETHEUS_URL,
        clock: Callable[[], float] = time.monotonic,
        cost_window: float = costs.DEFAULT_WINDOW_SECONDS,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.leading = leading
        self.period = period
        self.default_prometheus = PrometheusSpec(url=default_prometheus_url)
        self.clock = clock
        self.cost_window = cost_window
        self.wall = wall
        self.services: dict[str, Tracked] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._readers: dict[tuple[str, str | None], PrometheusReader] = {}
        self._secrets: dict[tuple[str, str], dict[str, Any] | None] = {}  # read once per tick, not per service

    # ---- what the reconcile tells us --------------------------------------------------------------------

    def track(self, resource: Service, policy: AutoscalingPolicySpec | None) -> None:
        a = resource.spec.autoscaling
        assert a is not None and resource.metadata.uid
        targets = resolve_targets(resource, policy)
        namespace = resource.metadata.namespace or "default"
        settings: dict[str, Any] = {  # the fields of Tracked that follow the service and its policy
            "kind": resource.kind, "namespace": namespace, "name": resource.metadata.name,
            "gpus": gpus_held(resource.spec.resources), "targets": targets,
            "queries": service_queries(resource.kind, namespace, resource.metadata.name, targets.window), "decides": a.backend == "operator",
            "wake_query": a.wake_query(namespace, resource.metadata.name),
            "idle_seconds": a.scale_to_zero.idle_seconds if a.scale_to_zero is not None else None,
            "price": costs.price_per_gpu_hour(policy.pricing if policy is not None else None, _product(resource)),
        }
        before = self.services.get(resource.metadata.uid)
        if before is not None:
            # Updated in place (a reconcile runs on every child event): a decision being taken keeps its service.
            for key, value in settings.items():
                setattr(before, key, value)
        else:  # what status says of an earlier zero and cost (a restart, another replica leading before) is kept
            created = parse_time((resource.metadata.model_extra or {}).get("creationTimestamp"))
            cost = resource.status.cost if resource.status is not None else None
            self.services[resource.metadata.uid] = Tracked(
                uid=resource.metadata.uid, zero=remembered(resource), created=created.timestamp() if created else None,
                cost=cost.model_dump(by_alias=True, exclude_none=True, mode="json") if cost is not None else None,
                **settings,
            )  # fmt: skip
        if namespace not in self._tasks or self._tasks[namespace].done():
            self._tasks[namespace] = asyncio.get_running_loop().create_task(self._run(namespace), name=f"autoscaler/{namespace}")

    def untrack(self, uid: str) -> None:
        """Forget a service (deleted, or no longer autoscaled by us); its state goes with it."""
        self.services.pop(uid, None)

    async def stop(self, body: dict[str, Any]) -> None:
        """The service exists but the operator no longer scales it: drop its state and its status block."""
        self.untrack(body["metadata"]["uid"])
        await clear_status(self.kube, body)

    async def clear_status(self, body: dict[str, Any]) -> None:
        """Another backend scales the service (it still counts towards the GPU budget): remove our status block."""
        await clear_status(self.kube, body)

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        for reader in self._readers.values():
            await reader.close()

    # ---- the per-namespace loop -----------------------------------------------------------------------

    def _in(self, namespace: str) -> list[Tracked]:
        return sorted((s for s in self.services.values() if s.namespace == namespace), key=lambda s: (s.name, s.kind))

    async def _run(self, namespace: str) -> None:
        while self._in(namespace):
            started = self.clock()
            try:
                if await self.leading():
                    await self.tick(namespace)
            except asyncio.CancelledError:
                raise
            except TransientError as exc:  # the API server away or busy: one line, not a traceback a period
                log.warning("Autoscaling namespace %s: %s; retrying in %ss", namespace, exc, self.period)
            except Exception:
                log.exception("Autoscaling namespace %s failed; retrying in %ss", namespace, self.period)
            # The period itself, not a wait for something to happen.
            await asyncio.sleep(max(0.0, self.period - (self.clock() - started)))
        self._tasks.pop(namespace, None)

    async def tick(self, namespace: str) -> list[tuple[Tracked, Decision]]:
        """One decision for every autoscaled service of the namespace, with the GPU budget shared out."""
        self._secrets = {}
        deployments = {d["metadata"]["name"]: d for d in self.cache.in_namespace("Deployment", namespace)}
        reads = [r for r in await asyncio.gather(*(self._read_safely(s, deployments) for s in self._in(namespace))) if r is not None]
        now = self.clock()
        decided: list[tuple[Read, Decision]] = []
        # What the namespace's autoscaled Deployments hold now, as watched (not from the services tracked: after
        # a restart, or for a service whose spec just turned invalid, the Deployments still hold their GPUs).
        used = held_by_autoscaled(deployments.values(), self._owner)
        growing: list[Read] = []
        for r in reads:
            if not r.service.decides or r.signals is None:
                continue
            d = self._decide(r, now, None)
            if d.desired > r.current:
                growing.append(r)
            else:
                used += (d.desired - r.current) * r.service.gpus
                decided.append((r, d))
        for r in growing:
            limit = r.service.targets.max_gpus_per_namespace
            budget = Budget(limit, used, r.service.gpus) if limit is not None and r.service.gpus > 0 else None
            d = self._decide(r, now, budget)
            used += (d.desired - r.current) * r.service.gpus
            decided.append((r, d))
        for r, d in decided:
            await self._act(r, d)
        return [(r.service, d) for r, d in decided]

    def _decide(self, r: Read, now: float, budget: Budget | None) -> Decision:
        assert r.signals is not None
        s = r.service
        seen = observed(r.body, r.current, r.ready, r.unschedulable)
        if not s.may_zero:
            return decide(now, r.signals, seen, s.targets, s.state, budget=budget)
        # minReplicas 0: the decision keeps at least one replica; zero.py says when to go to zero and back
        assert r.wake is not None
        return decide_or_zero(now, rfc3339(), r.signals, seen, s.targets, s.state, s.zero, r.wake, s.idle_seconds, budget)

    def _owner(self, deployment: dict[str, Any]) -> dict[str, Any] | None:
        key = owning_key(deployment)
        return self.cache.owner(key) if key is not None else None

    async def _read_safely(self, s: Tracked, deployments: dict[str, dict[str, Any]]) -> Read | None:
        """One service's read; a failure holds that service alone (its Deployment still counts for the budget)."""
        try:
            return await self._read(s, deployments.get(s.name))
        except Exception as exc:
            log.warning("Holding %s %s/%s this period: %s", s.kind, s.namespace, s.name, exc)
            return None

    async def _read(self, s: Tracked, deployment: dict[str, Any] | None) -> Read | None:
        body = self.cache.owner((s.kind, s.namespace, s.name))
        if body is None or body["metadata"].get("uid") != s.uid or body["metadata"].get("deletionTimestamp"):
            self.untrack(s.uid)
            return None
        if deployment is None:
            return None  # the reconcile has not created it yet
        pods = self.cache.pods_of((s.kind, s.namespace, s.name))
        placement = placement_problem(deployment, pods)
        signals = await self._signals(s) if s.decides else None
        wake = await self._wake(s) if s.may_zero else None
        return Read(
            service=s, body=body, current=int(deployment["spec"].get("replicas", 1)),
            ready=int((deployment.get("status") or {}).get("readyReplicas", 0)),
            unschedulable=placement.message if placement else None, signals=signals, wake=wake,
            pods=int((deployment.get("status") or {}).get("replicas", 0)),
        )

    async def _wake(self, s: Tracked) -> Wake:
        """The wake query's value and the series it summed, or why it has none."""
        assert s.wake_query is not None
        try:
            reader = await self._reader(s)
            return Wake(*await reader.total(s.wake_query))
        except (ApiError, QueryFailed) as exc:
            return Wake(None, 0, str(exc))

    async def _signals(self, s: Tracked) -> Signals:
        try:
            reader = await self._reader(s)
        except ApiError as exc:
            return Signals(unreachable=f"cannot read the policy's Prometheus credentials: {exc}", queries=s.queries.named())
        return await reader.read(s.queries)

    async def _reader(self, s: Tracked) -> PrometheusReader:
        endpoint = await self._endpoint(s.targets.prometheus or self.default_prometheus)
        key = (endpoint.url, endpoint.ca_pem)
        reader = self._readers.get(key)
        if reader is None or reader.endpoint != endpoint:
            if reader is not None:
                await reader.close()  # a rotated token or a new timeout: one session per Prometheus
            reader = self._readers[key] = PrometheusReader(endpoint)
        return reader

    async def _endpoint(self, spec: PrometheusSpec) -> Endpoint:
        async def secret(ref: Any) -> str | None:
            if ref is None:
                return None
            if (ref.namespace, ref.name) not in self._secrets:
                self._secrets[(ref.namespace, ref.name)] = await self.kube.get(KINDS["Secret"], ref.namespace, ref.name)
            obj = self._secrets[(ref.namespace, ref.name)]
            if obj is None or ref.key not in (obj.get("data") or {}):
                raise ApiError(404, "NotFound", f"Secret {ref.namespace}/{ref.name} has no key {ref.key}")
            return base64.b64decode(obj["data"][ref.key]).decode().strip()

        return Endpoint(
            url=spec.url,
            token=await secret(spec.bearer_token_secret_ref),
            ca_pem=await secret(spec.ca_secret_ref),
            timeout=duration_seconds(spec.timeout),
        )

    async def _act(self, r: Read, d: Decision) -> None:
        s = r.service
        if self.services.get(s.uid) is not s:
            return  # untracked meanwhile
        if not await self.leading():
            return  # the Lease went while this decision was being taken: another replica acts now
        s.state = d.state
        if d.desired != r.current:
            await write_scale(self.kube, r.body, r.current, d)
            s.last_scale_time = rfc3339()
        if d.zero is not None:  # after the scale: a write that failed went nowhere, and the next period tries again
            s.zero = d.zero.state
        await self._cost(s, r)
        await write_status(self.kube, r.body, d, r.current, r.ready,
                           s.last_scale_time or (r.body.get("status") or {}).get("autoscaling", {}).get("lastScaleTime"), self.cache,
                           cost=s.cost)  # fmt: skip

    async def _cost(self, s: Tracked, r: Read) -> None:
        """Record the GPUs held; once a window has ended (and a grace for the last scrapes has passed), what it cost.
        A query that fails leaves the last figures and is tried again next period."""
        now, window = self.wall(), self.cost_window
        gpus = r.pods * (1.0 if placed_whole(r.body.get("status") or {}) else s.gpus)  # status.services.gpus_as_placed
        s.held = costs.start(now, gpus, s.created, self.period) if s.held is None else costs.record(s.held, now, gpus, window)
        end = costs.window_end(now - costs.grace(window), window)
        if s.cost_end is not None and end <= s.cost_end:
            return
        gpu_s = costs.gpu_seconds(s.held, end - window, end)
        if gpu_s is None:  # not watched whole: the figures of an earlier window stay
            s.cost_end = end
            return
        try:
            reader = await self._reader(s)
            queries = costs.cost_queries(matchers(s.namespace, s.name, COMPONENTS[s.kind]), window, end)
            tokens, token_series = await reader.total(queries[costs.TOKENS])
            inputs, input_series = await reader.total(queries[costs.INPUTS])
        except (ApiError, QueryFailed) as exc:
            log.debug("Cost of %s %s/%s not read this period: %s", s.kind, s.namespace, s.name, exc)
            return
        s.cost = costs.cost_status(window, end, gpu_s, tokens if token_series else None, inputs if input_series else None, s.price)
        s.cost_end = end

