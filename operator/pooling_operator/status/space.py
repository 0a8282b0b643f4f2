"""The condition SpaceVerified of a service with spec.spaceCheck, from its pods' own verdicts. Pure.

The space gate (runtime/space_gate.py) sets each gated pod's condition `vllm-pooling.io/space-verified`; the
service's condition says what its pods say, worst first:

| pods say | SpaceVerified |
|---|---|
| one drifted and is held back (False, Drift) | False, Drift, naming the pod, the canary and its cosine |
| one drifted and serves (True, DriftAllowed: onDrift warn) | False, Drift, saying it was admitted |
| one could not be asked (False, Unreachable or CanariesInvalid) | False, the same reason |
| every gated pod that runs: True (Verified, Recorded) | True, Verified |
| none answered yet | Unknown, Checking |
"""

from __future__ import annotations

from typing import Any

from pooling_operator.status import conditions as C
from pooling_operator.status.conditions import condition
from pooling_operator.vllm.space_check import DRIFT, DRIFT_ALLOWED, pod_verdict


def space_condition(pods: list[dict[str, Any]], generation: int | None) -> dict[str, Any]:
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase") not in ("Failed", "Succeeded")]
    verdicts = [(p["metadata"]["name"], v) for p in live if (v := pod_verdict(p)) is not None]
    for reason, status in ((DRIFT, "False"), (DRIFT_ALLOWED, "True")):
        found = next(((name, v) for name, v in verdicts if v.get("reason") == reason and v.get("status") == status), None)
        if found is not None:
            name, v = found
            return condition(C.SPACE_VERIFIED, False, C.SPACE_DRIFT, f"Pod {name} {v.get('message', 'drifted')}.", generation)
    failing = next(((name, v) for name, v in verdicts if v.get("status") == "False"), None)
    if failing is not None:
        name, v = failing
        return condition(C.SPACE_VERIFIED, False, str(v.get("reason") or C.SPACE_UNREACHABLE),
                         f"Pod {name}: {v.get('message', '')}.", generation)
    if verdicts and len(verdicts) == len(live):
        return condition(C.SPACE_VERIFIED, True, C.SPACE_VERIFIED_OK,
                         f"{len(verdicts)} of {len(live)} pods answer the canaries as the space's reference.", generation)
    return condition(C.SPACE_VERIFIED, "Unknown", C.SPACE_CHECKING,
                     f"{len(verdicts)} of {len(live)} pods checked against the space's reference so far.", generation)
