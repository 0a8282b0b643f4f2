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
from typing import Any

import yaml

from e2e.harness.poll import Fatal, Timeout, wait_for
from e2e.harness.processes import stop_pid
from e2e.kube.controlplane import DEFAULT_RUN_DIR, REPO_ROOT, ControlPlane
from e2e.kube.crds import install_crds
from e2e.operator_process import OperatorProcess
from e2e.podrunner.kubelet import DEFAULT_NODE
from e2e.podrunner.runner_process import PodRunner, on_this_machine
from e2e.realvllm import runtime
from e2e.realvllm.runtime import MINILM

APPLIED_KINDS = ("PoolingService", "ScoringService", "AutoscalingPolicy")
# What the demo cannot bring to Ready on kwok nodes, and why (printed, and in the README).
LEFT_OUT_WHY = {
    "ModelCache": "its fill Job downloads the model from the Hugging Face Hub and runs as a pod, which a kwok node "
    "never runs (e2e/tests/operator/real_vllm/test_model_cache_real.py fills one on the pod runner)",
    "HiddenStateJob": "it needs claims holding the model and the prompts (the real_vllm tier runs one)",
    "PoolingJob": "it needs claims holding the model and the corpus (the real_vllm tier runs one)",
}


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


def _name(doc: dict[str, Any]) -> str:
    ns = doc["metadata"].get("namespace")
    return f"{doc['kind']} {ns + '/' if ns else ''}{doc['metadata']['name']}"


