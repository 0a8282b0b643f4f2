"""The real_vllm tier: the operator's Deployments run by real vLLM 0.32 (CPU) through the pod runner.

Fixtures:
- ``vllm_runtime`` (session) the installed runtime (e2e/realvllm/runtime.py); e2e/conftest.py installs it at
  collection time when this tier is selected, as it does the control-plane build. Where it cannot be installed
  the tier is skipped with the reason, except under ``CI=true``, where that fails the run.
- ``pod_runner`` (session) the kubelet of node ``real-vllm-0``: pods placed there (``PLACEMENT``) run for real.
- ``serve`` (function) apply a service placed on the runner, wait for Ready, give back its pod's local URL.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from e2e.controlplane import ControlPlane
from e2e.harness.poll import Fatal, wait_for
from e2e.operator_process import OperatorProcess
from e2e.realvllm import runtime
from e2e.realvllm.runner_process import PodRunner, placed

# A cold start of vLLM on this 2-core machine takes 1-4 minutes (toolchain.md §9); the startup probe allows 30.
START_TIMEOUT = 900.0


@pytest.fixture(scope="session")
def vllm_runtime() -> runtime.Runtime:
    try:
        return runtime.find(install_missing=False)
    except runtime.RuntimeUnavailable as e:
        reason = runtime.INSTALL_ERROR or str(e)
        if os.environ.get("CI") == "true":
            pytest.fail(f"real_vllm tier cannot run under CI=true: {reason}")
        pytest.skip(f"real_vllm: {reason}")


@pytest.fixture(scope="session")
def pod_runner(cluster: ControlPlane, vllm_runtime: runtime.Runtime) -> Iterator[PodRunner]:
    r = PodRunner(cluster, vllm_runtime).start()
    yield r
    r.stop()


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


def _ready(cluster: ControlPlane, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    res = cluster.kubectl("get", kind.lower(), name, "-n", namespace, "-o", "json", check=False)
    if res.returncode != 0:
        return None
    obj = yaml.safe_load(res.stdout)
    st = obj.get("status") or {}
    ok = any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or [])
    return st if ok and st.get("observedGeneration") == obj["metadata"]["generation"] else None


class Deployer:
    """Applies services placed on the runner and waits until the operator reports them Ready; ``close``
    deletes them (and the model claims it made)."""

    def __init__(self, cluster: ControlPlane, pod_runner: PodRunner):
        self.cluster = cluster
        self.runner = pod_runner
        self.applied: list[tuple[str, str, str]] = []
        self.claimed: list[str] = []

    def serve(self, doc: dict[str, Any]) -> Served:
        cluster, pod_runner = self.cluster, self.runner
        doc = placed(doc)
        kind, ns, name = doc["kind"], doc["metadata"]["namespace"], doc["metadata"]["name"]
        if ns not in self.claimed and "volume" in (doc["spec"]["model"].get("source") or {}):
            pod_runner.model_claim(ns)
            self.claimed.append(ns)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
        self.applied.append((kind, ns, name))
        began = time.monotonic()

        def ready() -> dict[str, Any] | None:
            for plan in pod_runner.pods(ns):
                log = pod_runner.container_log(ns, plan["name"], 5)
                if "Traceback" in log and "EngineCore failed" in log:
                    raise Fatal(f"vLLM failed to start:\n{pod_runner.container_log(ns, plan['name'], 80)}")
            return _ready(cluster, kind, ns, name)

        try:
            status = wait_for(ready, timeout=START_TIMEOUT, what=f"{kind}/{name} Ready (real vLLM start-up)")
        except Exception:
            logs = "\n".join(pod_runner.container_log(ns, p["name"]) for p in pod_runner.pods(ns))
            raise AssertionError(f"{kind}/{name} never became Ready; container log tail:\n{logs}\n{pod_runner.tail()}") from None
        seconds = time.monotonic() - began
        [plan] = [p for p in pod_runner.pods(ns) if p["name"].startswith(f"{name}-")]
        print(f"real_vllm: {kind}/{name} Ready {seconds:.0f} s after apply")
        return Served(kind, ns, name, plan["name"], pod_runner.url(ns, plan["name"]), plan, status, seconds)

    def close(self) -> None:
        for kind, ns, name in self.applied:
            self.cluster.kubectl("delete", kind.lower(), name, "-n", ns, "--wait=false", check=False)
        for ns in self.claimed:
            self.runner.release_claim(ns)


@pytest.fixture
def serve(
    cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner
) -> Iterator[Callable[[dict[str, Any]], Served]]:
    d = Deployer(cluster, pod_runner)
    yield d.serve
    d.close()


@pytest.fixture(scope="module")
def module_namespace(cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """One namespace for a module whose tests share one real server (each start costs minutes)."""
    name = cluster.create_namespace(request.module.__name__.rsplit(".", 1)[-1].replace("_", "-"))
    yield name
    cluster.delete_namespace(name)


def oracle(rt: runtime.Runtime, command: str, model_dir: str, request: dict[str, Any]) -> dict[str, Any]:
    """Run e2e/realvllm/oracles.py in the runtime's interpreter."""
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parents[3] / "realvllm" / "oracles.py"
    res = subprocess.run(
        [str(rt.python), str(script), command, model_dir],
        input=json.dumps(request), capture_output=True, text=True, env={**os.environ, **rt.env()}, timeout=600,
    )  # fmt: skip
    if res.returncode != 0:
        raise AssertionError(f"oracle {command} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout)


__all__ = ["Deployer", "Served", "oracle"]
