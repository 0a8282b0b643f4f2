"""Status of a job kind (HiddenStateJob, PoolingJob) from its Job and the progress its shards report."""

from __future__ import annotations

import json
from typing import Any

from pooling_operator.api import HiddenStateJob
from pooling_operator.api import shard_contract as hs
from pooling_operator.api.quantity import binary_quantity
from pooling_operator.api.resources import Job
from pooling_operator.status import conditions as C
from pooling_operator.status.conditions import condition
from pooling_operator.status.placement import placement_problem
from pooling_operator.status.queue import QueueObserved, admission

# The shard states that name the reason of a failed Job, in the order looked for: those that end the Job at once.
FAILURE_REASONS = {
    hs.BUDGET_EXCEEDED: C.STORAGE_BUDGET_EXCEEDED,
    hs.DATASET_UNREADABLE: C.DATASET_UNREADABLE,
    hs.OUTPUT_FULL: C.OUTPUT_VOLUME_FULL,
    hs.SPACE_DRIFT: C.SPACE_DRIFT_FAILED,
}
# The states that name no reason: running and succeeded are the Job's own conditions' business, and a shard
# that failed is retried; once its retries run out the Job's Failed condition says so (ShardFailed).
IGNORED_STATES = frozenset({hs.RUNNING, hs.SUCCEEDED, hs.FAILED})


