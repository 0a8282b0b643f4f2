"""Faults (issue 13): another field manager on our children, a kube-apiserver restart mid-reconcile, and a watch
that comes back 410 Gone.

The field-manager tests run on the session's cluster and operator. The restart and 410 tests need a cluster
whose API server they may restart and whose etcd they may compact, and an operator they may freeze: they get
their own control plane and operator (one per module, ~10-20 s to start), with the recheck of unsettled
resources set to an hour, so nothing but the watches (and a re-list) can make the operator notice a change.
Every wait polls with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.audit import OPERATOR_USER
from e2e.harness.config import ClusterConfig
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.kube.crds import install_crds
from e2e.operator_process import OperatorProcess, least_privilege_kubeconfig
from e2e.tests.operator.test_services import apply, get, path, ready, svc

FOREIGN = "platform-team"  # the other field manager


def foreign_apply(cluster: ControlPlane, obj: dict[str, Any]) -> None:
    """Server-side apply as another field manager, forced: it takes over whatever fields it names."""
    cluster.kubectl("apply", "--server-side", f"--field-manager={FOREIGN}", "--force-conflicts", "-f", "-",
                    input=yaml.safe_dump(obj))


def container(dep: dict[str, Any]) -> dict[str, Any]:
    return dep["spec"]["template"]["spec"]["containers"][0]


def deployment_writes(cluster: ControlPlane, mark: int, namespace: str) -> dict[str, int]:
    """The operator's writes to Deployments (and their /scale) in the namespace since `mark`, by verb/resource."""
    counts = cluster.audit.since(mark, namespace)
    return {f"{verb} {res}": n for (verb, res), n in counts.items()
            if res.startswith("deployments") and verb in ("create", "update", "patch", "delete")}


# ------------------------------------------------------------------------------------------------------------
# Another field manager


def test_a_second_field_manager_loses_our_fields_and_keeps_its_own(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    """A forced server-side apply by another manager changes the image and an argument of our Deployment and
    adds its own label and annotation: the operator takes the image and argument back with one apply, and the
    label and annotation stay (the label-only change before it caused no write at all)."""
    apply(cluster, svc(namespace))
    wait_for(lambda: ready(cluster, namespace, "emb"), timeout=90, what="Ready")
    dep = get(cluster, path(namespace, "deployments", "emb"))
    ours = container(dep)
    name, image, args = ours["name"], ours["image"], ours["args"]
    meta = {"name": "emb", "namespace": namespace}
    mark = cluster.audit.mark()
    # 1. only fields nobody else owns: a label and an annotation (no write may follow)
    foreign_apply(cluster, {"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {**meta, "labels": {"team.example.com/owner": "search"},
                                         "annotations": {"team.example.com/ticket": "OPS-13"}}})
    # 2. fields the operator owns: the image and the argument list (taken over by the force)
    foreign_apply(cluster, {"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {**meta, "labels": {"team.example.com/owner": "search"},
                                         "annotations": {"team.example.com/ticket": "OPS-13"}},
                            "spec": {"template": {"spec": {"containers": [
                                {"name": name, "image": "registry.example.com/patched:1", "args": [*args, "--enforce-eager"]}]}}}})

    def taken_back() -> dict[str, Any] | None:
        d = get(cluster, path(namespace, "deployments", "emb"))
        c = container(d)
        return d if (c["image"], c["args"]) == (image, args) else None

    dep = wait_for(taken_back, timeout=30, what="the image and args taken back")
    labels, annotations = dep["metadata"]["labels"], dep["metadata"]["annotations"]
    assert labels.get("team.example.com/owner") == "search", labels
    assert annotations.get("team.example.com/ticket") == "OPS-13", annotations
    managers = {m["manager"]: m for m in dep["metadata"]["managedFields"]}
    assert FOREIGN in managers  # it still owns its label and annotation
    assert "f:team.example.com/owner" in str(managers[FOREIGN]["fieldsV1"])
    # the operator's writes meanwhile: the one apply that took the fields back (the watch delivers the label
    # change before the image change, so a write caused by the label would be a second one)
    writes = wait_for(lambda: deployment_writes(cluster, mark, namespace) or None, timeout=15, what="the audit of the apply")
    assert writes == {"patch deployments": 1}, writes


