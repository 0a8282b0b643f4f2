"""Every condition type and reason the operator sets, in one place, with what True means and who sets it.

On the first visit (a service whose Deployment does not exist yet) Ready and Degraded are `Unknown` with
reason `Creating`: nothing has failed, nothing is known yet. Conditions follow the Kubernetes API conventions: CamelCase reasons, `observedGeneration`, and a
`lastTransitionTime` that moves only when the status flips. Two field managers write them (docs/design.md):
the reconcile (`vllm-pooling-operator`) owns every type but the autoscaler's two, which the autoscaler
(`vllm-pooling-operator-autoscaler`) owns; conditions are a list-map keyed by `type`, so neither removes
the other's entries.

| type | True means | set by | present on |
|---|---|---|---|
| Ready | the desired replicas are ready by their readiness probes (vLLM's /health) and the Service exists; jobs: running or done without failure | status/ (reconcile) | all |
| SpecValid | every rule of the resource's vLLM version (and its policy) holds | reconcile parse | all |
| Progressing | a rollout, scale or job run is under way | status/ (reconcile) | services, jobs |
| Degraded | pods crash-loop or cannot be created or placed (at once, with the controller's or scheduler's reason), or fewer replicas than desired are ready for longer than the startup budget | status/ (reconcile) | services |
| MetricsAvailable | the autoscaler's queries return data | autoscaling/ | services with backend operator |
| ScalingLimited | a bound (min, max, policy cap, GPU budget, unplaceable pods) stops the desired replica count | autoscaling/ | services with backend operator |
| ScaledToZero | the service has no replica: idle past its idle time (reason Idle), or held at 0 while its wake query cannot be read (HeldAtZero); False: Serving, or Woken by demand | autoscaling/zero.py | services with minReplicas 0 and backend operator |
| Succeeded / Failed | every shard wrote _SUCCESS / a shard exhausted its retries or the budget | status/ (reconcile) | jobs |
| Queued | a job with spec.queue waits for Kueue to admit it (again); False once admitted | status/ (reconcile), from the Job and Kueue's Workload | jobs with spec.queue |
| SpaceVerified | every running pod answered the canaries as the space's reference (status/space.py from the pods' verdicts) | status/ (reconcile), from the space gate's pod conditions | services with spec.spaceCheck |
"""

from __future__ import annotations

from typing import Any

from pooling_operator.vllm import space_check

# ---- types ---------------------------------------------------------------------------------------------------
READY = "Ready"
SPEC_VALID = "SpecValid"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
METRICS_AVAILABLE = "MetricsAvailable"
SCALING_LIMITED = "ScalingLimited"
SCALED_TO_ZERO_TYPE = "ScaledToZero"  # True while a minReplicas-0 service has no replica (autoscaling/zero.py)
SUCCEEDED = "Succeeded"
FAILED = "Failed"
QUEUED = "Queued"
SPACE_VERIFIED = "SpaceVerified"  # services with spec.spaceCheck: every pod answers the canaries as the space's reference
TYPES_ORDER = (READY, SPEC_VALID, PROGRESSING, DEGRADED, METRICS_AVAILABLE, SCALING_LIMITED, SCALED_TO_ZERO_TYPE, SPACE_VERIFIED,
               SUCCEEDED, FAILED, QUEUED)
AUTOSCALER_TYPES = (METRICS_AVAILABLE, SCALING_LIMITED, SCALED_TO_ZERO_TYPE)  # owned by the autoscaler's field manager