def count_indexes(spec: str | None) -> int:
    """Indexes in a Job's compressed list, e.g. '1,3-5' -> 4."""
    total = 0
    for part in (spec or "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        total += int(high or low) - int(low) + 1
    return total


def shard_progress(configmap: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    """The shards' own reports (data key shard-<i>, compact JSON); unreadable entries are skipped."""
    out: dict[int, dict[str, Any]] = {}
    for key, value in ((configmap or {}).get("data") or {}).items():
        shard = hs.progress_shard(key)
        if shard is None:
            continue
        try:
            out[shard] = json.loads(value)
        except (ValueError, TypeError):
            continue
    return out


def storage_estimate(progress: dict[int, dict[str, Any]], layers: int, shards: int) -> tuple[int, str] | None:
    """(bytes, basis): tokens seen x layers x hidden size x bytes per value, per sample done, projected over the
    samples of the reporting shards, and over the shards not reporting yet at their mean. None until some
    shard has finished a sample and knows its files' width and hidden size."""
    tokens = done = total = 0
    reporting = 0
    value_bytes = 0.0
    for p in progress.values():
        d, t = int(p.get(hs.PROGRESS_DONE, 0) or 0), int(p.get(hs.PROGRESS_TOKENS, 0) or 0)
        hidden, width = int(p.get(hs.PROGRESS_HIDDEN_SIZE, 0) or 0), int(p.get(hs.PROGRESS_VALUE_BYTES, 0) or 0)
        reporting += 1
        total += int(p.get(hs.PROGRESS_TOTAL, 0) or 0)
        if d and t and hidden and width:
            tokens, done = tokens + t, done + d
            value_bytes += t * layers * hidden * width
    if not done or not reporting:
        return None
    per_sample = value_bytes / done
    projected = per_sample * total * max(shards, reporting) / reporting
    basis = (f"{tokens} prompt tokens in {done} samples done; {total} samples in the {reporting} of {shards} shards "
             "reporting")  # fmt: skip
    return round(projected), basis


def job_status(
    resource: HiddenStateJob, job: dict[str, Any] | None, configmap: dict[str, Any] | None,
    pods: list[dict[str, Any]] | None = None, refusals: list[dict[str, Any]] | None = None,
    queue: QueueObserved | None = None,
) -> dict[str, Any]:
    """The whole status of a HiddenStateJob: the common part (`common_job_status`) and its storage estimate."""
    status, progress = common_job_status(resource, job, configmap, pods, refusals, queue)
    spec = resource.spec
    storage = storage_status(storage_estimate(progress, len(spec.layers), spec.shards), spec.output.storage_budget)
    if storage is not None:
        status["storage"] = storage
    return status


def storage_status(estimate: tuple[int, str] | None, budget: object | None) -> dict[str, Any] | None:
    """status.storage: the projected output size (bytes, basis) beside the budget as written; None without
    either."""
    if estimate is None and budget is None:
        return None
    storage: dict[str, Any] = {}
    if estimate is not None:
        storage.update(estimatedBytes=estimate[0], estimate=binary_quantity(estimate[0]), basis=estimate[1])
    if budget is not None:
        storage["budget"] = str(budget)
    return storage


def common_job_status(
    resource: Job, job: dict[str, Any] | None, configmap: dict[str, Any] | None,
    pods: list[dict[str, Any]] | None = None, refusals: list[dict[str, Any]] | None = None,
    queue: QueueObserved | None = None,
) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """What every job kind's status holds, and the shards' progress records it was computed from: conditions
    from the Job, its pods and the shards' reports; `refusals` are the FailedCreate events of the Job (its
    controller reports a quota or PodSecurity refusal nowhere else); `queue` what was seen of Kueue for a job
    with spec.queue (Queued)."""
    spec, generation = resource.spec, resource.metadata.generation
    js = (job or {}).get("status") or {}
    job_conditions = {c.get("type"): c for c in js.get("conditions") or [] if c.get("status") == "True"}
    progress = shard_progress(configmap)
    failed_shards = count_indexes(js.get("failedIndexes")) if "failedIndexes" in js else js.get("failed", 0)
    shards = {"total": spec.shards, "succeeded": js.get("succeeded", 0), "failed": failed_shards, "active": js.get("active", 0)}
    samples = {"done": sum(int(p.get(hs.PROGRESS_DONE, 0)) for p in progress.values()),
               "failed": sum(int(p.get(hs.PROGRESS_FAILED, 0)) for p in progress.values())}
    written = sum(int(p.get(hs.PROGRESS_BYTES, 0)) for p in progress.values())

    states = {p.get(hs.PROGRESS_STATE) for p in progress.values()}
    failure_reason = next((FAILURE_REASONS[s] for s in FAILURE_REASONS if s in states), None)
    if "Complete" in job_conditions:
        succeeded = condition(C.SUCCEEDED, True, C.ALL_SHARDS_SUCCEEDED, f"{spec.shards} shards wrote {hs.SUCCESS_MARKER}; {samples['done']} samples.", generation)
        failed = condition(C.FAILED, False, C.NO_FAILURE, "No shard failed.", generation)
        progressing = condition(C.PROGRESSING, False, C.FINISHED, "The job finished.", generation)
        ready = condition(C.READY, True, C.SUCCEEDED, "Every shard finished.", generation)
    elif "Failed" in job_conditions:
        reason = failure_reason or C.SHARD_FAILED
        message = job_conditions["Failed"].get("message") or "A shard exhausted its retries."
        if failure_reason == C.STORAGE_BUDGET_EXCEEDED:
            message = f"A shard stopped before exceeding its share of output.storageBudget; {samples['done']} finished samples kept."
        elif failure_reason == C.DATASET_UNREADABLE:
            message = "A shard could not read the dataset."
        elif failure_reason == C.OUTPUT_VOLUME_FULL:
            message = (f"A shard ran out of space on the output volume ({spec.output.volume.claim_name}); "
                       f"{samples['done']} finished samples kept. Free space or grow the claim, then run the job "
                       f"again (re-create the {resource.kind}): each shard resumes from its manifest.")
        succeeded = condition(C.SUCCEEDED, False, reason, message, generation)
        failed = condition(C.FAILED, True, reason, message, generation)
        progressing = condition(C.PROGRESSING, False, C.FINISHED, "The job finished.", generation)
        ready = condition(C.READY, False, reason, message, generation)
    else:
        running = job is not None
        succeeded = condition(C.SUCCEEDED, False, C.RUNNING if running else C.CREATING, "Not finished yet.", generation)
        failed = condition(C.FAILED, False, C.NO_FAILURE, "No shard failed so far.", generation)
        progressing = condition(
            C.PROGRESSING, True, C.RUNNING if running else C.CREATING,
            f"{shards['succeeded']} of {spec.shards} shards done, {shards['active']} running; {samples['done']} samples.",
            generation,
        )
        ready = condition(C.READY, running, C.RUNNING if running else C.CREATING, "The job is running." if running else "The Job is being created.", generation)
    finished = "Complete" in job_conditions or "Failed" in job_conditions
    admitted = None if spec.queue is None else admission(spec.queue, job, queue or QueueObserved(), spec.parallelism or spec.shards)
    placement = None if finished or (admitted and admitted.waiting) else placement_problem(job, pods or [], refusals)
    if admitted is not None and admitted.waiting and not finished:
        # Held by Kueue (never started, or preempted): not failed, not progressing, nothing to place yet.
        ready = condition(C.READY, False, admitted.reason, admitted.message, generation)
        progressing = condition(C.PROGRESSING, False, admitted.reason, admitted.message, generation)
        succeeded = condition(C.SUCCEEDED, False, admitted.reason, "Not finished yet.", generation)
    if placement is not None:
        # Pods that cannot be created or placed: say so at once, in the controller's or scheduler's words.
        ready = condition(C.READY, False, placement.reason, placement.message, generation)
        degraded = condition(C.DEGRADED, True, placement.reason, placement.message, generation)
    else:
        degraded = condition(C.DEGRADED, False, C.HEALTHY, "No pod is refused or unplaceable.", generation)
    out_path = spec.output.volume
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": [ready, condition(C.SPEC_VALID, True, C.VALID, "Every rule holds.", generation), progressing, degraded, succeeded, failed,
                       *([admitted.condition(generation)] if admitted is not None else [])],
        "shards": shards,
        "samples": samples,
        "bytesWritten": written,
        "output": {
            "path": f"{out_path.claim_name}:{out_path.path}",
            "manifests": [hs.manifest_path(i) for i in sorted(progress)],
        },
    }
    if js.get("startTime"):
        status["startTime"] = js["startTime"]
    if js.get("completionTime"):
        status["completionTime"] = js["completionTime"]
    return status, progress
