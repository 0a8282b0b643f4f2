"""Kueue admission of a HiddenStateJob with spec.queue, pure parts: the Job it renders (suspended, labelled,
partial admission asked for only where Kueue accepts it), the Queued condition from the Job and Kueue's
Workload, the cache's view of Kueue's objects, and the one read that tells a missing LocalQueue from a
Kueue that is not installed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from pooling_operator.api import kueue
from pooling_operator.builders import BuildContext, build
from pooling_operator.k8s.api import ApiError, Kube
from pooling_operator.k8s.cache import Cache, queue_stored
from pooling_operator.status import conditions as C
from pooling_operator.status.jobs import job_status
from pooling_operator.status.queue import QueueObserved
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.validate import validate
from tests.factories import hidden_states

QUEUE = {"name": "team-a", "priorityClassName": "batch-low"}


def parsed(spec: dict[str, Any]) -> Any:
    result = validate(hidden_states(spec, name="extract", namespace="ml"))
    assert result.ok, [str(p) for p in result.errors]
    result.resource.metadata.generation = 1  # type: ignore[union-attr]
    result.resource.metadata.uid = "hsj-uid"  # type: ignore[union-attr]
    return result.resource


def the_job(spec: dict[str, Any]) -> dict[str, Any]:
    return next(o for o in build(parsed(spec), contract("0.33"), BuildContext()) if o["kind"] == "Job")


# ---- the Job ------------------------------------------------------------------------------------------------


def test_a_queued_job_is_created_suspended_with_kueues_labels_and_partial_admission() -> None:
    job = the_job({"queue": QUEUE, "shards": 4, "parallelism": 4})
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"][kueue.QUEUE_LABEL] == "team-a"
    assert job["metadata"]["labels"][kueue.PRIORITY_LABEL] == "batch-low"
    assert job["metadata"]["annotations"][kueue.MIN_PARALLELISM_ANNOTATION] == "1"
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (4, 4)


def test_one_shard_at_a_time_asks_for_no_partial_admission_which_kueue_would_refuse() -> None:
    # Kueue's webhook: job-min-parallelism must lie in [1, parallelism - 1].
    job = the_job({"queue": {"name": "team-a"}, "shards": 4, "parallelism": 1})
    assert kueue.MIN_PARALLELISM_ANNOTATION not in (job["metadata"].get("annotations") or {})
    assert kueue.PRIORITY_LABEL not in job["metadata"]["labels"] and job["spec"]["suspend"] is True


def test_without_a_queue_nothing_changes() -> None:
    job = the_job({"shards": 4})
    assert "suspend" not in job["spec"]
    assert not [k for k in job["metadata"]["labels"] if k.startswith("kueue.x-k8s.io/")]
    assert kueue.MIN_PARALLELISM_ANNOTATION not in (job["metadata"].get("annotations") or {})


@pytest.mark.parametrize(("queue", "path"), [
    ({"name": "Team_A"}, "spec.queue.name"),
    ({"name": "a" * 64}, "spec.queue.name"),
    ({"name": "team-a", "priorityClassName": "High Priority"}, "spec.queue.priorityClassName"),
    ({}, "spec.queue.name"),
])  # fmt: skip
def test_a_bad_queue_is_refused_naming_the_field(queue: dict[str, Any], path: str) -> None:
    result = validate(hidden_states({"queue": queue}, name="extract", namespace="ml"))
    assert not result.ok
    assert any(p.path == path for p in result.errors), [str(p) for p in result.errors]


# ---- Queued ------------------------------------------------------------------------------------------------


def job_obj(suspend: bool | None, parallelism: int = 4, **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"parallelism": parallelism}
    if suspend is not None:
        spec["suspend"] = suspend
    return {"metadata": {"name": "extract", "namespace": "ml", "uid": "job-uid"}, "spec": spec, "status": status}


def workload(*conds: tuple[str, str, str, str], admitted_to: str | None = None) -> dict[str, Any]:
    st: dict[str, Any] = {"conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conds]}
    if admitted_to:
        st["admission"] = {"clusterQueue": admitted_to, "podSetAssignments": [{"name": "main", "count": 2}]}
    return {"kind": "Workload", "metadata": {"name": "job-extract-1a2b3", "namespace": "ml",
            "ownerReferences": [{"kind": "Job", "name": "extract", "uid": "job-uid", "controller": True}]}, "status": st}


LQ = {"kind": "LocalQueue", "metadata": {"name": "team-a", "namespace": "ml"}, "spec": {"clusterQueue": "gpus"}}
PENDING = workload((kueue.QUOTA_RESERVED, "False", "Pending",
                    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor default, 4 more needed"))
PREEMPTED = workload((kueue.EVICTED, "True", "Preempted", "Preempted to accommodate a higher priority Workload"),
                     (kueue.PREEMPTED, "True", "InClusterQueue",
                      "Preempted to accommodate a workload (UID: w2, JobUID: j2) due to prioritization in the ClusterQueue"),
                     (kueue.QUOTA_RESERVED, "False", "Preempted", "Preempted"))


@pytest.mark.parametrize(("job", "observed", "queued", "says"), [
    (None, QueueObserved(), ("True", C.CREATING), "LocalQueue team-a"),
    (job_obj(True), QueueObserved(installed=False), ("True", C.KUEUE_NOT_INSTALLED), "kueue.x-k8s.io/v1beta2"),
    (job_obj(True), QueueObserved(), ("True", C.LOCAL_QUEUE_NOT_FOUND), "LocalQueue team-a does not exist"),
    (job_obj(True), QueueObserved(local_queue=LQ), ("True", C.WAITING_FOR_WORKLOAD), "ClusterQueue gpus (LocalQueue team-a)"),
    (job_obj(True), QueueObserved(PENDING, LQ), ("True", C.WAITING_FOR_QUOTA),
     "Waiting for quota in ClusterQueue gpus (LocalQueue team-a): couldn't assign flavors to pod set main: insufficient unused quota"),
    (job_obj(True), QueueObserved(workload((kueue.QUOTA_RESERVED, "True", "QuotaReserved", ""), admitted_to="gpus"), LQ),
     ("True", C.WAITING_FOR_ADMISSION_CHECKS), "Quota reserved in ClusterQueue gpus"),
    (job_obj(True), QueueObserved(PREEMPTED, LQ), ("True", C.PREEMPTED), "due to prioritization in the ClusterQueue. The Job is suspended; each shard resumes"),
    (job_obj(True), QueueObserved(workload((kueue.EVICTED, "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout")), LQ),
     ("True", C.EVICTED), "Exceeded the PodsReady timeout"),
    (job_obj(True), QueueObserved(workload((kueue.ADMITTED, "True", "Admitted", ""), admitted_to="gpus"), LQ), ("False", C.ADMITTED),
     "Admitted by ClusterQueue gpus"),
    (job_obj(False, parallelism=2), QueueObserved(workload((kueue.ADMITTED, "True", "Admitted", ""), admitted_to="gpus"), LQ),
     ("False", C.ADMITTED), "2 of 4 shards at once (partial admission)"),
    (job_obj(False), QueueObserved(workload((kueue.ADMITTED, "True", "Admitted", ""), admitted_to="gpus")), ("False", C.ADMITTED),
     "4 shards at once"),
])  # fmt: skip
def test_queued_says_where_the_job_stands_with_kueue(job: dict[str, Any] | None, observed: QueueObserved,
                                                     queued: tuple[str, str], says: str) -> None:
    status = job_status(parsed({"queue": QUEUE, "shards": 4}), job, None, [], [], observed)
    conds = {c["type"]: c for c in status["conditions"]}
    assert (conds["Queued"]["status"], conds["Queued"]["reason"]) == queued
    assert says in conds["Queued"]["message"]
    if queued[0] == "True" and job is not None:
        # Held by Kueue: not ready, not progressing, not failed (a preempted job is suspended, never Failed).
        assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", queued[1])
        assert conds["Progressing"]["status"] == "False" and conds["Failed"]["status"] == "False"
        assert conds["Degraded"]["status"] == "False"


def test_a_job_without_a_queue_has_no_queued_condition() -> None:
    status = job_status(parsed({}), job_obj(None, status_active=0), None, [], [], None)
    assert "Queued" not in {c["type"] for c in status["conditions"]}


def test_a_finished_queued_job_says_succeeded_and_admitted() -> None:
    done = job_obj(False, succeeded=4, conditions=[{"type": "Complete", "status": "True"}])
    status = job_status(parsed({"queue": QUEUE, "shards": 4}), done, None, [], [], QueueObserved())
    conds = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conds["Succeeded"] == ("True", C.ALL_SHARDS_SUCCEEDED) and conds["Queued"] == ("False", C.ADMITTED)


def test_each_new_reason_of_queued_is_announced_and_a_job_nothing_will_admit_warns() -> None:
    def queued(status: str, reason: str) -> list[dict[str, Any]]:
        return [C.condition(C.QUEUED, status, reason, reason, 1)]

    assert C.announced(queued("True", C.WAITING_FOR_QUOTA), queued("True", C.PREEMPTED)) == [
        ("Normal", C.PREEMPTED, f"Queued is True: {C.PREEMPTED}")]
    assert C.announced(queued("True", C.PREEMPTED), queued("True", C.PREEMPTED)) == []
    assert C.announced(None, queued("True", C.KUEUE_NOT_INSTALLED))[0][0] == "Warning"
    assert C.announced(queued("True", C.WAITING_FOR_QUOTA), queued("False", C.ADMITTED))[0][:2] == ("Normal", C.ADMITTED)


# ---- the cache and the one read ---------------------------------------------------------------------------


def test_the_cache_keeps_a_workload_under_its_job_and_little_of_it() -> None:
    body = {**PENDING, "apiVersion": kueue.API_VERSION,
            "spec": {"podSets": [{"name": "main", "count": 4, "template": {"spec": {"containers": [{"name": "x" * 1000}]}}}]}}
    body["metadata"] = {**body["metadata"], "managedFields": [{"manager": "kueue"}], "resourceVersion": "7", "uid": "w1"}
    key, stored = queue_stored(body)  # type: ignore[misc]
    assert key == ("ml", "extract") and "spec" not in stored and "managedFields" not in stored["metadata"]
    assert stored["status"]["conditions"] == PENDING["status"]["conditions"]
    foreign = {**body, "metadata": {**body["metadata"], "ownerReferences": [{"kind": "RayJob", "name": "r", "controller": True}]}}
    assert queue_stored(foreign) is None
    assert queue_stored(LQ) == (("ml", "team-a"), {"apiVersion": None, "kind": "LocalQueue", "metadata": LQ["metadata"],
                                                   "spec": {"clusterQueue": "gpus"}})

    cache = Cache(workloads={key: [stored]}, local_queues={("ml", "team-a"): [LQ]},
                  owners={("HiddenStateJob", "ml", "extract"): [{"kind": "HiddenStateJob", "metadata": {"name": "extract", "namespace": "ml"},
                                                                 "spec": {"queue": {"name": "team-a"}}}],
                          ("HiddenStateJob", "ml", "other"): [{"kind": "HiddenStateJob", "metadata": {"name": "other", "namespace": "ml"},
                                                               "spec": {}}]})
    assert cache.workload_of(job_obj(True)) == stored
    assert cache.workload_of({"metadata": {"name": "extract", "namespace": "ml", "uid": "a-new-job"}}) is None
    assert cache.local_queue("ml", "team-a") == LQ
    assert cache.queued_owners("ml", job="extract") == [("HiddenStateJob", "ml", "extract")]
    assert cache.queued_owners("ml", local_queue="team-a") == [("HiddenStateJob", "ml", "extract")]
    assert cache.queued_owners("ml", local_queue="team-b") == [] and cache.queued_owners("other-ns", job="extract") == []


class _Answers(Kube):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__()
        self.answer = (status, body)

    async def request(self, method: str, path: str, **_: Any) -> Any:
        status, body = self.answer
        if status != 200:
            raise ApiError(status, "Not Found", json.dumps(body))
        return body


@pytest.mark.parametrize(("status", "body", "want"), [
    (200, LQ, (LQ, True)),
    # The API server's answers, as kube-apiserver v1.35 gives them: an object missing, a resource not served.
    (404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
           "message": 'localqueues.kueue.x-k8s.io "team-a" not found',
           "details": {"name": "team-a", "group": "kueue.x-k8s.io", "kind": "localqueues"}}, (None, True)),
    (404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
           "message": "the server could not find the requested resource", "details": {}}, (None, False)),
])  # fmt: skip
def test_lookup_tells_a_missing_object_from_a_kind_nobody_serves(status: int, body: dict[str, Any], want: Any) -> None:
    from pooling_operator.api.kinds import KINDS

    assert asyncio.run(_Answers(status, body).lookup(KINDS["LocalQueue"], "ml", "team-a")) == want


def test_the_docs_job_validates_and_renders_suspended() -> None:
    """docs/kueue.md's HiddenStateJob is a valid one, and renders as the doc says."""
    from pathlib import Path

    import yaml

    text = (Path(__file__).resolve().parents[1] / "docs" / "kueue.md").read_text()
    blocks = [yaml.safe_load_all(b.split("```", 1)[0]) for b in text.split("```yaml\n")[1:]]
    docs = [d for block in blocks for d in block]
    job = next(d for d in docs if d["kind"] == "HiddenStateJob")
    result = validate(job)
    assert result.ok, [str(p) for p in result.errors]
    rendered = next(o for o in build(result.resource, contract("0.33"), BuildContext()) if o["kind"] == "Job")  # type: ignore[arg-type]
    assert rendered["spec"]["suspend"] is True and rendered["metadata"]["labels"][kueue.QUEUE_LABEL] == "team-a"
    assert {d["kind"] for d in docs} >= {"ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"}


def test_a_job_kueue_holds_is_settled_and_an_admitted_one_is_not() -> None:
    """Held by Kueue, a job changes only with Kueue's objects or its Job (watched): no recheck, so no read."""
    held = job_status(parsed({"queue": QUEUE}), job_obj(True), None, [], [], QueueObserved(installed=False))
    assert C.settled(held)
    running = job_status(parsed({"queue": QUEUE}), job_obj(False, active=4), None, [], [], QueueObserved())
    assert not C.settled(running)
