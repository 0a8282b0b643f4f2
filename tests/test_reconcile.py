"""Every refusal reason through the reconcile itself (reconcile/flow.py), fast: a recording client answers as
the API server would and remembers every request; the cache's indexes are plain dicts. The same reasons run
on the real control plane in e2e/tests/operator/."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from typing import Any

import pytest

from pooling_operator.k8s.api import ApiError, classify
from pooling_operator.k8s.cache import Cache, owner_key, project
from pooling_operator.reconcile import Context, InvalidSpec, Reconciles
from pooling_operator.status import conditions as C
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.validate import validate
from pooling_operator.vllm.workload import workload
from tests.factories import policy, pooling


class Recording:
    """The API as the reconcile sees it: writes answered with a uid and resourceVersion, every request kept,
    and a 422 for the kinds it is told to refuse (as the API server refuses a bad toleration)."""

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        self.refuse = refuse
        self.applied: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.deleted: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []
        self.rv = itertools.count(100)
        self.held: dict[tuple[str, str], dict[str, Any]] = {}  # (kind, name) -> an object already there (not ours)
        self.creates: list[tuple[str, str]] = []  # the applies that asked to create

    async def apply(self, obj: dict[str, Any], *, manager: str = "", subresource: str | None = None, create: bool = False) -> dict[str, Any]:
        key = (obj["kind"], obj["metadata"]["name"])
        if create:
            self.creates.append(key)
            if key in self.held:  # as the API server answers an apply carrying NEVER_A_VERSION
                raise classify(409, "Conflict", json.dumps({"message": "the object has been modified"}))
        if subresource == "status":
            self.statuses.append(copy.deepcopy(obj["status"]))
        else:
            if obj["kind"] in self.refuse:
                raise ApiError(422, "Invalid", json.dumps({"message": f"{obj['kind']} is invalid: spec.template: forbidden"}))
            self.applied.append(obj)
        out = copy.deepcopy(obj)
        out["metadata"].setdefault("uid", f"uid-{obj['kind']}-{obj['metadata']['name']}")
        out["metadata"]["resourceVersion"] = str(next(self.rv))
        return out

    async def delete(self, obj: dict[str, Any]) -> None:
        self.deleted.append(obj)

    async def event(self, owner: dict[str, Any], type_: str, reason: str, message: str, at: str | None = None) -> None:
        self.events.append((type_, reason, message))

    async def get(self, kind: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.held.get((kind.kind, name))

    async def list(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []

    async def close(self) -> None:
        pass


def world(body: dict[str, Any], *, policies: list[dict[str, Any]] = (), namespace_labels: dict[str, str] | None = None,
          refuse: tuple[str, ...] = (), api: type[Recording] | None = None) -> tuple[Reconciles, Recording, dict[str, Any]]:
    body = copy.deepcopy(body)
    body["metadata"].update(uid="svc-1", generation=2, resourceVersion="7")
    kube = (api or Recording)(refuse)
    cache = Cache(
        owners={owner_key(body): [project(body)]},
        children={},
        policy_index={p["metadata"]["name"]: [dict(p, metadata={**p["metadata"], "resourceVersion": "1"})] for p in policies},
        namespaces={"ns": [namespace_labels or {}]},
    )
    return Reconciles(Context(kube=kube, cache=cache)), kube, body  # type: ignore[arg-type]


def refused(body: dict[str, Any], **kw: Any) -> tuple[dict[str, Any], Recording]:
    """Reconcile once; it must refuse. The status it wrote, and the client."""
    reconciles, kube, body = world(body, **kw)

    async def main() -> None:
        with pytest.raises(InvalidSpec):
            await reconciles.reconcile(body)
        await reconciles.ctx.events.drain()

    asyncio.run(main())
    [status] = kube.statuses
    return status, kube


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


def assert_refused(status: dict[str, Any], kube: Recording, reason: str, path: str, *, applied: bool = False) -> None:
    valid = cond(status, C.SPEC_VALID)
    assert (valid["status"], valid["reason"]) == ("False", reason), valid
    assert path in valid["message"], valid["message"]
    assert cond(status, C.READY)["status"] == "False"
    assert not kube.deleted  # a refusal deletes nothing
    if not applied:
        assert kube.applied == []  # nor applies anything
    assert any(r == reason and t == "Warning" for t, r, _ in kube.events), kube.events  # the flip is announced


def test_invalid_spec() -> None:
    status, kube = refused(pooling({"pooling": {"type": "ALL"}}))
    assert_refused(status, kube, C.INVALID_SPEC, "spec.pooling.type")


def test_a_child_the_api_server_refuses() -> None:
    status, kube = refused(pooling({"embeddingSpace": "v1"}), refuse=("Deployment",))
    assert_refused(status, kube, C.CHILD_REJECTED, "the API server refused a child object", applied=True)
    assert "forbidden" in cond(status, C.SPEC_VALID)["message"]


def test_the_embedding_space_changed_without_a_new_label() -> None:
    before = validate(pooling({"embeddingSpace": "v1"})).resource
    body = pooling({"embeddingSpace": "v1", "pooling": {"type": "CLS"}})
    body["status"] = {"embeddingSpace": {"label": "v1", "fingerprint": embedding_fingerprint(workload(before))}}  # type: ignore[arg-type]
    status, kube = refused(body)
    assert_refused(status, kube, C.EMBEDDING_SPACE_CHANGED, "spec.embeddingSpace")
    assert status["embeddingSpace"] == body["status"]["embeddingSpace"]  # still protecting the index


def test_a_policy_that_does_not_select_the_namespace() -> None:
    p = policy({"namespaceSelector": {"matchLabels": {"team": "a"}}}, name="team-a")
    body = pooling({"autoscaling": {"maxReplicas": 2, "policyRef": {"name": "team-a"}}})
    status, kube = refused(body, policies=[p], namespace_labels={"team": "b"})
    assert_refused(status, kube, C.POLICY_NOT_ALLOWED, "spec.autoscaling.policyRef.name")


def test_a_backend_the_policy_switched_off() -> None:
    p = policy({"allowedBackends": ["operator"]}, name="strict")
    body = pooling({"autoscaling": {"maxReplicas": 2, "backend": "keda", "policyRef": {"name": "strict"}}})
    status, kube = refused(body, policies=[p])
    assert_refused(status, kube, C.INVALID_SPEC, "spec.autoscaling.backend")
    assert "allowed: operator" in cond(status, C.SPEC_VALID)["message"]


@pytest.mark.parametrize("named", [True, False], ids=["named", "the namespace's default"])
def test_a_policy_that_breaks_its_own_rules_is_followed_by_no_service(named: bool) -> None:
    broken = policy({"default": True, "allowedBackends": []}, name="broken")
    autoscaling: dict[str, Any] = {"maxReplicas": 2, **({"policyRef": {"name": "broken"}} if named else {})}
    status, kube = refused(pooling({"autoscaling": autoscaling}), policies=[broken])
    assert_refused(status, kube, C.POLICY_INVALID, "spec.autoscaling")
    assert "AutoscalingPolicy 'broken'" in cond(status, C.SPEC_VALID)["message"]
    assert "spec.allowedBackends" in cond(status, C.SPEC_VALID)["message"]  # what is wrong with it


def test_a_valid_spec_converges_and_writes_ready_false_until_pods_are_ready() -> None:
    """The refusals' counterpart: the same client, a valid spec, every child applied once."""
    reconciles, kube, body = world(pooling())

    async def main() -> dict[str, Any]:
        status = await reconciles.reconcile(body)
        await reconciles.ctx.events.drain()
        return status

    status = asyncio.run(main())
    assert sorted(o["kind"] for o in kube.applied) == ["Deployment", "PodDisruptionBudget", "Service"]
    assert cond(status, C.SPEC_VALID)["status"] == "True"
    assert status["effective"]["args"][:2] == ["vllm", "serve"]  # the plan's command line, not read back


