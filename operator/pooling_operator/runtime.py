"""The operator's runtime, beside (not inside) the kopf handlers: leadership by a `coordination.k8s.io` Lease,
the resync loop, per-object backoff and state, and the autoscaler's lifetime.

Every replica runs kopf standalone and watches; only the replica holding the Lease acts. Every loop — the
reconciles kopf's events trigger, the resync, the autoscaler — asks `leading` before it acts, and a replica
that fails to renew in time stops acting at once. A standby is healthy (its `/healthz` answers) and says in
its log and in `vllm_pooling_operator_leader` that it stands by. On taking the Lease a replica resyncs
everything at once, since it ignored the events that came while it stood by.

The Lease follows client-go's leader election: the holder renews every `RETRY_SECONDS`; a candidate takes an
expired Lease (no renewal *observed* for `LEASE_SECONDS`, by its own clock, so clocks need not agree) with an
optimistic-concurrency update, so two candidates can never both win; a holder that has not renewed within
`RENEW_DEADLINE_SECONDS` steps down before anyone else may take over.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Gauge

from pooling_operator.api.policy import DEFAULT_PROMETHEUS_URL, AutoscalingPolicySpec
from pooling_operator.autoscaling.loop import Autoscaler
from pooling_operator.builders.common import COMPONENTS
from pooling_operator.k8s.api import KINDS, ApiError, TransientError
from pooling_operator.reconcile import Context, Gone, InvalidSpec, reconcile_policies, reconcile_service

log = logging.getLogger(__name__)

LEASE_SECONDS = 15
RENEW_DEADLINE_SECONDS = 10
RETRY_SECONDS = 2
RESYNC_SECONDS = max(1, int(float(os.environ.get("VPO_RESYNC_SECONDS", "60"))))
AUTOSCALE_SECONDS = max(0.5, float(os.environ.get("VPO_AUTOSCALE_SECONDS", "15")))
OWNER_KINDS = ("PoolingService", "ScoringService", "HiddenStateJob")
LEADER = Gauge("vllm_pooling_operator_leader", "1 while this replica holds the Lease and acts; 0 while it stands by.")


def _micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Leadership:
    """Holding (or waiting for) one Lease. `held` is what every loop reads."""

    kube: Any
    name: str
    namespace: str
    identity: str
    clock: Callable[[], float] = time.monotonic
    held: bool = False
    _observed: tuple[Any, ...] | None = None  # (holder, renewTime) last seen
    _observed_at: float = 0.0
    _renewed_at: float = 0.0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    async def attempt(self) -> bool:
        """One try to acquire or renew; returns whether this replica holds the Lease afterwards."""
        now = self.clock()
        try:
            lease = await self.kube.request("GET", self.path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            lease = None
        stamp = _micro(datetime.now(UTC))
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": LEASE_SECONDS,
                         "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0},
            }
            await self.kube.request("POST", self.path.rsplit("/", 1)[0], body=body)
            self._renewed_at = now
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = int(spec.get("leaseDurationSeconds") or LEASE_SECONDS)
        mine = holder == self.identity
        if holder and not mine and now < self._observed_at + duration:
            return False  # someone else holds a live Lease
        new_spec = dict(spec, holderIdentity=self.identity, leaseDurationSeconds=LEASE_SECONDS, renewTime=stamp)
        if not mine:
            new_spec.update(acquireTime=stamp, leaseTransitions=int(spec.get("leaseTransitions") or 0) + 1)
        body = {**lease, "spec": new_spec}  # carries resourceVersion: a concurrent taker gets a 409
        await self.kube.request("PUT", self.path, body=body)
        self._renewed_at = now
        return True

    @property
    def leading(self) -> bool:
        """Held, and renewed recently enough that nobody else can have taken it: a replica whose renewals are
        stuck stops acting at the renew deadline, before the Lease can expire for the others."""
        return self.held and self.clock() - self._renewed_at < RENEW_DEADLINE_SECONDS

    async def run(self, on_acquire: Callable[[], Awaitable[None]], background: Callable[[Any], None]) -> None:
        LEADER.set(0)
        log.info("Standing by for Lease %s/%s as %s", self.namespace, self.name, self.identity)
        while True:
            try:
                won = await asyncio.wait_for(self.attempt(), RENEW_DEADLINE_SECONDS / 2)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a slow or failing API server, a bad answer: never kill this loop
                won = False
                if self.held and self.clock() - self._renewed_at < RENEW_DEADLINE_SECONDS:
                    won = True  # a failed renewal inside the deadline: still ours
                log.info("Lease %s/%s not renewed: %s", self.namespace, self.name, exc)
            if won and not self.held:
                self.held = True
                LEADER.set(1)
                log.info("Acquired Lease %s/%s: this replica acts", self.namespace, self.name)
                background(on_acquire())
            elif self.held and (not won or not self.leading):
                self.held = False
                LEADER.set(0)
                log.warning("Lost Lease %s/%s: this replica stands by and stops acting", self.namespace, self.name)
            await asyncio.sleep(RETRY_SECONDS)  # the renewal period itself

    async def release(self) -> None:
        """On shutdown: hand the Lease over at once instead of letting it expire."""
        if not self.held:
            return
        self.held = False
        LEADER.set(0)
        try:
            lease = await self.kube.request("GET", self.path)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                await self.kube.request("PUT", self.path, body=lease)
                log.info("Released Lease %s/%s", self.namespace, self.name)
        except (ApiError, OSError) as exc:
            log.info("Could not release Lease %s/%s: %s", self.namespace, self.name, exc)


class Runtime:
    """Owns the loops of one operator replica. `leadership` None means standalone: always acting."""

    def __init__(self, ctx: Context, leadership: Leadership | None) -> None:
        self.ctx = ctx
        self.leadership = leadership
        self._tasks: list[asyncio.Task[Any]] = []
        self._retries: set[str] = set()
        self._wanted = asyncio.Event()

    @property
    def leading(self) -> bool:
        return self.leadership is None or self.leadership.leading

    async def _leading(self) -> bool:
        return self.leading

    async def start(self) -> None:
        ctx = self.ctx
        ctx.autoscaler = Autoscaler(
            ctx.kube, leading=self._leading, period=AUTOSCALE_SECONDS,
            default_prometheus_url=os.environ.get("VPO_PROMETHEUS_URL", DEFAULT_PROMETHEUS_URL),
        )
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._resync_forever(), name="resync"))
        if self.leadership is not None:
            self._tasks.append(loop.create_task(self.leadership.run(self._acquired, ctx.background), name="lease"))
        else:
            LEADER.set(1)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.ctx.autoscaler is not None:
            await self.ctx.autoscaler.close()  # no decision in flight once the Lease is handed over
        if self.leadership is not None:
            await self.leadership.release()

    async def _acquired(self) -> None:
        try:
            await self.resync_all()
        except Exception:
            log.exception("The first resync after acquiring the Lease failed; the next one runs in %ss", RESYNC_SECONDS)

    # ---- events -----------------------------------------------------------------------------------------

    async def on_resource(self, body: dict[str, Any], deleted: bool, policies: dict[str, AutoscalingPolicySpec]) -> None:
        """A PoolingService, ScoringService or HiddenStateJob changed or went away."""
        if deleted or body["metadata"].get("deletionTimestamp"):
            self.forget(body["metadata"]["uid"])
            return
        if self.leading:
            await self.run(body, policies)

    async def on_child(self, body: dict[str, Any], policies: dict[str, AutoscalingPolicySpec]) -> None:
        """A child (or a pod of one) changed: reconcile its owner now."""
        if not self.leading:
            return
        owner = owner_of(body)
        if owner is None:
            return
        kind, name, uid = owner
        try:
            parent = await self.ctx.kube.get(KINDS[kind], body["metadata"]["namespace"], name)
        except TransientError:
            return  # the resync or the next event catches up
        if parent is None or (uid and parent["metadata"].get("uid") != uid) or parent["metadata"].get("deletionTimestamp"):
            return
        await self.run(parent, policies)

    def forget(self, uid: str) -> None:
        """Drop every piece of per-object state of a deleted resource, so memory stays flat under churn."""
        ctx = self.ctx
        ctx.locks.pop(uid, None)
        ctx.failures.pop(uid, None)
        ctx.warned = {w for w in ctx.warned if w[0] != uid}
        if ctx.autoscaler is not None:
            ctx.autoscaler.untrack(uid)

    async def run(self, body: dict[str, Any], policies: dict[str, AutoscalingPolicySpec]) -> None:
        """Reconcile once. A user error is already in status and events: nothing to retry until the spec
        changes. A transient API error retries with per-object exponential backoff (1, 2, 4 ... 60 s)."""
        kind, meta = body["kind"], body["metadata"]
        try:
            await reconcile_service(self.ctx, body, policies)
        except InvalidSpec as exc:
            log.info("Refused %s %s/%s: %s", kind, meta.get("namespace"), meta["name"], exc)
        except Gone:
            log.info("Skipped %s %s/%s: it or its namespace is being deleted", kind, meta.get("namespace"), meta["name"])
        except TransientError as exc:
            delay = self._backoff(meta["uid"])
            log.warning("Will retry %s %s/%s in %.0fs: %s", kind, meta.get("namespace"), meta["name"], delay, exc)
            if meta["uid"] not in self._retries:
                self._retries.add(meta["uid"])
                asyncio.get_running_loop().call_later(
                    delay, lambda: self.ctx.background(self._retry(kind, meta.get("namespace"), meta["name"], meta["uid"], policies))
                )
        else:
            self.ctx.failures.pop(meta["uid"], None)

    def _backoff(self, uid: str) -> float:
        attempt = self.ctx.failures.get(uid, 0)
        self.ctx.failures[uid] = attempt + 1
        return float(min(60, 2**attempt))

    async def _retry(self, kind: str, namespace: str | None, name: str, uid: str, policies: dict[str, AutoscalingPolicySpec]) -> None:
        self._retries.discard(uid)
        if not self.leading:
            return
        try:
            body = await self.ctx.kube.get(KINDS[kind], namespace, name)
        except TransientError:
            body = None
        if body is None or body["metadata"].get("uid") != uid or body["metadata"].get("deletionTimestamp"):
            return
        await self.run(body, policies)

    # ---- resync -----------------------------------------------------------------------------------------
    # kopf's watches resume from the last resourceVersion and never re-list, and its timers need finalizers, so
    # the resync is one operator-wide loop: every RESYNC_SECONDS it lists the resources and reconciles each.

    def request_resync(self) -> None:
        """Resync soon (a policy changed): requests coalesce into one pass of the resync loop."""
        self._wanted.set()

    async def _resync_forever(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wanted.wait(), RESYNC_SECONDS)  # the period, or a request
            except TimeoutError:
                pass
            self._wanted.clear()
            if not self.leading:
                continue
            try:
                await self.resync_all()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Resync failed; the next one runs in %ss", RESYNC_SECONDS)

    async def resync_all(self) -> int:
        """Reconcile every resource the operator watches, then every policy's status; returns how many
        resources were visited."""
        ctx = self.ctx
        policy_bodies = await ctx.kube.list(KINDS["AutoscalingPolicy"], None, {})
        policies: dict[str, AutoscalingPolicySpec] = {}
        for item in policy_bodies:
            try:
                policies[item["metadata"]["name"]] = AutoscalingPolicySpec.model_validate(item.get("spec") or {})
            except ValueError:
                continue
        bodies = []
        for kind in OWNER_KINDS:
            for namespace in ctx.namespaces or [None]:
                bodies += [b for b in await ctx.kube.list(KINDS[kind], namespace, {}) if not b["metadata"].get("deletionTimestamp")]
        limit = asyncio.Semaphore(8)

        async def one(body: dict[str, Any]) -> None:
            async with limit:
                if not self.leading:
                    return
                try:
                    await reconcile_service(ctx, body, policies)
                except (InvalidSpec, Gone):
                    pass
                except TransientError as exc:
                    log.info("Resync of %s %s/%s deferred: %s", body["kind"], body["metadata"].get("namespace"), body["metadata"]["name"], exc)
                except Exception:  # one object's failure never stops the others' reconciles
                    log.exception("Resync of %s %s/%s failed", body["kind"], body["metadata"].get("namespace"), body["metadata"]["name"])

        await asyncio.gather(*(one(b) for b in bodies))
        if self.leading:
            await reconcile_policies(ctx, policy_bodies, bodies)
        return len(bodies)


COMPONENT_KINDS = {component: kind for kind, component in COMPONENTS.items()}


def owner_of(body: dict[str, Any]) -> tuple[str, str, str | None] | None:
    """(kind, name, uid) of the resource a child belongs to: its controller reference, or for a pod (whose
    controller is a ReplicaSet or Job) the instance and component labels every child carries."""
    ref = next((r for r in body["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    if ref is not None and ref.get("kind") in OWNER_KINDS:
        return ref["kind"], ref["name"], ref.get("uid")
    labels = body["metadata"].get("labels") or {}
    kind = COMPONENT_KINDS.get(labels.get("app.kubernetes.io/component", ""))
    name = labels.get("app.kubernetes.io/instance")
    if kind and name:
        return kind, name, None
    return None
