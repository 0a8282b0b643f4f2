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

Command line (used by ``e2e/cluster.mk``):

    python -m e2e.controlplane up [--run-dir .cluster]   # detached; idempotent; builds binaries if missing
    python -m e2e.controlplane down [--run-dir .cluster]
    python -m e2e.controlplane status|logs [--run-dir .cluster]
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import ctypes
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from e2e import build

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RUN_DIR = REPO_ROOT / ".cluster"

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
FIELD_MANAGER = "vpo-e2e"
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")

T = TypeVar("T")


# --------------------------------------------------------------------------------------------- polling


class Timeout(AssertionError):
    """A condition polled by ``wait_for`` did not hold before its deadline."""


class Fatal(RuntimeError):
    """Raised by a ``wait_for`` check when waiting longer cannot help; it propagates at once."""


def wait_for(
    check: Callable[[], T],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    max_interval: float = 1.0,
    alive: Callable[[], None] | None = None,
) -> T:
    """Poll ``check`` until it returns a truthy value (returned) or ``timeout`` seconds pass.

    Exceptions raised by ``check`` count as "not yet" and the last one is reported on timeout.
    ``alive`` is called each round and should raise when waiting is pointless (a process died).
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if alive:
            alive()
        try:
            result = check()
            if result:
                return result
            last = result
        except Fatal:
            raise
        except Exception as exc:  # any failure means "not yet"
            last = exc
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)  # poll period, not synchronisation: the deadline decides
        interval = min(interval * 1.5, max_interval)


# ------------------------------------------------------------------------------------------- config


@dataclass
class ClusterConfig:
    """What the fake cluster looks like. ``from_env`` reads VPO_GPU_NODES, VPO_GPUS_PER_NODE, VPO_CPU_NODES."""

    gpu_nodes: int = 4
    gpus_per_node: int = 8
    cpu_nodes: int = 1
    gpu_product: str = GPU_PRODUCT
    # extra command-line flags per component, e.g. {"kube-controller-manager": ["--v=4"]}
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    # kwok --config files; default: kwok's stages (copied by the build) + cluster/kwok/pod-ready-after.yaml
    kwok_stages: list[Path] | None = None
    start_timeout: float = 120.0

    @classmethod
    def from_env(cls, **overrides: Any) -> ClusterConfig:
        env = os.environ
        values: dict[str, Any] = {
            "gpu_nodes": int(env.get("VPO_GPU_NODES", 4)),
            "gpus_per_node": int(env.get("VPO_GPUS_PER_NODE", 8)),
            "cpu_nodes": int(env.get("VPO_CPU_NODES", 1)),
        }
        values.update(overrides)
        return cls(**values)


def gpu_node_name(i: int) -> str:
    return f"gpu-node-{i}"


def cpu_node_name(i: int) -> str:
    return f"cpu-node-{i}"


def node_manifests(cfg: ClusterConfig) -> list[dict[str, Any]]:
    """Node objects for kwok: annotated as fake, with capacity that node-initialize keeps."""

    def node(name: str, labels: dict[str, str], capacity: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    **labels,
                },
            },
            "spec": {},
            "status": {"capacity": capacity, "allocatable": capacity},
        }

    nodes = []
    for i in range(cfg.gpu_nodes):
        nodes.append(
            node(
                gpu_node_name(i),
                {
                    GPU_PRODUCT_LABEL: cfg.gpu_product,
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.count": str(cfg.gpus_per_node),
                },
                {
                    "cpu": "96",
                    "memory": "1536Gi",
                    "ephemeral-storage": "2Ti",
                    "pods": "110",
                    GPU_RESOURCE: str(cfg.gpus_per_node),
                },
            )
        )
    for i in range(cfg.cpu_nodes):
        nodes.append(
            node(
                cpu_node_name(i),
                {},
                {"cpu": "32", "memory": "128Gi", "ephemeral-storage": "500Gi", "pods": "110"},
            )
        )
    return nodes


# ---------------------------------------------------------------------------------------------- PKI


def write_pki(d: Path) -> dict[str, Path]:
    """CA, a serving cert for every component (SANs: loopback and the kubernetes Service names), an admin
    client cert (O=system:masters) and the service-account signing key pair."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    before, after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=30)

    def pem_key(key: Any) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def pem_cert(cert: x509.Certificate) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vpo-e2e-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(before)
        .not_valid_after(after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        cn: str, orgs: list[str], sans: list[x509.GeneralName], usages: list[Any]
    ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(before)
            .not_valid_after(after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
            )
        )
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return pem_cert(b.sign(ca_key, hashes.SHA256())), pem_key(key)

    service_ip = next(iter(ipaddress.ip_network(SERVICE_CIDR).hosts()))
    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
           "kubernetes.default.svc.cluster.local"]  # fmt: skip
    ips = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"), service_ip]
    sans = [x509.DNSName(n) for n in dns] + [x509.IPAddress(i) for i in ips]
    serving = leaf("vpo-e2e-serving", [], sans, [ExtendedKeyUsageOID.SERVER_AUTH])
    admin = leaf("vpo-e2e-admin", ["system:masters"], [], [ExtendedKeyUsageOID.CLIENT_AUTH])
    # the apiserver's identity towards aggregated APIs; also fills the requestheader CA that the
    # controller-manager and scheduler read for delegated authentication
    front_proxy = leaf("front-proxy-client", [], [], [ExtendedKeyUsageOID.CLIENT_AUTH])
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_pub = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )

    files = {
        "ca.crt": pem_cert(ca),
        "ca.key": pem_key(ca_key),
        "serving.crt": serving[0],
        "serving.key": serving[1],
        "admin.crt": admin[0],
        "admin.key": admin[1],
        "front-proxy-client.crt": front_proxy[0],
        "front-proxy-client.key": front_proxy[1],
        "sa.key": pem_key(sa_key),
        "sa.pub": sa_pub,
    }
    paths = {}
    for name, data in files.items():
        p = d / name
        p.write_bytes(data)
        if name.endswith(".key"):
            p.chmod(0o600)
        paths[name] = p
    return paths