def test_startup_is_measured_once_per_pod_and_not_again_after_a_restart() -> None:
    """Two pods Ready 60 and 90 s after creation: status.startup carries both once, however many reconciles
    follow; a new operator (restart) with the same status and pods counts nothing again; a third pod counts."""

    def pod(uid: str, seconds: int) -> dict[str, Any]:
        return {"kind": "Pod", "metadata": {"uid": uid, "name": uid, "namespace": "ns", "creationTimestamp": "2026-12-01T10:00:00Z",
                                             "labels": {"app.kubernetes.io/instance": "demo", "app.kubernetes.io/component": "pooling-service"}},
                "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": f"2026-12-01T10:0{seconds // 60}:{seconds % 60:02d}Z"}]}}

    reconciles, _, body = world(pooling())
    key = owner_key(body)
    reconciles.ctx.cache.children = {"Pod": {key: [pod("p1", 60), pod("p2", 90)]}}

    async def twice(r: Reconciles, b: dict[str, Any]) -> dict[str, Any]:
        first = await r.reconcile(b)
        second = await r.reconcile({**b, "status": first})
        await r.ctx.events.drain()
        return second

    status = asyncio.run(twice(reconciles, body))
    ready = {"lastSeconds": 90.0, "typicalSeconds": 75.0, "samples": 2}
    assert status["startup"] == {**ready, "phases": {"ready": ready}}  # the only phase these pods record
    restarted = Reconciles(reconciles.ctx)  # a new replica: no memory, the same status and pods
    again = asyncio.run(twice(restarted, {**body, "status": status}))
    assert again["startup"] == status["startup"]
    reconciles.ctx.cache.children = {"Pod": {key: [pod("p1", 60), pod("p2", 90), pod("p3", 30)]}}
    third = asyncio.run(twice(restarted, {**body, "status": again}))
    assert third["startup"] == {"lastSeconds": 30.0, "typicalSeconds": 60.0, "samples": 3,
                                "phases": {"ready": {"lastSeconds": 30.0, "typicalSeconds": 60.0, "samples": 3}}}


