"""Operator tier: the operator runs as a process against the session's control plane."""

from __future__ import annotations

from collections.abc import Iterator
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


@pytest.fixture(scope="session")
def operator(cluster: ControlPlane, crds: list[str], hub: Hub) -> Iterator[OperatorProcess]:
    """The operator under test runs with deploy/rbac.yaml's permissions only, so every operator-tier test
    also proves that RBAC is enough."""
    proc = OperatorProcess(
        cluster, kubeconfig=least_privilege_kubeconfig(cluster), standalone=False, lease_namespace="vllm-pooling-operator",
        extra=["--hub-endpoint", hub.url],
    )
    proc.env["VPO_AUTOSCALE_SECONDS"] = str(AUTOSCALE_SECONDS)
    proc.start()
    yield proc
    proc.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    proc: Any = item.funcargs.get("operator") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(proc, OperatorProcess):
        report.sections.append(("operator log (tail)", proc.tail(80)))
