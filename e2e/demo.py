"""`make demo`: the local control plane, the CRDs, the operator, the examples — until they are Ready.

Run after `make cluster-up` (the Makefile does both). The operator keeps running in the background;
`make demo-down` stops it and the control plane. With ``--real-vllm`` (``make demo REAL_VLLM=1``) the pod runner
plays the kubelet of one more node, search/minilm is placed there and served by real vLLM 0.32 (CPU), and
the demo ends with a real /v1/embeddings answer.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from e2e.controlplane import DEFAULT_RUN_DIR, REPO_ROOT, ControlPlane
from e2e.crds import install_crds
from e2e.harness.poll import wait_for
from e2e.harness.processes import stop_pid
from e2e.operator_process import OperatorProcess
from e2e.realvllm import runtime
from e2e.realvllm.kubelet import DEFAULT_NODE
from e2e.realvllm.runner_process import PodRunner, on_this_machine
from e2e.realvllm.runtime import MINILM

SERVICE_KINDS = ("PoolingService", "ScoringService", "AutoscalingPolicy")


def say(msg: str) -> None:
    print(f"==> {msg}", flush=True)


def _pidfile(run_dir: Path) -> Path:
    return run_dir / "operator.pid"


def stop_operator(run_dir: Path) -> None:
    pidfile = _pidfile(run_dir)
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text())
    if stop_pid(pid):
        say(f"Stopped the operator (pid {pid})")
    pidfile.unlink(missing_ok=True)


def up(run_dir: Path, real_vllm: bool = False) -> int:
    started = time.monotonic()
    cluster = ControlPlane.attach(run_dir)
    runner = None
    if real_vllm:
        runner = start_pod_runner(cluster, run_dir)
    say("Installing CRDs (ours, KEDA, prometheus-operator)")
    install_crds(cluster)
    stop_operator(run_dir)
    say("Starting the operator")
    op = OperatorProcess(cluster, "operator", resync_seconds=30)
    op.start()
    _pidfile(run_dir).write_text(str(op.proc.pid))  # type: ignore[union-attr]
    docs = []
    for path in sorted((REPO_ROOT / "examples").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") in SERVICE_KINDS]
    if runner is not None:  # search/minilm runs on real vLLM: placed on the runner's node, as this machine allows
        docs = [on_this_machine(d) if _is_real_minilm(d) else d for d in docs]
    for ns in sorted({d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")}):
        cluster.kubectl("create", "namespace", ns, check=False)
        wait_for(
            lambda n=ns: (
                cluster.kubectl("get", "serviceaccount", "default", "-n", n, check=False).returncode == 0
            ),
            timeout=30,
            what=f"namespace {ns}",
        )
    say(f"Applying {len(docs)} examples (services and the policy; the HiddenStateJob needs volumes)")
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(docs))
    services = [d for d in docs if d["kind"] != "AutoscalingPolicy"]

    def all_ready() -> bool:
        for d in services:
            res = cluster.kubectl(
                "get",
                d["kind"].lower(),
                d["metadata"]["name"],
                "-n",
                d["metadata"]["namespace"],
                "-o",
                "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                check=False,
            )
            if res.stdout.strip() != "True":
                return False
        return True

    if runner is not None:
        say("search/minilm is starting on real vLLM (1-4 min on 2 cores; the pod runner's log: "
            f"{runner.log})")
    wait_for(all_ready, timeout=900 if runner else 300, what="every example Ready", alive=lambda: op.healthy() or True)
    say(f"All {len(services)} services Ready in {time.monotonic() - started:.1f}s")
    print(cluster.kubectl("get", "pooling", "-A").stdout)
    args = cluster.kubectl(
        "get", "pls", "minilm", "-n", "search", "-o", "jsonpath={.status.effective.args}"
    ).stdout
    say("The vLLM command line of search/minilm:")
    print(shlex.join(yaml.safe_load(args)))
    if runner is not None:
        show_real_answer(runner)
    print(f"\nKUBECONFIG={cluster.kubeconfig} {cluster.kubectl_path} get pooling -A   # look around")
    print(f"Operator log: {op.log}")
    print("Stop everything with: make demo-down")
    return 0


def _is_real_minilm(doc: dict) -> bool:
    return doc["kind"] == "PoolingService" and doc["spec"]["model"]["name"] == MINILM.repo_id


def start_pod_runner(cluster: ControlPlane, run_dir: Path) -> PodRunner:
    say("Installing or finding the vLLM runtime (once: 5-12 min)")
    rt = runtime.find(install_missing=True, log=print)
    PodRunner.stop_detached(run_dir / "pod-runner")
    say(f"Starting the pod runner: node {DEFAULT_NODE} runs its pods as real local processes")
    return PodRunner(cluster, rt, detached=True).start()


def show_real_answer(runner: PodRunner) -> None:
    [plan] = [p for p in runner.pods("search") if p["name"].startswith("minilm-")]
    url = runner.url("search", plan["name"])
    body = {"model": "minilm", "input": ["Kubernetes runs vLLM."]}
    say(f"A real /v1/embeddings answer from search/minilm (pod {plan['name']}, local {url}):")
    print(f"curl -s {url}/v1/embeddings -H 'Content-Type: application/json' -d '{json.dumps(body)}'")
    with urllib.request.urlopen(urllib.request.Request(
        f"{url}/v1/embeddings", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    ), timeout=120) as r:  # fmt: skip
        answer = json.load(r)
    vec = answer["data"][0]["embedding"]
    answer["data"][0]["embedding"] = [round(x, 5) for x in vec[:6]] + [f"... {len(vec) - 6} more"]
    print(json.dumps(answer))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.demo")
    p.add_argument("command", choices=["up", "down"])
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR)
    p.add_argument("--real-vllm", action="store_true", help="serve search/minilm with real vLLM (pod runner)")
    args = p.parse_args(argv)
    if args.command == "down":
        if PodRunner.stop_detached(args.run_dir / "pod-runner"):
            say("Stopped the pod runner and its vLLM processes")
        stop_operator(args.run_dir)
        return 0
    return up(args.run_dir, real_vllm=args.real_vllm)


if __name__ == "__main__":
    sys.exit(main())