def test_the_gpus_a_service_holds_are_exported_for_chargeback_and_dropped_with_it() -> None:
    """vllm_pooling_operator_gpus_held = the Deployment's pods (status.replicas) x what one pod holds: two pods
    of a 4Gi time-sliced share of an H100 (81559Mi) hold 2 x 4096/81559 GPU; the series goes with the service."""
    from prometheus_client import REGISTRY

    from pooling_operator.reconcile.services import SERVICES

    spec = {"model": {"hints": {"numParameters": 22713216, "maxModelLen": 512}}, "engine": {"maxModelLen": 512},
            "resources": {"gpu": {"product": "NVIDIA-H100-80GB-HBM3", "share": {"memory": "4Gi", "via": "timeSlicing"}}}}  # fmt: skip
    reconciles, _, body = world(pooling(spec, name="shared"))
    labels = {"kind": "PoolingService", "namespace": "ns", "name": "shared"}

    async def main() -> None:
        status = await reconciles.reconcile(body)  # the write's Deployment: no pods yet
        assert REGISTRY.get_sample_value("vllm_pooling_operator_gpus_held", labels) == 0.0
        desired = await SERVICES.desired(reconciles.ctx, reconciles.memory, reconciles.policies(), body)
        await SERVICES.after(reconciles.ctx, reconciles.memory, body, desired, {**status, "replicas": 2}, status)
        await reconciles.ctx.events.drain()

    asyncio.run(main())
    assert REGISTRY.get_sample_value("vllm_pooling_operator_gpus_held", labels) == pytest.approx(2 * 4096 / 81559)
    reconciles.forget(body["metadata"]["uid"])
    assert REGISTRY.get_sample_value("vllm_pooling_operator_gpus_held", labels) is None


class GateOff(Recording):
    """kube-apiserver 1.35 with DRAConsumableCapacity off: it drops a claim request's capacity on write, with no
    error (what e2e/tests/operator/test_gpu_shares_dra.py sees on the real one)."""

    async def apply(self, obj: dict[str, Any], *, manager: str = "", subresource: str | None = None, create: bool = False) -> dict[str, Any]:
        out = await super().apply(obj, manager=manager, subresource=subresource, create=create)
        if out["kind"] == "ResourceClaimTemplate":
            for r in out["spec"]["spec"]["devices"]["requests"]:
                r["exactly"].pop("capacity", None)
        return out


