"""ModelCache, pure and through the reconcile (fast): the fill Job and claim it becomes, its status from the
Job's pods' termination messages, and a service that uses it: waiting while it is not Ready, refused when it
pins another model or revision, mounting the claim read-only with the Hub offline once it is. The real fill
runs in tests/test_model_cache_fill.py; the whole path on the real control plane and real vLLM in
e2e/tests/operator/real_vllm/test_model_cache_real.py."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from pooling_operator.api import cache_fill_contract as F
from pooling_operator.builders.caches import build_cache, fill_job_name
from pooling_operator.k8s.cache import owner_key, project
from pooling_operator.reconcile import InvalidSpec
from pooling_operator.status import conditions as C
from pooling_operator.status.caches import cache_status
from pooling_operator.vllm.validate import validate
from tests.factories import MINILM_SHA, model_cache, pooling
from tests.test_reconcile import world

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def cache_resource(spec: dict[str, Any] | None = None) -> Any:
    body = model_cache(spec, namespace="ns")
    body["metadata"].update(uid="mc-1", generation=1)
    result = validate(body)
    assert result.ok, [str(p) for p in result.errors]
    return result.resource


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


# ---- the children ----------------------------------------------------------------------------------------


def test_a_sized_cache_gets_a_claim_and_a_fill_job_that_alone_sees_the_token() -> None:
    r = cache_resource({"model": {"tokenSecretRef": {"name": "hf", "key": "token"}}, "storage": {"storageClassName": "nfs"}})
    pvc, job = build_cache(r, "op:1", "http://mirror.internal")
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"] == "nfs" and pvc["metadata"]["ownerReferences"][0]["uid"] == "mc-1"
    pod = job["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["image"] == "op:1" and c["args"][:2] == ["model-cache", "fill"]
    assert c["args"][c["args"].index("--revision") + 1] == MINILM_SHA
    assert c["args"][c["args"].index("--endpoint") + 1] == "http://mirror.internal"
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in c["env"]
    assert not any("hf_" in a or "token" in a.lower() for a in c["args"])  # never an argument
    assert pod["automountServiceAccountToken"] is False and c["terminationMessagePath"] == F.TERMINATION_LOG
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "FailJob", "onExitCodes": {"containerName": "fill", "operator": "In", "values": [F.EXIT_PERMANENT]}}
    assert job["spec"]["backoffLimit"] == F.BACKOFF_LIMIT


def test_an_existing_claim_is_named_never_created_and_a_new_revision_is_a_new_job() -> None:
    r = cache_resource({"storage": {"size": None, "claimName": "models"}})
    [job] = build_cache(r, "op:1", None)
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "models"}
    assert "--endpoint" not in job["spec"]["template"]["spec"]["containers"][0]["args"]
    other = cache_resource({"storage": {"size": None, "claimName": "models"}, "model": {"revision": "v2"}})
    assert fill_job_name(other) != fill_job_name(r)


@pytest.mark.parametrize(("spec", "path", "words", "severity"), [
    ({"storage": {"claimName": "c"}}, "spec.storage", "exactly one of claimName or size", "error"),
    ({"storage": {"size": None}}, "spec.storage", "exactly one of claimName or size", "error"),
    ({"storage": {"size": None, "claimName": "c", "storageClassName": "nfs"}}, "spec.storage.storageClassName", "only to a claim the operator creates", "error"),
    ({"model": {"revision": None}}, "spec.model.revision", "no revision pinned", "warning"),
    ({"model": {"name": "has space"}}, "spec.model.name", "pattern", "error"),
])
def test_cache_rules(spec: dict[str, Any], path: str, words: str, severity: str) -> None:
    result = validate(model_cache(spec, namespace="ns"))
    found = [p for p in result.problems if p.path == path and p.severity == severity]
    assert found and words in found[0].message, [str(p) for p in result.problems]


# ---- status ----------------------------------------------------------------------------------------------


def _job(state: str | None) -> dict[str, Any]:
    return {"metadata": {"name": "minilm-fill-1"}, "status": {"conditions": [{"type": state, "status": "True"}]} if state else {}}


def _pod(result: dict[str, Any] | str, finished: str = "2026-12-01T10:00:00Z") -> dict[str, Any]:
    message = result if isinstance(result, str) else F.encode(result)
    return {"status": {"containerStatuses": [{"name": "fill", "state": {"terminated": {"message": message, "finishedAt": finished}}}]}}


FILLED = {"revision": MINILM_SHA, "files": 12, "bytes": 91_000_000, "downloaded": 91_000_000}
HELD = {"revision": MINILM_SHA, "bytes": 1, "files": 1, "claimName": "model-cache-minilm",
        "path": f"hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/{MINILM_SHA}"}


@pytest.mark.parametrize(("job", "pods", "old", "ready", "progressing", "failed"), [
    (None, [], {}, ("False", C.NOT_FILLED), ("True", C.CREATING), ("False", C.NO_FAILURE)),
    ("", [], {}, ("False", C.NOT_FILLED), ("True", C.FILLING), ("False", C.NO_FAILURE)),
    ("Complete", [_pod(FILLED)], {}, ("True", C.FILLED), ("False", C.UP_TO_DATE), ("False", C.NO_FAILURE)),
    # a retried pod's failure, then the success: the newest result counts
    ("Complete", [_pod({"reason": F.HUB_UNREACHABLE, "message": "x"}, "2026-12-01T09:00:00Z"), _pod(FILLED)], {},
     ("True", C.FILLED), ("False", C.UP_TO_DATE), ("False", C.NO_FAILURE)),
    ("Failed", [_pod({"reason": F.CORRUPT, "message": "model.safetensors: sha256 ..."})], {},
     ("False", C.NOT_FILLED), ("False", C.FINISHED), ("True", F.CORRUPT)),
    # a crash without a result: the Job's own words
    ("Failed", [_pod("Traceback ...")], {}, ("False", C.NOT_FILLED), ("False", C.FINISHED), ("True", F.FILL_FAILED)),
    # a new revision failing keeps the snapshot held before Ready: pods still read it
    ("Failed", [_pod({"reason": F.REVISION_NOT_FOUND, "message": "Invalid rev id: v2"})], HELD,
     ("True", C.FILLED), ("False", C.FINISHED), ("True", F.REVISION_NOT_FOUND)),
    # ... but not what another claim held, nor another model's snapshot: those are not on this one
    ("", [], {**HELD, "claimName": "elsewhere"}, ("False", C.NOT_FILLED), ("True", C.FILLING), ("False", C.NO_FAILURE)),
    ("", [], {**HELD, "path": f"hub/models--BAAI--bge-m3/snapshots/{MINILM_SHA}"}, ("False", C.NOT_FILLED),
     ("True", C.FILLING), ("False", C.NO_FAILURE)),
])
def test_cache_status(job: str | None, pods: list[dict[str, Any]], old: dict[str, Any], ready: tuple[str, str],
                      progressing: tuple[str, str], failed: tuple[str, str]) -> None:
    st = cache_status(cache_resource(), _job(job) if job is not None else None, pods, old)
    for type_, want in ((C.READY, ready), (C.PROGRESSING, progressing), (C.FAILED, failed)):
        assert (cond(st, type_)["status"], cond(st, type_)["reason"]) == want, (type_, cond(st, type_))
    if ready[0] == "True":
        assert st["revision"] == MINILM_SHA and st["claimName"] == "model-cache-minilm"
    if failed[0] == "True" and old and ready[0] == "True":
        assert f"still holds {MINILM_SHA}" in cond(st, C.FAILED)["message"]


# ---- a service that uses a cache -------------------------------------------------------------------------


def service(**model: Any) -> dict[str, Any]:
    return pooling({"model": {"name": MINILM, "revision": None, "source": {"cache": {"name": "minilm"}}, **model}})


def with_cache(body: dict[str, Any], cache_status_: dict[str, Any] | None, cache_spec: dict[str, Any] | None = None) -> Any:
    reconciles, kube, body = world(body)
    if cache_status_ is not None:
        cache = model_cache(cache_spec, namespace="ns")
        cache["metadata"].update(uid="mc-1", generation=1, resourceVersion="3")
        cache["status"] = cache_status_
        reconciles.ctx.cache.owners = {**reconciles.ctx.cache.owners, owner_key(cache): [project(cache)]}  # type: ignore[dict-item]
    return reconciles, kube, body


READY_CACHE = cache_status(cache_resource(), _job("Complete"), [_pod(FILLED)], {})


def test_a_service_waits_for_its_cache_and_creates_nothing() -> None:
    for cache in (None, cache_status(cache_resource(), _job(""), [], {})):
        reconciles, kube, body = with_cache(service(), cache)
        status = asyncio.run(reconciles.reconcile(body))
        assert kube.applied == []
        ready = cond(status, C.READY)
        assert (ready["status"], ready["reason"]) == ("False", C.WAITING_FOR_MODEL_CACHE)
        assert ("does not exist" if cache is None else "not Ready yet") in ready["message"]
        assert cond(status, C.SPEC_VALID)["status"] == "True"


def test_a_ready_cache_is_mounted_read_only_with_the_hub_offline_at_the_commit_it_holds() -> None:
    reconciles, kube, body = with_cache(service(), READY_CACHE)
    asyncio.run(reconciles.reconcile(body))
    dep = next(o for o in kube.applied if o["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    [c] = [c for c in pod["containers"] if c["name"] == "vllm"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HUB_CACHE"] == "/model-cache/hub" and "HF_TOKEN" not in env
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache-minilm", "readOnly": True}} in pod["volumes"]
    assert {"name": "model-cache", "mountPath": "/model-cache", "readOnly": True} in c["volumeMounts"]
    args = c["args"]
    assert args[0] == MINILM and args[args.index("--revision") + 1] == MINILM_SHA


@pytest.mark.parametrize(("model", "path", "words"), [
    ({"name": "BAAI/bge-m3"}, "spec.model.name", "is not the model ModelCache 'minilm' holds"),
    ({"revision": "0" * 40}, "spec.model.revision", "is not the revision ModelCache 'minilm' holds"),
])
def test_a_service_pinning_another_model_or_revision_is_refused_naming_the_field(model: dict[str, Any], path: str, words: str) -> None:
    reconciles, kube, body = with_cache(service(**model), READY_CACHE)
    with pytest.raises(InvalidSpec) as caught:
        asyncio.run(reconciles.reconcile(body))
    assert any(p.path == path and words in p.message for p in caught.value.problems), [str(p) for p in caught.value.problems]
    assert kube.applied == []


def test_the_same_revision_pinned_on_both_is_fine() -> None:
    reconciles, kube, body = with_cache(service(revision=MINILM_SHA), READY_CACHE)
    asyncio.run(reconciles.reconcile(body))
    assert any(o["kind"] == "Deployment" for o in kube.applied)


def test_a_cache_event_queues_the_services_that_use_it() -> None:
    reconciles, _, body = with_cache(service(), READY_CACHE)
    other = copy.deepcopy(pooling(name="other"))
    other["metadata"].update(uid="o-1", resourceVersion="1")
    cache = reconciles.ctx.cache
    cache.owners = {**cache.owners, owner_key(other): [project(other)]}  # type: ignore[dict-item]
    assert cache.using_cache("ns", "minilm") == [owner_key(body)]
    assert cache.using_cache("elsewhere", "minilm") == []


def test_main_pinned_against_a_cache_that_pins_nothing_is_the_same_revision() -> None:
    unpinned = cache_status(cache_resource({"model": {"revision": None}}), _job(""), [], {})
    reconciles, _, body = with_cache(service(revision="main"), unpinned, {"model": {"revision": None}})
    status = asyncio.run(reconciles.reconcile(body))  # waits for the fill; not refused
    assert cond(status, C.READY)["reason"] == C.WAITING_FOR_MODEL_CACHE


def test_an_embedding_space_read_from_a_cache_needs_the_commit_pinned() -> None:
    errors = [str(p) for p in validate(pooling({"embeddingSpace": "v1", "model": {
        "name": MINILM, "revision": None, "source": {"cache": {"name": "minilm"}}}})).errors]
    assert any(e.startswith("spec.model.revision: set it to the commit the ModelCache holds") for e in errors), errors
    assert validate(pooling({"embeddingSpace": "v1", "model": {
        "name": MINILM, "revision": MINILM_SHA, "source": {"cache": {"name": "minilm"}}}})).ok
