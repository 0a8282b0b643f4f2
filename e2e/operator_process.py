"""Run the operator (`python -m pooling_operator run`) as a real process against a test control plane."""

from __future__ import annotations

import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

from e2e.harness.poll import wait_for
from e2e.harness.processes import _free_ports, stop_process
from e2e.kube.controlplane import REPO_ROOT, ControlPlane


class OperatorProcess:
    """One operator replica; its log is kept in the control plane's run folder."""

    def __init__(
        self,
        cluster: ControlPlane,
        name: str = "operator",
        *,
        resync_seconds: float = 3,
        standalone: bool = True,
        lease_namespace: str | None = None,
        lease_name: str | None = None,
        extra: list[str] | None = None,
        kubeconfig: Path | None = None,
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.metrics_port, self.health_port = _free_ports(2)
        self.log = Path(cluster.run_dir) / "logs" / f"{name}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.argv = [
            sys.executable, "-m", "pooling_operator", "run",
            "--bind", "127.0.0.1",
            "--metrics-port", str(self.metrics_port),
            "--health-port", str(self.health_port),
            *(["--standalone"] if standalone else []),
            *(["--lease-namespace", lease_namespace] if lease_namespace else []),
            *(["--lease-name", lease_name] if lease_name else []),
            *(extra or []),
        ]  # fmt: skip
        self.env = {**cluster.env(), "VPO_RESYNC_SECONDS": str(resync_seconds), "PYTHONUNBUFFERED": "1"}
        if kubeconfig is not None:
            self.env["KUBECONFIG"] = str(kubeconfig)
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_port: int | None = None

    @classmethod
    def from_chart(cls, cluster: ControlPlane, deployment: dict, name: str, *, kubeconfig: Path | None = None,
                   webhook_port: int | None = None) -> OperatorProcess:
        """The operator as the chart's Deployment runs it: its container's arguments and literal environment, with
        this machine's free ports for metrics, health and readiness, everything bound to loopback, and the
        webhook on `webhook_port` (the chart's webhook.url names it); POD_NAMESPACE is the Deployment's namespace."""
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        op = cls(cluster, name, standalone=False, kubeconfig=kubeconfig)
        (op.ready_port,) = _free_ports(1)
        ports = {"--metrics-port": op.metrics_port, "--health-port": op.health_port, "--readiness-port": op.ready_port,
                 "--webhook-port": webhook_port}
        args = []
        for arg in container["args"]:
            flag = arg.split("=", 1)[0]
            if flag in ports:
                if ports[flag] is not None:
                    args.append(f"{flag}={ports[flag]}")
                continue
            args.append(arg)
        op.argv = [sys.executable, "-m", "pooling_operator", *args, "--bind", "127.0.0.1", "--webhook-bind", "127.0.0.1"]
        namespace = deployment["metadata"]["namespace"]
        literal = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
        op.env.update({**literal, "POD_NAMESPACE": namespace})
        return op

    def ready(self) -> bool:
        """/readyz answers 200 (a replica started from the chart: from_chart)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ready_port}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def start(self, timeout: float = 60) -> OperatorProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=REPO_ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self.healthy, timeout=timeout, what=f"{self.name} /healthz")
        return self

    def healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def metrics(self, *names: str) -> str:
        """The exposition; with `names`, only those families (prometheus_client's `name[]` filter): a poll of one
        gauge then costs the operator that gauge, not a rendering of every resource's series (at 3,000 services
        a full scrape holds the GIL for a large share of each second, and a poll every 0.5 s slowed the very
        first pass it waited for)."""
        query = "?" + urllib.parse.urlencode([("name[]", n) for n in names]) if names else ""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics{query}", timeout=5) as r:
            return r.read().decode()

    def rss_bytes(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        stop_process(self.proc, timeout=20)


RBAC = REPO_ROOT / "deploy" / "rbac.yaml"


def token_kubeconfig(cluster: ControlPlane, namespace: str, service_account: str, path: Path, hours: int = 4) -> Path:
    """A kubeconfig at ``path`` that authenticates as a ServiceAccount with a TokenRequest token (so a process
    run with it has exactly that account's permissions)."""
    import yaml

    api = cluster.api
    assert api is not None
    wait_for(lambda: api.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}")[0] == 200,
             timeout=30, what=f"ServiceAccount {namespace}/{service_account}")
    status, body = api.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
        {"spec": {"expirationSeconds": hours * 3600}},
    )
    assert status == 201, body
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    user = config["contexts"][0]["context"]["user"]
    config["users"] = [{"name": user, "user": {"token": body["status"]["token"]}}]
    path.write_text(yaml.safe_dump(config))
    return path


def least_privilege_kubeconfig(cluster: ControlPlane, hours: int = 4) -> Path:
    """A kubeconfig that authenticates as the operator's ServiceAccount of deploy/rbac.yaml, so the operator
    under test has exactly the permissions the deployment grants."""
    cluster.kubectl("apply", "--server-side", "-f", str(RBAC))
    path = Path(cluster.run_dir) / "operator-sa.kubeconfig"
    return token_kubeconfig(cluster, "vllm-pooling-operator", "vllm-pooling-operator", path, hours)
