"""ModelCache on the real control plane (kwok nodes: the fill pod never runs here; it does, for real, in
real_vllm/test_model_cache_real.py): the claim and the fill Job it becomes, the service that waits for it
without a pod, the refusal at admission, and what its deletion takes with it."""

from __future__ import annotations

import json
from typing import Any

from e2e.harness.config import GPU_PRODUCT
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.standin.hub import Hub
from e2e.tests.operator.test_hidden_states import claims
from e2e.tests.operator.test_services import API, apply, cond, get, path, svc
from pooling_operator.api import ModelCache
from pooling_operator.api import cache_fill_contract as F
from pooling_operator.builders.caches import claim_name, snapshot_path
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.validate import parse, validate
from pooling_operator.vllm.workload import workload
from tests.factories import MINILM_SHA, hidden_states, model_cache, pooling, pooling_job

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def jobs(cluster: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return get(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]


def test_a_cache_becomes_a_claim_and_a_fill_job_and_its_service_waits_without_a_pod(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str, hub: Hub
) -> None:
    # The fill pod passes the API server's own PodSecurity admission at the restricted level.
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")
    apply(cluster, model_cache({"storage": {"size": "2Gi"}}, namespace=namespace))
    service = svc(namespace, name="emb", spec={"model": {"name": MINILM, "revision": None, "source": {"cache": {"name": "minilm"}},
                                                         "hints": None}})
    apply(cluster, service)

    pvc = wait_for(lambda: get(cluster, path(namespace, "persistentvolumeclaims", "model-cache-minilm")), timeout=30,
                   what="the cache's claim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"] and pvc["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert pvc["metadata"]["ownerReferences"][0]["kind"] == "ModelCache"
    [job] = wait_for(lambda: jobs(cluster, namespace) or None, timeout=30, what="the fill Job")
    [c] = job["spec"]["template"]["spec"]["containers"]
    assert c["args"][:2] == ["model-cache", "fill"] and c["args"][c["args"].index("--endpoint") + 1] == hub.url
    assert c["args"][c["args"].index("--revision") + 1] == MINILM_SHA and c["terminationMessagePath"] == F.TERMINATION_LOG
    wait_for(lambda: get(cluster, path(namespace, "pods"))["items"] or None, timeout=30,
             what="the fill pod admitted under PodSecurity restricted")

    def waiting() -> dict[str, Any] | None:
        obj = get(cluster, path(namespace, "poolingservices", "emb"))
        return obj if cond(obj, "Ready").get("reason") == "WaitingForModelCache" else None

    obj = wait_for(waiting, timeout=30, what="the service waiting for its cache")
    assert "ModelCache 'minilm' is not Ready yet" in cond(obj, "Ready")["message"], cond(obj, "Ready")
    assert cond(obj, "SpecValid")["status"] == "True"
    assert get(cluster, path(namespace, "deployments", "emb")) is None  # no pod before the cache holds the model
    cache = get(cluster, path(namespace, "modelcaches", "minilm"))
    assert cond(cache, "Ready")["reason"] == "NotFilled" and cond(cache, "Progressing")["status"] == "True"
    table = cluster.kubectl("get", "mc", "-n", namespace).stdout
    assert "NotFilled" in table and MINILM in table, table

    # Deleted: its claim and Job go with it (garbage collection of owned children), and the service says so.
    cluster.kubectl("delete", "mc", "minilm", "-n", namespace)
    wait_for(lambda: not jobs(cluster, namespace), timeout=60, what="the fill Job collected")

    def gone_said() -> bool:
        obj = get(cluster, path(namespace, "poolingservices", "emb"))
        return "does not exist" in cond(obj, "Ready").get("message", "")

    wait_for(gone_said, timeout=30, what="the service told its cache is gone")


def test_a_cache_naming_a_claim_and_a_size_is_refused_at_admission(cluster: ControlPlane, operator: OperatorProcess,
                                                                   namespace: str) -> None:
    res = apply(cluster, model_cache({"storage": {"claimName": "c"}}, namespace=namespace), check=False)
    assert res.returncode != 0 and "exactly one of claimName or size must be set" in res.stderr, res.stderr


def test_a_cache_whose_size_is_no_quantity_is_refused_by_the_operator(cluster: ControlPlane, operator: OperatorProcess,
                                                                      namespace: str) -> None:
    apply(cluster, model_cache({"storage": {"size": "lots"}}, namespace=namespace))

    def refused() -> dict[str, Any] | None:
        obj = get(cluster, path(namespace, "modelcaches", "minilm"))
        return obj if cond(obj, "SpecValid").get("status") == "False" else None

    obj = wait_for(refused, timeout=30, what="SpecValid=False")
    assert "spec.storage.size" in cond(obj, "SpecValid")["message"] and not jobs(cluster, namespace)


def filled(cluster: ControlPlane, namespace: str, body: dict[str, Any]) -> None:
    """Write a ModelCache's status as its fill pod's result would leave it (kwok runs no fill pod; the real fill is
    real_vllm/test_model_cache_real.py), until the operator's own status says Ready at that commit."""
    resource = parse(body).resource
    assert isinstance(resource, ModelCache) and resource.spec.model.revision
    commit, name = resource.spec.model.revision, body["metadata"]["name"]
    status = {"claimName": claim_name(resource), "revision": commit, "path": snapshot_path(resource, commit), "bytes": 1, "files": 1}

    def ready_at_commit() -> bool:
        obj = get(cluster, path(namespace, "modelcaches", name))
        if cond(obj, "Ready").get("status") == "True" and obj["status"].get("revision") == commit:
            return True
        cluster.kubectl("patch", "modelcache", name, "-n", namespace, "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": status}))
        return False

    wait_for(ready_at_commit, timeout=30, what=f"ModelCache {name} Ready at {commit}")


