"""TEST STAND-IN for the ``/metrics`` of a vLLM Deployment's pods, for closed-loop autoscaler tests. Never ship it.

kwok's pods run nothing, so nobody serves their metrics. An ``ExporterFleet`` follows one Deployment's pods on
the real API server (a pod list by the two selector labels, every half second) and keeps one exporter process
(``e2e.standin.exporter``) per ready pod: started when the pod turns Ready, stopped when it is unready,
terminating or gone. It tells Prometheus about them through file-based discovery, one target per pod with
the scope labels the operator's PodMonitor would give (``pooling_operator.vllm.metrics.target_labels``).

The load is a profile file the test rewrites (``write_load``: total requests per second and prompt length);
each exporter takes an even share over the ready pods, which the fleet counts into a pods file. A pod that is
not Ready (a kwok stage holds back pods annotated ``vllm-pooling.io/e2e-ready-after``, as model loading
does) has no exporter, gets no load and is no capacity.

    write_load(load_file, requests_per_second=40)
    fleet = ExporterFleet(cluster, ns, "minilm", "pooling-service", "minilm", prometheus, load_file).start()
    ...
    fleet.close()
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from e2e.harness.poll import wait_for
from e2e.harness.processes import _child_setup, stop_process
from e2e.harness.rest import Api
from e2e.kube.controlplane import REPO_ROOT
from e2e.kube.prometheus import PrometheusServer
from pooling_operator.autoscaling.simulator.servicemodel import ServiceParams
from pooling_operator.vllm.metrics import target_labels

INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
READY_AFTER_ANNOTATION = "vllm-pooling.io/e2e-ready-after"  # read by e2e/cluster/kwok/pod-ready-after.yaml
POLL_SECONDS = 0.5


def write_load(path: Path | str, requests_per_second: float, mean_tokens: float = 16) -> None:
    """Write the load profile every exporter of a fleet reads (atomically: exporters never see half a file)."""
    _write_json(Path(path), {"requests_per_second": requests_per_second, "mean_tokens": mean_tokens})


def write_ready_pods(path: Path | str, ready_pods: int) -> None:
    """Write the pods file: over how many ready pods each exporter splits the load (atomically)."""
    _write_json(Path(path), {"ready_pods": ready_pods})


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def pod_ready(pod: dict[str, Any]) -> bool:
    """Ready as a Service sees it: the Ready condition True and not terminating."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass
class ExporterProcess:
    """One exporter process; ``port`` is None until it serves."""

    pod: str
    proc: subprocess.Popen[bytes]
    port_file: Path
    log: Path
    port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def poll_port(self) -> int | None:
        if self.port is None:
            with contextlib.suppress(OSError, ValueError):
                self.port = int(self.port_file.read_text())
        return self.port

    def stop(self, timeout: float = 5.0) -> None:
        stop_process(self.proc, timeout)
        self.port_file.unlink(missing_ok=True)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def start_exporter(
    work_dir: Path,
    pod: str,
    *,
    model_name: str,
    load_file: Path,
    pods_file: Path,
    params: ServiceParams = ServiceParams(),  # noqa: B008 - frozen dataclass
    seed: int | None = None,
) -> ExporterProcess:
    """Start one exporter process for ``pod``; it serves once ``poll_port()`` returns its port."""
    work_dir.mkdir(parents=True, exist_ok=True)
    port_file = work_dir / f"{pod}.port"
    port_file.unlink(missing_ok=True)
    log = work_dir / f"{pod}.log"
    argv = [
        sys.executable,
        "-m",
        "e2e.standin.exporter",
        f"--port-file={port_file}",
        f"--load-file={load_file}",
        f"--pods-file={pods_file}",
        f"--model-name={model_name}",
        f"--seed={zlib.crc32(pod.encode()) if seed is None else seed}",
        f"--params={json.dumps(dataclasses.asdict(params))}",
    ]
    with open(log, "ab") as logf:
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_child_setup,  # dies with the thread that started it
        )
    return ExporterProcess(pod, proc, port_file, log)


