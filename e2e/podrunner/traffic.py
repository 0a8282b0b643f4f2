"""Test traffic for the pods of the pod runner, routed as a cluster would route it. Test-only.

- ``RunnerTargets`` stands in for Prometheus's pod discovery under the operator's PodMonitor: it follows one
  workload's pods and gives Prometheus (file-based discovery) a target per Ready pod at the local port the
  runner's record names, with the scope labels the PodMonitor's relabelings give.
- ``SliceClient`` stands in for kube-proxy and a client behind it: it follows the Service's EndpointSlices, maps
  each ready endpoint (by its ``targetRef``, the pod) to that pod's local port through the runner's records,
  and sends every request to one of them in turn. An endpoint that leaves the slice, or turns not ready (a pod
  being deleted is marked so by the EndpointSlice controller), gets nothing more. It never retries: every
  answer other than 200 and every connection error is one lost request, kept with its time and pod.

Everything goes to ``127.0.0.1``; the pod IP in the slice is the runner's bookkeeping and is never dialled.
Load is bounded: each worker stops at ``stop()`` or its deadline.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from e2e.harness.rest import Api
from e2e.kube.prometheus import PrometheusServer
from e2e.podrunner.runner_process import PodRunner
from e2e.standin.exporters import pod_ready
from pooling_operator.vllm.metrics import target_labels

FOLLOW_SECONDS = 0.2  # how often the followers list pods and slices (kube-proxy's watch, as a poll)
# vLLM's HTTP server closes a kept-alive connection idle for 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, vllm/envs.py 111 in
# 0.32): a request written on it as it closes fails before the server reads it (BrokenPipe, RemoteDisconnected),
# a loss of the client's making, not the server's. A connection idle this long is replaced before it is used, as
# a pooling client with an idle timeout below its server's does (the 2026-12-07 run 3c239c6 lost one such).
STALE_AFTER_SECONDS = 3.0


def _local_port(runner: PodRunner, namespace: str, pod: str, port: str = "http") -> int | None:
    try:
        return int(runner.pod(namespace, pod)["ports"][port]["local"])
    except (OSError, KeyError, ValueError):
        return None


class _Follower:
    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.errors: list[str] = []

    def start(self) -> _Follower:
        self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + 1800  # bounded even when nobody calls stop()
        while time.monotonic() < deadline:
            try:
                self.sync()
            except Exception as exc:  # a transient API error: next round
                self.errors.append(f"{time.strftime('%H:%M:%S')} {exc!r}")
            if self._stop.wait(FOLLOW_SECONDS):
                return

    def sync(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class RunnerTargets(_Follower):
    def __init__(self, api: Api, runner: PodRunner, prometheus: PrometheusServer, namespace: str, instance: str,
                 component: str) -> None:
        super().__init__(f"targets-{instance}")
        self.api, self.runner, self.prometheus = api, runner, prometheus
        self.namespace, self.instance, self.component = namespace, instance, component
        self.file = prometheus.targets_path(f"{namespace}.{instance}.runner")
        self.published: dict[str, int] = {}
        self._written: list[dict[str, Any]] | None = None

    def sync(self) -> None:
        selector = f"app.kubernetes.io/instance={self.instance},app.kubernetes.io/component={self.component}"
        pods = self.api.get(f"/api/v1/namespaces/{self.namespace}/pods", params={"labelSelector": selector})["items"]
        ports = {}
        for p in pods:
            name = p["metadata"]["name"]
            if pod_ready(p) and (port := _local_port(self.runner, self.namespace, name)) is not None:
                ports[name] = port
        groups = [{"targets": [f"127.0.0.1:{port}"], "labels": target_labels(self.namespace, self.instance, self.component, pod)}
                  for pod, port in sorted(ports.items())]
        if groups != self._written:
            self.prometheus.write_targets(self.file, groups)
            self._written = groups
        self.published = ports

    def stop(self) -> None:
        super().stop()
        self.file.unlink(missing_ok=True)


@dataclass(frozen=True)
class Outcome:
    t: float  # monotonic, when the request was sent
    seconds: float
    pod: str
    status: int  # 0: a connection error
    error: str = ""


class SliceClient(_Follower):
    """POSTs ``body`` to ``path`` of the Service's ready endpoints, ``workers`` requests at a time, each worker
    pausing ``pause`` seconds between its requests."""

    def __init__(self, api: Api, runner: PodRunner, namespace: str, service: str, path: str, body: dict[str, Any],
                 headers: dict[str, str] | None = None, port_name: str = "http") -> None:
        super().__init__(f"slices-{service}")
        self.api, self.runner, self.namespace, self.service = api, runner, namespace, service
        self.path, self.body = path, json.dumps(body).encode()
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.port_name = port_name
        self.outcomes: list[Outcome] = []
        self.changes: list[tuple[float, tuple[str, ...]]] = []  # (time, the ready endpoints' pods) at each change
        self._endpoints: tuple[tuple[str, int], ...] = ()
        self._lock = threading.Lock()
        self._turn = 0
        self._workers: list[threading.Thread] = []
        self._load_stop = threading.Event()
        self.pause = 0.0

    # -- the slices ---------------------------------------------------------------------------------

    def sync(self) -> None:
        slices = self.api.get(f"/apis/discovery.k8s.io/v1/namespaces/{self.namespace}/endpointslices",
                              params={"labelSelector": f"kubernetes.io/service-name={self.service}"})["items"]
        ready = []
        for s in slices:
            for e in s.get("endpoints") or []:
                ref = e.get("targetRef") or {}
                if ref.get("kind") != "Pod" or not (e.get("conditions") or {}).get("ready"):
                    continue
                if (port := _local_port(self.runner, self.namespace, ref["name"], self.port_name)) is not None:
                    ready.append((ref["name"], port))
        endpoints = tuple(sorted(ready))
        with self._lock:
            if endpoints != self._endpoints:
                self._endpoints = endpoints
                self.changes.append((time.monotonic(), tuple(p for p, _ in endpoints)))

    def endpoints(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(p for p, _ in self._endpoints)

    def _next(self) -> tuple[str, int] | None:
        with self._lock:
            if not self._endpoints:
                return None
            self._turn += 1
            return self._endpoints[self._turn % len(self._endpoints)]

    # -- the load -----------------------------------------------------------------------------------

    def load(self, workers: int, pause: float = 0.0, seconds: float = 600.0) -> None:
        """Run ``workers`` senders (stopping those running), until ``stop_load`` or ``seconds`` pass."""
        self.stop_load()
        self._load_stop = threading.Event()
        self.pause = pause
        deadline = time.monotonic() + seconds
        self._workers = [threading.Thread(target=self._send_loop, args=(self._load_stop, deadline), daemon=True)
                         for _ in range(workers)]
        for w in self._workers:
            w.start()

    def stop_load(self) -> None:
        self._load_stop.set()
        for w in self._workers:
            w.join(timeout=180)
        self._workers = []

    def _send_loop(self, stop: threading.Event, deadline: float) -> None:
        conns: dict[int, http.client.HTTPConnection] = {}
        used: dict[int, float] = {}  # when each kept connection last had an answer
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                target = self._next()
                if target is None:  # no ready endpoint: a client behind kube-proxy gets refused; wait for one
                    stop.wait(FOLLOW_SECONDS)
                    continue
                pod, port = target
                began = time.monotonic()
                if port in conns and began - used[port] >= STALE_AFTER_SECONDS:
                    conns.pop(port).close()  # the server may close it as we write: never a request it was sent
                conn = conns.get(port) or http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                try:
                    conn.request("POST", self.path, body=self.body, headers=self.headers)
                    resp = conn.getresponse()
                    answer = resp.read()
                    why = "" if resp.status == 200 else answer[:300].decode(errors="replace")
                    self._record(Outcome(began, time.monotonic() - began, pod, resp.status, why))
                    conns[port] = conn
                    used[port] = time.monotonic()
                except (OSError, http.client.HTTPException) as exc:
                    self._record(Outcome(began, time.monotonic() - began, pod, 0, repr(exc)))
                    conn.close()
                    conns.pop(port, None)
                if self.pause:
                    stop.wait(self.pause)
        finally:
            for c in conns.values():
                with contextlib.suppress(Exception):
                    c.close()

    def _record(self, o: Outcome) -> None:
        with self._lock:
            self.outcomes.append(o)

    def lost(self, since: float = 0.0, until: float = float("inf")) -> list[Outcome]:
        with self._lock:
            return [o for o in self.outcomes if since <= o.t <= until and o.status != 200]

    def served(self, since: float = 0.0, until: float = float("inf")) -> dict[str, int]:
        """Requests answered 200 per pod in [since, until]."""
        out: dict[str, int] = {}
        with self._lock:
            for o in self.outcomes:
                if since <= o.t <= until and o.status == 200:
                    out[o.pod] = out.get(o.pod, 0) + 1
        return out

    def stop(self) -> None:
        self.stop_load()
        super().stop()
