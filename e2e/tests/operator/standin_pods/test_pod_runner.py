"""The pod runner acts as a kubelet: a pod is Ready only while its readiness probe passes, and a failing
liveness probe restarts the container (counted in restartCount). A tiny HTTP server stands in for vLLM so
each transition takes seconds; its answers are steered through files in its emptyDir volume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.podrunner.runner_process import PLACEMENT, PodRunner

pytestmark = [pytest.mark.timeout(300)]

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


# The Job's main container: reaches the sidecar through the pod's port (rewritten like any loopback address
# of a declared port), then writes one key of a ConfigMap with the operator's own in-cluster client (the
# hidden-state driver's), which finds its token, CA and namespace at the fixed ServiceAccount path.
MAIN = """
import asyncio, os, sys, urllib.request
assert urllib.request.urlopen(sys.argv[1], timeout=5).status == 200
from pooling_operator.k8s.progress import ProgressConfigMap, pod_namespace
async def write():
    p = ProgressConfigMap("seen", pod_namespace())
    await p.write(os.environ["WHO"], os.environ["KUBERNETES_SERVICE_HOST"])
    await p.close()
if os.environ["WRITE"] == "1":
    asyncio.run(write())
sys.exit(int(os.environ["EXIT"]))
"""


def job(namespace: str, name: str, exit_code: int, write: bool) -> dict[str, Any]:
    from pooling_operator import OPERATOR_IMAGE

    probe = {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1, "failureThreshold": 30}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {
                **PLACEMENT,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 5,
                "initContainers": [{
                    "name": "server", "image": "stand-in", "restartPolicy": "Always",
                    "command": ["python3", "-c", SERVER], "args": ["--port", "8080"],
                    "env": [{"name": "STATE", "value": "/state"}],
                    "ports": [{"name": "http", "containerPort": 8080}], "startupProbe": probe,
                    "volumeMounts": [{"name": "state", "mountPath": "/state"}],
                }],
                "containers": [{
                    "name": "main", "image": OPERATOR_IMAGE, "command": ["python", "-c", MAIN],
                    "args": ["http://127.0.0.1:8080/"],
                    "env": [{"name": "WHO", "value": name}, {"name": "EXIT", "value": str(exit_code)},
                            {"name": "WRITE", "value": "1" if write else "0"}],
                }],
                "volumes": [{"name": "state", "emptyDir": {}}],
            }},
        },
    }  # fmt: skip


def test_a_job_pod_runs_its_sidecar_first_and_ends_with_its_main_container(
    cluster: ControlPlane, pod_runner: PodRunner, namespace: str
) -> None:
    runner = json.loads((pod_runner.state_dir / "runner.json").read_text())
    in_cluster = runner["mountNamespaces"]
    cluster.kubectl("create", "configmap", "seen", "-n", namespace)
    cluster.kubectl("create", "role", "seen", "--verb=get,patch", "--resource=configmaps", "--resource-name=seen", "-n", namespace)
    cluster.kubectl("create", "rolebinding", "seen", "--role=seen", f"--serviceaccount={namespace}:default", "-n", namespace)
    for name, code in (("ok", 0), ("fails", 3)):
        # without a mount namespace (runner.json says so) the client cannot find its token: no write then
        cluster.kubectl("apply", "-f", "-", input=json.dumps(job(namespace, name, code, in_cluster)))

    def job_ended(name: str) -> dict[str, Any] | None:
        st = json.loads(cluster.kubectl("get", "job", name, "-n", namespace, "-o", "json").stdout).get("status") or {}
        done = [c["type"] for c in st.get("conditions") or [] if c["type"] in ("Complete", "Failed") and c["status"] == "True"]
        return {"condition": done[0], **st} if done else None

    ok = wait_for(lambda: job_ended("ok"), timeout=120, what="Job ok to end")
    fails = wait_for(lambda: job_ended("fails"), timeout=120, what="Job fails to end")
    assert (ok["condition"], ok.get("succeeded")) == ("Complete", 1), ok
    assert (fails["condition"], fails.get("failed")) == ("Failed", 1), fails

    for name, phase, code in (("ok", "Succeeded", 0), ("fails", "Failed", 3)):
        [p] = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", f"job-name={name}", "-o", "json").stdout)["items"]
        st = p["status"]
        assert st["phase"] == phase
        [side] = st["initContainerStatuses"]
        [main] = st["containerStatuses"]
        assert main["state"]["terminated"]["exitCode"] == code
        # the sidecar started before the main container and was stopped (SIGTERM) after it exited
        assert side["state"]["terminated"]["exitCode"] == 143, side
        assert side["state"]["terminated"]["startedAt"] <= main["state"]["terminated"]["startedAt"]
        assert side["state"]["terminated"]["finishedAt"] >= main["state"]["terminated"]["finishedAt"]
        record = pod_runner.pod(namespace, p["metadata"]["name"])
        local = record["ports"]["http"]["local"]
        rewrites = record["containers"]["main"]["rewrites"]
        assert f"args[0]: http://127.0.0.1:8080/ -> http://127.0.0.1:{local}/" in rewrites
        assert any(r.startswith("command[0]: python -> ") and r.endswith(f"(image {p['spec']['containers'][0]['image']})")
                   for r in rewrites), rewrites  # fmt: skip
        assert "KUBERNETES_SERVICE_HOST" in record["containers"]["main"]["envAdded"]
    if in_cluster:
        data = json.loads(cluster.kubectl("get", "configmap", "seen", "-n", namespace, "-o", "json").stdout)["data"]
        assert data == {"ok": "127.0.0.1", "fails": "127.0.0.1"}
