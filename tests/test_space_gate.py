"""The space gate (runtime/space_gate.py) against a recording API and the PoolingJob driver's fake vLLM serving the
canaries: the first pod of a space records the reference, the next verifies against it, an engine that computes
another space is held back (onDrift hold) or admitted with the drift said (warn), a pod that does not answer is
tried again, and a user's canaries that are missing are said so. The same gate on the real API server and real
vLLM: e2e/tests/operator/test_space_gate.py and real_vllm/test_space_check_real.py."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from pooling_operator.k8s.api import ApiError
from pooling_operator.runtime.space_gate import SpaceGate
from pooling_operator.vllm import space_check as sc
from tests.factories import pooling
from tests.pooling_support import FakePooling, fake_pooling


class Api:
    """ConfigMaps and pods' conditions as the API server keeps them; a create of an existing name is a 409."""

    def __init__(self) -> None:
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.conditions: dict[str, dict[str, Any]] = {}  # pod name -> the gate's condition

    async def get(self, kind: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.configmaps.get((str(namespace), name))) if kind.kind == "ConfigMap" else None

    async def apply(self, obj: dict[str, Any], *, subresource: str | None = None, create: bool = False, **_: Any) -> dict[str, Any]:
        meta = obj["metadata"]
        if obj["kind"] == "Pod":
            assert subresource == "status"
            [self.conditions[meta["name"]]] = obj["status"]["conditions"]
            return obj
        key = (meta["namespace"], meta["name"])
        if create and key in self.configmaps:
            raise ApiError(409, "Conflict", "already exists")
        self.configmaps[key] = copy.deepcopy(obj)
        return obj


def owner(**space_check: Any) -> dict[str, Any]:
    body = pooling({"embeddingSpace": "docs-v1", "spaceCheck": space_check}, name="minilm", namespace="search")
    body["metadata"]["uid"] = "svc-uid"
    return body


def pod(name: str, ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "search", "uid": f"uid-{name}"},
            "spec": {"readinessGates": [{"conditionType": sc.READINESS_GATE}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [{"name": "vllm", "ready": ready}]}}  # fmt: skip


def gate(api: Api, urls: dict[str, str | None]) -> tuple[SpaceGate, list[tuple[str, str, str]], list[Any]]:
    events: list[tuple[str, str, str]] = []
    requeued: list[Any] = []
    g = SpaceGate(api, leading=lambda: True, requeue=requeued.append,  # type: ignore[arg-type]
                  event=lambda body, t, reason, message: events.append((t, reason, message)),
                  address=lambda p, port: urls.get(p["metadata"]["name"]))
    return g, events, requeued


def check(g: SpaceGate, body: dict[str, Any], p: dict[str, Any]) -> str:
    async def main() -> str:
        try:
            return await g.check(body, p)
        finally:
            await g.close()

    return asyncio.run(main())


def test_the_first_pod_records_the_next_verifies_and_another_engine_is_held_back() -> None:
    api = Api()
    with fake_pooling(FakePooling()) as same, fake_pooling(FakePooling(skew=0.05)) as other:
        g, events, requeued = gate(api, {"a": same, "b": same, "c": other})
        assert check(g, owner(), pod("a")) == sc.RECORDED
        [(ns, name)] = api.configmaps
        assert (ns, name) == ("search", sc.reference_name("docs-v1"))
        ref = sc.reference_from(api.configmaps[(ns, name)]["data"], api.configmaps[(ns, name)]["binaryData"])
        assert ref is not None and ref.recorded_from == "search/a" and len(ref.names) == len(sc.builtin(False))
        assert api.conditions["a"]["status"] == "True" and ("Normal", "SpaceRecorded") in [(t, r) for t, r, _ in events]
        g, events, _ = gate(api, {"a": same, "b": same, "c": other})
        assert check(g, owner(), pod("b")) == sc.VERIFIED and api.conditions["b"]["status"] == "True"
        assert "least cosine 1.0" in api.conditions["b"]["message"] and "recorded from pod search/a" in api.conditions["b"]["message"]
        assert check(g, owner(), pod("c")) == sc.DRIFT
    drift = api.conditions["c"]
    assert (drift["status"], drift["reason"]) == ("False", sc.DRIFT) and "held back (onDrift hold)" in drift["message"]
    assert any(t == "Warning" and r == "SpaceDrift" and "Pod c drifted" in m for t, r, m in events)
    status = g.status_of("svc-uid")
    assert status["lastCheck"]["pod"] == "c" and status["lastCheck"]["worstCosine"] < 0.9995
    assert status["reference"]["configMap"] == name and status["reference"]["recordedFrom"] == "search/a"
    assert requeued and requeued[-1] == ("PoolingService", "search", "minilm")


