"""k8s/informer.py, k8s/store.py and runtime/watches.py over a scripted API: list in pages, watch from the
list's version, a 410 re-listed and compared with what was known, a kind not served until its CRD appears,
and the stores the cache reads. The same code against the real API server: e2e/tests/test_informer_apiserver.py
and the fault tests (e2e/tests/operator/test_faults.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pooling_operator.api.kinds import KINDS
from pooling_operator.k8s.api import ApiError, TransientError, classify
from pooling_operator.k8s.informer import Event, Informer, relist_events
from pooling_operator.k8s.store import Store


def obj(name: str, uid: str, rv: int, kind: str = "Deployment", **meta: Any) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": "apps/v1", "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": str(rv), **meta}}


# ---- relist_events: what a list tells, compared with what was known ----

@pytest.mark.parametrize(("known", "listed", "first", "want"), [
    ({}, [obj("a", "1", 5)], True, [("ADDED", "a", False)]),
    ({"1": obj("a", "1", 5)}, [obj("a", "1", 5)], True, [("MODIFIED", "a", False)]),  # a first list hands all over
    ({"1": obj("a", "1", 5)}, [obj("a", "1", 5)], False, []),  # unchanged: nothing to tell
    ({"1": obj("a", "1", 5)}, [obj("a", "1", 7)], False, [("MODIFIED", "a", False)]),
    ({"1": obj("a", "1", 5)}, [obj("b", "2", 9)], False, [("ADDED", "b", False), ("DELETED", "a", True)]),
    ({"1": obj("a", "1", 5)}, [obj("a", "3", 9)], False, [("ADDED", "a", False), ("DELETED", "a", True)]),  # same name, new uid
    ({"1": obj("a", "1", 5), "2": obj("b", "2", 6)}, [], False, [("DELETED", "a", True), ("DELETED", "b", True)]),
])  # fmt: skip
def test_a_list_compared_with_what_was_known(known: dict[str, Any], listed: list[dict[str, Any]], first: bool, want: list[Any]) -> None:
    events = relist_events(known, listed, first=first)
    assert [(e.type, e.body["metadata"]["name"], e.vanished) for e in events] == want
    assert all(e.listed for e in events)


# ---- Store ----

def test_a_store_keeps_each_object_once_under_its_current_key() -> None:
    store = Store()
    store.put("u1", ("PoolingService", "ns", "a"), {"n": 1})
    store.put("u2", ("PoolingService", "ns", "a"), {"n": 2})
    assert sorted(v["n"] for v in store[("PoolingService", "ns", "a")]) == [1, 2] and len(store) == 1
    store.put("u1", ("PoolingService", "ns", "b"), {"n": 3})  # its owner label changed: moved
    assert store[("PoolingService", "ns", "a")] == [{"n": 2}] and store.get(("PoolingService", "ns", "b")) == [{"n": 3}]
    store.put("u2", None, {"n": 4})  # belongs to nothing kept: dropped
    assert ("PoolingService", "ns", "a") not in store and store.objects() == 1
    assert store.remove("u1") == {"n": 3} and store.remove("u1") is None
    assert len(store) == 0 and store.get("x") is None and list(store.items()) == []


# ---- Informer over a scripted API ----

class Script:
    """A Kube whose lists and watches answer from queues the test fills: a list answer is a dict or an
    exception; a watch is a list of events (dicts) or an exception, and ends when they are spent."""

    def __init__(self) -> None:
        self.lists: list[Any] = []
        self.watches: list[Any] = []
        self.requests: list[tuple[str, list[tuple[str, Any]]]] = []
        self.idle = asyncio.Event()  # set when the script ran out: the informer waits there

    async def request(self, method: str, path: str, *, query: Any = None, accept: str = "", **_: Any) -> Any:
        self.requests.append(("list " + path, list(query or [])))
        if not self.lists:
            self.idle.set()
            await asyncio.Event().wait()
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def watch(self, path: str, query: list[tuple[str, Any]], *, accept: str = "", timeout: int = 300) -> AsyncIterator[dict[str, Any]]:
        self.requests.append(("watch " + path, [*query, ("timeoutSeconds", str(timeout))]))
        if not self.watches:
            self.idle.set()
            await asyncio.Event().wait()
        answer = self.watches.pop(0)
        if isinstance(answer, Exception):
            raise answer
        for event in answer:
            yield event


def listing(*items: dict[str, Any], rv: int = 10, cont: str = "") -> dict[str, Any]:
    return {"metadata": {"resourceVersion": str(rv), **({"continue": cont} if cont else {})}, "items": [dict(i) for i in items]}


async def until_idle(script: Script, informer: Informer) -> None:
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(script.idle.wait(), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def informer_of(script: Script, events: list[Event], lists: list[int] | None = None, kind: str = "Deployment") -> Informer:
    return Informer(script, KINDS[kind], None, handle=events.append,  # type: ignore[arg-type]
                    listed=lambda i: (lists if lists is not None else []).append(i.lists), project=dict,
                    selector={"app.kubernetes.io/managed-by": "x"}, pause=lambda s: asyncio.sleep(0))  # fmt: skip


def test_lists_in_pages_then_watches_from_the_lists_version_and_resumes_after_the_servers_timeout() -> None:
    script, events, lists = Script(), [], []
    script.lists = [listing(obj("a", "1", 3), rv=10, cont="next"), listing(obj("b", "2", 4), rv=10)]
    script.watches = [
        [{"type": "ADDED", "object": obj("c", "3", 11)}, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}],
        [{"type": "DELETED", "object": obj("a", "1", 16)}],
    ]
    informer = informer_of(script, events, lists)
    asyncio.run(until_idle(script, informer))
    assert [(e.type, e.body["metadata"]["name"], e.listed) for e in events] == [
        ("ADDED", "a", True), ("ADDED", "b", True), ("ADDED", "c", False), ("DELETED", "a", False)]
    assert lists == [1]  # listed once, after both pages
    assert events[0].body["kind"] == "Deployment"
    pages = [q for r, q in script.requests if r.startswith("list")]
    assert ("limit", "500") in pages[0] and ("continue", "next") in pages[1]
    assert ("labelSelector", "app.kubernetes.io/managed-by=x") in pages[0]
    watches = [dict(q) for r, q in script.requests if r.startswith("watch")]
    assert [w["resourceVersion"] for w in watches] == ["10", "15", "16"]  # the list's, then the last seen (a bookmark's)
    assert all(w["allowWatchBookmarks"] == "true" for w in watches)
    assert set(informer.known) == {"2", "3"}


def test_a_410_relists_and_hands_over_only_the_changes_and_what_vanished() -> None:
    script, events = Script(), []
    script.lists = [listing(obj("a", "1", 3), obj("b", "2", 4), obj("c", "3", 5), rv=10),
                    listing(obj("a", "1", 3), obj("c", "3", 30), obj("d", "4", 31), rv=40)]
    script.watches = [[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}]]
    informer = informer_of(script, events)
    asyncio.run(until_idle(script, informer))
    after = [(e.type, e.body["metadata"]["name"], e.vanished) for e in events[3:]]
    assert after == [("MODIFIED", "c", False), ("ADDED", "d", False), ("DELETED", "b", True)]
    assert [dict(q)["resourceVersion"] for r, q in script.requests if r.startswith("watch")] == ["10", "40"]
    assert informer.lists == 2


def test_a_410_on_the_watch_request_itself_and_an_expired_continue_token_list_again() -> None:
    script, events = Script(), []
    script.lists = [listing(obj("a", "1", 3), rv=10), listing(obj("a", "1", 3), rv=20, cont="t"),
                    ApiError(410, "Gone", "continue token expired"), listing(obj("a", "1", 3), rv=21)]
    script.watches = [ApiError(410, "Gone")]
    informer = informer_of(script, events)
    asyncio.run(until_idle(script, informer))
    assert [(e.type, e.body["metadata"]["name"]) for e in events] == [("ADDED", "a")]  # nothing changed
    lists = [q for r, q in script.requests if r.startswith("list")]
    assert len(lists) == 4 and not any(k == "continue" for k, _ in lists[3])  # the expired page: from the start
    assert informer.lists == 2


def test_a_broken_connection_resumes_from_the_last_version_with_backoff() -> None:
    script, events = Script(), []
    pauses: list[float] = []
    script.lists = [listing(rv=10)]
    script.watches = [TransientError(0, "ClientConnectorError"), [{"type": "ADDED", "object": obj("a", "1", 12)}],
                      [{"type": "ERROR", "object": {"code": 500, "message": "etcd leader changed"}}]]
    informer = informer_of(script, events)

    async def pause(s: float) -> None:
        pauses.append(s)

    informer.pause = pause
    asyncio.run(until_idle(script, informer))
    assert [dict(q)["resourceVersion"] for r, q in script.requests if r.startswith("watch")] == ["10", "10", "12", "12"]
    assert len(pauses) == 2 and all(0 < p < 2 for p in pauses)
    assert informer.lists == 1  # never re-listed


def test_a_kind_not_served_counts_as_listed_and_empty_until_served_then_its_crd_going_empties_it() -> None:
    async def main() -> None:
        script, events, lists = Script(), [], []
        script.lists = [ApiError(404, "Not Found")]
        informer = informer_of(script, events, lists, kind="ScaledObject")
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(_until(lambda: lists == [1]), 5)
        assert informer.served is False and events == []
        script.lists = [listing(obj("s", "9", 50, kind="ScaledObject"), rv=50), ApiError(404, "Not Found")]
        script.watches = [ApiError(404, "Not Found")]  # served, listed, then its CRD deleted
        informer.serve()
        await asyncio.wait_for(_until(lambda: len(lists) == 3), 5)
        assert [(e.type, e.body["metadata"]["name"], e.vanished) for e in events] == [("ADDED", "s", False), ("DELETED", "s", True)]
        assert informer.served is False and informer.known == {}
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())


async def _until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0)


# ---- runtime/watches.py: the stores, the sync barrier, CRDs ----

class Recorder:
    """The runtime's side of the watches: what each event handed over."""

    def __init__(self) -> None:
        from pooling_operator.k8s.cache import Cache
        from pooling_operator.reconcile import Context

        self.calls: list[tuple[Any, ...]] = []
        self.synced = 0
        self.ctx = Context(kube=Script(), cache=Cache())  # type: ignore[arg-type]

    def on_owner(self, body: dict[str, Any], deleted: bool) -> None:
        self.calls.append(("owner", body["metadata"]["name"], deleted))

    def on_child(self, body: dict[str, Any], deleted: bool) -> None:
        self.calls.append(("child", body["metadata"]["name"], deleted))

    def on_policy(self) -> None:
        self.calls.append(("policy",))

    def on_namespace(self, name: str, labels: dict[str, str], deleted: bool) -> None:
        self.calls.append(("namespace", name, labels, deleted))

    def on_queue(self, body: dict[str, Any]) -> None:
        self.calls.append(("queue", body["metadata"]["name"]))

    def cache_synced(self) -> None:
        self.synced += 1


