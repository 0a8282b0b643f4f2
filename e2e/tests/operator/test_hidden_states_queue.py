"""A HiddenStateJob with spec.queue on a cluster without Kueue, on the real control plane: the operator starts and
runs as before, creates the Job once, suspended and labelled for Kueue, and says why nothing runs
(Queued=True, KueueNotInstalled, and a Warning event). Then the test plays Kueue's part (real Kueue is in
standin_pods/test_kueue_real.py): it injects a scheduling directive, cuts parallelism (partial admission) and
unsuspends the Job under its own field manager, and the operator, reconciling after each step, writes nothing
to the Job (those fields are Kueue's) and reports the admission."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from e2e.harness.audit import WRITES
from e2e.harness.config import GPU_PRODUCT
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.tests.operator.test_hidden_states import API, claims, cond, get
from pooling_operator.api import kueue
from tests.factories import hidden_states

KUEUE_FIELD_MANAGER = "kueue-admission"  # the manager Kueue's job reconciler writes with (played here)


def reconciles(operator: OperatorProcess) -> float:
    pattern = r'vllm_pooling_operator_reconciles_total\{kind="HiddenStateJob",result="ok"\} (\S+)'
    return sum(float(m.group(1)) for m in re.finditer(pattern, operator.metrics()))


def job_writes(cluster: ControlPlane, mark: int, namespace: str) -> dict[str, int]:
    """The operator's writes to Jobs in the namespace since `mark` (the API server's audit log)."""
    counts = cluster.audit.since(mark, namespace)
    return {f"{verb} {res}": n for (verb, res), n in counts.items() if verb in WRITES and res.startswith("jobs")}


def test_a_queued_job_without_kueue_waits_suspended_and_kueues_writes_are_left_alone(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    status, _ = cluster.api.request("GET", f"/apis/{kueue.API_VERSION}")  # type: ignore[union-attr]
    assert status == 404, "this test needs a cluster without Kueue: a Kueue harness left its CRDs installed"
    claims(cluster, namespace)
    obj = hidden_states({"shards": 2, "parallelism": 2, "resources": {"gpu": {"count": 1, "product": GPU_PRODUCT}},
                         "queue": {"name": "team-a", "priorityClassName": "batch-low"}}, name="queued", namespace=namespace)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(obj))
    hsj_path = f"{API}/namespaces/{namespace}/hiddenstatejobs/queued"
    job_path = f"/apis/batch/v1/namespaces/{namespace}/jobs/queued"

    def queued_as(reason: str) -> dict[str, Any] | None:
        o = get(cluster, hsj_path)
        return o if cond(o, "Queued").get("reason") == reason else None

    o = wait_for(lambda: queued_as("KueueNotInstalled"), timeout=60, what="Queued KueueNotInstalled")
    assert cond(o, "Queued")["status"] == "True" and "kueue.x-k8s.io/v1beta2" in cond(o, "Queued")["message"]
    assert (cond(o, "Ready")["status"], cond(o, "Ready")["reason"]) == ("False", "KueueNotInstalled")
    assert cond(o, "Failed")["status"] == "False" and cond(o, "Progressing")["status"] == "False"
    job = get(cluster, job_path)
    assert job["spec"]["suspend"] is True and job["spec"]["parallelism"] == 2
    labels, annotations = job["metadata"]["labels"], job["metadata"].get("annotations") or {}
    assert (labels[kueue.QUEUE_LABEL], labels[kueue.PRIORITY_LABEL]) == ("team-a", "batch-low")
    assert annotations[kueue.MIN_PARALLELISM_ANNOTATION] == "1"

    def warned() -> list[dict[str, Any]]:
        events = get(cluster, f"/api/v1/namespaces/{namespace}/events")["items"]
        return [e for e in events if e["involvedObject"]["name"] == "queued" and e["reason"] == "KueueNotInstalled"]

    assert wait_for(warned, timeout=30, what="the KueueNotInstalled event")[0]["type"] == "Warning"
    no_pods = get(cluster, f"/api/v1/namespaces/{namespace}/pods?labelSelector=batch.kubernetes.io/job-name%3Dqueued")
    assert no_pods["items"] == []

    # Kueue's part: a flavor's nodeSelector while suspended, then partial admission (1 of 2) and unsuspend.
    mark = cluster.audit.mark()
    before = reconciles(operator)
    # (Kueue updates the Job; a merge patch under its own field manager does the same here.)
    directive = {"spec": {"template": {"spec": {"nodeSelector": {"example.com/flavor": "gpu"}}}}}
    cluster.kubectl("patch", "job/queued", "-n", namespace, "--type=merge", f"--field-manager={KUEUE_FIELD_MANAGER}",
                    "-p", json.dumps(directive))
    wait_for(lambda: reconciles(operator) > before, timeout=30, what="a reconcile after the injected directive")
    before = reconciles(operator)
    cluster.kubectl("patch", "job/queued", "-n", namespace, "--type=merge", f"--field-manager={KUEUE_FIELD_MANAGER}",
                    "-p", json.dumps({"spec": {"suspend": False, "parallelism": 1}}))
    o = wait_for(lambda: queued_as("Admitted"), timeout=60, what="Queued False, Admitted")
    # The reconcile that wrote Admitted counts itself once it has returned, a moment after its status write.
    wait_for(lambda: reconciles(operator) > before, timeout=30, what="the reconcile that wrote Admitted, counted")
    assert cond(o, "Queued")["status"] == "False"
    assert "1 of 2 shards at once (partial admission)" in cond(o, "Queued")["message"]
    job = get(cluster, job_path)
    assert (job["spec"]["suspend"], job["spec"]["parallelism"], job["spec"]["completions"]) == (False, 1, 2)
    assert job["spec"]["template"]["spec"]["nodeSelector"]["example.com/flavor"] == "gpu"
    # Reconciled after each of Kueue's writes, and not one write to the Job from the operator.
    assert job_writes(cluster, mark, namespace) == {}, job_writes(cluster, mark, namespace)


def test_a_job_without_a_queue_is_not_suspended_and_has_no_queued(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    claims(cluster, namespace)
    obj = hidden_states({"shards": 1, "resources": {"gpu": {"count": 1, "product": GPU_PRODUCT}}}, name="plain", namespace=namespace)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(obj))
    o = wait_for(lambda: (lambda x: x if cond(x, "Ready") else None)(get(cluster, f"{API}/namespaces/{namespace}/hiddenstatejobs/plain")),
                 timeout=60, what="status")
    assert not cond(o, "Queued")
    job = get(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs/plain")
    assert not job["spec"].get("suspend") and not any(k.startswith("kueue.x-k8s.io/") for k in job["metadata"]["labels"])
