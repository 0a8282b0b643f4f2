"""ModelCache on the real control plane (kwok nodes: the fill pod never runs here; it does, for real, in
real_vllm/test_model_cache_real.py): the claim and the fill Job it becomes, the service that waits for it
without a pod, the refusal at admission, and what its deletion takes with it."""

from __future__ import annotations

from typing import Any

from e2e.controlplane import ControlPlane
from e2e.harness.poll import wait_for
from e2e.operator_process import OperatorProcess
from e2e.standin.hub import Hub
from e2e.tests.operator.test_services import apply, cond, get, path, svc
from pooling_operator.api import cache_fill_contract as F
from tests.factories import MINILM_SHA, model_cache

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