def test_a_dra_share_whose_capacity_the_api_server_dropped_is_applied_once_and_counted_whole() -> None:
    """The observed template lacks what we applied; re-applying cannot change that, so a second reconcile sends
    nothing. Status and the chargeback gauge say one whole device per pod, and a Warning says so once."""
    from prometheus_client import REGISTRY

    from pooling_operator.reconcile.services import SERVICES
    from pooling_operator.status.services import WHOLE_DEVICE

    spec = {"model": {"hints": {"numParameters": 22713216, "maxModelLen": 512}}, "engine": {"maxModelLen": 512},
            "resources": {"gpu": {"product": "NVIDIA-H100-80GB-HBM3",
                                  "share": {"memory": "4Gi", "via": "dra", "deviceClassName": "gpu.nvidia.com"}}}}  # fmt: skip
    reconciles, kube, body = world(pooling(spec, name="dra"), api=GateOff)

    async def main() -> dict[str, Any]:
        first = await reconciles.reconcile(body)
        second = await reconciles.reconcile({**body, "status": first})
        desired = await SERVICES.desired(reconciles.ctx, reconciles.memory, reconciles.policies(), body)
        for _ in range(2):
            await SERVICES.after(reconciles.ctx, reconciles.memory, body, desired, {**second, "replicas": 2}, second)
        await reconciles.ctx.events.drain()
        return second

    status = asyncio.run(main())
    assert [o["kind"] for o in kube.applied].count("ResourceClaimTemplate") == 1
    assert status["effective"]["gpuShare"]["allocation"] == WHOLE_DEVICE
    assert status["effective"]["gpuShare"]["gpus"] == 1.0
    labels = {"kind": "PoolingService", "namespace": "ns", "name": "dra"}
    assert REGISTRY.get_sample_value("vllm_pooling_operator_gpus_held", labels) == 2.0
    warned = [m for t, r, m in kube.events if r == "GpuShareNotHonoured"]
    assert len(warned) == 1 and "spec.resources.gpu.share.memory" in warned[0] and "DRAConsumableCapacity" in warned[0]


def test_a_changed_dra_share_keeps_the_old_claim_template_while_a_pod_names_it() -> None:
    """A ResourceClaimTemplate's spec is immutable, so a changed share is a new template. The old one stays while a
    pod of the service was made with it (one of the old ReplicaSet, recreated mid-rollout, needs it for its
    claim), and goes with the next reconcile once none does."""

    def spec(memory: str) -> dict[str, Any]:
        return {"model": {"hints": {"numParameters": 22713216, "maxModelLen": 512}}, "engine": {"maxModelLen": 512},
                "resources": {"gpu": {"product": "NVIDIA-H100-80GB-HBM3",
                                      "share": {"memory": memory, "via": "dra", "deviceClassName": "gpu.nvidia.com"}}}}  # fmt: skip

    reconciles, kube, body = world(pooling(spec("4Gi"), name="dra"))
    key = owner_key(body)

    async def reconcile(b: dict[str, Any]) -> None:
        await reconciles.reconcile(b)
        await reconciles.ctx.events.drain()

    asyncio.run(reconcile(body))
    [old] = [o["metadata"]["name"] for o in kube.applied if o["kind"] == "ResourceClaimTemplate"]
    pod = {"kind": "Pod", "metadata": {"uid": "p1", "name": "dra-1", "namespace": "ns"},
           "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": old}]}, "status": {}}
    reconciles.ctx.cache.children = {"Pod": {key: [project(pod)]}}  # the projection keeps the claims
    changed = copy.deepcopy(body)
    changed["spec"] = pooling(spec("6Gi"), name="dra")["spec"]
    changed["metadata"]["generation"] = 3
    asyncio.run(reconcile(changed))
    new = [o["metadata"]["name"] for o in kube.applied if o["kind"] == "ResourceClaimTemplate"][-1]
    assert new != old and not kube.deleted
    reconciles.ctx.cache.children = {"Pod": {key: []}}  # the old pod went
    asyncio.run(reconcile(changed))
    assert [(o["kind"], o["metadata"]["name"]) for o in kube.deleted] == [("ResourceClaimTemplate", old)]
