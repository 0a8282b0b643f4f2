"""The Helm chart installed into a real control plane of its own (so that its CRDs are Helm's from the start),
and the operator run as a process with the chart's ServiceAccount token: the chart's RBAC is enough for the
examples and no more, its webhook (certificate and registration from the chart) answers over TLS, an
upgrade really changes a CRD, and uninstalling leaves users' resources and workloads alone.

This machine has no kube-proxy, so the webhook is registered through the chart's ``webhook.url`` value at
the operator's loopback address; the certificate the operator makes names 127.0.0.1 for that (the chart passes
the URL's host to it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.config import ClusterConfig
from e2e.harness.poll import wait_for
from e2e.harness.processes import _free_ports
from e2e.kube import build
from e2e.kube.controlplane import REPO_ROOT, ControlPlane
from e2e.operator_process import OperatorProcess, token_kubeconfig
from e2e.tests.operator.test_webhook import INVALID as WEBHOOK_INVALID
from pooling_operator.api import KINDS as OUR_KINDS

pytestmark = pytest.mark.timeout(900)

CHART = REPO_ROOT / "charts" / "vllm-pooling-operator"
RELEASE, NS = "vpo", "vpo-system"
FULLNAME = "vpo-vllm-pooling-operator"
SA = f"system:serviceaccount:{NS}:{FULLNAME}"
KINDS = ("PoolingService", "ScoringService")
INVALID = WEBHOOK_INVALID.replace("NS", "search")  # one invalid service for both webhook tests


class Env:
    def __init__(self, cp: ControlPlane, helm: Path, tmp: Path, webhook_port: int):
        self.cp, self.helm, self.tmp, self.webhook_port = cp, helm, tmp, webhook_port

    def helm_run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([str(self.helm), *args], capture_output=True, text=True, env=self.cp.env(), timeout=300)
        if check and res.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}:\n{res.stdout}\n{res.stderr}")
        return res

    def get(self, *args: str) -> dict[str, Any] | None:
        res = self.cp.kubectl("get", *args, "-o", "json", check=False)
        return json.loads(res.stdout) if res.returncode == 0 else None


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    helm = build.tool("helm")
    cp = ControlPlane(ClusterConfig.from_env(gpu_nodes=2)).start()
    try:
        (port,) = _free_ports(1)
        yield Env(cp, helm, tmp_path_factory.mktemp("helm"), port)
    finally:
        cp.stop()


def chart_operator(e: Env) -> OperatorProcess:
    """The operator as the chart's pod runs it (its Deployment's arguments and environment) with the chart's
    ServiceAccount: it fills the chart's empty webhook Secret, serves from it and sets the caBundle."""
    deployment = e.get("deployment", FULLNAME, "-n", NS)
    assert deployment is not None
    op = OperatorProcess.from_chart(e.cp, deployment, "chart-operator", webhook_port=e.webhook_port,
                                    kubeconfig=token_kubeconfig(e.cp, NS, FULLNAME, e.tmp / "chart-sa.kubeconfig", hours=2))
    op.env["VPO_RESYNC_SECONDS"] = "3"
    return op


def examples() -> list[dict[str, Any]]:
    docs = []
    for f in sorted((REPO_ROOT / "examples").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(f.read_text()) if d and d.get("kind") in (*KINDS, "AutoscalingPolicy")]
    return docs


def ready(e: Env, d: dict[str, Any]) -> bool:
    obj = e.get(d["kind"].lower(), d["metadata"]["name"], "-n", d["metadata"]["namespace"])
    conds = {c["type"]: c["status"] for c in ((obj or {}).get("status") or {}).get("conditions") or []}
    return conds.get("Ready") == "True"