def test_replicas_of_an_autoscaled_service_are_not_ours(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    """On an autoscaled service another manager sets spec.replicas (and changes the image): the image is taken
    back, the replica count is left as it was set (the operator's apply leaves it out; the autoscaler, with no
    Prometheus to ask, holds it)."""
    apply(cluster, svc(namespace, name="auto", spec={"autoscaling": {"minReplicas": 1, "maxReplicas": 4}}))
    wait_for(lambda: ready(cluster, namespace, "auto"), timeout=90, what="Ready")

    dep = get(cluster, path(namespace, "deployments", "auto"))
    # created autoscaled: the operator's apply never set the count (the API server defaulted it)
    assert not [m for m in dep["metadata"]["managedFields"]
                if m["manager"] == "vllm-pooling-operator" and "f:replicas" in m.get("fieldsV1", {}).get("f:spec", {})]
    name, image = container(dep)["name"], container(dep)["image"]
    mark = cluster.audit.mark()
    meta = {"name": "auto", "namespace": namespace}
    foreign_apply(cluster, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {"replicas": 3}})
    foreign_apply(cluster, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
        "replicas": 3, "template": {"spec": {"containers": [{"name": name, "image": "registry.example.com/patched:1"}]}}}})
    dep = wait_for(lambda: (d := get(cluster, path(namespace, "deployments", "auto"))) and container(d)["image"] == image and d,
                   timeout=30, what="the image taken back")
    writes = wait_for(lambda: deployment_writes(cluster, mark, namespace) or None, timeout=15, what="the audit of the apply")
    assert writes.get("patch deployments") == 1, writes  # the image, and nothing about the count
    # whatever else ran meanwhile (the autoscaler holds: no Prometheus), the count is the one the other manager set
    dep = get(cluster, path(namespace, "deployments", "auto"))
    assert dep["spec"]["replicas"] == 3, (dep["spec"]["replicas"], writes)


# ------------------------------------------------------------------------------------------------------------
# The API server restarted; a watch answered 410 Gone