def test_with_on_drift_warn_the_pod_is_admitted_and_the_drift_said() -> None:
    api = Api()
    with fake_pooling(FakePooling()) as same, fake_pooling(FakePooling(skew=0.05)) as other:
        g, _, _ = gate(api, {"a": same, "c": other})
        check(g, owner(onDrift="warn"), pod("a"))
        g, _, _ = gate(api, {"a": same, "c": other})
        assert check(g, owner(onDrift="warn"), pod("c")) == sc.DRIFT_ALLOWED
    assert api.conditions["c"]["status"] == "True" and "admitted (onDrift warn)" in api.conditions["c"]["message"]


def test_a_pod_that_does_not_answer_is_tried_again_and_missing_canaries_are_said() -> None:
    api = Api()
    g, _, _ = gate(api, {"a": "http://127.0.0.1:9"})  # nothing listens on the discard port
    assert check(g, owner(), pod("a")) == sc.UNREACHABLE
    assert api.conditions["a"]["status"] == "False" and g._pending["uid-a"].attempts == 1
    g, _, _ = gate(api, {})
    assert check(g, owner(), pod("a")) == sc.UNREACHABLE and "no address" in api.conditions["a"]["message"]
    g, _, _ = gate(api, {"a": "http://127.0.0.1:9"})
    assert check(g, owner(canaries={"configMapRef": {"name": "mine", "key": "c.jsonl"}}), pod("a")) == sc.CANARIES_INVALID
    assert "ConfigMap mine does not exist" in api.conditions["a"]["message"]


def test_only_a_gated_pod_whose_vllm_is_ready_and_has_no_verdict_is_taken() -> None:
    api = Api()
    g, _, _ = gate(api, {})
    taken: list[str] = []

    async def main() -> None:
        async def fake_check(body: dict[str, Any], p: dict[str, Any]) -> str:
            taken.append(p["metadata"]["name"])
            return "x"

        g.check = fake_check  # type: ignore[method-assign]
        ungated = pod("u")
        ungated["spec"] = {}
        judged = pod("j")
        judged["status"]["conditions"] = [{"type": sc.READINESS_GATE, "status": "True", "reason": sc.VERIFIED}]
        retried = pod("r")
        retried["status"]["conditions"] = [{"type": sc.READINESS_GATE, "status": "False", "reason": sc.UNREACHABLE}]
        kwok = pod("kwok")  # kwok turns every readiness gate True by itself: no reason of the gate's, so no verdict
        kwok["status"]["conditions"] = [{"type": sc.READINESS_GATE, "status": "True"}]
        for p in (pod("new"), pod("loading", ready=False), ungated, judged, retried, kwok):
            g.consider(owner(), p)
        await asyncio.gather(*g._tasks)

    asyncio.run(main())
    assert sorted(taken) == ["kwok", "new", "r"]
    json.dumps(g.status_of("svc-uid"))  # nothing remembered that status could not hold


def test_a_pod_is_checked_once_even_where_the_cache_does_not_show_its_verdict_yet() -> None:
    """(On real vLLM a pod once said Recorded and then, its next informer event still without the condition,
    Verified against its own reference.) A final verdict is remembered until the pod goes; a retried one is not."""
    api = Api()

    async def main() -> None:
        with fake_pooling(FakePooling()) as same:
            g, _, _ = gate(api, {"a": same})
            stale = pod("a")
            g.consider(owner(), stale)
            await asyncio.gather(*g._tasks)
            assert api.conditions["a"]["reason"] == sc.RECORDED
            g.consider(owner(), stale)  # the same pod as the cache last saw it: no verdict yet
            assert not g._tasks
            g.forget_pod("uid-a")
            g.consider(owner(), stale)
            assert g._tasks
            await asyncio.gather(*g._tasks)

    asyncio.run(main())
    assert api.conditions["a"]["reason"] == sc.VERIFIED  # asked again only after forget_pod
