"""The operator's runtime, beside (not inside) the kopf layer: a work queue of resources to reconcile, the
workers that drain it from the watch-fed cache, the resync, per-object backoff and state, leadership and the
autoscaler's lifetime.

Handlers only record and enqueue (`on_owner`, `on_child`, `on_policy`): they never wait on the API, so a
burst of events coalesces into one reconcile per resource. A worker reads the resource, its children and its
pods from the cache (`k8s/cache.py`) and sends only writes.

There is no periodic pass over every resource, so an idle resource costs nothing. A resource whose last
reconcile left it settled (Ready, finished, or refused until its spec changes) is not visited again until an
event about it or its children arrives, or a policy changes; an unsettled one (starting, degraded) is looked
at again after `RECHECK_SECONDS` (`VPO_RESYNC_SECONDS`), as its conditions may turn with time alone. Full
passes run when the caches first fill, when this replica takes the Lease, and when a policy changes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from prometheus_client import Counter, Gauge

from pooling_operator.api.kinds import OWNER_KINDS
from pooling_operator.api.policy import DEFAULT_PROMETHEUS_URL
from pooling_operator.autoscaling.cost import DEFAULT_WINDOW_SECONDS as DEFAULT_COST_WINDOW
from pooling_operator.autoscaling.loop import Autoscaler
from pooling_operator.k8s.api import TransientError
from pooling_operator.k8s.cache import OwnerKey, owner_key, owning_key, raw_front_hosts, workload_job
from pooling_operator.reconcile import Context, Gone, InvalidSpec, Reconciles
from pooling_operator.reconcile.context import EVENTS_SHUTDOWN_SECONDS
from pooling_operator.runtime import readiness
from pooling_operator.runtime.breaker import Breaker
from pooling_operator.runtime.lease import LEADER, Leadership
from pooling_operator.runtime.queue import WorkQueue
from pooling_operator.runtime.series import Series
from pooling_operator.runtime.shards import Sharding
from pooling_operator.runtime.space_gate import PodAddress, SpaceGate, pod_ip_address
from pooling_operator.runtime.watches import Watches
from pooling_operator.runtime.webhook_certs import WebhookCertificate
from pooling_operator.status.conditions import settled
from pooling_operator.vllm.space_check import REFERENCE_LABEL

log = logging.getLogger(__name__)

# How soon a resource that is not settled (starting, degraded) is looked at again without an event.
RECHECK_SECONDS = max(1.0, float(os.environ.get("VPO_RESYNC_SECONDS", "30")))
AUTOSCALE_SECONDS = max(0.5, float(os.environ.get("VPO_AUTOSCALE_SECONDS", "15")))
COST_WINDOW_SECONDS = max(10.0, float(os.environ.get("VPO_COST_WINDOW_SECONDS", str(DEFAULT_COST_WINDOW))))
WORKERS = max(1, int(os.environ.get("VPO_WORKERS", "16")))
POLICY_RECOUNT_SECONDS = 2.0  # policy status recounts coalesce over this window
LATE_RENEWAL_RETRY_SECONDS = 1.0  # a key met while the held Lease's renewal is late waits this long, then again
POLICIES_KEY: OwnerKey = ("AutoscalingPolicy", "", "*")  # the queue's key for "recount every policy's services"

PASSES = Counter("vllm_pooling_operator_resync_passes", "Resync passes run.", ["kind"])
QUEUED = Gauge("vllm_pooling_operator_queue_depth", "Resources waiting for or in a reconcile.")
SETTLED = Gauge("vllm_pooling_operator_settled_resources", "Resources that need no visit until something changes.")
FIRST_PASS = Gauge("vllm_pooling_operator_first_pass_seconds",
                   "Seconds from the process's start until the first full pass over every resource, run while this "
                   "replica leads, finished (0 until then: a standby replica's stays 0).")
STARTED = time.monotonic()


class Runtime:
    """Owns the loops of one operator replica. `leadership` None means standalone: always acting."""

    def __init__(
        self, ctx: Context, leadership: Leadership | None, *, workers: int = WORKERS, namespaces: list[str] | None = None,
        reconciles: Reconciles | None = None, watch: bool = False, sharding: Sharding | None = None,
    ) -> None:
        self.ctx = ctx
        self.sharding = sharding or Sharding()
        self.leadership = leadership
        self.reconciles = reconciles or Reconciles(ctx)
        self.autoscaler: Autoscaler | None = None
        self.queue: WorkQueue[OwnerKey] = WorkQueue()
        ctx.events.yield_to(self.queue)  # reconciles first, events in the gaps
        self.workers = workers
        self.synced = False
        self.first_pass_done = False  # a full pass ran to the end while leading (FIRST_PASS is set once, then)
        self._settled: set[OwnerKey] = set()  # reconciled, and nothing changed since (the gauge counts them)
        self._failures: dict[str, int] = {}  # uid -> failed reconciles in a row (the backoff)
        self._namespace_labels: dict[str, dict[str, str]] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._passes: set[asyncio.Task[Any]] = set()  # full passes in flight
        # the informers that fill the cache's stores (runtime/watches.py); None: the caller feeds the cache
        self.watches = Watches(self, list(namespaces or []), self.sharding) if watch else None
        self.breaker = Breaker()  # the API server away: one probe, not one retry per resource
        self.webhook_cert: WebhookCertificate | None = None  # the webhook's serving certificate, kept from its Secret
        self.pod_address: PodAddress = pod_ip_address  # how the space gate reaches a pod (a test harness maps it)
        self.space_gate: SpaceGate | None = None  # spec.spaceCheck's canaries (started with the runtime)
        self.readiness: tuple[str, int] | None = None  # (bind, port) of /readyz; None: not served
        self._ready_server: Any = None
        self.series = Series()  # each watched resource's status as Prometheus series (alert rules, dashboards)

    @property
    def leading(self) -> bool:
        return self.leadership is None or self.leadership.leading

    async def _leading(self) -> bool:
        return self.leading

    async def start(self) -> None:
        ctx = self.ctx
        self.autoscaler = Autoscaler(
            ctx.kube, ctx.cache, leading=self._leading, period=AUTOSCALE_SECONDS,
            default_prometheus_url=os.environ.get("VPO_PROMETHEUS_URL", DEFAULT_PROMETHEUS_URL),
            cost_window=COST_WINDOW_SECONDS,
        )
        ctx.tracker = self.autoscaler
        self.space_gate = SpaceGate(ctx.kube, leading=lambda: self.leading, requeue=self._requeue, event=ctx.event,
                                    address=self.pod_address)
        ctx.space = self.space_gate
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.queue.serve(self._work, self.workers, after=self._count_queued), name="workers"))
        if self.watches is not None:
            self.watches.start()
        if self.leadership is not None:
            self._tasks.append(loop.create_task(self.leadership.run(self._acquired, self._background), name="lease"))
        else:
            LEADER.set(1)
        if self.webhook_cert is not None:
            self._tasks.append(loop.create_task(self.webhook_cert.run(lambda: self.leading), name="webhook-certificate"))
        if self.readiness is not None:
            self._ready_server = await readiness.serve(*self.readiness, self.why_not_ready)

    def why_not_ready(self) -> str | None:
        """What keeps this replica out of its Service (runtime/readiness.py), or None."""
        if self.webhook_cert is not None and not self.webhook_cert.loaded:
            return f"no serving certificate for the webhook yet (Secret {self.webhook_cert.namespace}/{self.webhook_cert.secret})"
        return None

    async def stop(self) -> None:
        if self._ready_server is not None:
            await self._ready_server.cleanup()
        if self.watches is not None:
            await self.watches.stop()
        for task in [*self._tasks, *self._passes]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._passes, return_exceptions=True)
        if self.autoscaler is not None:
            await self.autoscaler.close()  # no decision in flight once the Lease is handed over
        if self.space_gate is not None:
            await self.space_gate.close()
        await self.ctx.events.drain(EVENTS_SHUTDOWN_SECONDS)  # events in flight, for a bounded time
        if self.leadership is not None:
            await self.leadership.release()
        await self.ctx.kube.close()

    def _background(self, coro: Any) -> None:
        """Run a pass on the loop, keeping a reference so it is not garbage-collected mid-flight."""
        task = asyncio.get_running_loop().create_task(coro)
        self._passes.add(task)
        task.add_done_callback(self._passes.discard)

    async def _acquired(self) -> None:
        if self.webhook_cert is not None:
            self.webhook_cert.nudge()  # the caBundle and renewals are the leader's: now, not at the next period
        if self.synced:
            await self._pass("leader")

    # ---- events: record and enqueue, never wait on the API ---------------------------------------------

    def cache_synced(self) -> None:
        """Every watched kind's first list is in the cache (runtime/watches.py). The first full pass runs."""
        if self.synced:
            return
        self.synced = True
        self._background(self._pass("start"))

    def on_owner(self, body: dict[str, Any], deleted: bool) -> None:
        """A PoolingService, ScoringService, HiddenStateJob, PoolingJob or ModelCache was listed, changed or went away."""
        key = owner_key(body)
        # the front hosts it claimed before this change and claims now: a host it let go may be another's turn
        hosts = {*raw_front_hosts(self.ctx.cache.owner(key) or {}), *raw_front_hosts(body)}
        self.ctx.cache.observed(body, deleted=deleted)
        if deleted:
            self.forget(key, body["metadata"].get("uid") or "")
        else:
            self.series.publish(key, body)
            self._settled.discard(key)
            self._add(key, first=not self.reconciles.knows(body["metadata"].get("uid") or ""))  # new: ahead of the re-reconciles
        if deleted or (body.get("spec") or {}).get("autoscaling") is not None:
            self._recount_policies()
        for dependent in self.ctx.cache.dependents(key):  # e.g. a cache's users: they wait for it, or mount what it holds
                self._settled.discard(dependent)
                self._add(dependent)
        if label := (body.get("spec") or {}).get("embeddingSpace"):
            for other in self.ctx.cache.claiming_space(key[1], str(label)):  # one may be refused for claiming it
                if (peer := owner_key(other)) != key:
                    self._settled.discard(peer)
                    self._add(peer)
        if hosts:  # one may hold a host another waits for (reconcile/fronts.py)
            for other in self.ctx.cache.claiming_hosts(hosts):
                if (peer := owner_key(other)) != key:
                    self._settled.discard(peer)
                    self._add(peer)

    def on_foreign_owner(self, body: dict[str, Any], deleted: bool) -> None:
        """Another shard's resource changed (shard 0 hears it for the policies' counts only)."""
        if deleted or (body.get("spec") or {}).get("autoscaling") is not None:
            self._recount_policies()

    def on_child(self, body: dict[str, Any], deleted: bool) -> None:
        """A child (or a pod of one) was listed, changed or went away: its owner is reconciled (whose reconcile hands
        a gated pod to the space gate)."""
        self.ctx.cache.observed(body, deleted=deleted)
        key = owning_key(body)
        if self.space_gate is not None:
            self._space(body, key, deleted)
        if deleted and body.get("kind") != "Pod" and key is not None:
            log.info("%s %s/%s of %s %s went away", body.get("kind"), key[1], body["metadata"].get("name"), key[0], key[2])
        if key is not None and key[0] in OWNER_KINDS:
            self._settled.discard(key)
            self._add(key)

    def _space(self, body: dict[str, Any], key: OwnerKey | None, deleted: bool) -> None:
        assert self.space_gate is not None
        meta = body["metadata"]
        if body.get("kind") == "ConfigMap" and (meta.get("labels") or {}).get(REFERENCE_LABEL):
            self.space_gate.reference_changed(str(meta.get("namespace") or ""), str(meta["name"]))
        elif body.get("kind") == "Pod" and deleted:  # (a live pod is handed to the gate by its owner's reconcile)
            self.space_gate.forget_pod(str(meta.get("uid") or ""))

    def _requeue(self, key: OwnerKey) -> None:
        self._settled.discard(key)
        self._add(key)

    def on_queue(self, body: dict[str, Any]) -> None:
        """A Kueue Workload (admitted, pending, preempted) or LocalQueue changed: the queued jobs it concerns."""
        meta = body["metadata"]
        namespace = str(meta.get("namespace") or "")
        if body.get("kind") == "LocalQueue":
            keys = self.ctx.cache.queued_owners(namespace, local_queue=str(meta["name"]))
        else:
            job = workload_job(body)
            keys = [] if job is None else self.ctx.cache.queued_owners(namespace, job=job)
        for key in keys:
            self._settled.discard(key)
            self._add(key)

    def on_policy(self) -> None:
        """A policy appeared, changed or went away: every service may follow another one now (before the caches
        are synced, the first full pass covers it)."""
        if self.synced:
            self._background(self.full_pass("policy"))

    def on_namespace(self, name: str, labels: dict[str, str], deleted: bool) -> None:
        """A namespace's labels decide which policies select it: when they change, its resources are queued."""
        if deleted:
            self._namespace_labels.pop(name, None)
            return
        before = self._namespace_labels.get(name)
        self._namespace_labels[name] = labels
        if before is None or before == labels:
            return  # first seen (the first pass covers it), or nothing that matters changed
        for key in self.ctx.cache.owner_keys():
            if key[1] == name:
                self._settled.discard(key)
                self._add(key)

    def _add(self, key: OwnerKey, *, first: bool = False) -> None:
        if self.synced:
            self.queue.add(key, first=first)
            self._count_queued()

    def _count_queued(self) -> None:
        QUEUED.set(len(self.queue))  # the one place the queue-depth gauge is set

    def _recount_policies(self) -> None:
        if self.synced:
            self.queue.add_after(POLICIES_KEY, POLICY_RECOUNT_SECONDS)

    def forget(self, key: OwnerKey, uid: str) -> None:
        """Drop every piece of per-object state of a deleted resource, so memory stays flat under churn."""
        self._settled.discard(key)
        self.queue.discard(key)
        self.series.drop(key)
        self._failures.pop(uid, None)
        self.reconciles.forget(uid)
        self.ctx.cache.forget(uid)
        if self.autoscaler is not None:
            self.autoscaler.untrack(uid)
        if self.space_gate is not None:
            self.space_gate.forget(key, uid)

    def state_sizes(self) -> dict[str, int]:
        """How much per-object state is held, by every owner of some (the churn test reads it)."""
        return {
            "settled": len(self._settled), "failures": len(self._failures), **self.reconciles.memory.sizes(),
            "written": self.ctx.cache.remembered(), "queued": len(self.queue), "series": len(self.series),
            "delayed": self.queue.delayed - self.queue.is_delayed(POLICIES_KEY),
            "tracked": len(self.autoscaler.services) if self.autoscaler is not None else 0,
        }

    # ---- the worker --------------------------------------------------------------------------------------

    async def _work(self, key: OwnerKey) -> None:
        self._count_queued()
        if not self.leading:
            if self.leadership is not None and self.leadership.held:
                # Held, but the last renewal is older than the renew deadline (a slow API server): act on this key
                # once a renewal lands. Nothing else would bring it back: no pass runs on a renewal, and while the
                # Lease stays held no acquisition comes either (50 services were left without a Deployment).
                self.queue.add_after(key, LATE_RENEWAL_RETRY_SECONDS)
            return  # standing by: a replica that takes the Lease runs a full pass
        if key == POLICIES_KEY:
            await self._policies()
            return
        body = self.ctx.cache.owner(key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        uid = body["metadata"]["uid"]
        hold = self.breaker.wait(time.monotonic())
        if hold:  # the API server is away: one probe at a time, not one request per resource
            self.queue.add_after(key, hold)
            return
        try:
            status = await self.reconciles.reconcile(body)
        except InvalidSpec as exc:
            log.info("Refused %s %s/%s: %s", key[0], key[1], key[2], exc)
            self._settle(key)  # nothing to retry until the spec changes
        except Gone:
            log.info("Skipped %s %s/%s: it or its namespace is being deleted", *key)
        except TransientError as exc:
            was_open = self.breaker.open
            self.breaker.failed(exc.status, time.monotonic())
            if self.breaker.open:
                if not was_open:
                    log.warning("The API server is unreachable (%s); holding every reconcile, probing with backoff", exc)
                self.queue.add_after(key, self.breaker.pause)
                return
            delay = self._backoff(uid)
            log.warning("Will retry %s %s/%s in %.0fs: %s", key[0], key[1], key[2], delay, exc)
            self.queue.add_after(key, delay)
        except Exception:  # never let one object's failure stop a worker
            delay = self._backoff(uid)
            log.exception("Reconcile of %s %s/%s failed; retrying in %.0fs", key[0], key[1], key[2], delay)
            self.queue.add_after(key, delay)
        else:
            if self.breaker.open:
                log.info("The API server answers again; reconciles resume")
            self.breaker.succeeded()
            self._failures.pop(uid, None)
            if settled(status):
                self._settle(key)
            else:
                self._settled.discard(key)
                self.queue.add_after(key, RECHECK_SECONDS)  # conditions that turn with time alone
        finally:
            if self.breaker.probing:  # the probe got answers (refused, gone or a bug): the API server is there
                self.breaker.succeeded()

    def _settle(self, key: OwnerKey) -> None:
        self._settled.add(key)
        SETTLED.set(len(self._settled))

    def _backoff(self, uid: str) -> float:
        attempt = self._failures.get(uid, 0)
        self._failures[uid] = attempt + 1
        return float(min(60, 2**attempt))

    async def _policies(self) -> None:
        """The policies' status: every shard judges them, shard 0 alone writes it (runtime/shards.py)."""
        if not self.sharding.writes_policy_status:
            return
        cache = self.ctx.cache
        services = [b for b in (cache.owner(k) for k in cache.owner_keys()) if b is not None]
        if self.watches is not None:
            foreign = self.watches.foreign
            services += [b for key in foreign for b in foreign[key]]
        await self.reconciles.reconcile_policies(services)

    # ---- passes ------------------------------------------------------------------------------------------

    async def _pass(self, why: str) -> None:
        """A full pass at start or on taking the Lease; the first that runs to the end while leading is the first
        pass the metric and the log report. A replica that syncs its caches before it leads runs nothing here
        ("start" finds it standing by): its first pass is the one it runs on taking the Lease."""
        visited = await self.full_pass(why)
        if visited is None or self.first_pass_done or not self.leading:  # lost the Lease mid-pass: not in sync
            return
        self.first_pass_done = True
        seconds = time.monotonic() - STARTED
        FIRST_PASS.set(seconds)
        log.info("First full pass done (%s): %d resources in sync %.1fs after start", why, visited, seconds)

    async def full_pass(self, why: str) -> int | None:
        """Queue every resource and wait until the queue has drained; returns how many were queued, or None when
        this replica does not lead (nothing was queued)."""
        if not self.leading:
            return None
        keys = self.ctx.cache.owner_keys()
        self._settled.clear()
        for key in keys:
            self.queue.add(key)
        self.queue.add(POLICIES_KEY)
        self._count_queued()
        PASSES.labels(why).inc()
        await self.queue.join()
        return len(keys)
