"""A real Kubernetes control plane as local processes: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok with fake GPU nodes, all on 127.0.0.1 with free ports.

    cp = ControlPlane()          # ClusterConfig.from_env() unless given
    cp.start()                   # PKI, processes, readiness, admin kubeconfig, fake nodes
    cp.kubectl("get", "nodes")
    cp.stop()                    # also runs at exit, on SIGTERM/SIGHUP, and for strays on the next start

Every component runs in its own process group with its log in ``<run dir>/logs/``; ``log_tails()`` prints
their ends. A registry entry per run (``$TMPDIR/vpo-e2e-<uid>/<run>.json``) lists the processes (pid and
start time) and the folders to remove, so a run that was killed (SIGKILL, OOM) is cleaned up by the next
``start()``. On Linux the components also get PR_SET_PDEATHSIG, so they die with the process that started
them.

This module holds ``ControlPlane``; its command line (``make cluster-up`` and friends) is
``e2e/kube/cli.py``, and the pieces it is built from live in ``e2e/harness/`` (polling, PKI, processes,
REST client, cluster config and nodes, component flags, state files), re-exported here under their old names.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from e2e.harness import audit, components
from e2e.harness.config import (
    ClusterConfig,
    node_manifests,
)
from e2e.harness.pki import write_kubeconfig, write_pki
from e2e.harness.poll import wait_for
from e2e.harness.processes import (
    KEPT_MARKER,
    Component,
    ComponentDied,
    _exit_on_signal,
    _free_ports,
    log_tails,
    reap_strays,
    registry_dir,
    spawn,
    stop_process,
    stop_processes,
    write_registry,
)
from e2e.harness.rest import Api, _http_json, _https_ok
from e2e.harness.state import read_state, write_state
from e2e.kube import build

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RUN_DIR = REPO_ROOT / ".cluster"


# ------------------------------------------------------------------------------- control plane


class ControlPlane:
    """One control plane. ``run_dir`` holds pki/, logs/, kubeconfig and state.json; etcd's data lives in a
    temporary folder (tmpfs when /dev/shm is writable). Without ``run_dir`` a temporary folder is used and
    removed by ``stop()`` (keep it with ``keep_run_dir=True``, e.g. to read logs after a failure)."""

    def __init__(
        self,
        config: ClusterConfig | None = None,
        *,
        run_dir: Path | str | None = None,
        binaries: build.Binaries | None = None,
        keep_run_dir: bool = False,
        log: Callable[[str], None] | None = None,
    ):
        self.config = config or ClusterConfig.from_env()
        self._binaries = binaries
        self._temp_run_dir = run_dir is None
        self.run_dir = Path(run_dir).resolve() if run_dir else Path(tempfile.mkdtemp(prefix="vpo-e2e-run-"))
        self.keep_run_dir = keep_run_dir
        self.log_dir = self.run_dir / "logs"
        self.kubeconfig = self.run_dir / "kubeconfig"
        self.run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.components: dict[str, Component] = {}
        self.ports: dict[str, int] = {}
        self.pki: dict[str, Path] = {}
        self.data_dir: Path | None = None
        self.api: Api | None = None
        self.server = ""
        self.timings: dict[str, float] = {}
        self._say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self._stopped = False
        self._attached = False
        self._atexit_registered = False
        self._lock = threading.Lock()

    @classmethod
    def attach(cls, run_dir: Path | str) -> ControlPlane:
        """The control plane a detached supervisor (``up``, ``make cluster-up``) runs in ``run_dir``.
        ``stop()`` on it does nothing; ``down`` stops it."""
        run_dir = Path(run_dir).resolve()
        state = read_state(run_dir)
        if not state or state.get("status") != "ready":
            raise RuntimeError(f"no ready control plane in {run_dir} (run `make cluster-up`)")
        cp = cls(run_dir=run_dir, keep_run_dir=True)
        cp._attached = True
        cp._stopped = True
        cp.run_id = state["run_id"]
        cp.server = state["server"]
        cp.ports = state["ports"]
        cp.pki = {p.name: p for p in (run_dir / "pki").iterdir()}
        cp.api = Api(cp.server, cp.pki)
        return cp

    # -- public helpers ------------------------------------------------------------------------

    @property
    def binaries(self) -> build.Binaries:
        if self._binaries is None:
            self._binaries = build.find(build=False)
        return self._binaries

    @property
    def kubectl_path(self) -> Path:
        return self.binaries["kubectl"]

    def env(self) -> dict[str, str]:
        """Environment for subprocesses that should talk to this cluster (kubectl, kopf, the operator)."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.kubectl_path.parent}{os.pathsep}{env.get('PATH', '')}"
        return env

    @property
    def audit(self) -> audit.Audit:
        """The audit log of the users in config.audit_users (empty when none were named)."""
        return audit.Audit(self.run_dir / "audit.log")

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        argv = [
            str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.run_dir / 'kubectl-cache'}", *args,
        ]  # fmt: skip
        res = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise subprocess.CalledProcessError(res.returncode, argv, res.stdout, res.stderr)
        return res

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this cluster (needs the ``kubernetes`` package)."""
        from kubernetes import config as kconfig

        return kconfig.new_client_from_config(config_file=str(self.kubeconfig))

    def create_namespace(self, base: str) -> str:
        """A fresh namespace named after ``base`` (plus a random suffix), once its default ServiceAccount
        exists (ServiceAccount admission refuses pods until kube-controller-manager created it)."""
        import re
        import uuid

        base = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:40].strip("-")
        name = f"e2e-{base}-{uuid.uuid4().hex[:5]}"
        assert self.api is not None
        status, body = self.api.request(
            "POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": {"vpo-e2e": "true"}}}
        )
        if status != 201:
            raise RuntimeError(f"creating namespace {name}: {status} {body}")
        api = self.api
        wait_for(
            lambda: api.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] == 200,
            timeout=30,
            what=f"ServiceAccount {name}/default",
        )
        return name

    def delete_namespace(self, name: str) -> None:
        assert self.api is not None
        self.api.request("DELETE", f"/api/v1/namespaces/{name}")

    def log_tails(self, lines: int = 30, names: Iterable[str] | None = None) -> str:
        return log_tails(self.log_dir, lines, names)

    def check_alive(self) -> None:
        for c in self.components.values():
            rc = c.proc.poll()
            if rc is not None:
                raise ComponentDied(f"{c.name} exited with {rc}; see {c.log}\n{self.log_tails(40, [c.name])}")

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        t0 = time.monotonic()
        reap_strays(self._say)
        bins = self.binaries
        self._register_cleanup()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
        self.data_dir = Path(tempfile.mkdtemp(prefix="vpo-e2e-etcd-", dir=base))
        self._write_registry()
        try:
            self.pki = write_pki(self.run_dir / "pki")
            names = [
                "etcd-client",
                "etcd-peer",
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kwok",
            ]
            self.ports = dict(zip(names, _free_ports(len(names)), strict=True))
            self.server = f"https://127.0.0.1:{self.ports['kube-apiserver']}"
            self.api = Api(self.server, self.pki)
            write_kubeconfig(self.kubeconfig, self.server, self.pki)
            self._start_etcd(bins)
            self._start_apiserver(bins)
            self._start_rest(bins)
            self._create_nodes()
            self._wait_ready()
            self.timings["start"] = time.monotonic() - t0
            self._write_state("ready")
            self._say(
                f"Control plane ready in {self.timings['start']:.1f}s: {self.server} "
                f"(kubeconfig {self.kubeconfig}, logs {self.log_dir})"
            )
        except BaseException:
            with contextlib.suppress(Exception):
                self._say(self.log_tails(25))
            self.stop()
            raise
        return self

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        # reverse order; kube components first, etcd last so the apiserver shuts down cleanly
        for group in (("kwok", "kube-scheduler", "kube-controller-manager"), ("kube-apiserver",), ("etcd",)):
            stop_processes(((c.proc, c.start_time) for n, c in self.components.items() if n in group), timeout=10)
        if self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        if self._temp_run_dir and not self.keep_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                self._write_state("stopped")
            if self._temp_run_dir:  # kept for its logs; the next start prunes it after a day
                shutil.rmtree(self.run_dir / "pki", ignore_errors=True)
                self.kubeconfig.unlink(missing_ok=True)
                (self.run_dir / KEPT_MARKER).touch()
        (registry_dir() / f"{self.run_id}.json").unlink(missing_ok=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults (bench/chaos, e2e/tests/operator/test_faults.py) --------------------------------

    def stop_component(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        """Stop one component (its process group) and wait for it to exit; SIGKILL after `timeout`."""
        c = self.components[name]
        stop_process(c.proc, timeout, sig=sig, start_time=c.start_time)

    def start_component(self, name: str, timeout: float = 60) -> None:
        """Start a stopped component again with the same command line (same ports, same etcd data) and wait
        until it answers: etcd /health, kube-apiserver /readyz."""
        old = self.components[name]
        if old.proc.poll() is None:
            raise RuntimeError(f"{name} is still running")
        self._spawn(name, old.argv[: len(old.argv) - len(self.config.extra_args.get(name, []))])
        if name == "etcd":
            health = f"http://127.0.0.1:{self.ports['etcd-client']}/health"
            wait_for(lambda: _http_json(health).get("health") == "true", timeout=timeout, what="etcd /health",
                     alive=self.check_alive)
        elif name == "kube-apiserver":
            assert self.api is not None
            api = self.api
            wait_for(lambda: api.healthy("/readyz"), timeout=timeout, what="kube-apiserver /readyz", alive=self.check_alive)

    def restart_component(self, name: str, *, down: float = 0.0, sig: int = signal.SIGTERM, timeout: float = 60) -> None:
        """Stop a component, keep it down for `down` seconds, start it again and wait until it answers."""
        self.stop_component(name, sig)
        if down > 0:
            deadline = time.monotonic() + down
            wait_for(lambda: time.monotonic() >= deadline, timeout=down + 5, what=f"{name} down for {down}s")
        self.start_component(name, timeout=timeout)

    def etcd_revision(self) -> int:
        """etcd's current revision (through its HTTP gateway)."""
        return int(self._etcd_post("/v3/kv/range", {"key": "AA==", "limit": 1})["header"]["revision"])

    def compact_etcd(self, revision: int | None = None) -> int:
        """Compact etcd up to `revision` (default: the current one), physically: every watch that resumes from
        an older resourceVersion is answered 410 Gone. Returns the revision compacted to."""
        rev = revision if revision is not None else self.etcd_revision()
        self._etcd_post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    def _etcd_post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import urllib.request

        req = urllib.request.Request(f"http://127.0.0.1:{self.ports['etcd-client']}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"{}")

    # -- internals -----------------------------------------------------------------------------

    def _register_cleanup(self) -> None:
        if self._atexit_registered:
            return
        self._atexit_registered = True
        atexit.register(self.stop)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) in (signal.SIG_DFL, None):
                    signal.signal(sig, _exit_on_signal)

    def _write_registry(self) -> None:
        remove = [str(self.data_dir)] if self.data_dir else []
        if self._temp_run_dir and not self.keep_run_dir:
            remove.append(str(self.run_dir))
        write_registry(self.run_id, self.run_dir, self.components.values(), remove)

    def _write_state(self, status: str) -> None:
        state = {
            "status": status,
            "run_id": self.run_id,
            "pid": os.getpid(),
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "kubectl": str(self.kubectl_path),
            "ports": self.ports,
            "processes": {c.name: c.proc.pid for c in self.components.values()},
            "data_dir": str(self.data_dir) if self.data_dir else None,
            "logs": str(self.log_dir),
            "timings": {k: round(v, 2) for k, v in self.timings.items()},
            "versions": self.binaries.versions,
        }
        write_state(self.run_dir, state)

    def _spawn(self, name: str, argv: list[str]) -> Component:
        argv = argv + self.config.extra_args.get(name, [])
        c = spawn(name, argv, self.log_dir / f"{name}.log", run_id=self.run_id, cwd=self.run_dir)
        self.components[name] = c
        self._write_registry()
        return c

    def _start_etcd(self, bins: build.Binaries) -> None:
        t = time.monotonic()
        assert self.data_dir is not None
        self._spawn("etcd", components.etcd_argv(bins["etcd"], self.ports, self.data_dir))
        health = f"http://127.0.0.1:{self.ports['etcd-client']}/health"
        wait_for(
            lambda: _http_json(health).get("health") == "true",
            timeout=30,
            what="etcd /health",
            alive=self.check_alive,
        )
        self.timings["etcd"] = time.monotonic() - t

    def _start_apiserver(self, bins: build.Binaries) -> None:
        t = time.monotonic()
        argv = components.apiserver_argv(bins["kube-apiserver"], self.ports, self.pki, self.run_dir / "pki")
        if self.config.audit_users:
            argv += audit.apiserver_flags(self.run_dir, self.config.audit_users)
        self._spawn("kube-apiserver", argv)
        assert self.api is not None
        wait_for(
            lambda: self.api.healthy("/readyz"),
            timeout=self.config.start_timeout,
            what="kube-apiserver /readyz",
            alive=self.check_alive,
        )
        self.timings["kube-apiserver"] = time.monotonic() - t

    def _start_rest(self, bins: build.Binaries) -> None:
        p, kc = self.pki, self.kubeconfig
        cm = "kube-controller-manager"
        self._spawn(cm, components.controller_manager_argv(bins[cm], self.ports, p, kc))
        self._spawn("kube-scheduler", components.scheduler_argv(bins["kube-scheduler"], self.ports, p, kc))
        # kwok's own stages plus ours: pods annotated vllm-pooling.io/e2e-ready-after wait before Ready
        ours = REPO_ROOT / "e2e" / "cluster" / "kwok" / "pod-ready-after.yaml"
        stages = self.config.kwok_stages or [bins.kwok_stages, ours]
        self._spawn("kwok", components.kwok_argv(bins["kwok"], self.ports, p, kc, stages))

    def _create_nodes(self) -> None:
        assert self.api is not None
        for node in node_manifests(self.config):
            self.api.apply(f"/api/v1/nodes/{node['metadata']['name']}", node)

    def _wait_ready(self) -> None:
        t = time.monotonic()
        ctx = ssl.create_default_context(cafile=str(self.pki["ca.crt"]))
        ctx.load_cert_chain(str(self.pki["admin.crt"]), str(self.pki["admin.key"]))
        deadline = self.config.start_timeout
        for name, path in (
            ("kube-controller-manager", "/healthz"),
            ("kube-scheduler", "/readyz"),
            ("kwok", "/healthz"),
        ):
            url = f"https://127.0.0.1:{self.ports[name]}{path}"
            wait_for(
                lambda u=url: _https_ok(u, ctx),
                timeout=deadline,
                what=f"{name} {path}",
                alive=self.check_alive,
            )
        assert self.api is not None
        api = self.api
        # ServiceAccount admission rejects pods until the serviceaccount controller made "default"
        wait_for(
            lambda: api.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
            timeout=deadline,
            what="ServiceAccount default/default (kube-controller-manager)",
            alive=self.check_alive,
        )
        want = {n["metadata"]["name"] for n in node_manifests(self.config)}

        def nodes_ready() -> bool:
            items = api.get("/api/v1/nodes")["items"]
            ready = set()
            for n in items:
                conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions", [])}
                taints = [t["key"] for t in n.get("spec", {}).get("taints", []) or []]
                if conds.get("Ready") == "True" and not any(
                    k.startswith("node.kubernetes.io/") for k in taints
                ):
                    ready.add(n["metadata"]["name"])
            return want <= ready

        wait_for(
            nodes_ready, timeout=deadline, what=f"{len(want)} Ready untainted nodes", alive=self.check_alive
        )
        self.timings["components+nodes"] = time.monotonic() - t
