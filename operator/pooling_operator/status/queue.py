"""Kueue admission of a job with spec.queue, from what was observed: the Job, its Workload and the LocalQueue.

Pure. Kueue owns when the Job runs (api/kueue.py): the Job is created suspended, Kueue unsuspends it once the
ClusterQueue has quota (perhaps with fewer pods at once: partial admission), and suspends it again to preempt
it. The Queued condition says which of these holds, in Kueue's words where Kueue has any, and names the
ClusterQueue. A preempted job is suspended, never failed: each shard resumes from its manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pooling_operator.api import kueue
from pooling_operator.api.job_base import QueueSpec
from pooling_operator.status import conditions as C

RESUMES = "The Job is suspended; each shard resumes from its manifest once Kueue admits the job again."


@dataclass(frozen=True)
class QueueObserved:
    """What the reconcile saw of Kueue for one job."""

    workload: dict[str, Any] | None = None  # the Workload owned by the job's Job
    local_queue: dict[str, Any] | None = None  # the LocalQueue spec.queue.name names
    installed: bool = True  # False: the API server does not serve kueue.x-k8s.io


@dataclass(frozen=True)
class Admission:
    waiting: bool  # the Job is held (suspended) by Kueue: Queued True
    reason: str
    message: str

    def condition(self, generation: int | None) -> dict[str, Any]:
        return C.condition(C.QUEUED, self.waiting, self.reason, self.message, generation)


def _true(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def _cluster_queue(observed: QueueObserved) -> str | None:
    admitted = (((observed.workload or {}).get("status") or {}).get("admission") or {}).get("clusterQueue")
    return admitted or ((observed.local_queue or {}).get("spec") or {}).get("clusterQueue")


def suspended(job: dict[str, Any] | None) -> bool:
    return bool(((job or {}).get("spec") or {}).get("suspend"))


def admission(queue: QueueSpec, job: dict[str, Any] | None, observed: QueueObserved, requested: int) -> Admission:
    """Where the job stands with Kueue. `requested` is the parallelism the job asked for (Kueue may admit fewer)."""
    cq = _cluster_queue(observed)
    where = f"ClusterQueue {cq} (LocalQueue {queue.name})" if cq else f"LocalQueue {queue.name}"
    if job is None:
        return Admission(True, C.CREATING, f"The Job is being created, suspended, for {where}.")
    if not suspended(job):
        running = int((job.get("spec") or {}).get("parallelism") or requested)
        partial = f"{running} of {requested} shards at once (partial admission)" if running < requested else f"{running} shards at once"
        return Admission(False, C.ADMITTED, f"Admitted by {where}: {partial}.")
    if not observed.installed:
        return Admission(True, C.KUEUE_NOT_INSTALLED,
                         f"The API server does not serve {kueue.API_VERSION}: nothing admits the Job, which stays suspended. "
                         "Install Kueue, or re-create the job without spec.queue.")
    if observed.workload is None:
        if observed.local_queue is None:
            return Admission(True, C.LOCAL_QUEUE_NOT_FOUND,
                             f"LocalQueue {queue.name} does not exist in this namespace: create it (pointing at a "
                             "ClusterQueue), or re-create the job naming an existing one in spec.queue.name.")
        return Admission(True, C.WAITING_FOR_WORKLOAD, f"Waiting for Kueue to make the Job's Workload in {where}.")
    conds = _true(observed.workload)
    if kueue.ADMITTED in conds:
        return Admission(False, C.ADMITTED, f"Admitted by {where}; Kueue is starting the Job.")
    evicted = conds.get(kueue.EVICTED)
    if evicted is not None:
        preempted = evicted.get("reason") == kueue.PREEMPTED
        said = (conds.get(kueue.PREEMPTED) or evicted).get("message") or evicted.get("reason") or "evicted"
        return Admission(True, C.PREEMPTED if preempted else C.EVICTED, f"{where}: {said}. {RESUMES}")
    if kueue.QUOTA_RESERVED in conds:
        return Admission(True, C.WAITING_FOR_ADMISSION_CHECKS, f"Quota reserved in {where}; waiting for its admission checks.")
    pending = next((c for c in ((observed.workload.get("status") or {}).get("conditions") or [])
                    if c.get("type") == kueue.QUOTA_RESERVED), None)
    said = (pending or {}).get("message") or "not yet considered by Kueue"
    return Admission(True, C.WAITING_FOR_QUOTA, f"Waiting for quota in {where}: {said}.")
