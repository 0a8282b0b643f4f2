"""What bench/reconcile/run.py makes and how it watches: the client that creates objects (a burst, CONCURRENCY in
flight, or paced), the watch that notes when each Deployment appears, and the readings of the operator (/proc, its
metrics) and of the services (Ready, the autoscaler's first decision). No phase logic: run.py orders the phases."""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess

API = "/apis/vllm-pooling.io/v1alpha1"
CONCURRENCY = 16  # the operator's default VPO_WORKERS


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)



def url_for(obj: dict[str, Any]) -> str:
    kind, ns = obj["kind"], obj["metadata"]["namespace"]
    plural = {"Deployment": "/apis/apps/v1", "Service": "/api/v1", "PodDisruptionBudget": "/apis/policy/v1",
              "PoolingService": API, "ScoringService": API}[kind]
    return f"{plural}/namespaces/{ns}/{kind.lower()}s"


# ---------------------------------------------------------------------------------------------------------
# The minimal client


def client(cp: ControlPlane) -> httpx.AsyncClient:
    pki = cp.pki
    import ssl

    ctx = ssl.create_default_context(cafile=str(pki["ca.crt"]))
    ctx.load_cert_chain(str(pki["admin.crt"]), str(pki["admin.key"]))
    return httpx.AsyncClient(base_url=cp.server, verify=ctx, timeout=60,
                             limits=httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY))


async def create_all(cp: ControlPlane, objs: list[dict[str, Any]]) -> dict[str, float]:
    """POST every object, CONCURRENCY at a time; returns when each create was answered (monotonic), by kind/name."""
    done: dict[str, float] = {}
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for o in objs:
        queue.put_nowait(o)
    async with client(cp) as http:
        async def worker() -> None:
            while not queue.empty():
                o = queue.get_nowait()
                for attempt in range(5):
                    r = await http.post(url_for(o), json=o)
                    if r.status_code == 201:
                        break
                    if r.status_code in (429, 500, 503, 504):
                        await asyncio.sleep(0.2 * (attempt + 1))
                        continue
                    raise RuntimeError(f"create {o['kind']} {o['metadata']['name']}: {r.status_code} {r.text[:300]}")
                done[f"{o['kind']}/{o['metadata']['name']}"] = time.monotonic()

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return done


def percentiles(watch: DeploymentWatch, answered: dict[str, float], objs: list[dict[str, Any]]) -> tuple[float, float]:
    latencies = sorted(watch.seen[o["metadata"]["name"]] - answered[f"{o['kind']}/{o['metadata']['name']}"] for o in objs)
    return round(statistics.median(latencies), 3), round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 3)


async def create_paced(cp: ControlPlane, objs: list[dict[str, Any]], gap: float) -> dict[str, float]:
    done: dict[str, float] = {}
    async with client(cp) as http:
        for o in objs:
            started = time.monotonic()
            r = await http.post(url_for(o), json=o)
            if r.status_code != 201:
                raise RuntimeError(f"create {o['metadata']['name']}: {r.status_code} {r.text[:300]}")
            done[f"{o['kind']}/{o['metadata']['name']}"] = time.monotonic()
            await asyncio.sleep(max(0.0, gap - (time.monotonic() - started)))
    return done


class DeploymentWatch:
    """When each Deployment of the namespaces was first seen, by one cluster-wide watch (local monotonic clock); names
    are unique across the bench's namespaces."""

    def __init__(self, cp: ControlPlane, namespaces: list[str]) -> None:
        self.cp, self.namespaces = cp, set(namespaces)
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("the Deployment watch did not start")

    def _run(self) -> None:
        from kubernetes import watch

        api = self.cp.api_client()
        from kubernetes.client import AppsV1Api

        apps = AppsV1Api(api)

        def note(d: Any) -> None:
            if d.metadata.namespace in self.namespaces:
                self.seen.setdefault(d.metadata.name, time.monotonic())

        listed = apps.list_deployment_for_all_namespaces()
        rv = listed.metadata.resource_version
        for d in listed.items:
            note(d)
        self._ready.set()
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(apps.list_deployment_for_all_namespaces, resource_version=rv,
                                                  timeout_seconds=30, allow_watch_bookmarks=False):
                    obj = event["object"]
                    rv = obj.metadata.resource_version
                    note(obj)
                    if self._stop.is_set():
                        return
            except Exception as exc:  # a 410 or a dropped stream: list again
                if self._stop.is_set():
                    return
                say(f"deployment watch restarted: {type(exc).__name__}")
                listed = apps.list_deployment_for_all_namespaces()
                rv = listed.metadata.resource_version
                for d in listed.items:
                    note(d)

    def stop(self) -> None:
        self._stop.set()


# ---------------------------------------------------------------------------------------------------------
# The audit log


# ---------------------------------------------------------------------------------------------------------
# One run


def proc_figures(pid: int) -> tuple[float, float]:
    """(peak RSS MiB, CPU seconds) of a live process."""
    hwm = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return hwm / 1024, cpu


def resident_mb(pid: int) -> float:
    """Resident memory now (VmRSS, MiB): what is kept, against the peak (VmHWM) a burst reached."""
    return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmRSS:")) / 1024


def metric(op: OperatorProcess, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", op.metrics(name), re.M)  # that family only: polling must not slow the pass
    return float(m.group(1)) if m else 0.0


def labelled(op: OperatorProcess, name: str) -> dict[str, float]:
    """A family with one label: {label value: sample} (the resync passes by why they ran)."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(rf'^{name}{{\w+="([^"]*)"}} (\S+)$', op.metrics(name), re.M)}


def ready_count(cp: ControlPlane, namespaces: list[str]) -> int:
    n = 0
    wanted = set(namespaces)
    for plural in ("poolingservices", "scoringservices"):
        for o in cp.api.get(f"{API}/{plural}")["items"]:  # type: ignore[union-attr]
            if o["metadata"]["namespace"] not in wanted:
                continue
            conds = {c["type"]: c["status"] for c in (o.get("status") or {}).get("conditions") or []}
            n += conds.get("Ready") == "True"
    return n


def decided_count(cp: ControlPlane, namespaces: list[str]) -> int:
    """Services the operator autoscales that carry its autoscaler's first decision (a MetricsAvailable condition:
    the bench has no Prometheus, so it says False, once, with an event)."""
    n = 0
    wanted = set(namespaces)
    for plural in ("poolingservices", "scoringservices"):
        for o in cp.api.get(f"{API}/{plural}")["items"]:  # type: ignore[union-attr]
            auto = o["spec"].get("autoscaling")
            if o["metadata"]["namespace"] not in wanted or not auto or auto.get("backend") == "keda":
                continue
            n += any(c["type"] == "MetricsAvailable" for c in (o.get("status") or {}).get("conditions") or [])
    return n


def count(cp: ControlPlane, path: str) -> int:
    return len(cp.api.get(path, timeout=60)["items"])  # type: ignore[union-attr]
