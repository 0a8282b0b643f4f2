"""Security of what the operator creates, on the real control plane (issue 13): the pods are admitted by the
API server's own PodSecurity admission at `restricted`, the service-account token is mounted only where the
driver needs it, the optional NetworkPolicy is accepted (and pruned), and a canary token in every Secret the
operator is pointed at never appears in anything it writes or logs.

Every wait polls with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import yaml

from e2e.harness.config import GPU_PRODUCT
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.tests.operator.test_hidden_states import claims
from e2e.tests.operator.test_services import apply, get, svc
from tests.factories import hidden_states, policy, pooling_job

OPERATOR_NAMESPACE = "vllm-pooling-operator"  # deploy/rbac.yaml lets the operator read Secrets here only


def _pods(cluster: ControlPlane, namespace: str, instance: str) -> list[dict[str, Any]]:
    listed = get(cluster, f"/api/v1/namespaces/{namespace}/pods?labelSelector=app.kubernetes.io/instance%3D{instance}")
    return (listed or {}).get("items") or []


def test_children_are_admitted_under_pod_security_restricted(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")
    # The namespace really enforces: a pod without the restricted settings is refused.
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    refused = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(bare), check=False)
    assert refused.returncode != 0 and "violates PodSecurity \"restricted:latest\"" in refused.stderr, refused.stderr

    claims(cluster, namespace)
    apply(cluster, svc(namespace, "emb"))
    apply(cluster, svc(namespace, "rerank", kind="scs"))
    apply(cluster, hidden_states({"shards": 1, "resources": {"gpu": {"count": 1, "product": GPU_PRODUCT}}}, name="extract",
                                 namespace=namespace))
    apply(cluster, pooling_job({"shards": 1, "resources": {"gpu": {"count": 1, "product": GPU_PRODUCT}},
                                "dataset": {"volume": {"claimName": "datasets", "path": "/corpus.jsonl"}},
                                "output": {"volume": {"claimName": "hidden-states", "path": "/vectors"}}},
                               name="corpus", namespace=namespace))  # fmt: skip
    # PodSecurity refuses pods, not Deployments or Jobs: the pods existing is the proof.
    for instance in ("emb", "rerank", "extract", "corpus"):
        pods = wait_for(lambda i=instance: _pods(cluster, namespace, i), timeout=90, what=f"{instance}'s pod admitted")
        spec = pods[0]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory"
        token_mounted = any(v.get("projected") and v["name"].startswith("kube-api-access") for v in spec["volumes"])
        # Only the jobs' drivers talk to the API server (their progress ConfigMap).
        assert token_mounted == (instance in ("extract", "corpus")), (instance, [v["name"] for v in spec["volumes"]])
    events = get(cluster, f"/api/v1/namespaces/{namespace}/events") or {"items": []}
    assert not [e for e in events["items"] if e["reason"] == "FailedCreate"], "a controller could not create a pod"


def test_network_policy_is_accepted_and_pruned(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    path = f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/emb"
    apply(cluster, svc(namespace, "emb", {"networkPolicy": {"clientNamespaces": {"matchLabels": {"team": "search"}}}}))
    np = wait_for(lambda: get(cluster, path), timeout=60, what="the NetworkPolicy")
    assert np["spec"]["policyTypes"] == ["Ingress"]
    assert [rule["ports"] for rule in np["spec"]["ingress"]] == [[{"protocol": "TCP", "port": 8000}]] * 2
    assert np["spec"]["ingress"][1]["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    apply(cluster, svc(namespace, "emb"))  # the field removed: the policy goes with it
    wait_for(lambda: get(cluster, path) is None, timeout=60, what="the NetworkPolicy pruned")


def test_a_canary_in_every_secret_never_leaves_its_secret(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    canary = f"canary-{secrets.token_hex(12)}"
    for ns, name in ((namespace, "hf"), (namespace, "api-key"), (OPERATOR_NAMESPACE, f"prom-{namespace}"[:63])):
        cluster.kubectl("create", "secret", "generic", name, "-n", ns, f"--from-literal=token={canary}")
    pol_name = f"canary-{namespace}"[:63]
    pol = policy({"default": False, "prometheus": {
        "url": "http://127.0.0.1:9/prometheus",  # nothing listens: the autoscaler reports it, with the token in hand
        "bearerTokenSecretRef": {"namespace": OPERATOR_NAMESPACE, "name": f"prom-{namespace}"[:63], "key": "token"}}}, name=pol_name)
    apply(cluster, pol)
    try:
        hub = {"source": {"huggingFace": {"tokenSecretRef": {"name": "hf", "key": "token"}}}}
        service = {"apiKeySecretRef": {"name": "api-key", "key": "token"}}
        apply(cluster, svc(namespace, "emb", {"model": hub, "service": service, "monitoring": {"serviceMonitor": True},
                                              "autoscaling": {"minReplicas": 1, "maxReplicas": 2, "policyRef": {"name": pol_name}}}))
        apply(cluster, svc(namespace, "rerank", {"model": hub, "service": service}, kind="scs"))
        claims(cluster, namespace)
        apply(cluster, hidden_states({"shards": 1, "model": hub, "resources": {"gpu": {"count": 1, "product": GPU_PRODUCT}}},
                                     name="extract", namespace=namespace))

        def settled() -> dict[str, Any] | None:
            emb = get(cluster, f"/apis/vllm-pooling.io/v1alpha1/namespaces/{namespace}/poolingservices/emb")
            conditions = {c["type"]: c for c in ((emb or {}).get("status") or {}).get("conditions") or []}
            job = get(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs/extract")
            return emb if "MetricsAvailable" in conditions and job else None

        wait_for(settled, timeout=120, what="the services written and the autoscaler's first (failed) query reported")
        deployment = get(cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments/emb")
        env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "token"}  # a reference, not the value
        assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "api-key", "key": "token"}

        # Everything in the namespace but the Secrets themselves, the policy, and the operator's log.
        plurals = ["/api/v1/namespaces/{ns}/" + p for p in ("configmaps", "services", "events", "serviceaccounts", "pods")]
        plurals += [f"/apis/{g}/namespaces/{{ns}}/{p}" for g, p in (
            ("apps/v1", "deployments"), ("batch/v1", "jobs"), ("policy/v1", "poddisruptionbudgets"),
            ("rbac.authorization.k8s.io/v1", "roles"), ("rbac.authorization.k8s.io/v1", "rolebindings"),
            ("monitoring.coreos.com/v1", "servicemonitors"), ("networking.k8s.io/v1", "networkpolicies"),
            ("vllm-pooling.io/v1alpha1", "poolingservices"), ("vllm-pooling.io/v1alpha1", "scoringservices"),
            ("vllm-pooling.io/v1alpha1", "hiddenstatejobs"))]
        scanned = 0
        for p in plurals:
            body = json.dumps(get(cluster, p.format(ns=namespace)))
            scanned += len(body)
            assert canary not in body, f"the canary is in {p.format(ns=namespace)}"
        for p in (f"/apis/vllm-pooling.io/v1alpha1/autoscalingpolicies/{pol_name}", f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/events"):
            assert canary not in json.dumps(get(cluster, p)), p
        log = operator.log.read_text(errors="replace")
        assert canary not in log, "the canary is in the operator's log"
        assert scanned > 10_000 and log  # the scan saw the objects; the log exists
    finally:
        cluster.kubectl("delete", "autoscalingpolicy", pol_name, "--ignore-not-found")
        cluster.kubectl("delete", "secret", f"prom-{namespace}"[:63], "-n", OPERATOR_NAMESPACE, "--ignore-not-found")
