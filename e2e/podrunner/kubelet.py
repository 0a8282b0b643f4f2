"""A pod runner for tests: the kubelet of one node that kwok does not manage, running real local processes.

Test-only (it lives in ``e2e/``). kwok marks its own pods Ready by itself, so probes there prove nothing; on
this node a pod is Ready only when the real process answers its readiness probe. The runner:

- registers its Node (labelled and tainted ``vllm-pooling.io/e2e-runner=real-vllm`` so only pods that ask for
  it land here; capacity is this machine's CPUs and memory, plus ``RUNNER_GPUS`` ``nvidia.com/gpu`` the runner
  never uses, so a pod that requests a GPU schedules here and runs on the CPU) and keeps its Lease in
  ``kube-node-lease`` and its Ready condition fresh, as a kubelet's heartbeat does;
- watches the Pods bound to the node; for each, plans every container as a local process
  (``podspec.plan_pod``: volumes → folders, ports → one free local port per containerPort for the whole pod,
  a mapped image's command → a local program, and nothing else in the argv changed), and runs them in the
  kubelet's order (``lifecycle.step``): init containers one by one, a native sidecar (an init container with
  ``restartPolicy: Always``) until its startup probe passes, then the main containers; once those have
  exited for good the sidecars are stopped and the pod's phase follows ``restartPolicy``. Each process has
  its own process group and its declared startup, readiness and liveness probes;
- gives every container ``KUBERNETES_SERVICE_HOST``/``PORT`` (the API server on loopback) and, where it may
  (root), binds the ServiceAccount volume at ``/var/run/secrets/...`` in a private mount namespace, so an
  in-cluster client (the hidden-state driver) finds its token, CA and namespace where it looks;
- writes the Pod's status as a kubelet would: Pending while initializing, Running, ``started`` after the
  startup probe, Ready from the readiness probes of the main containers and sidecars and the conditions of the
  pod's readinessGates (set by another controller: the operator's space gate), restarts (with back-off,
  counted), Succeeded/Failed, and the final delete once a deleted pod's processes have stopped;
- records each pod's plan (each container's argv, what was rewritten, the local ports, the log file) in
  ``<state dir>/pods/<namespace>_<name>.json`` for tests and the demo: there is no kubelet API here, so
  ``kubectl logs`` and ``port-forward`` do not work against this node.

Traffic stays on loopback: probes and test clients use ``127.0.0.1`` and the local ports of the record. The
pod IP the runner reports (this machine's address, which EndpointSlices accept where loopback is refused) is
for the API's bookkeeping only and is never an address to send to.

Not done: securityContext (processes run as the runner's user), resource limits, images other than those
mapped (the runtime's ``vllm`` is on PATH), and volumes other than emptyDir, projected and
persistentVolumeClaim.

    python -m e2e.podrunner.kubelet --kubeconfig K --state-dir D --claim models=/path [--hub-model REPO=DIR@REV]
        [--image REPOSITORY=BINDIR]
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
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from e2e.harness.config import GPU_RESOURCE
from e2e.harness.processes import _free_ports
from e2e.podrunner import podspec
from e2e.podrunner.pods import PodWorker, mount_namespaces, now_iso

OMP_BIND = "VLLM_CPU_OMP_THREADS_BIND"
# a pod annotated so gets a core of its own (_core_for); opt-in: CI13's compile-cache test, whose second replica
# was bound to core 1 that way, never became Ready, and there was no time left to learn why
OWN_CORE_ANNOTATION = "vllm-pooling.io/e2e-own-core"

log = logging.getLogger("pod-runner")

NODE_LABEL = "vllm-pooling.io/e2e-runner"
NODE_LABEL_VALUE = "real-vllm"
DEFAULT_NODE = "real-vllm-0"
LEASE_SECONDS = 40
HEARTBEAT_SECONDS = 10


def _micronow_iso() -> dt.datetime:
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


# Advertised, never used: a pod's GPU request (a HiddenStateJob's sidecar with gpu.count 1, run by the vLLM
# stand-in image) only has to schedule here; the runner gives a process no device, and there is none.
RUNNER_GPUS = 4


def node_capacity() -> dict[str, str]:
    mem_kib = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
    return {"cpu": str(os.cpu_count() or 1), "memory": f"{mem_kib}Ki", "pods": "16", "ephemeral-storage": "100Gi",
            GPU_RESOURCE: str(RUNNER_GPUS)}  # fmt: skip


class Runner:
    def __init__(
        self,
        api: client.ApiClient,
        node: str,
        state_dir: Path,
        claims: dict[str, Path],
        hub_models: dict[str, tuple[Path, str]],
        base_env: dict[str, str],
        images: dict[str, Path] | None = None,
        program_env: dict[str, dict[str, str]] | None = None,
        program_override: dict[str, dict[str, str]] | None = None,
    ):
        self.api = api
        self.images = images or {}
        self.program_env = program_env or {}
        self.program_override = program_override or {}
        server = urllib.parse.urlsplit(api.configuration.host)
        # what a kubelet injects into every container: the API server, here on loopback
        self.cluster_env = {"KUBERNETES_SERVICE_HOST": server.hostname or "127.0.0.1",
                            "KUBERNETES_SERVICE_PORT": str(server.port or 443)}  # fmt: skip
        self.mount_namespaces = mount_namespaces()
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.node = node
        self.state_dir = state_dir
        self.claims = claims
        self.hub_models = hub_models
        self.base_env = base_env
        self.ip = host_ip()
        self.workers: dict[str, PodWorker] = {}
        self.cores: dict[str, int] = {}  # pod uid -> the core its vLLM binds to (_core_for)
        self._cores_lock = threading.Lock()
        self.stop = threading.Event()

    def plan(self, pod: dict[str, Any], pod_dir: Path) -> podspec.PodPlan:
        override = {k: dict(v) for k, v in self.program_override.items()}
        asks = (pod["metadata"].get("annotations") or {}).get(OWN_CORE_ANNOTATION) == "true"
        core = self._core_for(pod["metadata"]["uid"]) if asks else None
        if core is not None:
            override.setdefault("vllm", {})[OMP_BIND] = str(core)
        return podspec.plan_pod(
            pod, pod_dir=pod_dir, claims=self.claims, hub_models=self.hub_models,
            base_env=self.base_env, lookup=lambda kind, name, key: self._lookup(pod["metadata"]["namespace"], kind, name, key),
            free_port=lambda: _free_ports(1)[0], pod_ip=self.ip, images=self.images, cluster_env=self.cluster_env,
            program_env=self.program_env, program_override=override,
        )  # fmt: skip

    def _core_for(self, uid: str) -> int | None:
        """The core a pod's vLLM binds its compute threads to: the one the fewest running pods here use, as a
        kubelet's CPU manager gives pods cores of their own. vLLM's ``auto`` binding puts every server on core 0
        (it reserves the last core for its front end), so two servers at once would share one core and starve
        each other's start-up. None when the runner's own override already names a binding."""
        if OMP_BIND in self.program_override.get("vllm", {}):
            return None
        with self._cores_lock:
            live = [self.cores[u] for u in self.workers if u in self.cores and u != uid]
            cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
            core = min(cpus, key=lambda c: (live.count(c), c))
            self.cores[uid] = core
            return core

    def project(self, pod: dict[str, Any], volume: dict[str, Any], folder: Path) -> None:
        """Fill a projected volume as a kubelet does: a ServiceAccount token (TokenRequest, bound to the pod),
        ConfigMap keys, and the downward API's namespace; or a configMap volume: its keys as files (binaryData's
        decoded), an optional one that does not exist left empty, a required one waited for (PlanError)."""
        ns, sa = pod["metadata"]["namespace"], pod["spec"].get("serviceAccountName") or "default"
        folder.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            ref = volume["configMap"]
            try:
                cm = self.core.read_namespaced_config_map(ref["name"], ns)
            except ApiException as e:
                if e.status == 404 and ref.get("optional"):
                    return
                if e.status == 404:
                    raise podspec.PlanError(f'configmap "{ref["name"]}" not found (volume {volume["name"]})') from None
                raise
            files = {k: v.encode() for k, v in (cm.data or {}).items()}
            files.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
            for item in ref.get("items") or [{"key": k, "path": k} for k in files]:
                if item["key"] in files:
                    (folder / item["path"]).parent.mkdir(parents=True, exist_ok=True)
                    (folder / item["path"]).write_bytes(files[item["key"]])
            return
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
        now = now_iso()
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
        renew = _micronow_iso().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
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
        if w is not None:  # the conditions other controllers set (a readiness gate's): Ready follows them
            w.watched_conditions = list((pod.get("status") or {}).get("conditions") or [])
        if w is None and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            w = PodWorker(self, pod)
            self.workers[uid] = w
            log.info("pod %s/%s bound here: starting", w.ns, w.name)
            w.start()

    def _delete(self, w: PodWorker, grace: float) -> None:
        pre = (w.pod["spec"]["containers"][0].get("lifecycle") or {}).get("preStop") or {}
        started = time.monotonic()
        if "sleep" in pre and w.running():
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
    p = argparse.ArgumentParser(prog="python -m e2e.podrunner.kubelet", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--node-name", default=DEFAULT_NODE)
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--claim", action="append", default=[], metavar="NAME=DIR", help="a PVC's local folder")
    p.add_argument("--hub-model", action="append", default=[], metavar="REPO=DIR@REV",
                   help="a prepared model served for a Hugging Face name (laid out as a hub cache at REV)")  # fmt: skip
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="base env for every process")
    p.add_argument("--program-env", action="append", default=[], metavar="PROGRAM=NAME=VALUE",
                   help="env for processes of this program only, beneath the container's (e.g. vllm=PYTHONPATH=...)")  # fmt: skip
    p.add_argument("--program-override", action="append", default=[], metavar="PROGRAM=NAME=VALUE",
                   help="env for processes of this program, over the container's (a machine override, recorded)")  # fmt: skip
    p.add_argument("--image", action="append", default=[], metavar="REPOSITORY=BINDIR",
                   help="run this image's command[0] from BINDIR (e.g. the operator's image from .venv/bin)")  # fmt: skip
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
    images = {k: Path(v) for k, v in (i.split("=", 1) for i in a.image)}
    program_env: dict[str, dict[str, str]] = {}
    program_override: dict[str, dict[str, str]] = {}
    for items, into in ((a.program_env, program_env), (a.program_override, program_override)):
        for item in items:
            prog, name, value = item.split("=", 2)
            into.setdefault(prog, {})[name] = value
    runner = Runner(api, a.node_name, a.state_dir, claims, hub, base_env, images, program_env, program_override)
    runner.register()
    signal.signal(signal.SIGTERM, lambda *_: runner.stop.set())
    threading.Thread(target=runner.heartbeat, daemon=True, name="heartbeat").start()
    threading.Thread(target=runner.watch_pods, daemon=True, name="pods").start()
    a.state_dir.mkdir(parents=True, exist_ok=True)
    (a.state_dir / "runner.json").write_text(json.dumps({"node": a.node_name, "pid": os.getpid(), "ip": runner.ip,
                                                                   "images": {k: str(v) for k, v in images.items()},
                                                                   "mountNamespaces": runner.mount_namespaces}))
    try:
        while not runner.stop.wait(1):
            pass
    except KeyboardInterrupt:
        pass
    runner.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
