"""pytest fixtures for tests against a real control plane (see e2e/kube/controlplane.py).

- ``cluster``   (session) one control plane per test run; a ``ControlPlane`` (kubeconfig, kubectl, api, env()).
- ``k8s``       (session) a ``kubernetes.client.ApiClient`` for it.
- ``third_party_crds`` (session) KEDA and prometheus-operator CRDs from their Go modules, Established.
- ``crds``      (session) those plus ours from crds/, Established.
- ``namespace`` (function) a fresh namespace whose default ServiceAccount exists; deleted afterwards.

Environment:
  VPO_E2E_RUN_DIR=.cluster   use the control plane of `make cluster-up` instead of starting one
  VPO_E2E_BUILD=0            never build binaries (fail if missing) - default builds them before the tests
  VPO_E2E_KEEP=1             keep the run folder (logs, pki, kubeconfig) even when every test passed
  VPO_GPU_NODES, VPO_GPUS_PER_NODE, VPO_CPU_NODES   shape of the fake cluster (4, 8, 1)
On a failing test the tails of every component's log are attached to its report; when any test failed
the run folder is kept and its path printed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.harness.audit import OPERATOR_USER
from e2e.harness.config import ClusterConfig
from e2e.kube import build
from e2e.kube.controlplane import ControlPlane
from e2e.kube.crds import install_crds
from e2e.realvllm import runtime

_CLUSTER: ControlPlane | None = None
_REPORTED: set[int] = set()


def _needs_cluster(item: pytest.Item) -> bool:
    return "cluster" in getattr(item, "fixturenames", ())


# Timing-sensitive real tests run last in their tier: make test runs the tier beside the others (e2e/tiers.py),
# which have most likely finished by then.
LAST_IN_TIER = ("test_closed_loop_real.py",)
# Modules of the real tier moved to run right after another: they use the same pool server (pool.py), which then
# serves both without a second start and without being held through the modules between them.
REAL_TIER_AFTER = {"test_pooling_job_real.py": "test_examples.py"}
# The operator tier's tests of pods run by the pod runner on stand-ins (no vLLM): last in their process.
STANDIN_PODS = "e2e/tests/operator/standin_pods/"


def is_real(item: pytest.Item) -> bool:
    return item.get_closest_marker("real_vllm") is not None


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: build and install only for what will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark e2e tests, run the third-party controllers' tests next to last and the real_vllm tier last (its
    LAST_IN_TIER modules at its end), and build or install what is missing now: a cold build
    (~10-20 min) or vLLM install (~5-12 min) would blow a test's timeout."""
    selected = [i for i in items if _needs_cluster(i)]
    for item in selected:
        item.add_marker(pytest.mark.e2e)
    real = [i for i in items if is_real(i)]
    real = [i for i in real if i.path.name not in LAST_IN_TIER] + [i for i in real if i.path.name in LAST_IN_TIER]
    for moved, after in REAL_TIER_AFTER.items():
        block = [i for i in real if i.path.name == moved]
        rest = [i for i in real if i.path.name != moved]
        anchor = max((n for n, i in enumerate(rest) if i.path.name == after), default=None)
        if block and anchor is not None:
            real = rest[: anchor + 1] + block + rest[anchor + 1 :]
    # third-party controllers next to last: make test builds them in the background while the tiers run; the
    # stand-in pod tests after them (their pod runner's node, once started, stays for the session: no other
    # operator-tier test runs beside it)
    third = [i for i in items if i.get_closest_marker("controllers") and not i.get_closest_marker("real_vllm")]
    standin = [i for i in items if STANDIN_PODS in i.nodeid and not is_real(i)]
    third = [i for i in third if i not in standin]
    if real or third or standin:  # real vLLM loads both cores for minutes; the other tiers' timings should not feel it
        items[:] = [i for i in items if i not in third and i not in real and i not in standin] + third + standin + real
    capman = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")

    def say(msg: str) -> None:
        if reporter:
            reporter.write_line(msg)

    def uncaptured(fn: Callable[[], object]) -> None:
        if capman:
            with capman.global_and_fixture_disabled():
                fn()
        else:
            fn()

    if os.environ.get("VPO_E2E_BUILD") == "0":
        return
    if real and not runtime.Runtime(runtime.default_root()).installed():
        say(f"real_vllm: installing the vLLM runtime into {runtime.default_root()} (cold: 5-12 min)")
        try:
            uncaptured(lambda: runtime.find(install_missing=True, log=say))
        except Exception as e:  # the tier's fixture skips with this reason (fails under CI)
            runtime.INSTALL_ERROR = f"{type(e).__name__}: {e}"
            say(f"real_vllm: the vLLM runtime could not be installed: {runtime.INSTALL_ERROR}")
    if not selected or os.environ.get("VPO_E2E_RUN_DIR") or not build.missing():
        return
    say(f"e2e: building control-plane binaries into {build.bin_dir()} (cold: ~20 min)")
    uncaptured(lambda: build.find(build=True, log=say))


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    global _CLUSTER
    attach = os.environ.get("VPO_E2E_RUN_DIR")
    if attach:
        cp = ControlPlane.attach(Path(attach))
    else:
        # The operator's own requests are audited: tests count them per namespace (harness/audit.py).
        config = ClusterConfig.from_env(audit_users=(OPERATOR_USER,))
        cp = ControlPlane(config, keep_run_dir=os.environ.get("VPO_E2E_KEEP") == "1")
        cp.start()
    _CLUSTER = cp
    try:
        yield cp
    finally:
        _CLUSTER = None
        if request.session.testsfailed and not attach:
            cp.keep_run_dir = True
        cp.stop()
        if cp.keep_run_dir and not attach:
            reporter = request.config.pluginmanager.getplugin("terminalreporter")
            if reporter:
                reporter.write_line(f"e2e: control-plane run folder kept: {cp.run_dir}")


@pytest.fixture(scope="session")
def k8s(cluster: ControlPlane) -> Any:
    client = cluster.api_client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def third_party_crds(cluster: ControlPlane) -> list[str]:
    """KEDA and prometheus-operator CRDs from their Go modules, Established."""
    return install_crds(cluster, ours=False)


@pytest.fixture(scope="session")
def crds(cluster: ControlPlane, third_party_crds: list[str]) -> list[str]:
    """Third-party CRDs plus every CRD in crds/, Established (the names of all of them)."""
    return third_party_crds + install_crds(cluster, third_party=False)


@pytest.fixture
def namespace(cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    name = cluster.create_namespace(request.node.name)
    yield name
    cluster.delete_namespace(name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.failed and _CLUSTER is not None and _needs_cluster(item)):
        return
    # a failed session fixture re-raises the same exception for every test: attach the logs once
    exc = call.excinfo.value if call.excinfo else None
    if exc is not None and id(exc) in _REPORTED:
        return
    _REPORTED.add(id(exc))
    report.sections.append(("control-plane logs (tails)", _CLUSTER.log_tails(30)))
