"""A pod on the pod runner's node: its containers as local processes, run in the kubelet's order
(``lifecycle.step``), probed, restarted with back-off, and the Pod status a kubelet would write (test-only;
``kubelet.Runner`` watches the pods and owns one ``PodWorker`` per pod)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.harness.processes import _child_setup, stop_process
from e2e.podrunner import lifecycle, podspec


class Node(Protocol):
    """What a pod needs of the node it runs on (kubelet.Runner)."""

    state_dir: Path
    ip: str
    core: client.CoreV1Api
    mount_namespaces: bool

    def plan(self, pod: dict[str, Any], pod_dir: Path) -> podspec.PodPlan: ...

    def project(self, pod: dict[str, Any], volume: dict[str, Any], folder: Path) -> None: ...

log = logging.getLogger("pod-runner")

BACKOFF_START, BACKOFF_MAX = 10.0, 300.0


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ContainerRun:
    """One container of a pod: its process, its probes, and the status a kubelet reports for it."""

    def __init__(self, worker: PodWorker, plan: podspec.LocalContainer):
        self.worker = worker
        self.plan = plan
        self.name, self.kind = plan.name, plan.kind
        self.proc: subprocess.Popen[bytes] | None = None
        self.state: lifecycle.State = "new"
        self.exit_code: int | None = None
        self.restarts = 0
        self.ready = False
        self.last_state: dict[str, Any] | None = None
        self.started_at = ""
        self.waiting: tuple[str, str] | None = ("ContainerCreating", "")
        self.backoff = BACKOFF_START
        self.restart_at = 0.0
        self.log_path = worker.dir / f"{self.name}.log"
        self._fails: dict[str, int] = {}
        self._oks: dict[str, int] = {}
        self._next: dict[str, float] = {}

    def seen(self) -> lifecycle.Seen:
        return lifecycle.Seen(self.name, self.kind, self.state, self.exit_code)  # type: ignore[arg-type]

    def start(self) -> None:
        p = self.plan
        argv = podspec.in_mount_namespace(p.argv, p.fixed_mounts) if self.worker.runner.mount_namespaces else p.argv
        self.worker.dir.mkdir(parents=True, exist_ok=True)
        if p.termination_log is not None:
            p.termination_log.unlink(missing_ok=True)  # each start writes its own, as a kubelet gives it a fresh file
        with open(self.log_path, "ab") as logf:
            logf.write(f"\n==> {now_iso()} {' '.join(p.argv)}\n".encode())
            logf.flush()
            self.proc = subprocess.Popen(
                argv, env=p.env, cwd=self.worker.dir, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_child_setup,
            )  # fmt: skip
        self.started_at = now_iso()
        self.waiting = None
        self.exit_code = None
        self.ready = False
        began = time.monotonic()
        self._fails = {k: 0 for k in p.probes}
        self._oks = {k: 0 for k in p.probes}
        self._next = {k: began + pr.initial_delay for k, pr in p.probes.items()}
        self.state = "running" if "startup" in p.probes else "started"
        if self.state == "started" and "readiness" not in p.probes:
            self.ready = self.kind != "init"
        log.info("pod %s/%s: container %s started (pid %d)", self.worker.ns, self.worker.name, self.name, self.proc.pid)

    def schedule_restart(self, now: float) -> None:
        self.restarts += 1
        self.restart_at = now + self.backoff
        reason = (self.last_state or {}).get("terminated", {}).get("reason", "exited")
        self.waiting = ("CrashLoopBackOff", f"back-off {self.backoff:.0f}s restarting failed container={self.name}: {reason}")
        log.info("pod %s/%s: %s %s; restarting in %.0f s (restart %d)", self.worker.ns, self.worker.name, self.name,
                 reason, self.backoff, self.restarts)  # fmt: skip
        self.backoff = min(self.backoff * 2, BACKOFF_MAX)
        self.state = "backoff"

    def stop(self, grace: float) -> None:
        if self.proc is not None and self.proc.poll() is None:
            rc = stop_process(self.proc, grace)
            self._terminated(rc if rc is not None else 137, "Completed" if rc == 0 else "Error")

    def _terminated(self, code: int, reason: str) -> None:
        code = 128 - code if code < 0 else code  # killed by signal N: the runtime reports 128 + N, as a shell does
        self.state, self.exit_code, self.ready = "exited", code, False
        terminated: dict[str, Any] = {"exitCode": code, "reason": reason, "startedAt": self.started_at, "finishedAt": now_iso()}
        message = self._termination_message()
        if message:
            terminated["message"] = message
        self.last_state = {"terminated": terminated}

    def _termination_message(self) -> str:
        """What the container wrote to its terminationMessagePath (a kubelet keeps the first 4096 bytes)."""
        path = self.plan.termination_log
        try:
            return path.read_bytes()[: podspec.TERMINATION_MESSAGE_LIMIT].decode(errors="replace") if path else ""
        except OSError:
            return ""

    def tick(self, now: float) -> None:
        """Poll the process and run the probes that are due (startup first, then readiness and liveness)."""
        if self.state == "backoff" and now >= self.restart_at:
            self.start()
            return
        if self.proc is None or self.state not in ("running", "started"):
            return
        rc = self.proc.poll()
        if rc is not None:
            self._terminated(rc, "Completed" if rc == 0 else "Error")
            log.info("pod %s/%s: container %s exited with code %d", self.worker.ns, self.worker.name, self.name, rc)
            return
        probes = self.plan.probes
        active = ["startup"] if self.state == "running" else [k for k in ("readiness", "liveness") if k in probes]
        for kind in active:
            if now < self._next[kind]:
                continue
            p = probes[kind]
            self._next[kind] = now + p.period
            if _http_ok(p):
                self._fails[kind], self._oks[kind] = 0, self._oks[kind] + 1
            else:
                self._fails[kind], self._oks[kind] = self._fails[kind] + 1, 0
            if kind == "startup":
                if self._oks[kind] >= p.success_threshold:
                    self.state = "started"
                    self.ready = "readiness" not in probes
                    log.info("pod %s/%s: %s startup probe passed", self.worker.ns, self.worker.name, self.name)
                elif self._fails[kind] >= p.failure_threshold:
                    self._probe_failed(kind)
            elif kind == "readiness":
                self.ready = self._oks[kind] >= p.success_threshold if not self.ready else self._fails[kind] < p.failure_threshold
            elif self._fails[kind] >= p.failure_threshold:
                self._probe_failed(kind)

    def _probe_failed(self, kind: str) -> None:
        log.info("pod %s/%s: %s %s probe failed; killing the container", self.worker.ns, self.worker.name, self.name, kind)
        rc = stop_process(self.proc, float(self.worker.pod["spec"].get("terminationGracePeriodSeconds", 30)))
        self._terminated(rc if rc is not None else 137, f"{kind.capitalize()}ProbeFailed")

    def status(self) -> dict[str, Any]:
        if self.waiting is not None:
            state: dict[str, Any] = {"waiting": {"reason": self.waiting[0], "message": self.waiting[1]}}
        elif self.state == "exited":
            state = self.last_state or {"terminated": {"exitCode": self.exit_code or 0}}
        else:
            state = {"running": {"startedAt": self.started_at}}
        cs: dict[str, Any] = {
            "name": self.name,
            "image": self.plan.image,
            "imageID": "",
            "containerID": f"pod-runner://{self.proc.pid}" if self.proc else "",
            "ready": self.ready,
            "started": self.state == "started",
            "restartCount": self.restarts,
            "state": state,
        }
        if self.last_state and "terminated" not in state:
            cs["lastState"] = self.last_state
        return cs

    def record(self) -> dict[str, Any]:
        p = self.plan
        return {
            "kind": p.kind,
            "argv": p.argv,
            "rewrites": p.rewrites,
            "envAdded": p.env_added,
            "fixedMounts": [[str(f), path] for f, path in p.fixed_mounts],
            "terminationLog": str(p.termination_log) if p.termination_log else None,
            "hubLayout": [[str(h), r, str(f), rev] for h, r, f, rev in p.hub_layout],
            "mounts": {k: str(v) for k, v in p.mounts.items()},
            "log": str(self.log_path),
            "pid": self.proc.pid if self.proc else None,
            "restarts": self.restarts,
        }


class PodWorker:
    """One pod: its containers in the kubelet's order (lifecycle.step) and the status the runner writes."""

    def __init__(self, runner: Node, pod: dict[str, Any]):
        self.runner = runner
        self.pod = pod
        meta = pod["metadata"]
        self.ns, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.dir = runner.state_dir / "pods" / f"{self.ns}_{self.name}_{self.uid[:8]}"
        self.state_file = runner.state_dir / "pods" / f"{self.ns}_{self.name}.json"
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.restart_policy = pod["spec"].get("restartPolicy", "Always")
        self.plan: podspec.PodPlan | None = None
        self.containers: list[ContainerRun] = []
        self.initialized = False
        self.watched_conditions: list[dict[str, Any]] = list((pod.get("status") or {}).get("conditions") or [])
        self.thread = threading.Thread(target=self._run, name=f"pod-{self.name}", daemon=True)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def stop(self, grace: float) -> None:
        """As a deleted pod's containers stop: the main ones first, then the sidecars in reverse order."""
        self.stopping.set()
        with self.lock:
            for c in reversed(self.containers):
                c.stop(grace)

    def running(self) -> bool:
        return any(c.proc is not None and c.proc.poll() is None for c in self.containers)

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:
            log.exception("pod %s/%s: runner thread failed", self.ns, self.name)

    def _loop(self) -> None:
        while self.plan is None:
            try:
                plan = self.runner.plan(self.pod, self.dir)
                self._layout(plan)  # a ConfigMap volume's ConfigMap missing: waits, as a kubelet does
                self.plan = plan
            except podspec.PlanError as e:
                self._status(waiting=("CreateContainerConfigError", str(e)))
                if self.stopping.wait(5):
                    return
        self.containers = [ContainerRun(self, c) for c in self.plan.containers]
        by_name = {c.name: c for c in self.containers}
        while not self.stopping.is_set():
            with self.lock:
                if self.stopping.is_set():
                    return
                now = time.monotonic()
                for c in self.containers:
                    c.tick(now)
                step = lifecycle.step(self.restart_policy, [c.seen() for c in self.containers], self.initialized)
                self.initialized = step.initialized
                grace = float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))
                for verb, name in step.actions:
                    c = by_name[name]
                    if verb == "start":
                        c.start()
                    elif verb == "restart":
                        c.schedule_restart(now)
                    else:
                        c.stop(grace)
                if step.actions or any(c.state == "started" and c.proc for c in self.containers):
                    self._write_state()
            self._status(step=step)
            if step.phase in ("Succeeded", "Failed"):
                log.info("pod %s/%s: %s", self.ns, self.name, step.phase)
                return
            self.stopping.wait(0.25)

    def _layout(self, plan: podspec.PodPlan) -> None:
        for c in plan.containers:
            for folder in c.mounts.values():
                if str(folder).startswith(str(self.dir)):
                    folder.mkdir(parents=True, exist_ok=True)
            for hub, repo_id, folder, revision in c.hub_layout:
                for path, target in podspec.hub_entries(hub, repo_id, folder, revision):
                    path.parent.mkdir(parents=True, exist_ok=True)
                    if isinstance(target, Path):
                        if not path.exists():
                            path.symlink_to(target)
                    else:
                        path.write_text(target)
        for v in self.pod["spec"].get("volumes") or []:
            if "projected" in v or "configMap" in v:
                self.runner.project(self.pod, v, self.dir / "volumes" / v["name"])

    def _write_state(self) -> None:
        """The runner record: each container's plan, and at the top level the pod's ports and the first main
        container's plan (the serving container of a Deployment's pod)."""
        assert self.plan is not None
        records = {c.name: c.record() for c in self.containers}
        main = next(c for c in self.containers if c.kind == "main")
        ports = {k: {"container": cp, "local": loc} for c in self.plan.containers for k, (cp, loc) in c.ports.items()}
        body = {"namespace": self.ns, "name": self.name, "uid": self.uid, **records[main.name], "ports": ports,
                "containers": records}  # fmt: skip
        key = json.dumps(body, sort_keys=True)
        if key == getattr(self, "_last_record", None):
            return
        self._last_record = key
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=2))
        os.replace(tmp, self.state_file)

    # -- status -----------------------------------------------------------------------------------
    def _status(self, *, step: lifecycle.Step | None = None, waiting: tuple[str, str] | None = None) -> None:
        ip = self.runner.ip
        spec = self.pod["spec"]
        if waiting is not None:  # the pod could not be planned: every container waits, the pod stays Pending
            wait = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
            init_cs = [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False, "started": False,
                        "restartCount": 0, "state": wait} for c in spec.get("initContainers") or []]  # fmt: skip
            main_cs = [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False, "started": False,
                        "restartCount": 0, "state": wait} for c in spec.get("containers") or []]  # fmt: skip
            phase, initialized, ready = "Pending", False, False
        else:
            assert step is not None
            init_cs = [c.status() for c in self.containers if c.kind != "main"]
            main_cs = [c.status() for c in self.containers if c.kind == "main"]
            phase, initialized = step.phase, step.initialized
            ready = phase == "Running" and all(c.ready for c in self.containers if c.kind != "init")
        # As a kubelet does with spec.readinessGates: Ready also needs each gate's condition True (another
        # controller sets it: the operator's space gate); ContainersReady does not
        gates = [g.get("conditionType") for g in spec.get("readinessGates") or []]
        watched = {c.get("type"): c.get("status") for c in self.watched_conditions or []}
        gated = all(watched.get(t) == "True" for t in gates)
        flag = lambda b: "True" if b else "False"  # noqa: E731
        conditions = [
            {"type": "PodReadyToStartContainers", "status": "True"},
            {"type": "Initialized", "status": flag(initialized)},
            {"type": "ContainersReady", "status": flag(ready)},
            {"type": "Ready", "status": flag(ready and gated)},
            {"type": "PodScheduled", "status": "True"},
        ]
        # As a kubelet does: a condition's lastTransitionTime moves only when its status does (status.startup's
        # phases are read from these); PodScheduled keeps the scheduler's own time.
        seen = getattr(self, "_transitions", None)
        if seen is None:
            seen = self._transitions = {
                c.get("type"): (c.get("status"), c.get("lastTransitionTime"))
                for c in (self.pod.get("status") or {}).get("conditions") or [] if c.get("lastTransitionTime")
            }
        for c in conditions:
            before = seen.get(c["type"])
            if before is None or before[0] != c["status"] or not before[1]:
                before = seen[c["type"]] = (c["status"], now_iso())
            c["lastTransitionTime"] = before[1]
        status: dict[str, Any] = {
            "phase": phase,
            "hostIP": ip,
            "hostIPs": [{"ip": ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": self.pod.get("status", {}).get("startTime") or now_iso(),
            "conditions": conditions,
            "containerStatuses": main_cs,
        }
        if init_cs:
            status["initContainerStatuses"] = init_cs
        key = json.dumps({k: v for k, v in status.items() if k != "conditions"}, sort_keys=True) + flag(ready) + flag(initialized) + flag(gated)
        if key == getattr(self, "_last_key", None):
            return
        self._last_key = key
        try:
            self.runner.core.patch_namespaced_pod_status(self.name, self.ns, {"status": status})
        except ApiException as e:
            if e.status != 404:
                log.warning("pod %s/%s: status update failed: %s", self.ns, self.name, e.reason)


def mount_namespaces() -> bool:
    """Whether this runner may bind a pod's fixed mounts (``/var/run/secrets/...``) in a private mount
    namespace (root, or CAP_SYS_ADMIN); without it an in-cluster client finds no token at the fixed path."""
    try:
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _http_ok(p: podspec.Probe) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{p.port}{p.path}", timeout=p.timeout) as r:
            return 200 <= r.status < 400
    except Exception:
        return False
