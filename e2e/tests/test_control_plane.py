"""The control plane itself: CRDs and examples admitted, GPU scheduling on kwok nodes, Jobs, garbage collection.

Every wait polls the API with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.harness.config import GPU_PRODUCT, GPU_PRODUCT_LABEL, GPU_RESOURCE
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import REPO_ROOT, ControlPlane
from e2e.kube.crds import install_crds, load_crds, our_crd_files

OUR_CRDS = load_crds(our_crd_files())
EXAMPLES = sorted(
    p for p in (REPO_ROOT / "examples").rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()
)


def _deployment(
    name: str, *, gpus: int = 0, replicas: int = 1, node_selector: dict[str, str] | None = None
) -> dict:
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    if gpus:
        resources["limits"] = {GPU_RESOURCE: str(gpus)}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.invalid/vllm:test", "resources": resources}]
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def _pods(core: client.CoreV1Api, namespace: str, app: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"app={app}").items


def _gone(read: Any, *args: str) -> bool:
    try:
        read(*args)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


# ------------------------------------------------------------------------------------- the cluster


def test_cluster_has_fake_gpu_nodes(cluster: ControlPlane, k8s: Any) -> None:
    core = client.CoreV1Api(k8s)
    nodes = {n.metadata.name: n for n in core.list_node().items}
    gpu = [n for n in nodes.values() if n.metadata.labels.get(GPU_PRODUCT_LABEL) == GPU_PRODUCT]
    assert len(gpu) == cluster.config.gpu_nodes
    assert len(nodes) == cluster.config.gpu_nodes + cluster.config.cpu_nodes
    for n in gpu:
        assert n.status.allocatable[GPU_RESOURCE] == str(cluster.config.gpus_per_node)
    for n in nodes.values():
        ready = {c.type: c.status for c in n.status.conditions}["Ready"]
        assert ready == "True", n.metadata.name
    version = client.VersionApi(k8s).get_code()
    assert version.git_version == cluster.binaries.versions["k8s"]


# ------------------------------------------------------------------------------------------ CRDs


def test_third_party_crds_established(cluster: ControlPlane, third_party_crds: list[str]) -> None:
    crds = third_party_crds
    for name in (
        "scaledobjects.keda.sh",
        "servicemonitors.monitoring.coreos.com",
        "podmonitors.monitoring.coreos.com",
    ):
        assert name in crds
    out = cluster.kubectl("api-resources", "-o", "name").stdout.split()
    assert {
        "scaledobjects.keda.sh",
        "servicemonitors.monitoring.coreos.com",
        "podmonitors.monitoring.coreos.com",
    } <= set(out)


def test_our_crds_established(cluster: ControlPlane, third_party_crds: list[str]) -> None:
    assert OUR_CRDS, "crds/ holds no CustomResourceDefinition: run 'make crds'"
    assert cluster.api is not None
    crds = install_crds(cluster, third_party=False)  # fails here, naming each rejected CRD and why
    for crd in OUR_CRDS:
        name = crd["metadata"]["name"]
        assert name in crds
        obj = cluster.api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conds = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
        assert conds.get("Established") == "True", (name, conds)
        assert conds.get("NamesAccepted") == "True", (name, conds)
        assert "NonStructuralSchema" not in conds, (name, obj["status"]["conditions"])


def _explain_fields(text: str) -> dict[str, list[str]]:
    """Field name -> description lines from the FIELDS section of ``kubectl explain``."""
    fields: dict[str, list[str]] = {}
    current = None
    in_fields = False
    for line in text.splitlines():
        if line.startswith("FIELDS:"):
            in_fields = True
            continue
        if not in_fields:
            continue
        m = re.match(r"^  (\S+)\t?\s*<", line)
        if m:
            current = m.group(1)
            fields[current] = []
        elif current and line.startswith("    ") and line.strip():
            fields[current].append(line.strip())
    return fields


def test_explain_poolingservice_pooling_has_descriptions(cluster: ControlPlane, crds: list[str]) -> None:
    assert any(c["spec"]["names"]["kind"] == "PoolingService" for c in OUR_CRDS), "no PoolingService CRD in crds/"
    out = cluster.kubectl("explain", "poolingservice.spec.pooling").stdout
    assert "DESCRIPTION:" in out, out
    description = out.split("DESCRIPTION:", 1)[1].split("FIELDS:", 1)[0].strip()
    assert description and description != "<empty>", out
    fields = _explain_fields(out)
    assert fields, out
    undocumented = [f for f, lines in fields.items() if not lines or lines == ["<no description>"]]
    assert not undocumented, f"fields without description: {undocumented}\n{out}"


# -------------------------------------------------------------------------------------- examples


def _example_docs(path: Path) -> list[dict[str, Any]]:
    return [
        d
        for d in yaml.safe_load_all(path.read_text())
        if isinstance(d, dict) and d.get("apiVersion") and d.get("kind")
    ]


def test_examples_is_not_empty() -> None:
    assert EXAMPLES, "examples/ holds no YAML: the dry runs below would prove nothing"


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(REPO_ROOT)) for p in EXAMPLES])
def test_example_accepted_by_server_dry_run(
    cluster: ControlPlane, crds: list[str], namespace: str, path: Path
) -> None:
    docs = _example_docs(path)
    assert docs, f"{path.name} holds no Kubernetes object"
    # namespaces the example names must exist for a server-side dry run; objects without one go to ours
    named = sorted({d["metadata"]["namespace"] for d in docs if d.get("metadata", {}).get("namespace")})
    for ns in named:
        if cluster.kubectl("get", "namespace", ns, check=False).returncode != 0:
            cluster.kubectl("create", "namespace", ns)
    where = [] if named else ["-n", namespace]
    res = cluster.kubectl(
        "apply", "--dry-run=server", "--validate=strict", *where, "-f", str(path), check=False
    )
    assert res.returncode == 0, f"{path}:\n{res.stdout}{res.stderr}"


# ---------------------------------------------------------------------------------- scheduling


def test_gpu_deployment_scheduled_on_gpu_node_and_running(
    cluster: ControlPlane, k8s: Any, namespace: str
) -> None:
    apps, core = client.AppsV1Api(k8s), client.CoreV1Api(k8s)
    apps.create_namespaced_deployment(
        namespace, _deployment("gpu-one", gpus=1, replicas=2, node_selector={GPU_PRODUCT_LABEL: GPU_PRODUCT})
    )

    def running() -> list[client.V1Pod] | None:
        pods = _pods(core, namespace, "gpu-one")
        if len(pods) == 2 and all(p.status.phase == "Running" for p in pods):
            return pods
        return None

    pods = wait_for(running, timeout=60, what="2 Running pods of Deployment gpu-one")
    for pod in pods:
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels.get(GPU_PRODUCT_LABEL) == GPU_PRODUCT
        assert {c.type: c.status for c in pod.status.conditions}.get("Ready") == "True"
    wait_for(
        lambda: (
            (
                apps.read_namespaced_deployment(name="gpu-one", namespace=namespace).status.available_replicas
                or 0
            )
            == 2
        ),
        timeout=60,
        what="Deployment gpu-one available",
    )


def test_deployment_asking_more_gpus_than_a_node_has_stays_pending(k8s: Any, namespace: str) -> None:
    apps, core = client.AppsV1Api(k8s), client.CoreV1Api(k8s)
    apps.create_namespaced_deployment(
        namespace, _deployment("gpu-nine", gpus=9, node_selector={GPU_PRODUCT_LABEL: GPU_PRODUCT})
    )

    def unschedulable() -> client.V1Pod | None:
        for pod in _pods(core, namespace, "gpu-nine"):
            for c in pod.status.conditions or []:
                if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                    return pod
        return None

    pod = wait_for(unschedulable, timeout=60, what="pod of gpu-nine marked Unschedulable")
    assert pod.status.phase == "Pending"
    assert not pod.spec.node_name
    message = next(c.message for c in pod.status.conditions if c.type == "PodScheduled")
    assert f"Insufficient {GPU_RESOURCE}" in message, message


# ------------------------------------------------------------------------------------------ jobs


def test_indexed_job_completes_through_kwok_stages(k8s: Any, namespace: str) -> None:
    batch, core = client.BatchV1Api(k8s), client.CoreV1Api(k8s)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "shards"},
        "spec": {
            "completions": 3,
            "parallelism": 3,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "shards"}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {GPU_PRODUCT_LABEL: GPU_PRODUCT},
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/driver:test",
                            "resources": {"limits": {GPU_RESOURCE: "1"}},
                        }
                    ],
                },
            },
        },
    }
    batch.create_namespaced_job(namespace, job)

    def complete() -> client.V1Job | None:
        j = batch.read_namespaced_job(name="shards", namespace=namespace)
        conds = {c.type: c.status for c in j.status.conditions or []}
        if conds.get("Failed") == "True":
            raise AssertionError(f"Job failed: {j.status}")
        return j if conds.get("Complete") == "True" else None

    j = wait_for(complete, timeout=90, what="Job shards Complete")
    assert j.status.succeeded == 3
    assert j.status.completed_indexes == "0-2"
    pods = _pods(core, namespace, "shards")
    assert sorted(p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in pods) == [
        "0",
        "1",
        "2",
    ]
    assert all(p.status.phase == "Succeeded" for p in pods)


# ------------------------------------------------------------------------------- garbage collection


def test_deleting_owner_garbage_collects_dependents(k8s: Any, namespace: str) -> None:
    core = client.CoreV1Api(k8s)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}, "data": {"a": "1"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    for i in range(3):
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": f"child-{i}", "ownerReferences": [ref]}}
        )
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")
    for i in range(3):
        wait_for(
            lambda i=i: _gone(core.read_namespaced_config_map, f"child-{i}", namespace),
            timeout=60,
            what=f"ConfigMap child-{i} garbage-collected",
        )


def test_foreground_deletion_of_deployment_removes_replicasets_and_pods(k8s: Any, namespace: str) -> None:
    apps, core = client.AppsV1Api(k8s), client.CoreV1Api(k8s)
    apps.create_namespaced_deployment(namespace, _deployment("cpu-app", replicas=2))
    wait_for(
        lambda: len([p for p in _pods(core, namespace, "cpu-app") if p.status.phase == "Running"]) == 2,
        timeout=60,
        what="2 Running pods of cpu-app",
    )
    assert apps.list_namespaced_replica_set(namespace, label_selector="app=cpu-app").items
    apps.delete_namespaced_deployment("cpu-app", namespace, propagation_policy="Foreground")
    wait_for(
        lambda: _gone(apps.read_namespaced_deployment, "cpu-app", namespace),
        timeout=60,
        what="Deployment cpu-app deleted after its dependents",
    )
    assert not apps.list_namespaced_replica_set(namespace, label_selector="app=cpu-app").items
    assert not _pods(core, namespace, "cpu-app")
