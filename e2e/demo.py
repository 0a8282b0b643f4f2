"""`make demo`: the local control plane, the CRDs, the operator, the examples — until they are Ready.

Run after `make cluster-up` (the Makefile does both). The operator keeps running in the background;
`make demo-down` stops it and the control plane.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import yaml

from e2e.controlplane import DEFAULT_RUN_DIR, REPO_ROOT, ControlPlane, wait_for
from e2e.crds import install_crds
from e2e.operator_process import OperatorProcess

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
    try:
        os.killpg(pid, signal.SIGTERM)
        say(f"Stopped the operator (pid {pid})")
    except ProcessLookupError:
        pass
    pidfile.unlink(missing_ok=True)


def up(run_dir: Path) -> int:
    started = time.monotonic()
    cluster = ControlPlane.attach(run_dir)
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

    wait_for(all_ready, timeout=300, what="every example Ready", alive=lambda: op.healthy() or True)
    say(f"All {len(services)} services Ready in {time.monotonic() - started:.1f}s")
    print(cluster.kubectl("get", "pooling", "-A").stdout)
    args = cluster.kubectl(
        "get", "pls", "minilm", "-n", "search", "-o", "jsonpath={.status.effective.args}"
    ).stdout
    say("The vLLM command line of search/minilm:")
    print(shlex.join(yaml.safe_load(args)))
    print(f"\nKUBECONFIG={cluster.kubeconfig} {cluster.kubectl_path} get pooling -A   # look around")
    print(f"Operator log: {op.log}")
    print("Stop everything with: make demo-down")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.demo")
    p.add_argument("command", choices=["up", "down"])
    p.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR)
    args = p.parse_args(argv)
    if args.command == "down":
        stop_operator(args.run_dir)
        return 0
    return up(args.run_dir)


if __name__ == "__main__":
    sys.exit(main())
