"""A service's start-up, measured from its pods: pod created -> Ready (the readiness probe on vLLM's /health
passed), and per phase on the way, each read from what Kubernetes records, never inferred:

- scheduled:   the pod's PodScheduled condition turned True (the scheduler bound it to a node);
- initialized: its Initialized condition turned True (init containers done; volumes attached and mounted);
- started:     the vLLM container's `state.running.startedAt` (the image pulled, the process started);
- ready:       its Ready condition turned True (vLLM loaded the model, compiled, and /health answered).

Each is seconds from the pod's creation. vLLM's own phases inside `started -> ready` (weights loaded, graphs
compiled) are visible only in its log (bench/ reads them there). Pure: pods and the previous `status.startup`
in, the new one out. The reconcile counts each pod once (reconcile/state.py) and exports each phase of each
sample (`vllm_pooling_operator_replica_startup_seconds{phase=...}`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from pooling_operator.api.clock import parse_time
from pooling_operator.builders.common import SERVER_CONTAINER

TYPICAL_OVER = 10  # typicalSeconds follows about the last this many samples (a running mean)
PHASES = ("scheduled", "initialized", "started", "ready")
_CONDITION_OF = {"scheduled": "PodScheduled", "initialized": "Initialized", "ready": "Ready"}


class Startup(NamedTuple):
    """One Ready pod's start-up: seconds from creation to Ready, when it became Ready, and the seconds from
    creation to each phase Kubernetes recorded (PHASES order; a phase it did not record is absent)."""

    uid: str
    seconds: float
    at: datetime
    phases: dict[str, float]



def _true_since(status: dict[str, Any], kind: str) -> datetime | None:
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == kind and c.get("status") == "True"), None)
    return parse_time((cond or {}).get("lastTransitionTime"))


def phase_times(pod: dict[str, Any]) -> dict[str, datetime]:
    """When each phase of PHASES happened, as the pod's status records it (absent where it does not)."""
    status = pod.get("status") or {}
    out = {phase: at for phase, kind in _CONDITION_OF.items() if (at := _true_since(status, kind)) is not None}
    server = next((c for c in status.get("containerStatuses") or [] if c.get("name") == SERVER_CONTAINER), None)
    started = parse_time((((server or {}).get("state") or {}).get("running") or {}).get("startedAt"))
    if started is not None:
        out["started"] = started
    return {phase: out[phase] for phase in PHASES if phase in out}


def pod_startups(pods: Iterable[dict[str, Any]]) -> list[Startup]:
    """The start-up of every Ready pod, oldest Ready first."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        created = parse_time(meta.get("creationTimestamp"))
        times = phase_times(pod)
        at = times.get("ready")
        if created is None or at is None or not meta.get("uid"):
            continue
        phases = {phase: round(max(0.0, (t - created).total_seconds()), 3) for phase, t in times.items()}
        out.append(Startup(str(meta["uid"]), max(0.0, (at - created).total_seconds()), at, phases))
    return sorted(out, key=lambda x: x.at)


def _mean(typical: Any, value: float, n: int) -> float:
    """The running mean after its n-th sample (about the last TYPICAL_OVER)."""
    return value if not isinstance(typical, int | float) or n == 1 else typical + (value - typical) / min(n, TYPICAL_OVER)


def merged(old: dict[str, Any] | None, samples: list[float] | list[Startup]) -> dict[str, Any] | None:
    """`status.startup` with new samples (oldest first) folded in; the old one when there are none. A Startup
    sample also folds its phases into `phases` (each phase's own count: a phase a pod did not record is not
    counted for it)."""
    if not samples:
        return old
    n = int((old or {}).get("samples") or 0)
    typical = (old or {}).get("typicalSeconds")
    phases = {k: dict(v) for k, v in ((old or {}).get("phases") or {}).items() if isinstance(v, dict)}
    for sample in samples:
        n += 1
        seconds = sample.seconds if isinstance(sample, Startup) else sample
        typical = _mean(typical, seconds, n)
        for phase, value in (sample.phases if isinstance(sample, Startup) else {}).items():
            entry = phases.setdefault(phase, {})
            k = int(entry.get("samples") or 0) + 1
            entry.update(lastSeconds=round(value, 1), typicalSeconds=round(_mean(entry.get("typicalSeconds"), value, k), 1), samples=k)
    last = samples[-1]
    assert typical is not None  # samples is not empty: the loop set it
    out: dict[str, Any] = {"lastSeconds": round(last.seconds if isinstance(last, Startup) else last, 1),
                           "typicalSeconds": round(float(typical), 1), "samples": n}
    if phases:
        out["phases"] = {phase: phases[phase] for phase in PHASES if phase in phases}
    return out


def typical_seconds(body: dict[str, Any]) -> float | None:
    """A service's typical start-up from its `status.startup`, or None before the first pod was Ready."""
    value = ((body.get("status") or {}).get("startup") or {}).get("typicalSeconds")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None
