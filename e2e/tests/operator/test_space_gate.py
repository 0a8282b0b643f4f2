"""The space gate's states on the real API server, without vLLM (issue 68): the session operator, a PoolingService
with spec.spaceCheck on kwok nodes, and the PoolingJob driver's fake vLLM answering the canaries for its pods
(the operator reaches a pod where the pod runner would record its port: the test writes those records). The first
pod records the space's reference (a ConfigMap that outlives the service), a pod whose engine computes another
space is held back with the pod, the canary and its cosine named in SpaceVerified, and a pod that cannot be
asked is tried again until it can.

kwok turns its pods Ready by itself, whatever their readiness gates say: here the pods' gate conditions and the
service's condition are what is asserted; the real tier (real_vllm/test_space_check_real.py) holds a drifting pod
back from Ready on real vLLM.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.tests.operator.conftest import pod_addresses
from e2e.tests.operator.test_services import apply, cond, get, path, svc
from pooling_operator.vllm import space_check as sc
from tests.pooling_support import FakePooling, fake_pooling


def pods(cluster: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return get(cluster, path(namespace, "pods"))["items"]


def verdict(p: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in p["status"].get("conditions") or [] if c["type"] == sc.READINESS_GATE), {})


def point(cluster: ControlPlane, namespace: str, pod: str, url: str) -> None:
    """Record where `pod` answers, as the pod runner records its pods' ports."""
    folder = pod_addresses(cluster) / "pods"
    folder.mkdir(parents=True, exist_ok=True)
    port = int(url.rsplit(":", 1)[1])
    (folder / f"{namespace}_{pod}.json").write_text(json.dumps({"ports": {"http": {"container": 8000, "local": port}}}))


def test_the_gate_records_verifies_holds_a_drift_back_and_retries(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    doc = svc(namespace, name="space", spec={"embeddingSpace": "gate-v1", "spaceCheck": {}})
    with fake_pooling(FakePooling()) as same, fake_pooling(FakePooling(skew=0.05)) as other:
        apply(cluster, doc)
        [first] = wait_for(lambda: [p["metadata"]["name"] for p in pods(cluster, namespace)] or None, timeout=60, what="the first pod")
        # asked before its address is known: Unreachable, then asked again after the back-off
        said = wait_for(lambda: (v := verdict(get(cluster, path(namespace, "pods", first)))).get("reason") == sc.UNREACHABLE and v,
                        timeout=60, what="the first pod's verdict: Unreachable")  # fmt: skip
        assert said["status"] == "False" and "no address" in said["message"]
        point(cluster, namespace, first, same)
        recorded = wait_for(lambda: (v := verdict(get(cluster, path(namespace, "pods", first)))).get("reason") == sc.RECORDED and v,
                            timeout=60, what="the first pod recording the reference")  # fmt: skip
        assert recorded["status"] == "True"
        ref = get(cluster, path(namespace, "configmaps", sc.reference_name("gate-v1")))
        assert ref is not None and not ref["metadata"].get("ownerReferences")  # kept after the service: the index outlives it
        assert ref["metadata"]["labels"][sc.REFERENCE_LABEL] == "gate-v1" and ref["data"]["recordedFrom"] == f"{namespace}/{first}"
        obj = wait_for(lambda: (o := get(cluster, path(namespace, "poolingservices", "space"))) and cond(o, "SpaceVerified").get("status") == "True" and o,
                       timeout=60, what="SpaceVerified True")  # fmt: skip
        assert obj["status"]["spaceCheck"]["reference"]["configMap"] == ref["metadata"]["name"]
        dep = get(cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments/space")
        assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}

        # a second replica whose engine computes another space
        apply(cluster, svc(namespace, name="space", spec={"embeddingSpace": "gate-v1", "spaceCheck": {}, "replicas": 2}))
        [second] = wait_for(lambda: [n for p in pods(cluster, namespace) if (n := p["metadata"]["name"]) != first] or None,
                            timeout=60, what="the second pod")  # fmt: skip
        point(cluster, namespace, second, other)
        drift = wait_for(lambda: (v := verdict(get(cluster, path(namespace, "pods", second)))).get("reason") == sc.DRIFT and v,
                         timeout=60, what="the second pod held back: Drift")  # fmt: skip
        assert drift["status"] == "False" and "held back (onDrift hold)" in drift["message"]
        obj = wait_for(lambda: (o := get(cluster, path(namespace, "poolingservices", "space"))) and cond(o, "SpaceVerified").get("reason") == "Drift" and o,
                       timeout=60, what="SpaceVerified False, Drift")  # fmt: skip
        message = cond(obj, "SpaceVerified")["message"]
        assert message.startswith(f"Pod {second} drifted: least cosine") and "canary" in message, message
        assert obj["status"]["spaceCheck"]["lastCheck"]["pod"] == second
        events = get(cluster, path(namespace, "events"))["items"]
        assert any(e["reason"] == "SpaceDrift" and second in e["message"] for e in events)
    Path(pod_addresses(cluster) / "pods" / f"{namespace}_{first}.json").unlink(missing_ok=True)