# ---- reasons -------------------------------------------------------------------------------------------------
# Ready
AVAILABLE = "Available"  # True: desired replicas ready
REPLICAS_NOT_READY = "ReplicasNotReady"  # False: fewer ready than desired
SCALED_TO_ZERO = "ScaledToZero"  # False: 0 replicas desired
ROUTER_NOT_READY = "RouterNotReady"  # False: the replicas are ready but the router in front (spec.routing) is not
# SpecValid (also Ready=False with the same reason)
VALID = "Valid"  # True
INVALID_SPEC = "InvalidSpec"  # False: a rule is broken; the message names the field
EMBEDDING_SPACE_CHANGED = "EmbeddingSpaceChanged"  # False: vector-space fields changed without a new label
EMBEDDING_SPACE_CLAIMED = "EmbeddingSpaceClaimed"  # False: an older PoolingService or PoolingJob claims the label with another space
CHILD_REJECTED = "ChildRejected"  # False: the API server refused a child built from the spec
CHILD_NAME_TAKEN = "ChildNameTaken"  # Ready False: a child's name is held by an object this resource does not control
STATUS_REFUSED = "StatusRefused"  # False: the API server refused the status the reconcile wrote (the message says why)
POLICY_NOT_ALLOWED = "PolicyNotAllowed"  # False: the named AutoscalingPolicy does not select the namespace
POLICY_INVALID = "PolicyInvalid"  # False: the AutoscalingPolicy it would follow breaks its own rules (named)
# Ready (the spec is valid)
FRONT_HOST_CLAIMED = "FrontHostClaimed"  # False: another service or route holds a front host; this one's route is not written
# Progressing
CREATING = "Creating"  # True: the Deployment or Job is being created
ROLLING_OUT = "RollingOut"  # True: replicas are being updated, added or removed
COMPLETE = "Complete"  # False: the rollout finished
RUNNING = "Running"  # True (jobs): shards are running
FINISHED = "Finished"  # False (jobs): the job ended
# Degraded
HEALTHY = "Healthy"  # False
CRASH_LOOP = "CrashLoopBackOff"  # True: a container cannot start or keeps crashing
STARTUP_BUDGET_EXCEEDED = "StartupBudgetExceeded"  # True: the rollout missed its deadline
REPLICAS_UNAVAILABLE = "ReplicasUnavailable"  # True: fewer ready than desired for longer than the startup budget
FAILED_CREATE = "FailedCreate"  # True: the ReplicaSet controller cannot create pods (quota, PodSecurity, ...)
UNSCHEDULABLE = "Unschedulable"  # True: the scheduler cannot place a pod (no GPU left, a missing volume, ...)
# MetricsAvailable (autoscaler)
QUERIES_ANSWERED = "QueriesAnswered"  # True
NO_DATA = "NoData"  # False: a required query returned no series (named in the message); replicas held
PROMETHEUS_UNREACHABLE = "PrometheusUnreachable"  # False: Prometheus did not answer; replicas held
# ScalingLimited (autoscaler)
WITHIN_BOUNDS = "WithinBounds"  # False
LIMIT_MIN = "MinReplicas"  # True: the signals want fewer than minReplicas
LIMIT_MAX = "MaxReplicas"  # True: the signals want more than maxReplicas
LIMIT_POLICY = "PolicyMaxReplicas"  # True: the policy's limits.maxReplicas caps the service
LIMIT_BUDGET = "NamespaceGPUBudget"  # True: the policy's limits.maxGPUsPerNamespace leaves no room
LIMIT_UNSCHEDULABLE = UNSCHEDULABLE  # True: pods cannot be placed; no replica is added (scheduler's message)
# Succeeded / Failed (jobs)
ALL_SHARDS_SUCCEEDED = "AllShardsSucceeded"  # Succeeded True
NO_FAILURE = "NoFailure"  # Failed False
STORAGE_BUDGET_EXCEEDED = "StorageBudgetExceeded"  # Failed True
DATASET_UNREADABLE = "DatasetUnreadable"  # Failed True
OUTPUT_VOLUME_FULL = "OutputVolumeFull"  # Failed True
SHARD_FAILED = "ShardFailed"  # Failed True
SPACE_DRIFT_FAILED = "SpaceDrift"  # Failed True (PoolingJob with spaceCheck): the canaries drifted from the space's reference
# Queued (jobs with spec.queue; status/queue.py). True: the Job is suspended, waiting for Kueue.
KUEUE_NOT_INSTALLED = "KueueNotInstalled"  # True: kueue.x-k8s.io is not served; nothing will admit the Job
LOCAL_QUEUE_NOT_FOUND = "LocalQueueNotFound"  # True: the LocalQueue spec.queue.name does not exist
WAITING_FOR_WORKLOAD = "WaitingForWorkload"  # True: Kueue has not made the Job's Workload yet
WAITING_FOR_QUOTA = "WaitingForQuota"  # True: the Workload waits for quota in its ClusterQueue (Kueue's message)
WAITING_FOR_ADMISSION_CHECKS = "WaitingForAdmissionChecks"  # True: quota reserved, admission checks pending
PREEMPTED = "Preempted"  # True: Kueue preempted the job (suspended it); shards resume from their manifests
EVICTED = "Evicted"  # True: Kueue evicted the job for another reason (its own, in the message)
ADMITTED = "Admitted"  # False: Kueue admitted the job; its pods run

# SpaceVerified (status/space.py, from the pods' verdicts: runtime/space_gate.py)
SPACE_VERIFIED_OK = space_check.VERIFIED  # True: every running pod answers the canaries as the reference (or recorded it)
SPACE_DRIFT = space_check.DRIFT  # False: a pod's answers drifted from the reference (held back, or admitted by onDrift warn)
SPACE_UNREACHABLE = space_check.UNREACHABLE  # False: a pod could not be asked (tried again with back-off)
CANARIES_INVALID = space_check.CANARIES_INVALID  # False: spaceCheck.canaries is a missing ConfigMap or key, or not canaries
SPACE_CHECKING = "Checking"  # Unknown: no pod has answered yet

# ModelCache (its Failed reasons are the fill's: api/cache_fill_contract.py REASONS)
FILLED = "Filled"  # Ready True: a verified snapshot is in place
NOT_FILLED = "NotFilled"  # Ready False: no snapshot yet (filling, or the fill failed)
FILLING = "Filling"  # Progressing True: the fill Job runs
UP_TO_DATE = "UpToDate"  # Progressing False: the snapshot is the spec's revision
# A service or job using a ModelCache
WAITING_FOR_MODEL_CACHE = "WaitingForModelCache"  # Ready False: the cache is missing or not yet filled

