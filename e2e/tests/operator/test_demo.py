"""`make demo`, the README's first command, run by its own code (e2e/demo.py) on the suite's control plane: the
CRDs, an operator of its own, every example it applies Ready, each left-out example named with why, the
`kubectl` commands it prints answering, and `demo down` stopping its operator. (The real_vllm tier checks
`make demo REAL_VLLM=1`'s /v1/embeddings answer: real_vllm/test_examples.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import demo
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess


@pytest.fixture
def demo_run(cluster: ControlPlane, operator: OperatorProcess, tmp_path: Path) -> Iterator[Path]:
    """The session's operator stopped for the demo's (two would both reconcile the examples), the demo's
    objects deleted afterwards (its AutoscalingPolicy is the cluster's default), the session's operator back."""
    operator.stop()
    docs, _ = demo.examples()
    try:
        yield tmp_path
    finally:
        demo.down(tmp_path)
        for ns in sorted({d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")}):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cluster_wide = [(d["kind"].lower(), d["metadata"]["name"]) for d in docs if not d["metadata"].get("namespace")]
        for kind, name in cluster_wide:
            cluster.kubectl("delete", kind, name, "--wait=false", check=False)
        operator.start()
        for kind, name in cluster_wide:
            wait_for(lambda k=kind, n=name: cluster.kubectl("get", k, n, check=False).returncode != 0, timeout=60,
                     what=f"the demo's {kind} {name} deleted")  # fmt: skip


def test_the_demo_brings_what_it_applies_to_ready_names_what_it_leaves_out_and_its_commands_answer(
    cluster: ControlPlane, demo_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo.up(cluster, demo_run, timeout=180) == 0
    printed = capsys.readouterr().out
    docs, left_out = demo.examples()
    services = [d for d in docs if d["kind"] != "AutoscalingPolicy"]
    assert len(services) >= 8 and demo.not_ready(cluster, services) == []
    # The left-out examples are named in the output with why; the cached service with its cache.
    assert any("minilm-cached" in line and "ModelCache minilm" in line for line in left_out), left_out
    for line in left_out:
        assert line in printed
    assert not any(d["metadata"]["name"] == "minilm-cached" for d in docs)
    # Every printed kubectl command answers, and the listing shows every service.
    for argv in demo.LOOK_AROUND:
        assert " ".join(["kubectl", *argv]) in printed
        res = cluster.kubectl(*argv, check=False)
        assert res.returncode == 0, (argv, res.stderr)
    listing = cluster.kubectl("get", "pooling", "-A").stdout
    assert all(d["metadata"]["name"] in listing for d in services), listing
    # `demo down` stops the demo's operator (its pid file goes with it).
    pid = int((demo_run / "operator.pid").read_text())
    demo.down(demo_run)
    assert not (demo_run / "operator.pid").exists()
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text(),
             timeout=30, what="the demo's operator gone")  # fmt: skip