def test_watches_fill_the_caches_stores_and_say_synced_once_every_kind_has_listed() -> None:
    from pooling_operator.runtime.watches import Watches

    async def main() -> None:
        runtime = Recorder()
        watches = Watches(runtime, ["a", "b"])  # type: ignore[arg-type]
        scopes = {(i.kind.kind, i.namespace) for i in watches.informers}
        assert ("Deployment", "a") in scopes and ("Deployment", "b") in scopes and ("Namespace", None) in scopes
        svc = {"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "PoolingService",
               "metadata": {"name": "s", "namespace": "a", "uid": "o1", "resourceVersion": "1", "managedFields": [{"manager": "x"}]}}
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "s", "namespace": "a", "uid": "c1", "resourceVersion": "2",
               "ownerReferences": [{"kind": "PoolingService", "name": "s", "uid": "o1", "controller": True}]}}
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "uid": "n1", "resourceVersion": "3", "labels": {"team": "x"}}}
        first = {"PoolingService": svc, "Deployment": dep, "Namespace": ns}
        for informer in watches.informers:
            body = first.get(informer.kind.kind)
            for e in ([Event("ADDED", informer.project(dict(body)), listed=True)] if body and informer.namespace in ("a", None) else []):
                watches._handler(informer.kind)(e)
        for informer in watches.informers[:-1]:
            informer.lists = 1
            watches._listed(informer)
        assert runtime.synced == 0  # one informer has not listed yet
        last = watches.informers[-1]
        last.lists = 1
        watches._listed(last)
        watches._listed(last)
        assert runtime.synced == 1
        cache = runtime.ctx.cache
        assert cache.owner(("PoolingService", "a", "s"))["metadata"]["uid"] == "o1"
        assert "managedFields" not in cache.owner(("PoolingService", "a", "s"))["metadata"]
        assert list(cache.children_of(("PoolingService", "a", "s"), ["Deployment"], "o1")) == [("Deployment", "s")]
        assert cache.namespace_labels("a") == {"team": "x"}
        watches._handler(KINDS["Deployment"])(Event("DELETED", dep))
        assert cache.children_of(("PoolingService", "a", "s"), ["Deployment"], "o1") == {}
        assert ("child", "s", True) in runtime.calls and ("namespace", "a", {"team": "x"}, False) in runtime.calls

    asyncio.run(main())


