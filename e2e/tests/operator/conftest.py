"""Operator tier: the operator runs as a process against the session's control plane.

Fixtures shared with the real_vllm tier below it:
- ``vllm_runtime`` (session) the installed runtime (e2e/realvllm/runtime.py); e2e/conftest.py installs it at
  collection time when the real_vllm tier is selected, as it does the control-plane build (make test builds it
  first). Where it cannot be installed its tests skip with the reason, except under ``CI=true``, where that
  fails the run.
- ``pod_runner`` (session) the kubelet of node ``real-vllm-0``: pods placed there (``PLACEMENT``) run as local
  processes, for real (the real_vllm tier's vLLM) or on stand-ins (standin_pods/: the pod runner's kubelet
  behaviour and HiddenStateJobs on the hidden-state stand-in, no vLLM: in the operator tier's process, beside
  the real_vllm tier rather than on its critical path).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess, least_privilege_kubeconfig
from e2e.podrunner.runner_process import PodRunner
from e2e.realvllm import runtime
from e2e.standin.hub import Hub
from tests.unavailable import unavailable

AUTOSCALE_SECONDS = 2.0  # the autoscaler's decision period in these tests (15 s in production)
COST_WINDOW_SECONDS = 10  # status.cost's window in these tests (an hour in production): whole windows within a test


@pytest.fixture(scope="session")
def vllm_runtime() -> runtime.Runtime:
    try:
        return runtime.find(install_missing=False)
    except runtime.RuntimeUnavailable as e:
        reason = runtime.INSTALL_ERROR or str(e)
        unavailable(f"real_vllm: {reason}")


@pytest.fixture(scope="session")
def pod_runner(cluster: ControlPlane, vllm_runtime: runtime.Runtime) -> Iterator[PodRunner]:
    # make test runs the real_vllm tier beside the others (e2e/tiers.py): there vLLM yields the CPU to their waits
    r = PodRunner(cluster, vllm_runtime, idle=os.environ.get("VPO_RUNNER_IDLE") == "1").start()
    yield r
    r.stop()


@pytest.fixture(scope="session")
def hub() -> Iterator[Hub]:
    """The Hugging Face Hub stand-in on loopback (e2e/standin/hub.py) the operator's ModelCache fills use
    (--hub-endpoint); a test puts the repositories it needs in ``hub.repos``."""
    with Hub({}) as h:
        yield h


def pod_addresses(cluster: ControlPlane) -> Path:
    """Where a pod's loopback ports are recorded (<this>/pods/<namespace>_<name>.json): the real tier's pod runner's
    state folder (e2e/podrunner/runner_process.py)."""
    return Path(cluster.run_dir) / "pod-runner"


@pytest.fixture(scope="session")
def operator(cluster: ControlPlane, crds: list[str], hub: Hub) -> Iterator[OperatorProcess]:
    """The operator under test runs with deploy/rbac.yaml's permissions only, so every operator-tier test
    also proves that RBAC is enough."""
    proc = OperatorProcess(
        cluster, kubeconfig=least_privilege_kubeconfig(cluster), standalone=False, lease_namespace="vllm-pooling-operator",
        # the space gate reaches pods where the pod runner records their ports (POD_ADDRESSES: the real tier's
        # runner writes there, the operator tier's space-gate test writes there by hand)
        extra=["--hub-endpoint", hub.url, "--pod-addresses-from", str(pod_addresses(cluster))],
    )
    proc.env["VPO_AUTOSCALE_SECONDS"] = str(AUTOSCALE_SECONDS)
    proc.env["VPO_COST_WINDOW_SECONDS"] = str(COST_WINDOW_SECONDS)
    proc.start()
    yield proc
    proc.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries the log tail of every operator it ran with (the session's and any a module
    starts of its own), and of every control plane other than the session's (whose tails e2e/conftest.py adds)."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or not hasattr(item, "funcargs"):
        return
    values: list[Any] = list(item.funcargs.values())
    session = item.funcargs.get("cluster")
    for value in values:
        if isinstance(value, OperatorProcess):
            report.sections.append((f"{value.name} log (tail)", value.tail(80)))
    for value in values:
        if isinstance(value, ControlPlane) and value is not session:
            report.sections.append((f"control plane {value.run_dir.name} logs (tails)", value.log_tails(30)))