def test_install_run_admit_upgrade_uninstall(env: Env) -> None:
    e = env
    # a namespace that enforces Pod Security "restricted": the chart's operator pods must be admitted there
    e.cp.kubectl("create", "namespace", NS)
    e.cp.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")
    e.helm_run("install", RELEASE, str(CHART), "-n", NS, "--wait=false",
               "--set", f"webhook.url=https://127.0.0.1:{e.webhook_port},replicaCount=2")  # fmt: skip

    def pods() -> list[Any]:
        listed = e.get("pods", "-n", NS, "-l", f"app.kubernetes.io/instance={RELEASE}") or {"items": []}
        return listed["items"] if len(listed["items"]) == 2 else []

    wait_for(pods, timeout=60, what="the chart's two operator pods admitted under Pod Security restricted")
    crds = e.get("crd")
    assert crds is not None
    ours = [c for c in crds["items"] if c["spec"]["group"] == "vllm-pooling.io"]
    assert len(ours) == len(OUR_KINDS) and all(c["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for c in ours)

    # the operator with the chart's identity reconciles the examples to Ready
    op = chart_operator(e).start()
    try:
        docs = examples()
        for ns in sorted({d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")}):
            e.cp.kubectl("create", "namespace", ns)
            wait_for(lambda n=ns: e.get("serviceaccount", "default", "-n", n), timeout=30, what=f"namespace {ns}")
        e.cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(docs))
        # (One from a ModelCache waits for its fill, which no kwok node runs: test_model_cache_real.py serves it.)
        services = [d for d in docs if d["kind"] in KINDS and "cache" not in (d["spec"]["model"].get("source") or {})]
        wait_for(lambda: all(ready(e, d) for d in services), timeout=300, what="every example Ready")

        # ... and is refused what it does not need
        for verb, resource, where in (
            ("get", "secrets", ["-n", "search"]), ("create", "pods/exec", ["-n", "search"]), ("list", "nodes", []),
            ("create", "clusterroles", []), ("delete", "customresourcedefinitions", []), ("create", "pods", ["-n", "search"]),
        ):  # fmt: skip
            res = e.cp.kubectl("auth", "can-i", verb, resource, *where, f"--as={SA}", check=False)
            assert res.stdout.strip() == "no", (verb, resource, where, res.stdout)
        assert e.cp.kubectl("auth", "can-i", "get", "secrets", "-n", NS, f"--as={SA}", check=False).stdout.strip() == "yes"

        # the chart's webhook, served by this operator over TLS, refuses what the vLLM rules refuse
        def refused() -> subprocess.CompletedProcess[str] | None:
            res = e.cp.kubectl("apply", "-f", "-", input=INVALID, check=False)
            return res if res.returncode != 0 else None

        res = wait_for(refused, timeout=30, what="the chart's webhook refusing an invalid service")
        assert "spec.engine.maxNumBatchedTokens: 256 is smaller than maxModelLen 512" in res.stderr, res.stderr
    finally:
        op.stop()
    # failurePolicy Ignore (the chart's default): with the operator down the cluster keeps working
    res = e.cp.kubectl("apply", "-f", "-", input=INVALID, check=False)
    assert res.returncode == 0, res.stderr

    # an upgrade that adds a CRD field reaches the API server (CRDs are templates, not the crds/ folder)
    chart2 = e.tmp / "chart-v2"
    shutil.copytree(CHART, chart2)
    crd_file = chart2 / "files" / "crds" / "vllm-pooling.io_poolingservices.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["e2eUpgradeProbe"] = {
        "type": "string", "description": "added by an upgrade in the e2e test"}  # fmt: skip
    crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    e.helm_run("upgrade", RELEASE, str(chart2), "-n", NS, "--wait=false", "--reuse-values")
    live = e.get("crd", "poolingservices.vllm-pooling.io")
    assert live is not None
    assert "e2eUpgradeProbe" in live["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]

    # uninstall leaves the CRDs, users' resources and their workloads alone
    before = {(d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]) for d in examples()
              if d["kind"] in KINDS and "cache" not in (d["spec"]["model"].get("source") or {})}  # (as above)
    e.helm_run("uninstall", RELEASE, "-n", NS)
    assert e.get("crd", "poolingservices.vllm-pooling.io") is not None
    for kind, ns, name in before:
        assert e.get(kind.lower(), name, "-n", ns) is not None, (kind, ns, name)
        assert e.get("deployment", name, "-n", ns) is not None, (ns, name)
    assert e.get("deployment", FULLNAME, "-n", NS) is None  # the operator itself is gone