def test_a_kind_not_served_starts_the_crd_watch_and_its_crd_appearing_serves_it() -> None:
    from pooling_operator.runtime.watches import Watches

    async def main() -> None:
        runtime = Recorder()
        watches = Watches(runtime, [])  # type: ignore[arg-type]
        [workloads] = [i for i in watches.informers if i.kind.kind == "Workload"]
        workloads.served, workloads.lists = False, 1
        watches._listed(workloads)
        assert watches.crds is not None
        served: list[bool] = []
        workloads.serve = lambda: served.append(True)  # type: ignore[method-assign]
        watches._crd_event(Event("ADDED", {"metadata": {"name": "scaledobjects.keda.sh"}}))
        assert served == []
        watches._crd_event(Event("MODIFIED", {"metadata": {"name": "workloads.kueue.x-k8s.io"}}))
        assert served == [True]
        await watches.stop()

    asyncio.run(main())


def test_a_receiver_that_fails_and_an_unreadable_answer_do_not_stop_the_watch() -> None:
    script, seen = Script(), []
    script.lists = [listing(obj("a", "1", 3), rv=10), listing(obj("a", "1", 3), obj("bad", "2", 11), obj("b", "3", 12), rv=20)]
    script.watches = [[{"type": "ADDED", "object": obj("bad", "2", 11)}, {"type": "ADDED", "object": obj("b", "3", 12)}],
                      ValueError("Expecting value: line 1 column 1"), [{"type": "ADDED", "object": obj("c", "4", 21)}]]

    def handle(event: Event) -> None:
        if event.body["metadata"]["name"] == "bad":
            raise RuntimeError("a receiver's bug")
        seen.append(event.body["metadata"]["name"])

    informer = informer_of(script, [])
    informer.handle = handle
    asyncio.run(until_idle(script, informer))
    assert seen == ["a", "b", "c"]  # the unreadable answer: listed again, nothing changed, nothing handed over twice
    assert [dict(q)["resourceVersion"] for r, q in script.requests if r.startswith("watch")] == ["10", "12", "20", "21"]


