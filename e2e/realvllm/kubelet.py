"""A pod runner for tests: the kubelet of one node that kwok does not manage, running real local processes.

Test-only (it lives in ``e2e/``). kwok marks its own pods Ready by itself, so probes there prove nothing; on
this node a pod is Ready only when the real process answers its readiness probe. The runner:

- registers its Node (labelled and tainted ``vllm-pooling.io/e2e-runner=real-vllm`` so only pods that ask for
  it land here; capacity is this machine's CPUs and memory) and keeps its Lease in ``kube-node-lease`` and its
  Ready condition fresh, as a kubelet's heartbeat does;
- watches the Pods bound to the node; for each, plans the container as a local process (``podspec.plan``:
  volumes → folders, ports → free local ports, and nothing else in the argv changed), starts it in its own
  process group, and runs the declared startup, readiness and liveness probes against it;
- writes the Pod's status as a kubelet would: Running once started, ``started`` after the startup probe,
  Ready from the readiness probe, restarts (with back-off, counted) when liveness fails or the process exits
  under ``restartPolicy: Always``, and the final delete once a deleted pod's process has stopped;
- records each pod's plan (the argv, what was rewritten, the local ports, the log file) in
  ``<state dir>/pods/<namespace>_<name>.json`` for tests and the demo: there is no kubelet API here, so
  ``kubectl logs`` and ``port-forward`` do not work against this node.

Not done: securityContext (processes run as the runner's user), resource limits, images (the runtime's
``vllm`` is on PATH), init containers, and volumes other than emptyDir and persistentVolumeClaim.

    python -m e2e.realvllm.kubelet --kubeconfig K --state-dir D --claim models=/path [--hub-model REPO=DIR@REV]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from e2e.harness.processes import _child_setup, _free_ports, stop_process
from e2e.realvllm import podspec

log = logging.getLogger("pod-runner")

NODE_LABEL = "vllm-pooling.io/e2e-runner"
NODE_LABEL_VALUE = "real-vllm"
DEFAULT_NODE = "real-vllm-0"
LEASE_SECONDS = 40
HEARTBEAT_SECONDS = 10
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def host_ip() -> str:
    """This machine's primary IPv4 address (the pod and host IP); loopback only when there is no other."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))
        return s.getsockname()[0]
    return "127.0.0.1"


def node_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                NODE_LABEL: NODE_LABEL_VALUE,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "pod-runner",
            },
        },
        "spec": {"taints": [{"key": NODE_LABEL, "value": NODE_LABEL_VALUE, "effect": "NoSchedule"}]},
    }


def node_capacity() -> dict[str, str]:
    mem_kib = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
    return {"cpu": str(os.cpu_count() or 1), "memory": f"{mem_kib}Ki", "pods": "16", "ephemeral-storage": "100Gi"}


