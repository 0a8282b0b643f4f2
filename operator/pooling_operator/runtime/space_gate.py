"""The space gate: every new pod of a service with spec.spaceCheck answers the canaries before it may turn Ready.

A gated pod carries a readiness gate (builders/services.py); once its vLLM container passes vLLM's own readiness,
this sends it the canaries (built-in, or the user's ConfigMap), compares the answers with the space's reference
(vllm/space_check.py) and sets the pod's condition `vllm-pooling.io/space-verified`:

- no reference yet for this space (or one recorded from other canaries or another fingerprint): the answers
  become the reference, a ConfigMap kept after the service (the index outlives it), True/Recorded;
- the answers match: True/Verified;
- they drift: False/Drift with onDrift hold, so the pod never turns Ready and the rollout waits with the old pods
  serving (the Deployment surges for a gated service); True/DriftAllowed with onDrift warn, the drift said in the
  service's SpaceVerified condition, an event and a metric either way;
- the pod does not answer: False/Unreachable, tried again with back-off (5 s doubling to 60 s).

A pod is checked once: its condition then says the verdict for its life, also across operator restarts (the
verdict lives on the pod, level-based; the reconcile derives SpaceVerified from the pods, status/space.py). The
gate runs while this replica leads. What it remembers (references read, the last check per service, pods in
flight) it drops with the object.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client import Counter, Gauge

from pooling_operator.api.clock import rfc3339
from pooling_operator.api.resources import Service, in_space
from pooling_operator.api.space_check import SpaceCheckSpec
from pooling_operator.k8s.api import KINDS, ApiError, Kube
from pooling_operator.k8s.cache import OwnerKey, owner_key
from pooling_operator.vllm import space_check as sc
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.validate import validate
from pooling_operator.vllm.workload import Workload

log = logging.getLogger(__name__)

REQUEST_SECONDS = 120.0  # a canary request (a slow CPU server with the long canary)
RETRY_SECONDS = (5.0, 10.0, 20.0, 40.0, 60.0)
AT_ONCE = 2  # pods checked at a time
VLLM_CONTAINER = "vllm"

CHECKS = Counter("vllm_pooling_operator_space_checks", "Pods checked against their space's reference, by result "
                 "(Verified, Recorded, Drift, DriftAllowed, Unreachable, CanariesInvalid).", ["kind", "namespace", "name", "result"])
WORST = Gauge("vllm_pooling_operator_space_worst_cosine", "The least cosine of the last pod checked to its space's "
              "reference (a ScoringService's: 1 minus the largest score difference). Dropped with the service.",
              ["kind", "namespace", "name"])


PodAddress = Callable[[dict[str, Any], int], "str | None"]


def pod_ip_address(pod: dict[str, Any], port: int) -> str | None:
    """http://<pod IP>:<port>, the way the cluster reaches a pod."""
    ip = (pod.get("status") or {}).get("podIP")
    return f"http://{ip}:{port}" if ip else None


def runner_records(folder: Path) -> PodAddress:
    """The test pod runner's records (e2e/podrunner: <folder>/pods/<namespace>_<name>.json): where a pod's port
    listens on this machine's loopback. Test harness only (`run --pod-addresses-from`): its pod IPs are not to be
    sent to."""

    def address(pod: dict[str, Any], port: int) -> str | None:
        meta = pod["metadata"]
        try:
            record = json.loads((folder / "pods" / f"{meta['namespace']}_{meta['name']}.json").read_text())
        except (OSError, ValueError):
            return None
        for entry in (record.get("ports") or {}).values():
            if entry.get("container") == port:
                return f"http://127.0.0.1:{entry['local']}"
        return None

    return address


@dataclass
class _Pending:
    attempts: int = 0
    not_before: float = 0.0


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("conditionType") == sc.READINESS_GATE for g in (pod.get("spec") or {}).get("readinessGates") or [])


def vllm_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("name") == VLLM_CONTAINER and c.get("ready") for c in status.get("containerStatuses") or [])


