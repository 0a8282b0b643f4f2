"""The event queue (reconcile/context.Events): events never hold a reconcile up, at most EVENTS_IN_FLIGHT are
posted at once, at most EVENTS_BACKLOG wait (the oldest dropped and counted beyond it, issue 48: a burst of ten
thousand services left events posting into the idle minute after it), and a waiting event keeps no more of its
object than the Event needs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY

from pooling_operator.reconcile.context import EVENTS_BACKLOG, EVENTS_IN_FLIGHT, Events
from tests.factories import API, pooling


class GatedKube:
    """Holds every event until the gate opens; records the most posted at once and what each event carried."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.posting = 0
        self.most = 0
        self.posted: list[tuple[dict[str, Any], str]] = []

    async def event(self, owner: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.posting += 1
        self.most = max(self.most, self.posting)
        try:
            await self.gate.wait()
            self.posted.append((owner, message))
        finally:
            self.posting -= 1


def waiting() -> float:
    return REGISTRY.get_sample_value("vllm_pooling_operator_events_waiting") or 0.0


def dropped() -> float:
    return REGISTRY.get_sample_value("vllm_pooling_operator_events_dropped_total") or 0.0


def owner() -> dict[str, Any]:
    body = pooling(name="svc", namespace="team")
    body["metadata"].update(uid="u1", resourceVersion="7", generation=2, managedFields=[{"manager": "kubectl"}])
    return body


def test_a_burst_keeps_the_newest_events_and_counts_the_dropped_ones(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        kube = GatedKube()
        events = Events(kube)  # type: ignore[arg-type]
        before_waiting, before_dropped = waiting(), dropped()
        extra = 250
        total = EVENTS_IN_FLIGHT + EVENTS_BACKLOG + extra
        for i in range(EVENTS_IN_FLIGHT):
            events.post(owner(), "Normal", "Created", f"event {i}")
        await asyncio.sleep(0)  # the workers take their events (not a wait for anything: one turn of the loop)
        assert kube.posting == EVENTS_IN_FLIGHT
        for i in range(EVENTS_IN_FLIGHT, total):
            events.post(owner(), "Normal", "Created", f"event {i}")
        assert waiting() - before_waiting == EVENTS_IN_FLIGHT + EVENTS_BACKLOG
        assert dropped() - before_dropped == extra
        kube.gate.set()
        await events.drain()
        messages = [m for _, m in kube.posted]
        assert len(messages) == EVENTS_IN_FLIGHT + EVENTS_BACKLOG
        # the first EVENTS_IN_FLIGHT were already posting; of the rest, the oldest `extra` went
        kept = [f"event {i}" for i in range(EVENTS_IN_FLIGHT)] + [f"event {i}" for i in range(EVENTS_IN_FLIGHT + extra, total)]
        assert sorted(messages) == sorted(kept)
        assert kube.most == EVENTS_IN_FLIGHT
        assert waiting() == before_waiting
        said = [r.getMessage() for r in caplog.records if "Dropped" in r.getMessage()]
        assert said == [f"Dropped {extra} events: more than {EVENTS_BACKLOG} waited to be posted (a burst faster than the "
                        "API server took them); the newest were kept"]  # once, when the queue emptied

    asyncio.run(main())


def test_a_waiting_event_keeps_a_reference_not_the_object() -> None:
    async def main() -> None:
        kube = GatedKube()
        kube.gate.set()
        events = Events(kube)  # type: ignore[arg-type]
        events.post(owner(), "Normal", "Created", "Created Deployment svc.")
        await events.drain()
        [(ref, _)] = kube.posted
        assert ref == {"apiVersion": API, "kind": "PoolingService",
                       "metadata": {"name": "svc", "namespace": "team", "uid": "u1", "resourceVersion": "7"}}

    asyncio.run(main())


def test_events_posted_after_the_queue_emptied_are_still_posted() -> None:
    async def main() -> None:
        kube = GatedKube()
        kube.gate.set()
        events = Events(kube)  # type: ignore[arg-type]
        for round_ in range(3):
            for i in range(EVENTS_IN_FLIGHT + 3):
                events.post(owner(), "Normal", "Created", f"{round_}.{i}")
            await events.drain()
            assert len(kube.posted) == (round_ + 1) * (EVENTS_IN_FLIGHT + 3)

    asyncio.run(main())