def test_a_429_is_retried_after_its_retry_after_and_never_with_a_growing_pause() -> None:
    """A restarted API server answers every watch 429 (Retry-After: 1) while its watch cache fills, for seconds
    under load (KEP-4568). Eight such answers in a row are each followed after about a second; the backoff of
    broken connections (0.5 s growing to 30 s) would have waited 16 s before the eighth try, and a child deleted
    meanwhile went unseen that long (test_faults' API-server restart, 2 of 3 fresh runs)."""
    script, events = Script(), []
    pauses: list[float] = []
    script.lists = [listing(rv=10)]
    script.watches = [*(TransientError(429, "Too Many Requests", "storage is (re)initializing", retry_after=1.0) for _ in range(8)),
                      [{"type": "DELETED", "object": obj("a", "1", 12)}], TransientError(0, "ClientConnectorError")]
    informer = informer_of(script, events)

    async def pause(s: float) -> None:
        pauses.append(s)

    informer.pause = pause
    asyncio.run(until_idle(script, informer))
    assert len(pauses) == 9 and all(1.0 <= p <= 1.2 for p in pauses[:8]), pauses
    assert pauses[8] < 1  # a broken connection after them starts the backoff from its first step
    assert [dict(q)["resourceVersion"] for r, q in script.requests if r.startswith("watch")] == ["10"] * 9 + ["12", "12"]
    assert informer.lists == 1