def examples(real_vllm: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """Every document of examples/*.yaml the demo applies (search/minilm placed on the pod runner with
    ``real_vllm``), and one line for each it leaves out, saying why: the kinds in LEFT_OUT_WHY, and a service
    that loads its model from a ModelCache (it would wait for that cache forever)."""
    docs: list[dict[str, Any]] = []
    left_out: list[str] = []
    for path in sorted((REPO_ROOT / "examples").glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            if not d:
                continue
            where = f"examples/{path.name}: {_name(d)}"
            cache = (
                ((d.get("spec") or {}).get("model") or {}).get("source", {}).get("cache")
                if d["kind"] in APPLIED_KINDS
                else None
            )
            if d["kind"] in LEFT_OUT_WHY:
                left_out.append(f"{where}: {LEFT_OUT_WHY[d['kind']]}")
            elif cache:
                left_out.append(
                    f"{where}: it loads its model from ModelCache {cache['name']}, left out above, and "
                    f"would wait for it (WaitingForModelCache)"
                )
            elif d["kind"] in APPLIED_KINDS:
                docs.append(on_this_machine(d) if real_vllm and is_real_minilm(d) else d)
            else:
                left_out.append(f"{where}: the demo applies only {', '.join(APPLIED_KINDS)}")
    return docs, left_out


def apply_examples(cluster: ControlPlane, docs: list[dict[str, Any]]) -> None:
    for ns in sorted({d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")}):
        cluster.kubectl("create", "namespace", ns, check=False)
        wait_for(
            lambda n=ns: (
                cluster.kubectl("get", "serviceaccount", "default", "-n", n, check=False).returncode == 0
            ),
            timeout=30,
            what=f"namespace {ns}",
        )
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(docs))


def not_ready(cluster: ControlPlane, services: list[dict[str, Any]]) -> list[str]:
    """The services among ``services`` whose Ready condition is not True."""
    out = []
    for d in services:
        res = cluster.kubectl(
            "get", d["kind"].lower(), d["metadata"]["name"], "-n", d["metadata"]["namespace"],
            "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False,
        )  # fmt: skip
        if res.stdout.strip() != "True":
            out.append(_name(d))
    return out


LOOK_AROUND = [
    ["get", "pooling", "-A"],
    ["get", "pls", "-A", "-o", "wide"],
    ["explain", "poolingservice.spec.pooling"],
    ["describe", "pls", "minilm", "-n", "search"],
]  # the README's commands after `make demo`


def up(cluster: ControlPlane, run_dir: Path, real_vllm: bool = False, timeout: float | None = None) -> int:
    """The demo on ``cluster``: the CRDs, an operator in the background (its pid in ``run_dir``), the
    examples until every service is Ready, then what to look at. ``make demo`` and e2e/tests/operator/test_demo.py."""
    started = time.monotonic()
    runner = None
    if real_vllm:
        runner = start_pod_runner(cluster, run_dir)
    say("Installing CRDs (ours, KEDA, prometheus-operator)")
    install_crds(cluster)
    stop_operator(run_dir)
    say("Starting the operator")
    op = OperatorProcess(cluster, "demo-operator", resync_seconds=30)
    op.start()
    _pidfile(run_dir).write_text(str(op.proc.pid))  # type: ignore[union-attr]
    docs, left_out = examples(real_vllm)
    services = [d for d in docs if d["kind"] != "AutoscalingPolicy"]
    say(f"Applying {len(docs)} examples ({len(services)} services and the policy); left out, with why:")
    for line in left_out:
        print(f"    {line}")
    apply_examples(cluster, docs)
    if runner is not None:
        say(
            f"search/minilm is starting on real vLLM (1-4 min on 2 cores; the pod runner's log: {runner.log})"
        )

    def operator_alive() -> None:
        if op.proc is not None and op.proc.poll() is not None:
            raise Fatal(f"the operator exited ({op.proc.returncode}); its log ends:\n{op.tail()}")

    try:
        wait_for(
            lambda: not not_ready(cluster, services),
            timeout=timeout or (900 if runner else 300),
            what="every example Ready",
            alive=operator_alive,
        )
    except Timeout as exc:
        raise Timeout(f"{exc}; not Ready: {', '.join(not_ready(cluster, services))}") from None
    say(f"All {len(services)} services Ready in {time.monotonic() - started:.1f}s")
    print(cluster.kubectl("get", "pooling", "-A").stdout)
    args = cluster.kubectl(
        "get", "pls", "minilm", "-n", "search", "-o", "jsonpath={.status.effective.args}"
    ).stdout
    say("The vLLM command line of search/minilm:")
    print(shlex.join(yaml.safe_load(args)))
    if runner is not None:
        show_real_answer(runner.url("search", minilm_pod(runner)))
    say("Look around:")
    print(f"export KUBECONFIG={cluster.kubeconfig} PATH={Path(cluster.kubectl_path).parent}:$PATH")
    for argv in LOOK_AROUND:
        print(shlex.join(["kubectl", *argv]))
    print(f"Operator log: {op.log}")
    print("Stop everything with: make demo-down")
    return 0


def is_real_minilm(doc: dict) -> bool:
    return doc["kind"] == "PoolingService" and doc["spec"]["model"]["name"] == MINILM.repo_id


def start_pod_runner(cluster: ControlPlane, run_dir: Path) -> PodRunner:
    say("Installing or finding the vLLM runtime (once: 5-12 min)")
    rt = runtime.find(install_missing=True, log=print)
    PodRunner.stop_detached(run_dir / "pod-runner")
    say(f"Starting the pod runner: node {DEFAULT_NODE} runs its pods as real local processes")
    return PodRunner(cluster, rt, detached=True).start()


def minilm_pod(runner: PodRunner) -> str:
    [plan] = [p for p in runner.pods("search") if p["name"].startswith("minilm-")]
    return str(plan["name"])


def real_answer(url: str) -> dict[str, Any]:
    """search/minilm's /v1/embeddings answer at ``url`` (the demo prints it; the real_vllm tier checks it)."""
    body = {"model": "minilm", "input": ["Kubernetes runs vLLM."]}
    say(f"A real /v1/embeddings answer from search/minilm (local {url}):")
    print(f"curl -s {url}/v1/embeddings -H 'Content-Type: application/json' -d '{json.dumps(body)}'")
    with urllib.request.urlopen(urllib.request.Request(
        f"{url}/v1/embeddings", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    ), timeout=120) as r:  # fmt: skip
        return dict(json.load(r))


def show_real_answer(url: str) -> None:
    answer = real_answer(url)
    vec = answer["data"][0]["embedding"]
    answer["data"][0]["embedding"] = [round(x, 5) for x in vec[:6]] + [f"... {len(vec) - 6} more"]
    print(json.dumps(answer))


def down(run_dir: Path) -> None:
    """Stop what ``up`` started in ``run_dir`` (the pod runner and the operator; not the control plane)."""
    if PodRunner.stop_detached(run_dir / "pod-runner"):
        say("Stopped the pod runner and its vLLM processes")
    stop_operator(run_dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.demo")
    p.add_argument("command", choices=["up", "down"])
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR)
    p.add_argument("--real-vllm", action="store_true", help="serve search/minilm with real vLLM (pod runner)")
    args = p.parse_args(argv)
    if args.command == "down":
        down(args.run_dir)
        return 0
    return up(ControlPlane.attach(args.run_dir), args.run_dir.resolve(), real_vllm=args.real_vllm)


if __name__ == "__main__":
    sys.exit(main())
