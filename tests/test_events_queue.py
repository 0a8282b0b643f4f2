"""The event queue (reconcile/context.Events): events never hold a reconcile up, at most EVENTS_IN_FLIGHT are
posted at once, at most EVENTS_BACKLOG wait (the oldest dropped and counted beyond it, issue 48: a burst of ten
thousand services left events posting into the idle minute after it), and a waiting event keeps no more of its
object than the Event needs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY

from pooling_operator.api.clock import micro_time
from pooling_operator.reconcile.context import EVENTS_BACKLOG, EVENTS_IN_FLIGHT, EVENTS_WHILE_BUSY, Events
from pooling_operator.runtime.queue import WorkQueue
from tests.factories import API, pooling


class GatedKube:
    """Holds every event until the gate opens; records the most posted at once and what each event carried."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.posting = 0
        self.most = 0
        self.posted: list[tuple[dict[str, Any], str]] = []
        self.stamps: list[str | None] = []
        self.taken: list[str] = []  # in the order the workers took them

    async def event(self, owner: dict[str, Any], type_: str, reason: str, message: str, at: str | None = None) -> None:
        self.posting += 1
        self.most = max(self.most, self.posting)
        self.taken.append(message)
        try:
            await self.gate.wait()
            self.posted.append((owner, message))
            self.stamps.append(at)
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


def test_reconciles_go_first_events_post_in_the_gaps() -> None:
    """While the work queue holds keys, at most EVENTS_WHILE_BUSY events post at once; once it is empty, the rest
    go, EVENTS_IN_FLIGHT at once. The children a burst still has to create are worth more of the API server's
    time than news about the ones already made (issue 48)."""

    async def main() -> None:
        kube = GatedKube()
        events = Events(kube)  # type: ignore[arg-type]
        queue: WorkQueue[str] = WorkQueue()
        events.yield_to(queue)
        queue.add("team/svc")
        assert await queue.get() == "team/svc"  # a reconcile running
        for i in range(40):
            events.post(owner(), "Normal", "Created", f"event {i}")
        await asyncio.sleep(0)  # one turn of the loop: the workers take what they may
        assert kube.posting == EVENTS_WHILE_BUSY
        kube.gate.set()
        kube.gate = asyncio.Event()  # the first two are posted; the next ones are held at the gate again
        while len(kube.posted) < EVENTS_WHILE_BUSY or kube.posting < EVENTS_WHILE_BUSY:
            await asyncio.sleep(0)
        assert kube.posting == EVENTS_WHILE_BUSY  # still busy: no more than two
        queue.done("team/svc")  # the queue empties: the events take the gap
        while kube.posting < EVENTS_IN_FLIGHT:
            await asyncio.sleep(0)
        assert kube.most == EVENTS_IN_FLIGHT
        kube.gate.set()
        await events.drain()
        assert len(kube.posted) == 40

    asyncio.run(asyncio.wait_for(main(), 10))


def test_drain_does_not_wait_for_a_queue_that_never_empties() -> None:
    """At shutdown the workers are cancelled with keys still queued: the events still go out."""

    async def main() -> None:
        kube = GatedKube()
        kube.gate.set()
        events = Events(kube)  # type: ignore[arg-type]
        queue: WorkQueue[str] = WorkQueue()
        events.yield_to(queue)
        queue.add("team/svc")  # never taken
        for i in range(10):
            events.post(owner(), "Normal", "Created", f"event {i}")
        await asyncio.wait_for(events.drain(), 5)
        assert len(kube.posted) == 10

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_stop_gives_up_events_the_api_server_does_not_take(caplog: pytest.LogCaptureFixture) -> None:
    """A shutdown while the API server is away waits a bounded time for the events, then counts the rest as dropped
    and says so (the runtime stops with EVENTS_SHUTDOWN_SECONDS)."""

    async def main() -> None:
        kube = GatedKube()  # the gate never opens: every post hangs
        events = Events(kube)  # type: ignore[arg-type]
        before_waiting, before_dropped = waiting(), dropped()
        for i in range(EVENTS_IN_FLIGHT + 5):
            events.post(owner(), "Normal", "Created", f"event {i}")
        await events.drain(timeout=0.05)
        assert kube.posted == [] and kube.posting == 0
        assert dropped() - before_dropped == EVENTS_IN_FLIGHT + 5
        assert waiting() == before_waiting

    asyncio.run(asyncio.wait_for(main(), 10))
    said = [r.getMessage() for r in caplog.records if "Gave up" in r.getMessage()]
    assert said == [f"Gave up {EVENTS_IN_FLIGHT + 5} events not posted within 0.05s of stopping"]


def test_warnings_go_first_and_are_dropped_last() -> None:
    """A full queue drops the oldest Normal event, never a Warning while a Normal one waits; Warnings are posted
    before Normal events; each event keeps the time it was raised."""

    async def main() -> None:
        kube = GatedKube()
        events = Events(kube)  # type: ignore[arg-type]
        for i in range(EVENTS_IN_FLIGHT):  # these take every worker
            events.post(owner(), "Normal", "Created", f"busy {i}")
        await asyncio.sleep(0)  # one turn of the loop: the workers take their events
        events.post(owner(), "Warning", "Degraded", "warning 0")
        raised = micro_time()
        for i in range(EVENTS_BACKLOG):
            events.post(owner(), "Normal", "Created", f"normal {i}")
        events.post(owner(), "Warning", "Degraded", "warning 1")
        kube.gate.set()
        await events.drain()
        messages = [m for _, m in kube.posted]
        after_busy = kube.taken[EVENTS_IN_FLIGHT:]
        assert after_busy[:2] == ["warning 0", "warning 1"]  # first, and neither dropped
        assert after_busy[2:] == [f"normal {i}" for i in range(2, EVENTS_BACKLOG)]  # the two oldest Normal ones went
        stamp = kube.stamps[messages.index("warning 0")]
        assert stamp is not None and stamp <= raised  # when it was raised, not when it was posted

    asyncio.run(asyncio.wait_for(main(), 10))