# Conditions whose True (or False) is bad news: their flips become Warning events.
_BAD_WHEN_TRUE = (DEGRADED, FAILED, SCALING_LIMITED)
# Queued=True is the ordinary way of a queued job, except where nothing will ever admit it as it stands.
_BAD_QUEUED_REASONS = (KUEUE_NOT_INSTALLED, LOCAL_QUEUE_NOT_FOUND)
_BAD_WHEN_FALSE = (SPEC_VALID, READY, METRICS_AVAILABLE, SPACE_VERIFIED)


def condition(type_: str, status: bool | str, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    value = status if isinstance(status, str) else ("True" if status else "False")
    out: dict[str, Any] = {"type": type_, "status": value, "reason": reason, "message": message}
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def merge(old: list[dict[str, Any]] | None, new: list[dict[str, Any]], now: str) -> list[dict[str, Any]]:
    """New conditions, keeping each old lastTransitionTime whose status did not change; sorted by type."""
    previous = {c.get("type"): c for c in old or []}
    out = []
    for cond in new:
        before = previous.get(cond["type"])
        since = before.get("lastTransitionTime") if before and before.get("status") == cond["status"] else None
        out.append({**cond, "lastTransitionTime": since or now})
    order = {t: i for i, t in enumerate(TYPES_ORDER)}
    return sorted(out, key=lambda c: (order.get(c["type"], len(order)), c["type"]))


def flips(old: list[dict[str, Any]] | None, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conditions whose status changed (or appeared)."""
    previous = {c.get("type"): c.get("status") for c in old or []}
    return [c for c in new if previous.get(c["type"]) != c["status"]]


_QUIET_ON_FIRST_VISIT = (READY, PROGRESSING, DEGRADED, SUCCEEDED, FAILED)


def announced(old: list[dict[str, Any]] | None, new: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The events a status change posts, as (type Normal|Warning, reason, message): one per flipped condition
    (and per new reason of Queued),
    except on the first visit, where a lifecycle condition that is False or Unknown has not flipped from
    anything (no noise for a resource that is merely new)."""
    first_visit = not old
    out = []
    before = {c.get("type"): c.get("reason") for c in old or []}
    # Queued changes its reason while it stays True (waiting for quota -> admitted -> preempted -> waiting):
    # each step is news to whoever watches the job.
    flipped = flips(old, new)
    requeued = [c for c in new if c["type"] == QUEUED and c["type"] in before and before[c["type"]] != c["reason"]
                and c not in flipped]
    for cond in flipped + requeued:
        if first_visit and cond["status"] in ("False", "Unknown") and cond["type"] in _QUIET_ON_FIRST_VISIT:
            continue
        out.append((event_type(cond), cond["reason"], f"{cond['type']} is {cond['status']}: {cond['message']}"))
    return out


def event_type(cond: dict[str, Any]) -> str:
    """Warning for a flip into bad news, Normal otherwise."""
    bad = (cond["type"] in _BAD_WHEN_TRUE and cond["status"] == "True") or (
        cond["type"] in _BAD_WHEN_FALSE and cond["status"] == "False"
    ) or (cond["type"] == QUEUED and cond["status"] == "True" and cond["reason"] in _BAD_QUEUED_REASONS)
    return "Warning" if bad else "Normal"


def split(conditions: list[dict[str, Any]] | None, types: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(conditions of these types, the others)."""
    mine = [c for c in conditions or [] if c.get("type") in types]
    rest = [c for c in conditions or [] if c.get("type") not in types]
    return mine, rest


def settled(status: dict[str, Any]) -> bool:
    """Nothing will change without an event: Ready, refused until the spec changes, a finished job, or one Kueue
    holds (a queued job waits for a Workload, LocalQueue, CRD or Job event, so it costs no read meanwhile). A
    resource that is starting, rolling out or degraded is not settled: its conditions may turn with time."""
    conds = {c.get("type"): c for c in status.get("conditions") or []}

    def true(kind: str) -> bool:
        return (conds.get(kind) or {}).get("status") == "True"

    if (conds.get(SPEC_VALID) or {}).get("status") == "False":
        return True
    if true(SUCCEEDED) or true(FAILED):
        return True
    if true(QUEUED):
        return True  # held by Kueue: only Kueue's objects (watched) or the Job move it, never time alone
    space = conds.get(SPACE_VERIFIED)
    if space is not None and space.get("reason") in (SPACE_CHECKING, SPACE_UNREACHABLE, CANARIES_INVALID):
        return False  # a pod not yet asked, or asked again after a back-off: time alone moves it
    return true(READY) and not true(DEGRADED) and not true(PROGRESSING)
