"""The real_vllm tier: the operator's Deployments run by real vLLM 0.32 (CPU) through the pod runner.

Fixtures (``vllm_runtime`` and ``pod_runner``: e2e/tests/operator/conftest.py, which the operator tier's
stand-in pod tests share):
- ``serve`` (function) apply a service placed on the runner, wait for Ready, give back its pod's local URL.
- ``built_models`` (session) the tiny scoring models (e2e/realvllm/tiny_models.py) in the ``built-models`` claim.
- ``server_pool`` (session) servers shared by model and argv, two at a time, in their own namespace with the
  ``models`` and ``built-models`` claims (pool.py); every selected module's ``POOL`` wanted up front.
- ``_held_slots`` (module, autouse) a module that starts vLLM of its own declares one ``slot`` per server in its
  ``POOL``; they are held while its tests run, so the pool starts only what fits beside them on the runner's
  two CPUs (a module that does not declare them leaves its own pods Pending on ``Insufficient cpu``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.podrunner.runner_process import BUILT_CLAIM, PodRunner
from e2e.realvllm import built, runtime
from e2e.tests.operator.real_vllm.pool import ServerPool
from e2e.tests.operator.real_vllm.serving import STARTS, Deployer, Served


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if STARTS:
        terminalreporter.section("real vLLM servers: apply -> Ready")
        for name, seconds in STARTS:
            terminalreporter.write_line(f"{name:60s} {seconds:6.1f} s")
        terminalreporter.write_line(f"{len(STARTS)} starts, {sum(s for _, s in STARTS):.1f} s in all (overlapping where the pool ran two)")


@pytest.fixture
def serve(
    cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner
) -> Iterator[Callable[[dict[str, Any]], Served]]:
    d = Deployer(cluster, pod_runner)
    yield d.serve
    d.close()


@pytest.fixture(scope="session")
def built_models(pod_runner: PodRunner, vllm_runtime: runtime.Runtime) -> Path:
    """The tiny scoring models of every seed in the runner's ``built-models`` claim (built.py): ``seed-N/<family>``."""
    for seed in built.SEEDS:
        built.build(vllm_runtime, pod_runner.built_dir / f"seed-{seed}", seed)
    return pod_runner.built_dir


def declared(session: pytest.Session) -> list[dict[str, Any]]:
    """Every selected module's ``POOL`` (the servers it will use), in the order its tests run."""
    modules: list[Any] = []
    for item in session.items:
        module = getattr(item, "module", None)
        if module is not None and module not in modules and item.get_closest_marker("real_vllm"):
            modules.append(module)
    return [doc for module in modules for doc in getattr(module, "POOL", ())]


def _mounts(doc: dict[str, Any], claim: str) -> bool:
    volume = ((doc.get("spec") or {}).get("model") or {}).get("source", {}).get("volume") or {}
    return volume.get("claimName") == claim


@pytest.fixture(scope="session")
def server_pool(
    request: pytest.FixtureRequest, cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner
) -> Iterator[ServerPool]:
    wanted = declared(request.session)
    if any(_mounts(doc, BUILT_CLAIM) for doc in wanted):
        request.getfixturevalue("built_models")  # built before a pod that mounts them is applied
    ns = cluster.create_namespace("real-vllm-pool")
    deployer = Deployer(cluster, pod_runner)
    pod_runner.model_claim(ns)
    pod_runner.built_claim(ns)
    deployer.claimed.append(ns)
    pool = ServerPool(deployer, ns)
    for doc in wanted:
        pool.want(doc)
    yield pool
    pool.close()
    deployer.close()
    cluster.delete_namespace(ns)


@pytest.fixture(scope="module", autouse=True)
def _held_slots(request: pytest.FixtureRequest) -> Iterator[None]:
    slots = [doc for doc in getattr(request.module, "POOL", ()) if "slot" in doc]
    if not slots:
        yield
        return
    pool: ServerPool = request.getfixturevalue("server_pool")
    with ExitStack() as held:
        for doc in slots:
            held.enter_context(pool.holding(doc))
        yield


@pytest.fixture(scope="module")
def module_namespace(cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """One namespace for a module whose tests share one real server (each start costs minutes)."""
    name = cluster.create_namespace(request.module.__name__.rsplit(".", 1)[-1].replace("_", "-"))
    yield name
    cluster.delete_namespace(name)


def oracle(rt: runtime.Runtime, command: str, model_dir: str, request: dict[str, Any]) -> dict[str, Any]:
    """Run e2e/realvllm/oracles.py in the runtime's interpreter."""
    script = Path(__file__).resolve().parents[3] / "realvllm" / "oracles.py"
    res = subprocess.run(
        [str(rt.python), str(script), command, model_dir],
        input=json.dumps(request), capture_output=True, text=True, env={**os.environ, **rt.env()}, timeout=600,
    )  # fmt: skip
    if res.returncode != 0:
        raise AssertionError(f"oracle {command} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout)


__all__ = ["Deployer", "Served", "ServerPool", "oracle"]