def kubeconfig_dict(server: str, pki: dict[str, Path], name: str = "vpo-e2e") -> dict[str, Any]:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority-data": b64(pki["ca.crt"])}}
        ],
        "users": [
            {
                "name": f"{name}-admin",
                "user": {
                    "client-certificate-data": b64(pki["admin.crt"]),
                    "client-key-data": b64(pki["admin.key"]),
                },
            }
        ],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": f"{name}-admin", "namespace": "default"}}
        ],
        "current-context": name,
    }


# ------------------------------------------------------------------------------------ processes


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (held together so they differ, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _proc_start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` (clock ticks since boot), to tell our process from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def _alive(pid: int, start_time: int | None) -> bool:
    if start_time is not None and Path("/proc").is_dir():
        return _proc_start_time(pid) == start_time
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
except (OSError, AttributeError):
    _prctl = None


def _child_setup() -> None:
    """Runs in the child between fork and exec: default signal mask; die with the thread that started us."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def registry_dir() -> Path:
    """Where each run lists its processes and folders for a later run to reap if it crashed."""
    return Path(os.environ.get("VPO_STATE_DIR") or Path(tempfile.gettempdir()) / f"vpo-e2e-{os.getuid()}")


def _kill_group(pid: int, start_time: int | None, sig: int) -> None:
    if not _alive(pid, start_time):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def reap_strays(log: Callable[[str], None] | None = None) -> list[str]:
    """Kill the processes and remove the folders of runs whose owner process is gone."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    reaped = []
    reg = registry_dir()
    if not reg.is_dir():
        return reaped
    for entry in sorted(reg.glob("*.json")):
        try:
            data = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        owner = data.get("owner", {})
        if owner and _alive(owner["pid"], owner.get("start_time")):
            continue
        for p in data.get("processes", []):
            if _alive(p["pid"], p.get("start_time")):
                log(f"Killed stray {p['name']} (pid {p['pid']}) of run {data.get('run_id')}")
                _kill_group(p["pid"], p.get("start_time"), signal.SIGKILL)
        for d in data.get("remove", []):
            shutil.rmtree(d, ignore_errors=True)
        entry.unlink(missing_ok=True)
        reaped.append(data.get("run_id", entry.stem))
    _prune_kept_runs()
    return reaped


KEPT_MARKER = ".vpo-e2e-kept"


def _prune_kept_runs(max_age_hours: float = 24) -> None:
    """Temporary run folders kept for a post-mortem (a failed test run) are removed after a day."""
    cutoff = time.time() - max_age_hours * 3600
    for d in Path(tempfile.gettempdir()).glob("vpo-e2e-run-*"):
        marker = d / KEPT_MARKER
        with contextlib.suppress(OSError):
            if marker.exists() and marker.stat().st_mtime < cutoff:
                shutil.rmtree(d, ignore_errors=True)


@dataclass
class Component:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes]
    log: Path
    start_time: int | None


class ComponentDied(Fatal):
    pass


def log_tails(log_dir: Path, lines: int = 30, names: Iterable[str] | None = None) -> str:
    """The last ``lines`` lines of each component's log, headed by its name."""
    out = []
    for name in names or ORDER:
        p = log_dir / f"{name}.log"
        if not p.exists():
            continue
        text = p.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"----- {name} ({p}) last {len(text)} lines -----")
        out.extend(text)
    return "\n".join(out)


# -------------------------------------------------------------------------------- API access


class ApiError(RuntimeError):
    """A non-success answer of the API server; ``message`` is the Status message when there is one."""

    def __init__(self, method: str, path: str, status: int, body: Any):
        self.status = status
        self.body = body
        self.message = body.get("message", str(body)) if isinstance(body, dict) else str(body)
        super().__init__(f"{method} {path}: {status} {self.message}")


class Api:
    """A tiny dependency-free client (admin cert) for the harness's own reads and writes."""

    def __init__(self, server: str, pki: dict[str, Path]):
        self.server = server.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=str(pki["ca.crt"]))
        self.ctx.load_cert_chain(str(pki["admin.crt"]), str(pki["admin.key"]))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        timeout: float = 10,
    ) -> tuple[int, Any]:
        url = self.server + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            raw, status = err.read(), err.code
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def get(self, path: str, **kw: Any) -> Any:
        status, body = self.request("GET", path, **kw)
        if status != 200:
            raise ApiError("GET", path, status, body)
        return body

    def apply(self, path: str, obj: dict[str, Any]) -> Any:
        """Server-side apply ``obj`` at ``path`` (the object's own URL)."""
        status, body = self.request(
            "PATCH",
            path,
            obj,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
        )
        if status not in (200, 201):
            raise ApiError("apply", path, status, body)
        return body

    def healthy(self, path: str = "/readyz") -> bool:
        status, _ = self.request("GET", path, timeout=3)
        return status == 200


def _https_ok(url: str, ctx: ssl.SSLContext) -> bool:
    with urllib.request.urlopen(url, context=ctx, timeout=3) as resp:
        return resp.status == 200


def _http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=3) as resp:
        return json.loads(resp.read())


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
        state = _read_state(run_dir)
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
            self._write_kubeconfig()
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
            procs = [self.components[n] for n in group if n in self.components]
            for c in procs:
                if c.proc.poll() is None:
                    _kill_group(c.proc.pid, c.start_time, signal.SIGTERM)
            for c in procs:
                try:
                    c.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    _kill_group(c.proc.pid, c.start_time, signal.SIGKILL)
                    c.proc.wait(timeout=10)
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
        reg = registry_dir()
        reg.mkdir(parents=True, exist_ok=True)
        remove = [str(self.data_dir)] if self.data_dir else []
        if self._temp_run_dir and not self.keep_run_dir:
            remove.append(str(self.run_dir))
        data = {
            "run_id": self.run_id,
            "owner": {"pid": os.getpid(), "start_time": _proc_start_time(os.getpid())},
            "run_dir": str(self.run_dir),
            "processes": [
                {"name": c.name, "pid": c.proc.pid, "start_time": c.start_time, "exe": c.argv[0]}
                for c in self.components.values()
            ],
            "remove": remove,
        }
        tmp = reg / f".{self.run_id}.tmp"
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, reg / f"{self.run_id}.json")

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
        tmp = self.run_dir / ".state.json.tmp"
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, self.run_dir / "state.json")

    def _write_kubeconfig(self) -> None:
        import yaml

        tmp = self.kubeconfig.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(kubeconfig_dict(self.server, self.pki), sort_keys=False))
        tmp.chmod(0o600)
        os.replace(tmp, self.kubeconfig)

    def _spawn(self, name: str, argv: list[str]) -> Component:
        argv = argv + self.config.extra_args.get(name, [])
        logf = self.log_dir / f"{name}.log"
        with open(logf, "ab") as fh:
            fh.write(
                f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} run {self.run_id}\n# {' '.join(argv)}\n".encode()
            )
            fh.flush()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=self.run_dir,
                start_new_session=True,  # own process group: killpg reaches anything it forks
                preexec_fn=_child_setup,  # only a prctl call
            )
        c = Component(name, argv, proc, logf, _proc_start_time(proc.pid))
        self.components[name] = c
        self._write_registry()
        return c

    def _start_etcd(self, bins: build.Binaries) -> None:
        t = time.monotonic()
        client = f"http://127.0.0.1:{self.ports['etcd-client']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        assert self.data_dir is not None
        self._spawn(
            "etcd",
            [
                str(bins["etcd"]),
                "--name=vpo-e2e",
                f"--data-dir={self.data_dir}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=vpo-e2e={peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
                "--auto-compaction-mode=periodic",
                "--auto-compaction-retention=5m",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
        )
        wait_for(
            lambda: _http_json(f"{client}/health").get("health") == "true",
            timeout=30,
            what="etcd /health",
            alive=self.check_alive,
        )
        self.timings["etcd"] = time.monotonic() - t

    def _start_apiserver(self, bins: build.Binaries) -> None:
        t = time.monotonic()
        p = self.pki
        self._spawn(
            "kube-apiserver",
            [
                str(bins["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd-client']}",
                "--etcd-prefix=/registry",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['kube-apiserver']}",
                # Loopback is a valid advertise address, but the kubernetes Endpoints would reject it:
                # no endpoint reconciler (nothing in this cluster dials the kubernetes Service).
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                f"--client-ca-file={p['ca.crt']}",
                f"--tls-cert-file={p['serving.crt']}",
                f"--tls-private-key-file={p['serving.key']}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={p['sa.pub']}",
                f"--service-account-signing-key-file={p['sa.key']}",
                f"--requestheader-client-ca-file={p['ca.crt']}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-uid-headers=X-Remote-Uid",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={p['front-proxy-client.crt']}",
                f"--proxy-client-key-file={p['front-proxy-client.key']}",
                f"--cert-dir={self.run_dir / 'pki'}",
                "--profiling=false",
                "--event-ttl=30m",
            ],
        )
        assert self.api is not None
        wait_for(
            lambda: self.api.healthy("/readyz"),
            timeout=self.config.start_timeout,
            what="kube-apiserver /readyz",
            alive=self.check_alive,
        )
        self.timings["kube-apiserver"] = time.monotonic() - t

    def _start_rest(self, bins: build.Binaries) -> None:
        p = self.pki
        kc = str(self.kubeconfig)
        serving = [f"--tls-cert-file={p['serving.crt']}", f"--tls-private-key-file={p['serving.key']}"]
        delegated = [f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}"]
        self._spawn(
            "kube-controller-manager",
            [
                str(bins["kube-controller-manager"]),
                f"--kubeconfig={kc}",
                *delegated,
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['kube-controller-manager']}",
                *serving,
                "--leader-elect=false",
                "--controllers=*",
                f"--root-ca-file={p['ca.crt']}",
                f"--service-account-private-key-file={p['sa.key']}",
                f"--cluster-signing-cert-file={p['ca.crt']}",
                f"--cluster-signing-key-file={p['ca.key']}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--node-monitor-period=2s",
                "--profiling=false",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(bins["kube-scheduler"]),
                f"--kubeconfig={kc}",
                *delegated,
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['kube-scheduler']}",
                *serving,
                "--leader-elect=false",
                "--profiling=false",
            ],
        )
        # kwok's own stages plus ours: pods annotated vllm-pooling.io/e2e-ready-after wait before Ready
        ours = REPO_ROOT / "e2e" / "cluster" / "kwok" / "pod-ready-after.yaml"
        stages = self.config.kwok_stages or [bins.kwok_stages, ours]
        self._spawn(
            "kwok",
            [
                str(bins["kwok"]),
                f"--kubeconfig={kc}",
                *[f"--config={s}" for s in stages],
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--tls-cert-file={p['serving.crt']}",
                f"--tls-private-key-file={p['serving.key']}",
                "--node-ip=127.0.0.1",
                f"--node-port={self.ports['kwok']}",
                f"--server-address=127.0.0.1:{self.ports['kwok']}",
                "--node-lease-duration-seconds=40",
                f"--cidr={POD_CIDR}",
            ],
        )

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


def _exit_on_signal(signum: int, _frame: object) -> None:
    """SIGTERM/SIGHUP unwind like Ctrl-C: pytest then stops the session and runs fixture teardown (a
    SystemExit would only fail the current test), scripts run their finally blocks and atexit."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # a second signal must not interrupt the teardown
    raise KeyboardInterrupt(f"signal {signum}")


# ------------------------------------------------------------------------------ CLI (cluster.mk)


def _read_state(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None


def _supervisor_alive(state: dict[str, Any] | None) -> bool:
    return bool(
        state
        and state.get("supervisor")
        and _alive(state["supervisor"]["pid"], state["supervisor"].get("start_time"))
    )


def _cmd_up(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    state = _read_state(run_dir)
    if state and state.get("status") == "ready" and _supervisor_alive(_read_supervisor(run_dir)):
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
            [sys.executable, "-m", "e2e.controlplane", "_serve", "--run-dir", str(run_dir)],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # detached: survives the make that started it
        )
    sup = {"pid": proc.pid, "start_time": _proc_start_time(proc.pid)}
    (run_dir / "supervisor.json").write_text(json.dumps(sup))

    def ready() -> bool:
        if proc.poll() is not None:
            raise ComponentDied(f"supervisor exited with {proc.returncode}")
        st = _read_state(run_dir)
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
    state = _read_state(run_dir) or {}
    print(f"Control plane up in {time.monotonic() - t0:.1f}s: {state.get('server')}")
    print(f"export KUBECONFIG={state.get('kubeconfig')}")
    return 0


def _read_supervisor(run_dir: Path) -> dict[str, Any] | None:
    try:
        return {"supervisor": json.loads((run_dir / "supervisor.json").read_text())}
    except (OSError, ValueError):
        return None


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
    sup = _read_supervisor(run_dir)
    state = _read_state(run_dir)
    if _supervisor_alive(sup):
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
    state = _read_state(args.run_dir)
    if not state or not _supervisor_alive(_read_supervisor(args.run_dir)):
        print("Control plane not running")
        return 1
    print(json.dumps(state, indent=2))
    return 0


def _cmd_logs(args: argparse.Namespace) -> int:
    print(log_tails(args.run_dir / "logs", args.lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.controlplane")
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
