"""A ModelCache's status, pure: from its fill Job, the Job's pods (their termination messages carry the
fill's result, api/cache_fill_contract.py) and the status before.

- Ready: True once a verified snapshot is in place (`status.revision`), and it stays True while a new revision
  fills or after that fill fails: the old snapshot is still there and still served.
- Progressing: True while the fill Job runs.
- Failed: True with the fill's own reason (NoSpace, Unauthorized, RepositoryNotFound, RevisionNotFound,
  CorruptDownload, HubUnreachable, FillFailed) once the Job has failed; the message is the fill's.
"""

from __future__ import annotations

from typing import Any

from pooling_operator.api import ModelCache
from pooling_operator.api import cache_fill_contract as F
from pooling_operator.builders.caches import claim_name, revision, snapshot_path
from pooling_operator.status import conditions as C
from pooling_operator.status.conditions import condition


def _job_state(job: dict[str, Any] | None) -> str:
    """active | succeeded | failed | none, from the Job controller's own conditions and counters."""
    if job is None:
        return "none"
    status = job.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conds.get("Complete") == "True":
        return "succeeded"
    if conds.get("Failed") == "True":
        return "failed"
    return "active"


def fill_result(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The result of the newest fill pod that wrote one (a retried Job has several pods)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (cs.get("state") or {}).get("terminated") or {}
            result = F.decode(terminated.get("message"))
            if cs.get("name") == "fill" and result is not None:
                found.append((str(terminated.get("finishedAt") or ""), result))
    return max(found, key=lambda x: x[0])[1] if found else None


def cache_status(resource: ModelCache, job: dict[str, Any] | None, pods: list[dict[str, Any]],
                 old: dict[str, Any]) -> dict[str, Any]:
    generation = resource.metadata.generation
    state = _job_state(job)
    result = fill_result(pods) if state in ("succeeded", "failed") else None
    status: dict[str, Any] = {"observedGeneration": generation, "claimName": claim_name(resource)}
    held = {k: old[k] for k in ("revision", "bytes", "files", "path") if old.get(k) is not None}
    # What was filled before counts only on the same claim and for the same model (both may change).
    same = old.get("claimName") == claim_name(resource) and held.get("revision") is not None and \
        held.get("path") == snapshot_path(resource, str(held["revision"]))
    held = held if same else {}
    if state == "succeeded" and result is not None and not result.get(F.RESULT_REASON):
        held = {"revision": result[F.RESULT_REVISION], "bytes": result[F.RESULT_BYTES], "files": result[F.RESULT_FILES],
                "path": snapshot_path(resource, result[F.RESULT_REVISION])}
    status.update(held)
    wanted = revision(resource)
    if held.get("revision"):
        ready = condition(C.READY, True, C.FILLED, f"{resource.spec.model.name}@{held['revision']}: {held['files']} files, "
                                                   f"{held['bytes']} bytes, verified against the Hub's listing.", generation)
    elif state == "failed":
        ready = condition(C.READY, False, C.NOT_FILLED, "The fill failed (see Failed); nothing is in the cache.", generation)
    else:
        ready = condition(C.READY, False, C.NOT_FILLED, f"Filling {resource.spec.model.name}@{wanted}.", generation)
    if state == "active" or (state == "succeeded" and result is None):
        progressing = condition(C.PROGRESSING, True, C.FILLING, f"The fill Job {job['metadata']['name'] if job else ''} "
                                                                f"downloads {resource.spec.model.name}@{wanted}.", generation)
    elif state == "none":
        progressing = condition(C.PROGRESSING, True, C.CREATING, "The fill Job is being created.", generation)
    else:
        progressing = condition(C.PROGRESSING, False, C.UP_TO_DATE if state == "succeeded" else C.FINISHED,
                                "The fill finished." if state == "succeeded" else "The fill Job ended.", generation)
    if state == "failed":
        reason = (result or {}).get(F.RESULT_REASON) or F.FILL_FAILED
        message = (result or {}).get(F.RESULT_MESSAGE) or _job_message(job)
        kept = f" The cache still holds {held['revision']}." if held.get("revision") else ""
        failed = condition(C.FAILED, True, reason, f"{resource.spec.model.name}@{wanted}: {message}{kept}", generation)
    else:
        failed = condition(C.FAILED, False, C.NO_FAILURE, "No fill has failed.", generation)
    status["conditions"] = [ready, progressing, failed]
    return status


def _job_message(job: dict[str, Any] | None) -> str:
    cond: dict[str, Any] = next((c for c in ((job or {}).get("status") or {}).get("conditions") or [] if c.get("type") == "Failed"), {})
    return str(cond.get("message") or cond.get("reason") or "the fill Job failed without a result")


def cache_ready(cache: dict[str, Any] | None) -> tuple[str, str] | None:
    """(claim, revision) a service mounts when the ModelCache `cache` (a raw body) is Ready, else None."""
    status = (cache or {}).get("status") or {}
    ready: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == C.READY), {})
    if ready.get("status") != "True" or not status.get("revision") or not status.get("claimName"):
        return None
    return str(status["claimName"]), str(status["revision"])


def cache_wait_message(name: str, cache: dict[str, Any] | None) -> str:
    if cache is None:
        return f"ModelCache {name!r} does not exist in this namespace: create it (spec.model.source.cache.name)."
    conds = {c.get("type"): c for c in ((cache.get("status") or {}).get("conditions") or [])}
    failed = conds.get(C.FAILED, {})
    if failed.get("status") == "True":
        return f"ModelCache {name!r} failed to fill ({failed.get('reason')}): {failed.get('message')}"
    return f"ModelCache {name!r} is not Ready yet: {conds.get(C.READY, {}).get('message') or 'no status yet'}"


def waiting_status(generation: int | None, message: str, observed: dict[tuple[str, str], dict[str, Any]],
                   old: dict[str, Any]) -> dict[str, Any]:
    """Status of a service or job whose ModelCache is missing or not Ready: Ready False WaitingForModelCache;
    the spec itself is valid. What already runs (a Deployment or Job from before) is kept as last applied."""
    kept = next((f" {kind} {name}, as last applied, is kept until the cache is Ready again."
                 for (kind, name) in sorted(observed) if kind in ("Deployment", "Job")), "")
    status = {k: v for k, v in old.items() if k in ("startup", "embeddingSpace")}
    status.update({
        "observedGeneration": generation,
        "conditions": [
            condition(C.READY, False, C.WAITING_FOR_MODEL_CACHE, message + kept, generation),
            condition(C.SPEC_VALID, True, C.VALID, "Every rule holds; the model comes from a ModelCache.", generation),
            condition(C.PROGRESSING, True, C.WAITING_FOR_MODEL_CACHE, "No pod is created until the cache is Ready.", generation),
        ],
    })
    return status