class ExporterFleet:
    """One exporter per ready pod of a Deployment, registered with ``prometheus`` by file-based discovery.

    ``start()`` begins following (a background thread); ``close()`` stops every exporter and withdraws the
    targets. ``targets()`` lists the pods whose exporter serves and is in the targets file; ``failures``
    collects exporters that died on their own (a test should assert it stays empty)."""

    def __init__(
        self,
        cluster_or_api: Any,
        namespace: str,
        instance: str,
        component: str,
        model_name: str,
        prometheus: PrometheusServer,
        load_file: Path | str,
        params: ServiceParams = ServiceParams(),  # noqa: B008 - frozen dataclass
        *,
        work_dir: Path | None = None,
    ) -> None:
        api = getattr(cluster_or_api, "api", None) or cluster_or_api
        if not isinstance(api, Api):
            raise TypeError(f"need a ControlPlane or an e2e.kube.controlplane.Api, got {type(cluster_or_api)!r}")
        self.api = api
        self.namespace = namespace
        self.instance = instance
        self.component = component
        self.model_name = model_name
        self.prometheus = prometheus
        self.load_file = Path(load_file)
        self.params = params
        name = f"{namespace}.{instance}.{component}"
        self.work_dir = work_dir or prometheus.run_dir / "fleets" / name
        self.targets_file = prometheus.targets_path(name)
        self.pods_file = self.work_dir / "pods.json"
        self.exporters: dict[str, ExporterProcess] = {}
        self.failures: list[str] = []
        self.errors: list[str] = []  # API errors while following (transient ones are expected)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready_pods: int | None = None
        self._written: list[dict[str, Any]] | None = None
        self._published: dict[str, str] = {}
        self.published_at: dict[str, float] = {}  # pod -> wall time its target was first written for Prometheus
        self.created_at: dict[str, float] = {}  # pod -> its creationTimestamp (whole seconds, the API's own)
        self.ready_at: dict[str, float] = {}  # pod -> wall time this fleet first saw it Ready (its load share starts)

    @property
    def selector(self) -> str:
        return f"{INSTANCE_LABEL}={self.instance},{COMPONENT_LABEL}={self.component}"

    def start(self) -> ExporterFleet:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.prometheus.targets_dir.mkdir(parents=True, exist_ok=True)
        self._write_targets()
        self._thread = threading.Thread(target=self._run, name=f"fleet-{self.instance}", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> ExporterFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def targets(self) -> dict[str, str]:
        """Pod name -> the metrics URL, for the targets in the file Prometheus reads."""
        with self._lock:
            return dict(self._published)

    def wait_targets(self, pods: int, timeout: float = 30) -> dict[str, str]:
        def exactly() -> tuple[dict[str, str]] | None:
            targets = self.targets()
            return (targets,) if len(targets) == pods else None  # a tuple: true even for no targets

        return wait_for(
            exactly, timeout=timeout, what=f"{pods} exporter targets for {self.namespace}/{self.instance}"
        )[0]

    def close(self) -> None:
        """Stop following, stop every exporter and withdraw the targets file."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        self._shutdown()

    def _shutdown(self) -> None:
        with self._lock:
            exporters, self.exporters = list(self.exporters.values()), {}
            self._published = {}
        self.targets_file.unlink(missing_ok=True)
        self._written = None
        for e in exporters:
            e.stop()

    # ---- the following loop

    def _run(self) -> None:
        # This thread starts the exporters, and they get PR_SET_PDEATHSIG: it lives until close() and stops
        # them itself.
        try:
            while True:
                try:
                    self._sync()
                except Exception as exc:  # the API server restarting, a timeout: try again next round
                    self.errors.append(f"{time.strftime('%H:%M:%S')} {exc!r}")
                if self._stop.wait(POLL_SECONDS):  # the poll period; close() ends the wait at once
                    return
        finally:
            self._shutdown()

    def _sync(self) -> None:
        pods = self.api.get(
            f"/api/v1/namespaces/{self.namespace}/pods", params={"labelSelector": self.selector}
        )["items"]
        ready = sorted(p["metadata"]["name"] for p in pods if pod_ready(p))
        seen = time.time()
        for pod in ready:
            self.ready_at.setdefault(pod, seen)
        for p in pods:
            stamp = p["metadata"].get("creationTimestamp")
            if stamp:
                self.created_at.setdefault(p["metadata"]["name"], datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
        if len(ready) != self._ready_pods:
            write_ready_pods(self.pods_file, len(ready))
            self._ready_pods = len(ready)
        gone: list[ExporterProcess] = []
        with self._lock:
            for pod, e in list(self.exporters.items()):
                if pod not in ready:
                    gone.append(self.exporters.pop(pod))
                elif e.proc.poll() is not None:
                    gone.append(self.exporters.pop(pod))
                    self.failures.append(
                        f"exporter of {pod} exited with {e.proc.returncode}:\n{e.log_tail()}"
                    )
            for pod in ready:
                if pod not in self.exporters:
                    self.exporters[pod] = start_exporter(
                        self.work_dir,
                        pod,
                        model_name=self.model_name,
                        load_file=self.load_file,
                        pods_file=self.pods_file,
                        params=self.params,
                    )
            for e in self.exporters.values():
                e.poll_port()
        self._write_targets()  # withdraw the targets before their exporters stop answering
        for e in gone:
            e.stop()

    def _write_targets(self) -> None:
        with self._lock:
            serving = {pod: e for pod, e in sorted(self.exporters.items()) if e.port is not None}
        groups = [
            {
                "targets": [f"127.0.0.1:{e.port}"],
                "labels": target_labels(self.namespace, self.instance, self.component, pod),
            }
            for pod, e in serving.items()
        ]
        if groups != self._written:
            self.prometheus.write_targets(self.targets_file, groups)
            self._written = groups
        now = time.time()
        with self._lock:
            self._published = {pod: e.url for pod, e in serving.items()}
            for pod in serving:
                self.published_at.setdefault(pod, now)

    def startups(self, until: str = "published") -> dict[str, float]:
        """Pod -> seconds from its creation (the API's timestamp) to the fleet seeing it Ready (``until="ready"``:
        from then the exporters spread the load over it) or to its target written for Prometheus
        (``"published"``: its series can be scraped): the pod's own start-up plus what this machine adds (the
        fleet's poll, the exporter's start)."""
        created = dict(self.created_at)  # copies: the follower adds to these
        until_at = dict(self.ready_at if until == "ready" else self.published_at)
        return {pod: until_at[pod] - t for pod, t in created.items() if pod in until_at}