class SpaceGate:
    def __init__(self, kube: Kube, *, leading: Callable[[], bool], requeue: Callable[[OwnerKey], None],
                 event: Callable[[dict[str, Any], str, str, str], None], address: PodAddress = pod_ip_address) -> None:
        self.kube = kube
        self.leading = leading
        self.requeue = requeue
        self.event = event
        self.address = address
        self._references: dict[tuple[str, str], sc.Reference | None] = {}  # (namespace, ConfigMap) -> as last read
        self._last: dict[str, dict[str, Any]] = {}  # owner uid -> status.spaceCheck
        self._pending: dict[str, _Pending] = {}  # pod uid -> retries of an unreachable one
        self._judged: set[str] = set()  # pod uids given a final verdict (the cache may not show it yet)
        self._inflight: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots: asyncio.Semaphore | None = None
        self._session: aiohttp.ClientSession | None = None

    # ---- what the runtime tells it ----

    def consider(self, owner: dict[str, Any], pod: dict[str, Any]) -> None:
        """A pod of `owner` changed: check it in the background once its vLLM is ready, unless it has a verdict."""
        meta = pod["metadata"]
        uid = str(meta.get("uid") or "")
        if (not self.leading() or uid in self._inflight or uid in self._judged or meta.get("deletionTimestamp")
                or not gated(pod) or not vllm_ready(pod)):  # fmt: skip
            return
        done = sc.pod_verdict(pod)
        if done is not None and done.get("reason") not in sc.RETRIED:
            self._pending.pop(uid, None)
            return
        pending = self._pending.get(uid)
        if pending is not None and time.monotonic() < pending.not_before:
            return
        self._inflight.add(uid)
        task = asyncio.get_running_loop().create_task(self._guarded(owner, pod))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def reference_changed(self, namespace: str, name: str) -> None:
        """A reference ConfigMap was changed or deleted (re-recorded on purpose): read it again when next needed."""
        self._references.pop((namespace, name), None)

    def status_of(self, uid: str) -> dict[str, Any] | None:
        return self._last.get(uid)

    def forget(self, key: OwnerKey, uid: str) -> None:
        self._last.pop(uid, None)
        for result in sc.RESULTS:
            try:
                CHECKS.remove(*key, result)
            except KeyError:
                pass
        try:
            WORST.remove(*key)
        except KeyError:
            pass

    def forget_pod(self, uid: str) -> None:
        self._pending.pop(uid, None)
        self._judged.discard(uid)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ---- one check ----

    async def _guarded(self, owner: dict[str, Any], pod: dict[str, Any]) -> None:
        uid = str(pod["metadata"].get("uid") or "")
        if self._slots is None:
            self._slots = asyncio.Semaphore(AT_ONCE)
        try:
            async with self._slots:
                await self.check(owner, pod)
        except Exception:  # one pod's check never stops the others; it is tried again on its next event
            log.exception("Space check of pod %s/%s failed", pod["metadata"].get("namespace"), pod["metadata"].get("name"))
        finally:
            self._inflight.discard(uid)

    async def check(self, owner: dict[str, Any], pod: dict[str, Any]) -> str:
        """Check one pod and set its condition; returns the result."""
        result = validate({k: v for k, v in owner.items() if k != "status"})
        resource = result.resource
        if not isinstance(resource, Service) or result.workload is None:
            return "Skipped"
        check = resource.spec.space_check
        if check is None:
            return "Skipped"
        ns, pod_name = str(pod["metadata"]["namespace"]), str(pod["metadata"]["name"])
        w = result.workload
        scoring = not in_space(resource)  # a ScoringService: its scores are its own reference
        try:
            canaries = await self._canaries(ns, check, scoring)
        except ValueError as exc:
            return await self._conclude(owner, resource, pod, sc.CANARIES_INVALID, False, None, "",
                                        f"spec.spaceCheck.canaries: {exc}", retry=True)
        answers = await self._ask(resource, w, pod, canaries)
        if isinstance(answers, str):
            return await self._conclude(owner, resource, pod, sc.UNREACHABLE, False, None, "", answers, retry=True)
        if in_space(resource):
            fingerprint, key = embedding_fingerprint(w), str(resource.spec.embedding_space)
        else:
            fingerprint, key = _scoring_fingerprint(w), resource.metadata.name
        cm_name = sc.reference_name(key, scoring=scoring)
        reference = await self._reference(ns, cm_name)
        if reference is None or reference.digest != sc.digest(canaries) or reference.fingerprint != fingerprint:
            recorded = sc.as_reference(fingerprint, canaries, answers, rfc3339(), f"{ns}/{pod_name}")
            if await self._record(resource, cm_name, key, recorded):
                self._remember(resource, cm_name, recorded)
                self.event(owner, "Normal", "SpaceRecorded", f"Recorded the reference of {_space(resource)} from pod "
                           f"{pod_name}: {len(canaries)} canaries in ConfigMap {cm_name}.")
                return await self._conclude(owner, resource, pod, sc.RECORDED, True, 1.0, "",
                                            f"recorded as the reference of {_space(resource)} (ConfigMap {cm_name})")
            reference = await self._reference(ns, cm_name, fresh=True)  # another pod recorded it first
            if reference is None:
                return await self._conclude(owner, resource, pod, sc.UNREACHABLE, False, None, "",
                                            f"the reference ConfigMap {cm_name} could not be written or read", retry=True)
        self._remember(resource, cm_name, reference)
        v = sc.verdict(reference, answers, min_cosine=check.threshold, scores=scoring,
                       normalize=bool(w.pooling and w.pooling.normalize) and not scoring and w.task == "embed")
        against = f"against the reference of {_space(resource)} recorded from pod {reference.recorded_from or '?'}"
        if v.ok:
            return await self._conclude(owner, resource, pod, sc.VERIFIED, True, v.worst, v.canary, f"{v.message} {against}")
        held = check.on_drift == "hold"
        message = f"drifted: {v.message} {against}" + ("; held back (onDrift hold)" if held else "; admitted (onDrift warn)")
        self.event(owner, "Warning", "SpaceDrift", f"Pod {pod_name} {message}.")
        return await self._conclude(owner, resource, pod, sc.DRIFT if held else sc.DRIFT_ALLOWED, not held, v.worst,
                                    v.canary, message)

    async def _canaries(self, namespace: str, check: SpaceCheckSpec, scoring: bool) -> list[sc.Canary]:
        if check.canaries is None:
            return list(sc.builtin(scoring))
        ref = check.canaries.config_map_ref
        cm = await self.kube.get(KINDS["ConfigMap"], namespace, ref.name)
        if cm is None:
            raise ValueError(f"ConfigMap {ref.name} does not exist")
        text = (cm.get("data") or {}).get(ref.key)
        if text is None:
            raise ValueError(f"ConfigMap {ref.name} has no key {ref.key}")
        return sc.parse_canaries(text, scoring)

    async def _ask(self, resource: Service, w: Workload, pod: dict[str, Any],
                   canaries: list[sc.Canary]) -> list[list[list[float]]] | str:
        """The pod's answers to the canaries, or why there are none."""
        port = resource.spec.service.port
        base = self.address(pod, port)
        if base is None:
            return f"no address for pod {pod['metadata']['name']} (port {port})"
        mode, g = w.mode, w.generative
        generative = None
        if g is not None:
            generative = {"label_token_ids": [label.id for label in g.labels], "apply_softmax": g.apply_softmax, "item_first": g.item_first}
        task = None if mode is not None else w.task
        served = resource.spec.model.served_name or resource.metadata.name
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_SECONDS), trust_env=False)
        out: list[list[list[float]]] = []
        try:
            for route, body in sc.requests_for(canaries, served, task=task, mode=mode, generative=generative):
                async with self._session.post(base + route, json=body) as r:
                    text = await r.text()
                    if r.status != 200:
                        return f"{route} answered {r.status}: {text[:300]}"
                    out += sc.answers_of(route, json.loads(text))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return f"pod {pod['metadata']['name']} did not answer the canaries: {type(exc).__name__} {exc}"
        except ValueError as exc:
            return f"pod {pod['metadata']['name']} answered the canaries in a shape not understood: {exc}"
        if len(out) != len(canaries):
            return f"pod {pod['metadata']['name']} answered {len(out)} of {len(canaries)} canaries"
        return out

    async def _reference(self, namespace: str, name: str, *, fresh: bool = False) -> sc.Reference | None:
        key = (namespace, name)
        if fresh or key not in self._references:
            cm = await self.kube.get(KINDS["ConfigMap"], namespace, name)
            self._references[key] = sc.reference_from((cm or {}).get("data"), (cm or {}).get("binaryData"))
        return self._references[key]

    async def _record(self, resource: Service, name: str, key: str, ref: sc.Reference) -> bool:
        """Write the reference (replacing one of other canaries or another fingerprint); False when another pod's was
        written first (kept)."""
        data, binary = ref.data()
        meta = resource.metadata
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": meta.namespace,
                             "labels": {"app.kubernetes.io/managed-by": "vllm-pooling-operator", sc.REFERENCE_LABEL: key},
                             "annotations": {"vllm-pooling.io/space-of": f"{resource.kind}/{meta.name}"}},
                "data": data, "binaryData": binary}  # fmt: skip
        existing = self._references.get((str(meta.namespace), name))
        try:
            await self.kube.apply(body, create=existing is None)
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        self._references[(str(meta.namespace), name)] = ref
        log.info("Recorded the reference of %s in ConfigMap %s/%s from %s", _space(resource), meta.namespace, name, ref.recorded_from)
        return True

    def _remember(self, resource: Service, cm_name: str, ref: sc.Reference) -> None:
        last = self._last.setdefault(str(resource.metadata.uid or ""), {})
        last["reference"] = {"configMap": cm_name, "fingerprint": ref.fingerprint, "recordedAt": ref.recorded_at,
                             "recordedFrom": ref.recorded_from, "canaries": len(ref.names)}  # fmt: skip

    async def _conclude(self, owner: dict[str, Any], resource: Service, pod: dict[str, Any],
                        result: str, passed: bool, worst: float | None, canary: str, message: str, *, retry: bool = False) -> str:
        meta = pod["metadata"]
        condition = {"type": sc.READINESS_GATE, "status": "True" if passed else "False", "reason": result,
                     "message": message[:1000], "lastTransitionTime": rfc3339()}  # fmt: skip
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": {"conditions": [condition]}}  # fmt: skip
        try:
            await self.kube.apply(body, subresource="status")
        except ApiError as exc:
            if exc.status != 404:  # the pod went away meanwhile
                raise
        labels = (resource.kind, str(resource.metadata.namespace or ""), resource.metadata.name)
        CHECKS.labels(*labels, result).inc()
        if worst is not None:
            WORST.labels(*labels).set(worst)
        uid = str(meta.get("uid") or "")
        if retry:
            pending = self._pending.setdefault(uid, _Pending())
            pending.not_before = time.monotonic() + RETRY_SECONDS[min(pending.attempts, len(RETRY_SECONDS) - 1)]
            pending.attempts += 1
        else:
            self._pending.pop(uid, None)
            self._judged.add(uid)  # checked once: an informer event that still shows no verdict asks nothing again
        last = self._last.setdefault(str(resource.metadata.uid or ""), {})
        last["lastCheck"] = {"pod": meta["name"], "result": result, "at": condition["lastTransitionTime"],
                             **({"worstCosine": round(worst, 7)} if worst is not None else {}), **({"canary": canary} if canary else {})}
        log.info("Space check of pod %s/%s: %s (%s)", meta["namespace"], meta["name"], result, message)
        self.requeue(owner_key(owner))
        return result


def _space(resource: Service) -> str:
    if in_space(resource):
        return f"embedding space {resource.spec.embedding_space}"
    return f"{resource.kind} {resource.metadata.name}'s scores"


def _scoring_fingerprint(w: Workload) -> str:
    """What a ScoringService's scores depend on, as an embedding space's fingerprint does for vectors: the model,
    its revision and how it scores."""
    g = w.generative
    essence = {"space": embedding_fingerprint(w), "mode": w.mode,
               "labels": [label.id for label in g.labels] if g else None, "softmax": g.apply_softmax if g else None,
               "itemFirst": g.item_first if g else None}  # fmt: skip
    return "sha256:" + hashlib.sha256(json.dumps(essence, sort_keys=True).encode()).hexdigest()
