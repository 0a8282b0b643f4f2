"""Leadership by a `coordination.k8s.io` Lease, as client-go's leader election.

The holder renews every `RETRY_SECONDS`; a candidate takes an expired Lease (no renewal *observed* for
`LEASE_SECONDS`, by its own clock, so clocks need not agree) with an optimistic-concurrency update, so two
candidates can never both win; a holder that has not renewed within `RENEW_DEADLINE_SECONDS` steps down before
anyone else may take over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Gauge

from pooling_operator.api.clock import micro_time
from pooling_operator.k8s.api import ApiError

log = logging.getLogger(__name__)

LEASE_SECONDS = 15
RENEW_DEADLINE_SECONDS = 10
RETRY_SECONDS = 2
LEADER = Gauge("vllm_pooling_operator_leader", "1 while this replica holds the Lease and acts; 0 while it stands by.")


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
        stamp = micro_time()
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
                why = str(exc) or type(exc).__name__
                if isinstance(exc, TimeoutError):
                    why = f"no answer within {RENEW_DEADLINE_SECONDS / 2:.0f} s"
                log.info("Lease %s/%s not renewed: %s", self.namespace, self.name, why)
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