class Faulty:
    def __init__(self, cp: ControlPlane, op: OperatorProcess) -> None:
        self.cp, self.op = cp, op

    def metric(self, name: str) -> float:
        return sum(float(v) for v in re.findall(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", self.op.metrics(), re.M))


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faulty]:
    """A control plane of our own (two GPU nodes, the operator audited) and an operator whose recheck of
    unsettled resources is an hour away."""
    config = ClusterConfig(gpu_nodes=2, gpus_per_node=8, cpu_nodes=0, audit_users=(OPERATOR_USER,))
    cp = ControlPlane(config, run_dir=tmp_path_factory.mktemp("faults-cluster"))
    cp.start()
    op = None
    try:
        install_crds(cp)
        op = OperatorProcess(cp, "operator-faults", resync_seconds=3600, standalone=True, kubeconfig=least_privilege_kubeconfig(cp))
        op.start()
        yield Faulty(cp, op)
    finally:
        if op is not None and op.proc is not None and op.proc.poll() is None:
            os.killpg(op.proc.pid, signal.SIGCONT)  # a test that failed while it was frozen
            op.stop()
        cp.stop()


@pytest.fixture
def faulty_ns(faulty: Faulty, request: pytest.FixtureRequest) -> Iterator[str]:
    name = faulty.cp.create_namespace(request.node.name)
    yield name
    faulty.cp.delete_namespace(name)


def reconciled(cp: ControlPlane, ns: str, name: str) -> bool:
    """Its children exist and its status is current, with a Ready condition. (Ready=True needs
    kube-controller-manager, itself getting over the restart, and kwok: not what these tests are about.)"""
    obj = get(cp, path(ns, "poolingservices", name))
    status = (obj or {}).get("status") or {}
    return bool(obj and status.get("observedGeneration") == obj["metadata"]["generation"]
                and any(c["type"] == "Ready" for c in status.get("conditions") or [])
                and all(get(cp, path(ns, p, name)) for p in ("deployments", "services", "poddisruptionbudgets")))


def _dump_logs(faulty: Faulty) -> str:
    return f"--- operator ---\n{faulty.op.tail(200)}\n{faulty.cp.log_tails(40, ['kube-apiserver'])}"


def test_kube_apiserver_restart_mid_reconcile(faulty: Faulty, faulty_ns: str) -> None:
    """kube-apiserver goes away while five services are being reconciled and comes back: the same operator
    process reconnects by itself, reconciles the five (children, current status), and its watches work again
    (a child deleted afterwards is put back)."""
    cp, ns = faulty.cp, faulty_ns
    pid = faulty.op.proc.pid  # type: ignore[union-attr]
    for i in range(5):
        apply(cp, svc(ns, name=f"s{i}"))
    cp.restart_component("kube-apiserver", down=2)
    try:
        for i in range(5):
            wait_for(lambda i=i: reconciled(cp, ns, f"s{i}"), timeout=90, what=f"s{i} reconciled after the restart")
        assert faulty.op.proc is not None and faulty.op.proc.poll() is None and faulty.op.proc.pid == pid
        uid = get(cp, path(ns, "deployments", "s0"))["metadata"]["uid"]
        cp.kubectl("delete", "deployment/s0", "-n", ns)
        wait_for(lambda: (d := get(cp, path(ns, "deployments", "s0"))) and d["metadata"]["uid"] != uid,
                 timeout=30, what="the deleted Deployment put back by the watching operator")
    except BaseException as exc:
        raise AssertionError(_dump_logs(faulty)) from exc


def test_a_watch_that_comes_back_410_gone_is_relisted_not_trusted(faulty: Faulty, faulty_ns: str) -> None:
    """The operator is frozen (SIGSTOP); meanwhile kube-apiserver restarts (dropping every watch connection),
    a child Deployment is deleted and a service created, and etcd is compacted past every resourceVersion the
    operator saw. Resumed (SIGCONT), its watches resume from versions that are gone: 410 Gone, and each informer
    lists again. The listing shows the new service but no event tells of the deleted Deployment; the informer
    must find that out by comparing the list with what it knew (k8s/informer.py) and the operator put it back. The
    recheck is an hour away, so nothing else can."""
    cp, ns, op = faulty.cp, faulty_ns, faulty.op
    apply(cp, svc(ns, name="keep"))
    wait_for(lambda: ready(cp, ns, "keep"), timeout=90, what="keep Ready")
    # every kind has been listed and the first full pass is long done: the next listed events are a re-list
    wait_for(lambda: faulty.metric("vllm_pooling_operator_first_pass_seconds") > 0, timeout=30, what="the first full pass")
    uid = get(cp, path(ns, "deployments", "keep"))["metadata"]["uid"]
    sweeps = faulty.metric("vllm_pooling_operator_relist_sweeps_total")
    assert op.proc is not None
    os.killpg(op.proc.pid, signal.SIGSTOP)
    try:
        # the restart first: every watch connection is closed before the changes, so none of their events can
        # wait in the frozen process's socket buffers; the frozen process cannot open new ones
        cp.restart_component("kube-apiserver")
        cp.kubectl("delete", "deployment/keep", "-n", ns, "--wait=true")
        apply(cp, svc(ns, name="new"))
        compacted = cp.compact_etcd()
    finally:
        os.killpg(op.proc.pid, signal.SIGCONT)
    try:
        wait_for(lambda: reconciled(cp, ns, "new"), timeout=60, what="the service created while frozen reconciled")
        wait_for(lambda: (d := get(cp, path(ns, "deployments", "keep"))) and d["metadata"]["uid"] != uid,
                 timeout=60, what="the Deployment deleted while frozen put back")
        assert faulty.metric("vllm_pooling_operator_relist_vanished_total") >= 1
        assert faulty.metric("vllm_pooling_operator_relist_sweeps_total") > sweeps
        log = Path(op.log).read_text(errors="replace")
        # the Deployment re-list names what it found gone (at most ten): ours, and perhaps those of the previous
        # test's namespace, whose deletion (not waited for) may still run while the operator is frozen
        gone = [names for _, names in re.findall(
            r"Re-listed Deployment: (\d+) deleted while the watch was away, handled as deleted now: (.*)", log)]
        assert gone, "no re-list of Deployments was logged:\n" + "\n".join(re.findall(r".*Re-listed .*", log))
        assert any(f"{ns}/keep" in names.split(", ") for names in gone), gone
    except BaseException as exc:
        raise AssertionError(f"(etcd compacted to {compacted})\n{_dump_logs(faulty)}") from exc
