"""Operator tier: the operator runs as a process against the session's control plane."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess, least_privilege_kubeconfig
from e2e.standin.hub import Hub

AUTOSCALE_SECONDS = 2.0  # the autoscaler's decision period in these tests (15 s in production)


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