def test_an_answers_retry_after_header_is_read_in_seconds() -> None:
    assert classify(429, "Too Many Requests", "", {"Retry-After": "2"}).retry_after == 2.0
    assert classify(429, "Too Many Requests", "").retry_after is None
    assert classify(503, "Unavailable", "", {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}).retry_after is None


def test_a_policys_own_status_write_reconciles_nothing_but_a_change_of_its_rules_does() -> None:
    """Shard 0 writes each policy's count of services while they come and go; each write came back as a watch
    event, and every shard ran a full pass over all its resources for it."""
    from pooling_operator.runtime.watches import Watches

    runtime = Recorder()
    watches = Watches(runtime, [])  # type: ignore[arg-type]
    handle = watches._handler(KINDS["AutoscalingPolicy"])
    policy = {"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "AutoscalingPolicy",
              "metadata": {"name": "default", "uid": "p1", "resourceVersion": "1", "generation": 1},
              "spec": {"default": True, "limits": {"maxReplicas": 8}}}
    counted = {**policy, "metadata": {**policy["metadata"], "resourceVersion": "2"}, "status": {"services": 40}}
    tighter = {**counted, "metadata": {**policy["metadata"], "resourceVersion": "3", "generation": 2},
               "spec": {"default": True, "limits": {"maxReplicas": 4}}}
    going = {**tighter, "metadata": {**tighter["metadata"], "resourceVersion": "4", "deletionTimestamp": "2026-12-06T12:00:00Z"}}
    for event, calls in [(Event("ADDED", policy), 1), (Event("MODIFIED", counted), 1), (Event("MODIFIED", counted), 1),
                         (Event("MODIFIED", tighter), 2), (Event("MODIFIED", going), 3), (Event("DELETED", going), 4)]:
        handle(event)
        assert runtime.calls.count(("policy",)) == calls, event.type
    assert watches.policies.objects() == 0


def test_the_first_watch_after_an_interruption_is_short_and_the_next_long_again() -> None:
    """A restarted API server accepted a watch and sent nothing on it, not even a deletion (test_faults' restart,
    3 fresh runs of many): after a broken connection, a 429 or a re-list the next watch asks to be ended after
    SETTLING_WATCH_SECONDS; once one ends as asked, the next are the usual five minutes."""
    script, events = Script(), []
    script.lists = [listing(rv=10), listing(rv=20)]
    script.watches = [[], TransientError(0, "ClientConnectorError"), [], [], [{"type": "ERROR", "object": {"code": 410}}], []]
    informer = informer_of(script, events)

    async def pause(s: float) -> None:
        pass

    informer.pause = pause
    asyncio.run(until_idle(script, informer))
    asked = [dict(q)["timeoutSeconds"] for r, q in script.requests if r.startswith("watch")]
    # first watch long; after the broken connection short, then long; after the 410's re-list short, then long
    assert asked == ["300", "300", "10", "300", "300", "10", "300"], asked
