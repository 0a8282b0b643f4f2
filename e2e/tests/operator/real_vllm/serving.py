"""Real servers through the operator: apply a service placed on the pod runner, wait until the operator says
Ready, and find its pod's local URL. Every start is recorded in ``STARTS`` (the tier prints them)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from e2e import ledger
from e2e.harness.poll import Fatal, wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.podrunner.runner_process import PodRunner, placed

# A cold start of vLLM on this 2-core machine takes 1-4 minutes (toolchain.md §9); the startup probe allows 30.
START_TIMEOUT = 900.0
# (server, seconds from apply to Ready) of every real server this session, printed at the end of the run
STARTS: list[tuple[str, float]] = []


@dataclass
class Served:
    kind: str
    namespace: str
    name: str
    pod: str
    url: str
    plan: dict[str, Any]
    status: dict[str, Any]
    start_seconds: float


def pod_of(name: str, pod: str) -> bool:
    """Whether ``pod`` is a pod of the Deployment ``name`` (name-<ReplicaSet hash>-<suffix>): not merely a name
    that starts the same, such as minilm-mrl's pods for minilm."""
    return re.fullmatch(rf"{re.escape(name)}-[a-z0-9]+-[a-z0-9]+", pod) is not None


def _ready(cluster: ControlPlane, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    res = cluster.kubectl("get", kind.lower(), name, "-n", namespace, "-o", "json", check=False)
    if res.returncode != 0:
        return None
    obj = yaml.safe_load(res.stdout)
    st = obj.get("status") or {}
    ok = any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or [])
    return st if ok and st.get("observedGeneration") == obj["metadata"]["generation"] else None


def unscheduled(pods: list[dict[str, Any]]) -> list[str]:
    """The scheduler's word on those of ``pods`` it has not placed: a pod Pending on the runner's two CPUs says
    ``Insufficient cpu`` here, where waiting for Ready would only time out."""
    return [f"{p['metadata']['name']}: {c.get('reason')}: {c.get('message')}"
            for p in pods for c in (p.get("status") or {}).get("conditions") or []
            if c["type"] == "PodScheduled" and c["status"] == "False"]  # fmt: skip


class Deployer:
    """Applies services placed on the runner and waits until the operator reports them Ready; ``close``
    deletes them (and the model claims it made)."""

    def __init__(self, cluster: ControlPlane, pod_runner: PodRunner):
        self.cluster = cluster
        self.runner = pod_runner
        self.applied: list[tuple[str, str, str]] = []
        self.claimed: list[str] = []

    def apply(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Apply ``doc`` placed on the runner (and the model claim its volume names); returns the placed doc."""
        doc = placed(doc)
        ns = doc["metadata"]["namespace"]
        if ns not in self.claimed and "volume" in (doc["spec"]["model"].get("source") or {}):
            self.runner.model_claim(ns)
            self.claimed.append(ns)
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
        self.applied.append((doc["kind"], ns, doc["metadata"]["name"]))
        return doc

    def await_ready(self, doc: dict[str, Any], began: float) -> Served:
        """Wait until the operator reports ``doc`` Ready (its real vLLM started); ``began``: when it was applied."""
        cluster, pod_runner = self.cluster, self.runner
        kind, ns, name = doc["kind"], doc["metadata"]["namespace"], doc["metadata"]["name"]

        def ready() -> dict[str, Any] | None:
            for plan in pod_runner.pods(ns):
                log = pod_runner.container_log(ns, plan["name"], 5)
                if "Traceback" in log and "EngineCore failed" in log:
                    raise Fatal(f"vLLM failed to start:\n{pod_runner.container_log(ns, plan['name'], 80)}")
            return _ready(cluster, kind, ns, name)

        try:
            remaining = max(1.0, START_TIMEOUT - (time.monotonic() - began))
            status = wait_for(ready, timeout=remaining, what=f"{kind}/{name} Ready (real vLLM start-up)")
        except Exception:
            logs = "\n".join(pod_runner.container_log(ns, p["name"]) for p in pod_runner.pods(ns))
            _, pods = cluster.api.request("GET", f"/api/v1/namespaces/{ns}/pods")
            mine = [p for p in pods.get("items", []) if pod_of(name, p["metadata"]["name"])]
            pending = "\n".join(unscheduled(mine)) or "none"
            raise AssertionError(f"{kind}/{name} never became Ready; pods not scheduled: {pending}\n"
                                 f"container log tail:\n{logs}\n{pod_runner.tail()}") from None
        [plan] = [p for p in pod_runner.pods(ns) if pod_of(name, p["name"])]
        seconds = self._ready_after(ns, plan["name"], began)
        print(f"real_vllm: {kind}/{name} Ready {seconds:.0f} s after apply")
        STARTS.append((f"{kind}/{ns}/{name}", seconds))
        ledger.record("vllm_start", {"name": f"{kind}/{ns}/{name}", "seconds": round(seconds, 1)})
        return Served(kind, ns, name, plan["name"], pod_runner.url(ns, plan["name"]), plan, status, seconds)

    def _ready_after(self, namespace: str, pod: str, began: float) -> float:
        """Seconds from apply to the pod's Ready transition (whole seconds, as the API writes them): a server the
        pool started ahead was Ready long before a test asked for it."""
        applied_wall = time.time() - (time.monotonic() - began)
        _, body = self.cluster.api.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
        for c in (body.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready" and c.get("status") == "True" and c.get("lastTransitionTime"):
                ready = datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00")).timestamp()
                return max(0.0, ready - applied_wall)
        return time.monotonic() - began

    def serve(self, doc: dict[str, Any]) -> Served:
        began = time.monotonic()
        return self.await_ready(self.apply(doc), began)

    def delete(self, doc: dict[str, Any], wait: bool = False) -> None:
        """Delete an applied service; with ``wait``, until its pods are gone (the runner stopped its vLLM)."""
        kind, ns, name = doc["kind"], doc["metadata"]["namespace"], doc["metadata"]["name"]
        self.cluster.kubectl("delete", kind.lower(), name, "-n", ns, "--wait=false", check=False)
        self.applied.remove((kind, ns, name))
        if wait:
            self.drained(ns, name)

    def drained(self, namespace: str, name: str = "", timeout: float = 180) -> None:
        """Wait until ``namespace`` has no pod (of service ``name``, when given)."""

        def gone() -> bool:
            _, pods = self.cluster.api.request("GET", f"/api/v1/namespaces/{namespace}/pods")
            return not [p for p in pods.get("items", []) if p["metadata"]["name"].startswith(f"{name}-" if name else "")]

        wait_for(gone, timeout=timeout, what=f"the pods of {namespace}/{name or '*'} gone (their vLLM stopped)")

    def close(self) -> None:
        for kind, ns, name in self.applied:
            self.cluster.kubectl("delete", kind.lower(), name, "-n", ns, "--wait=false", check=False)
        for ns in self.claimed:
            self.runner.release_claim(ns)