def test_what_is_served_from_a_cache_without_a_pin_records_the_caches_commit(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str, hub: Hub
) -> None:
    """Issue 50: a service and jobs naming model.source.cache and no model.revision are served at the cache's commit;
    status.effective, status.embeddingSpace (the same fingerprint as a service pinned to that commit publishes) and
    each job's run record say it, not null."""
    qwen_sha = "0123456789abcdef0123456789abcdef01234567"
    caches = [model_cache({"storage": {"size": "2Gi"}}, namespace=namespace),
              model_cache({"model": {"name": "Qwen/Qwen3-8B", "revision": qwen_sha}, "storage": {"size": "2Gi"}}, name="qwen", namespace=namespace)]
    for c in caches:
        apply(cluster, c)
        filled(cluster, namespace, c)
    claims(cluster, namespace)
    from_cache = {"revision": None, "source": {"cache": {"name": "minilm"}}}
    apply(cluster, svc(namespace, name="emb", spec={"model": {"name": MINILM, **from_cache}, "pooling": {"type": "MEAN", "normalize": True}}))
    gpu = {"gpu": {"count": 1, "product": GPU_PRODUCT}}
    apply(cluster, pooling_job({"model": from_cache, "embeddingSpace": None, "resources": gpu,
                                "dataset": {"volume": {"claimName": "datasets", "path": "/corpus.jsonl"}},
                                "output": {"volume": {"claimName": "hidden-states", "path": "/runs/v1"}}}, name="corpus", namespace=namespace))
    apply(cluster, hidden_states({"model": {"revision": None, "source": {"cache": {"name": "qwen"}}}, "resources": gpu, "shards": 1},
                                 name="states", namespace=namespace))
    pinned = validate(pooling({"model": {"name": MINILM, "revision": MINILM_SHA}, "pooling": {"type": "MEAN", "normalize": True}})).resource
    assert pinned is not None
    fingerprint = embedding_fingerprint(workload(pinned))

    def published(plural: str, name: str) -> dict[str, Any] | None:
        obj = get(cluster, path(namespace, plural, name)) if plural != "poolingjobs" else get(cluster, f"{API}/namespaces/{namespace}/poolingjobs/{name}")
        return obj if ((obj or {}).get("status") or {}).get("embeddingSpace") else None

    service = wait_for(lambda: published("poolingservices", "emb"), timeout=60, what="the service's status")
    args = service["status"]["effective"]["args"]
    assert args[args.index("--revision") + 1] == MINILM_SHA
    assert service["status"]["embeddingSpace"]["fingerprint"] == fingerprint
    job = wait_for(lambda: published("poolingjobs", "corpus"), timeout=60, what="the PoolingJob's status")
    assert job["status"]["embeddingSpace"]["fingerprint"] == fingerprint
    for name, commit in (("corpus", MINILM_SHA), ("states", qwen_sha)):
        batch = wait_for(lambda name=name: get(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}"), timeout=60, what=f"Job {name}")
        driver = next(c for c in batch["spec"]["template"]["spec"]["containers"] if "--run-info" in c.get("args", []))
        info = json.loads(driver["args"][driver["args"].index("--run-info") + 1])
        assert info["revision"] == commit, info
        if name == "corpus":
            assert info["embeddingSpace"]["fingerprint"] == fingerprint
