"""The local control plane's command line, used by ``e2e/cluster.mk`` (``make cluster-up`` and friends):

    python -m e2e.kube.cli up [--run-dir .cluster]   # detached; idempotent; builds binaries if missing
    python -m e2e.kube.cli down [--run-dir .cluster]
    python -m e2e.kube.cli status|logs [--run-dir .cluster]

``up`` starts a detached supervisor (``_serve``) that owns a ``ControlPlane`` and stops it on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from e2e.harness.poll import Timeout, wait_for
from e2e.harness.processes import ComponentDied, _alive, _kill_group, log_tails, reap_strays
from e2e.harness.state import read_state, read_supervisor, supervisor_alive, write_supervisor
from e2e.kube import build
from e2e.kube.controlplane import DEFAULT_RUN_DIR, REPO_ROOT, ControlPlane


def _cmd_up(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    state = read_state(run_dir)
    if state and state.get("status") == "ready" and supervisor_alive(read_supervisor(run_dir)):
        print(f"Control plane already up: {state['server']} (KUBECONFIG={state['kubeconfig']})")
        return 0
    _cmd_down(args, quiet=True)
    build.find(build=True)  # first use builds in the foreground, with progress
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "state.json").unlink(missing_ok=True)
    sup_log = run_dir / "supervisor.log"
    t0 = time.monotonic()
    with open(sup_log, "ab") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "e2e.kube.cli", "_serve", "--run-dir", str(run_dir)],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # detached: survives the make that started it
        )
    write_supervisor(run_dir, proc.pid)

    def ready() -> bool:
        if proc.poll() is not None:
            raise ComponentDied(f"supervisor exited with {proc.returncode}")
        st = read_state(run_dir)
        return bool(st and st.get("status") == "ready")

    try:
        wait_for(
            ready, timeout=args.timeout, what="control plane (supervisor)", alive=None, max_interval=0.25
        )
    except (Timeout, ComponentDied) as exc:
        print(f"cluster-up failed: {exc}\n--- {sup_log} ---", file=sys.stderr)
        print("\n".join(sup_log.read_text(errors="replace").splitlines()[-60:]), file=sys.stderr)
        _cmd_down(args, quiet=True)
        return 1
    state = read_state(run_dir) or {}
    print(f"Control plane up in {time.monotonic() - t0:.1f}s: {state.get('server')}")
    print(f"export KUBECONFIG={state.get('kubeconfig')}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    """The detached supervisor: own the control plane until SIGTERM/SIGINT/SIGHUP."""
    run_dir: Path = args.run_dir
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        print(f"Received signal {signum}; stopping", flush=True)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    cp = ControlPlane(run_dir=run_dir, keep_run_dir=True, log=lambda m: print(m, flush=True))
    try:
        cp.start()
    except BaseException as exc:
        print(f"Start failed: {exc}", flush=True)
        return 1
    reported: set[str] = set()
    try:
        while not stop.wait(2.0):
            for c in cp.components.values():
                if c.proc.poll() is not None and c.name not in reported:
                    reported.add(c.name)
                    print(f"{c.name} exited with {c.proc.returncode}; see {c.log}", flush=True)
                    cp._write_state("degraded")
    finally:
        cp.stop()
        (run_dir / "kubeconfig").unlink(missing_ok=True)
        print("Stopped", flush=True)
    return 0


def _cmd_down(args: argparse.Namespace, quiet: bool = False) -> int:
    run_dir: Path = args.run_dir
    sup = read_supervisor(run_dir)
    state = read_state(run_dir)
    if supervisor_alive(sup):
        assert sup is not None
        pid = sup["supervisor"]["pid"]
        os.kill(pid, signal.SIGTERM)
        try:
            wait_for(
                lambda: not _alive(pid, sup["supervisor"].get("start_time")),
                timeout=40,
                what="supervisor exit",
            )
        except Timeout:
            _kill_group(pid, sup["supervisor"].get("start_time"), signal.SIGKILL)
        if not quiet:
            print("Control plane stopped")
    elif not quiet:
        print("Control plane not running")
    # whatever a crashed supervisor left behind
    reap_strays(print)
    if state and state.get("data_dir"):
        shutil.rmtree(state["data_dir"], ignore_errors=True)
    for f in ("supervisor.json", "state.json", "kubeconfig"):
        (run_dir / f).unlink(missing_ok=True)
    for d in ("pki", "kubectl-cache"):  # logs/ and supervisor.log stay for a post-mortem
        shutil.rmtree(run_dir / d, ignore_errors=True)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    state = read_state(args.run_dir)
    if not state or not supervisor_alive(read_supervisor(args.run_dir)):
        print("Control plane not running")
        return 1
    print(json.dumps(state, indent=2))
    return 0


def _cmd_logs(args: argparse.Namespace) -> int:
    print(log_tails(args.run_dir / "logs", args.lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.kube.cli")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("up", "down", "status", "logs", "_serve"):
        p = sub.add_parser(name)
        p.add_argument("--run-dir", type=lambda s: Path(s).resolve(), default=DEFAULT_RUN_DIR)
        if name == "up":
            p.add_argument("--timeout", type=float, default=180)
        if name == "logs":
            p.add_argument("--lines", type=int, default=40)
    args = ap.parse_args(argv)
    return {"up": _cmd_up, "down": _cmd_down, "status": _cmd_status, "logs": _cmd_logs, "_serve": _cmd_serve}[
        args.cmd
    ](args)


if __name__ == "__main__":
    sys.exit(main())