class PodWorker:
    """One pod: its process, its probes and the status the runner writes for it."""

    def __init__(self, runner: Runner, pod: dict[str, Any]):
        self.runner = runner
        self.pod = pod
        meta = pod["metadata"]
        self.ns, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.dir = runner.state_dir / "pods" / f"{self.ns}_{self.name}_{self.uid[:8]}"
        self.state_file = runner.state_dir / "pods" / f"{self.ns}_{self.name}.json"
        self.stopping = threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.started = False
        self.ready = False
        self.last_state: dict[str, Any] | None = None
        self.started_at = _now()
        self.thread = threading.Thread(target=self._run, name=f"pod-{self.name}", daemon=True)
        self.restart_policy = pod["spec"].get("restartPolicy", "Always")
        self.container = pod["spec"]["containers"][0]["name"]
        self.plan: podspec.LocalContainer | None = None
        self.exit_code: int | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def stop(self, grace: float) -> None:
        self.stopping.set()
        self._kill(grace)

    def _kill(self, grace: float) -> None:
        stop_process(self.proc, grace)

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:
            log.exception("pod %s/%s: runner thread failed", self.ns, self.name)

    def _loop(self) -> None:
        backoff = BACKOFF_START
        while not self.stopping.is_set():
            try:
                self.plan = self.runner.plan(self.pod, self.container, self.dir)
            except podspec.PlanError as e:
                self._status(waiting=("CreateContainerConfigError", str(e)))
                if self.stopping.wait(5):
                    return
                continue
            self._layout(self.plan)
            self._write_state()
            reason = self._run_once(self.plan)
            if self.stopping.is_set():
                return
            if self.restart_policy == "Never" or (self.restart_policy == "OnFailure" and self.exit_code == 0):
                self._status(phase="Succeeded" if self.exit_code == 0 else "Failed")
                return
            self.restarts += 1
            log.info("pod %s/%s: %s; restarting in %.0f s (restart %d)", self.ns, self.name, reason, backoff, self.restarts)
            self._status(waiting=("CrashLoopBackOff", f"back-off {backoff:.0f}s restarting failed container: {reason}"))
            if self.stopping.wait(backoff):
                return
            backoff = min(backoff * 2, BACKOFF_MAX)

    def _layout(self, plan: podspec.LocalContainer) -> None:
        for folder in plan.mounts.values():
            if str(folder).startswith(str(self.dir)):
                folder.mkdir(parents=True, exist_ok=True)
        for v in self.pod["spec"].get("volumes") or []:
            if "projected" in v:
                self.runner.project(self.pod, v, self.dir / "volumes" / v["name"])
        for hub, repo_id, folder, revision in plan.hub_layout:
            for path, target in podspec.hub_entries(hub, repo_id, folder, revision):
                path.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(target, Path):
                    if not path.exists():
                        path.symlink_to(target)
                else:
                    path.write_text(target)

    def _write_state(self) -> None:
        p = self.plan
        assert p is not None
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "namespace": self.ns,
                    "name": self.name,
                    "uid": self.uid,
                    "argv": p.argv,
                    "rewrites": p.rewrites,
                    "envAdded": p.env_added,
                    "ports": {k: {"container": c, "local": loc} for k, (c, loc) in p.ports.items()},
                    "hubLayout": [[str(h), r, str(f), rev] for h, r, f, rev in p.hub_layout],
                    "mounts": {k: str(v) for k, v in p.mounts.items()},
                    "log": str(self.dir / "container.log"),
                    "pid": self.proc.pid if self.proc else None,
                    "restarts": self.restarts,
                },
                indent=2,
            )
        )
        os.replace(tmp, self.state_file)

    def _run_once(self, plan: podspec.LocalContainer) -> str:
        """Start the process, probe it until it exits or must be restarted; return why it ended."""
        self.dir.mkdir(parents=True, exist_ok=True)
        logf = open(self.dir / "container.log", "ab")
        logf.write(f"\n==> {_now()} {' '.join(plan.argv)}\n".encode())
        logf.flush()
        self.proc = subprocess.Popen(
            plan.argv, env=plan.env, cwd=self.dir, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_child_setup,
        )
        logf.close()
        self.started_at = _now()
        self.started = self.ready = False
        self._write_state()
        self._status()
        probes = plan.probes
        began = time.monotonic()
        fails = {k: 0 for k in probes}
        oks = {k: 0 for k in probes}
        next_at = {k: began + p.initial_delay for k, p in probes.items()}
        if "startup" not in probes:
            self.started = True
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.exit_code = rc
                self._terminated(rc, "Error" if rc else "Completed")
                return f"exited with code {rc}"
            if self.stopping.is_set():
                return "stopped"
            now = time.monotonic()
            active = ["startup"] if not self.started else [k for k in ("readiness", "liveness") if k in probes]
            for kind in active:
                if now < next_at[kind]:
                    continue
                p = probes[kind]
                next_at[kind] = now + p.period
                if _http_ok(p):
                    fails[kind], oks[kind] = 0, oks[kind] + 1
                else:
                    fails[kind], oks[kind] = fails[kind] + 1, 0
                if kind == "startup":
                    if oks[kind] >= p.success_threshold:
                        self.started = True
                        log.info("pod %s/%s: startup probe passed after %.0f s", self.ns, self.name, now - began)
                        self._status()
                    elif fails[kind] >= p.failure_threshold:
                        return self._restart_for(kind)
                elif kind == "readiness":
                    ready = oks[kind] >= p.success_threshold if not self.ready else fails[kind] < p.failure_threshold
                    if ready != self.ready:
                        self.ready = ready
                        self._status()
                elif kind == "liveness" and fails[kind] >= p.failure_threshold:
                    return self._restart_for(kind)
            if self.started and "readiness" not in probes and not self.ready:
                self.ready = True
                self._status()
            self.stopping.wait(0.25)

    def _restart_for(self, kind: str) -> str:
        log.info("pod %s/%s: %s probe failed; killing the container", self.ns, self.name, kind)
        self._kill(float(self.pod["spec"].get("terminationGracePeriodSeconds", 30)))
        self.exit_code = self.proc.returncode if self.proc else None
        self._terminated(self.exit_code if self.exit_code is not None else 137, f"{kind.capitalize()}ProbeFailed")
        return f"{kind} probe failed"

    def _terminated(self, code: int, reason: str) -> None:
        self.started = self.ready = False
        self.last_state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": self.started_at, "finishedAt": _now()}}

    # -- status -----------------------------------------------------------------------------------
    def _status(self, *, waiting: tuple[str, str] | None = None, phase: str | None = None) -> None:
        ip = self.runner.ip
        if waiting:
            state: dict[str, Any] = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
            if self.proc is None:  # never started: a kubelet keeps the pod Pending
                phase = "Pending"
        elif phase in ("Succeeded", "Failed"):
            state = self.last_state or {"terminated": {"exitCode": self.exit_code or 0}}
        else:
            state = {"running": {"startedAt": self.started_at}}
        cs = {
            "name": self.container,
            "image": self.pod["spec"]["containers"][0].get("image", ""),
            "imageID": "",
            "containerID": f"pod-runner://{self.proc.pid}" if self.proc else "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restarts,
            "state": state,
        }
        if self.last_state:
            cs["lastState"] = self.last_state
        ready = "True" if self.ready else "False"
        conditions = [
            {"type": "PodReadyToStartContainers", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "ContainersReady", "status": ready},
            {"type": "Ready", "status": ready},
            {"type": "PodScheduled", "status": "True"},
        ]
        for c in conditions:
            c["lastTransitionTime"] = _now()
        status = {
            "phase": phase or "Running",
            "hostIP": ip,
            "hostIPs": [{"ip": ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": self.pod.get("status", {}).get("startTime") or _now(),
            "conditions": conditions,
            "containerStatuses": [cs],
        }
        key = json.dumps({k: v for k, v in status.items() if k != "conditions"}, sort_keys=True) + ready
        if key == getattr(self, "_last_key", None):
            return
        self._last_key = key
        try:
            self.runner.core.patch_namespaced_pod_status(self.name, self.ns, {"status": status})
        except ApiException as e:
            if e.status != 404:
                log.warning("pod %s/%s: status update failed: %s", self.ns, self.name, e.reason)


def _http_ok(p: podspec.Probe) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{p.port}{p.path}", timeout=p.timeout) as r:
            return 200 <= r.status < 400
    except Exception:
        return False


class Runner:
    def __init__(
        self,
        api: client.ApiClient,
        node: str,
        state_dir: Path,
        claims: dict[str, Path],
        hub_models: dict[str, tuple[Path, str]],
        base_env: dict[str, str],
    ):
        self.api = api
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.node = node
        self.state_dir = state_dir
        self.claims = claims
        self.hub_models = hub_models
        self.base_env = base_env
        self.ip = host_ip()
        self.workers: dict[str, PodWorker] = {}
        self.stop = threading.Event()

    def plan(self, pod: dict[str, Any], container: str, pod_dir: Path) -> podspec.LocalContainer:
        return podspec.plan(
            pod, container, pod_dir=pod_dir, claims=self.claims, hub_models=self.hub_models,
            base_env=self.base_env, lookup=lambda kind, name, key: self._lookup(pod["metadata"]["namespace"], kind, name, key),
            free_port=lambda: _free_ports(1)[0], pod_ip=self.ip,
        )  # fmt: skip

    def project(self, pod: dict[str, Any], volume: dict[str, Any], folder: Path) -> None:
        """Fill a projected volume as a kubelet does: a ServiceAccount token (TokenRequest, bound to the pod),
        ConfigMap keys, and the downward API's namespace."""
        ns, sa = pod["metadata"]["namespace"], pod["spec"].get("serviceAccountName") or "default"
        folder.mkdir(parents=True, exist_ok=True)
        for src in volume["projected"].get("sources") or []:
            if "serviceAccountToken" in src:
                t = src["serviceAccountToken"]
                req = {"spec": {"expirationSeconds": t.get("expirationSeconds", 3607), "audiences": [t["audience"]] if t.get("audience") else None,
                                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}}}  # fmt: skip
                token = self.core.create_namespaced_service_account_token(sa, ns, req)
                (folder / t["path"]).write_text(token.status.token)
            elif "configMap" in src:
                cm = src["configMap"]
                data = self.core.read_namespaced_config_map(cm["name"], ns).data or {}
                for item in cm.get("items") or [{"key": k, "path": k} for k in data]:
                    (folder / item["path"]).write_text(data.get(item["key"], ""))
            elif "downwardAPI" in src:
                for item in src["downwardAPI"].get("items") or []:
                    field = (item.get("fieldRef") or {}).get("fieldPath")
                    value = {"metadata.namespace": ns, "metadata.name": pod["metadata"]["name"]}.get(field, "")
                    (folder / item["path"]).write_text(value)

    def _lookup(self, ns: str, kind: str, name: str, key: str) -> str | None:
        try:
            if kind == "secret":
                data = self.core.read_namespaced_secret(name, ns).data or {}
                return base64.b64decode(data[key]).decode() if key in data else None
            data = self.core.read_namespaced_config_map(name, ns).data or {}
            return data.get(key)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    # -- node -------------------------------------------------------------------------------------
    def register(self) -> None:
        body = node_manifest(self.node)
        try:
            self.core.create_node(body)
        except ApiException as e:
            if e.status != 409:
                raise
            self.core.patch_node(self.node, {"metadata": {"labels": body["metadata"]["labels"]}, "spec": body["spec"]})
        self._node_status()
        log.info("node %s registered (ip %s)", self.node, self.ip)

    def _node_status(self) -> None:
        cap = node_capacity()
        now = _now()
        self.core.patch_node_status(
            self.node,
            {
                "status": {
                    "capacity": cap,
                    "allocatable": cap,
                    "addresses": [{"type": "InternalIP", "address": self.ip}, {"type": "Hostname", "address": self.node}],
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "pod runner is posting ready status",
                         "lastHeartbeatTime": now, "lastTransitionTime": now},
                        {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                         "lastHeartbeatTime": now, "lastTransitionTime": now},
                        {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                         "lastHeartbeatTime": now, "lastTransitionTime": now},
                        {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                         "lastHeartbeatTime": now, "lastTransitionTime": now},
                    ],
                    "nodeInfo": {"kubeletVersion": "pod-runner", "operatingSystem": "linux", "architecture": "amd64",
                                 "containerRuntimeVersion": "pod-runner://local-process", "kernelVersion": os.uname().release,
                                 "osImage": "", "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
                }
            },
        )  # fmt: skip

    def _renew_lease(self) -> None:
        renew = _micro_now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {"holderIdentity": self.node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": renew}
        try:
            self.coord.patch_namespaced_lease(self.node, "kube-node-lease", {"spec": spec})
        except ApiException as e:
            if e.status != 404:
                raise
            self.coord.create_namespaced_lease(
                "kube-node-lease", {"metadata": {"name": self.node, "namespace": "kube-node-lease"}, "spec": spec}
            )

    def heartbeat(self) -> None:
        while not self.stop.is_set():
            for beat in (self._node_status, self._renew_lease):
                try:
                    beat()
                except ApiException as e:  # keep beating through a restarting API server
                    log.warning("heartbeat %s failed: %s %s", beat.__name__, e.status, e.reason)
                except Exception as e:
                    log.warning("heartbeat %s failed: %s", beat.__name__, e)
            self.stop.wait(HEARTBEAT_SECONDS)

    # -- pods -------------------------------------------------------------------------------------
    def handle(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        w = self.workers.get(uid)
        if pod["metadata"].get("deletionTimestamp"):
            if w is not None and not w.stopping.is_set():
                grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 30)
                threading.Thread(target=self._delete, args=(w, grace), daemon=True).start()
            elif w is None:
                self._final_delete(pod["metadata"]["namespace"], pod["metadata"]["name"], uid)
            return
        if w is None and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            w = PodWorker(self, pod)
            self.workers[uid] = w
            log.info("pod %s/%s bound here: starting", w.ns, w.name)
            w.start()

    def _delete(self, w: PodWorker, grace: float) -> None:
        pre = (w.pod["spec"]["containers"][0].get("lifecycle") or {}).get("preStop") or {}
        started = time.monotonic()
        if "sleep" in pre and w.proc and w.proc.poll() is None:
            time.sleep(min(float(pre["sleep"]["seconds"]), grace))  # preStop: the container still serves
        w.stop(max(1.0, grace - (time.monotonic() - started)))
        self._final_delete(w.ns, w.name, w.uid)
        self.workers.pop(w.uid, None)

    def _final_delete(self, ns: str, name: str, uid: str) -> None:
        with contextlib.suppress(ApiException):
            self.core.delete_namespaced_pod(
                name, ns, body=client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid))
            )
        log.info("pod %s/%s deleted", ns, name)

    def watch_pods(self) -> None:
        selector = f"spec.nodeName={self.node}"
        while not self.stop.is_set():
            try:
                listed = self.api.sanitize_for_serialization(self.core.list_pod_for_all_namespaces(field_selector=selector))
                for pod in listed["items"]:
                    self.handle(pod)
                w = watch.Watch()
                for ev in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=listed["metadata"]["resourceVersion"],
                    timeout_seconds=60,
                    _preload_content=True,
                ):
                    if self.stop.is_set():
                        w.stop()
                        break
                    pod = self.api.sanitize_for_serialization(ev["object"])
                    if ev["type"] == "DELETED":
                        wk = self.workers.pop(pod["metadata"]["uid"], None)
                        if wk:
                            wk.stop(1)
                    elif ev["type"] in ("ADDED", "MODIFIED"):
                        self.handle(pod)
            except Exception as e:
                log.warning("pod watch restarted: %s", e)
                self.stop.wait(1)

    def shutdown(self) -> None:
        self.stop.set()
        for w in list(self.workers.values()):
            w.stop(10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.realvllm.kubelet", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--node-name", default=DEFAULT_NODE)
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--claim", action="append", default=[], metavar="NAME=DIR", help="a PVC's local folder")
    p.add_argument("--hub-model", action="append", default=[], metavar="REPO=DIR@REV",
                   help="a prepared model served for a Hugging Face name (laid out as a hub cache at REV)")  # fmt: skip
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="base env for every process")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    claims = {k: Path(v) for k, v in (c.split("=", 1) for c in a.claim)}
    hub = {}
    for h in a.hub_model:
        repo, rest = h.split("=", 1)
        folder, rev = rest.rsplit("@", 1)
        hub[repo] = (Path(folder), rev)
    base_env = dict(e.split("=", 1) for e in a.env)
    api = config.new_client_from_config(config_file=a.kubeconfig)
    runner = Runner(api, a.node_name, a.state_dir, claims, hub, base_env)
    runner.register()
    signal.signal(signal.SIGTERM, lambda *_: runner.stop.set())
    threading.Thread(target=runner.heartbeat, daemon=True, name="heartbeat").start()
    threading.Thread(target=runner.watch_pods, daemon=True, name="pods").start()
    a.state_dir.mkdir(parents=True, exist_ok=True)
    (a.state_dir / "runner.json").write_text(json.dumps({"node": a.node_name, "pid": os.getpid(), "ip": runner.ip}))
    try:
        while not runner.stop.wait(1):
            pass
    except KeyboardInterrupt:
        pass
    runner.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
