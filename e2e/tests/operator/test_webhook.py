"""The validating admission webhook, served by an operator process over TLS and called by the real API server.

The webhook operator joins the session operator's Lease (so it never reconciles: the session operator
leads) and serves only admission. It is registered here the way the chart registers it in a cluster
without kube-proxy: ``clientConfig.url`` to its loopback address, the CA in ``caBundle``; scoped to the
test's namespace so the rest of the session is not affected.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.poll import wait_for
from e2e.harness.processes import _free_ports
from e2e.kube.controlplane import REPO_ROOT, ControlPlane
from e2e.operator_process import OperatorProcess
from pooling_operator.api.resources import KINDS
from pooling_operator.handlers.admission import WEBHOOK_PATHS
from tests.factories import invalid_examples

# Every namespaced kind of ours (the webhook registered here is scoped to the test's namespace, so the
# cluster-scoped AutoscalingPolicy is judged in tests/test_admission.py and registered by test_chart.py).
NAMESPACED = tuple(info.plural for info in KINDS.values() if info.namespaced)

INVALID = """
apiVersion: vllm-pooling.io/v1alpha1
kind: PoolingService
metadata: {name: too-small-batch, namespace: NS}
spec:
  model: {name: sentence-transformers/all-MiniLM-L6-v2, revision: c9745ed1d9f207416be6d2e6f8de32d1f16199bf,
          hints: {architectures: [BertModel]}}
  task: embed
  pooling: {type: MEAN, normalize: true}
  engine: {maxModelLen: 512, maxNumBatchedTokens: 256}
"""
VALID_WITH_WARNING = """
apiVersion: vllm-pooling.io/v1alpha1
kind: PoolingService
metadata: {name: unpinned, namespace: NS}
spec:
  model: {name: sentence-transformers/all-MiniLM-L6-v2}
  task: embed
  pooling: {type: MEAN, normalize: true}
  engine: {maxModelLen: 256}
"""


def webhook_configuration(name: str, namespace: str, port: int, ca: bytes, failure_policy: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"{plural}.validate.vllm-pooling.io",
                "clientConfig": {"url": f"https://127.0.0.1:{port}{WEBHOOK_PATHS[plural]}", "caBundle": base64.b64encode(ca).decode()},
                "rules": [{"apiGroups": ["vllm-pooling.io"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
                           "resources": [plural], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "failurePolicy": failure_policy,
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
            for plural in NAMESPACED
        ],
    }  # fmt: skip


@pytest.fixture
def webhook(cluster: ControlPlane, operator: OperatorProcess, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    certs = tmp_path / "webhook-certs"  # the cluster CA's serving certificate: SAN 127.0.0.1
    certs.mkdir()
    shutil.copy(cluster.pki["serving.crt"], certs / "tls.crt")
    shutil.copy(cluster.pki["serving.key"], certs / "tls.key")
    (port,) = _free_ports(1)
    proc = OperatorProcess(
        cluster, "operator-webhook", standalone=False, lease_namespace="vllm-pooling-operator",
        extra=["--webhook-port", str(port), "--webhook-bind", "127.0.0.1", "--webhook-cert-dir", str(certs)],
    )  # fmt: skip
    proc.start()
    proc.webhook_port = port  # type: ignore[attr-defined]
    name = f"vpo-e2e-{namespace}"
    cfg = webhook_configuration(name, namespace, port, cluster.pki["ca.crt"].read_bytes(), "Ignore")
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(cfg))
    yield proc
    cluster.kubectl("delete", "validatingwebhookconfiguration", name, check=False)
    proc.stop()


def apply(cluster: ControlPlane, text: str, namespace: str) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("apply", "-f", "-", input=text.replace("NS", namespace), check=False)


def validate_lines(text: str, tmp_path: Path) -> list[str]:
    f = tmp_path / "doc.yaml"
    f.write_text(text)
    out = subprocess.run(
        [sys.executable, "-m", "pooling_operator", "validate", str(f)], capture_output=True, text=True, cwd=REPO_ROOT
    )
    return [line.split(": ", 1)[1] for line in (out.stdout + out.stderr).splitlines()
            if line.startswith(str(f)) and ": notice: " not in line]  # a notice (no model.hints) is validate's, not admission's


def test_kubectl_apply_gets_the_validate_messages_and_ignore_keeps_the_cluster_working(
    cluster: ControlPlane, webhook: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    invalid = INVALID.replace("NS", namespace)
    [line] = validate_lines(invalid, tmp_path)

    def refused() -> subprocess.CompletedProcess[str] | None:
        res = apply(cluster, INVALID, namespace)
        return res if res.returncode != 0 else None

    # the API server rejects what only the vLLM rules can judge, with exactly the validate line
    res = wait_for(refused, timeout=30, what="the webhook refusing an invalid PoolingService")
    assert line in res.stderr, (line, res.stderr)
    assert "admission webhook" in res.stderr and "denied the request" in res.stderr
    assert cluster.kubectl("get", "pls", "too-small-batch", "-n", namespace, check=False).returncode != 0

    # every other namespaced kind of ours too (PoolingJob was once left out of the webhook's list)
    for kind, doc in invalid_examples(namespace).items():
        if kind == "PoolingService" or not KINDS[kind].namespaced:
            continue
        text = yaml.safe_dump(doc)
        first = validate_lines(text, tmp_path)[0]
        res = cluster.kubectl("apply", "-f", "-", input=text, check=False)
        assert res.returncode != 0 and first in res.stderr and "denied the request" in res.stderr, (kind, first, res.stderr)

    # a valid one is let in, with the validate warnings passed on to kubectl
    ok = apply(cluster, VALID_WITH_WARNING, namespace)
    assert ok.returncode == 0, ok.stderr
    [warning] = validate_lines(VALID_WITH_WARNING.replace("NS", namespace), tmp_path)
    assert f"Warning: {warning}" in ok.stderr, ok.stderr
    # an update that keeps the spec (metadata only) is never refused
    labelled = cluster.kubectl("label", "pls", "unpinned", "-n", namespace, "team=search", check=False)
    assert labelled.returncode == 0, labelled.stderr

    # with the webhook's operator down, failurePolicy Ignore lets the invalid one in (status catches it)
    webhook.stop()
    res = apply(cluster, INVALID, namespace)
    assert res.returncode == 0, res.stderr
