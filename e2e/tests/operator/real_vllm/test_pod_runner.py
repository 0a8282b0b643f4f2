"""The pod runner acts as a kubelet: a pod is Ready only while its readiness probe passes, and a failing
liveness probe restarts the container (counted in restartCount). A tiny HTTP server stands in for vLLM so
each transition takes seconds; its answers are steered through files in its emptyDir volume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e.controlplane import ControlPlane
from e2e.harness.poll import wait_for
from e2e.realvllm.runner_process import PLACEMENT, PodRunner

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(300)]

# /ready answers 200 while $STATE/ready exists; /alive answers 500 while $STATE/dead exists.
SERVER = """
import http.server, os, sys
state = os.environ["STATE"]
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = {"/ready": os.path.exists(state + "/ready"), "/alive": not os.path.exists(state + "/dead")}.get(self.path, True)
        self.send_response(200 if ok else 500); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", port), H).serve_forever()
"""


def pod(namespace: str) -> dict[str, Any]:
    probe = {"periodSeconds": 1, "timeoutSeconds": 1}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probed", "namespace": namespace},
        "spec": {
            **PLACEMENT,
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "server",
                "image": "stand-in",
                "command": ["python3", "-c", SERVER],
                "args": ["--port", "8080"],
                "env": [{"name": "STATE", "value": "/state"}],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "failureThreshold": 1, **probe},
                "livenessProbe": {"httpGet": {"path": "/alive", "port": "http"}, "failureThreshold": 2, **probe},
                "volumeMounts": [{"name": "state", "mountPath": "/state"}],
            }],
            "volumes": [{"name": "state", "emptyDir": {}}],
        },
    }  # fmt: skip


def status(cluster: ControlPlane, namespace: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", "pod", "probed", "-n", namespace, "-o", "json").stdout)["status"]


def ready(st: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or [])


def test_readiness_and_liveness_drive_the_pod_status(cluster: ControlPlane, pod_runner: PodRunner, namespace: str) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod(namespace)))

    def running() -> dict[str, Any] | None:
        st = status(cluster, namespace)
        return st if st.get("phase") == "Running" and st.get("containerStatuses") else None

    st = wait_for(running, timeout=60, what="the pod Running on the runner's node")
    assert not ready(st) and st["podIP"]
    plan = pod_runner.pod(namespace, "probed")
    state = Path(plan["mounts"]["/state"])
    assert plan["rewrites"] == [f"args[1]: 8080 -> {plan['ports']['http']['local']}", f"env STATE: /state -> {state}"]

    (state / "ready").touch()
    wait_for(lambda: ready(status(cluster, namespace)), timeout=30, what="Ready once /ready answers")
    (state / "ready").unlink()
    wait_for(lambda: not ready(status(cluster, namespace)), timeout=30, what="not Ready once /ready fails")

    (state / "ready").touch()
    (state / "dead").touch()

    def restarted() -> dict[str, Any] | None:
        cs = status(cluster, namespace)["containerStatuses"][0]
        return cs if cs["restartCount"] >= 1 else None

    cs = wait_for(restarted, timeout=60, what="a restart after the liveness probe failed")
    assert cs["lastState"]["terminated"]["reason"] == "LivenessProbeFailed"
    (state / "dead").unlink()
    wait_for(lambda: ready(status(cluster, namespace)), timeout=90, what="Ready again after the back-off")
