"""Real KEDA v2.20.2 beside the control plane: its operator and its metrics adapter, built from the pinned module
(``e2e/kube/build.py``, ``CONTROLLERS``) and run as local processes with the admin kubeconfig.

    keda = Keda(cluster, build.controllers(wait_seconds=900)).start()   # APIService Available
    ...
    keda.stop()

How the pieces meet, all on loopback but for one hop:
- the operator serves its gRPC metrics service on ``127.0.0.1``; the adapter dials it there with mutual TLS
  (``--metrics-service-address``, the authority overridden to the Service name the certificate names);
- the API server reaches the adapter as KEDA's chart sets it up: an APIService ``v1beta1.external.metrics.k8s.io``
  backed by the Service ``keda/keda-metrics-apiserver``. That Service has no selector; its Endpoints name an
  address inside a network namespace the harness makes for it (``e2e/harness/netns.py``: Endpoints may not name
  loopback), where a relay forwards to the adapter's port on ``127.0.0.1``. The API server runs with
  ``--enable-aggregator-routing=true`` and so dials that endpoint;
- both serve with a certificate of the harness's PKI (``pki.issue``), whose CA is the APIService's caBundle.
  Certificate rotation, webhook and APIService patching are off: the harness owns those objects.
kube-controller-manager runs the HorizontalPodAutoscaler KEDA makes, every ``HPA_SYNC_SECONDS``.
"""

from __future__ import annotations

import base64
import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from e2e.harness.components import HPA_SYNC_SECONDS
from e2e.harness.netns import Netns
from e2e.harness.pki import issue
from e2e.harness.poll import wait_for
from e2e.harness.processes import Component, _free_ports, spawn, stop_process
from e2e.kube.thirdparty import Controller, ensure_namespace, http_ok

if TYPE_CHECKING:
    from e2e.kube.controlplane import ControlPlane

NAMESPACE = "keda"
ADAPTER_SERVICE = "keda-metrics-apiserver"
OPERATOR_SERVICE = "keda-operator"
APISERVICE = "v1beta1.external.metrics.k8s.io"
RELAY_PORT = 6443  # the adapter's port as its Endpoints name it, inside the namespace
__all__ = ["HPA_SYNC_SECONDS", "Keda"]


class Keda(Controller):
    LOGS = ("keda-operator", "keda-adapter")

    def __init__(self, cluster: ControlPlane, binaries: dict[str, Path]):
        super().__init__(cluster, binaries, "keda")
        self.components: dict[str, Component] = {}
        self.netns: Netns | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def _start(self, timeout: float) -> None:
        self.netns = Netns("keda").create()
        svc = f"{ADAPTER_SERVICE}.{NAMESPACE}.svc"
        op = f"{OPERATOR_SERVICE}.{NAMESPACE}.svc"
        certs = issue(self.cluster.pki, self.dir / "certs", "keda",
                      [svc, f"{svc}.cluster.local", op, f"{op}.cluster.local", "localhost"],
                      ["127.0.0.1", self.netns.inner_ip])
        names = ["operator-metrics", "operator-probe", "operator-grpc", "adapter", "adapter-metrics"]
        self.ports = dict(zip(names, _free_ports(len(names)), strict=True))
        self._namespace()
        self._spawn("keda-operator", self._operator_argv(certs["tls.crt"].parent))
        probe = f"http://127.0.0.1:{self.ports['operator-probe']}/readyz"
        wait_for(lambda: http_ok(probe), timeout=timeout, what="keda-operator /readyz", alive=self._alive)
        self._spawn("keda-adapter", self._adapter_argv(certs))
        self.netns.relay(RELAY_PORT, self.ports["adapter"])
        self._register(certs["ca.crt"])
        wait_for(self._available, timeout=timeout, what=f"APIService {APISERVICE} Available", alive=self._alive)

    def stop(self) -> None:
        api = self.cluster.api
        if api is not None:
            with contextlib.suppress(Exception):
                api.request("DELETE", f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
        for c in reversed(list(self.components.values())):
            stop_process(c.proc, 10, start_time=c.start_time)
        self.components.clear()
        if self.netns is not None:
            self.netns.close()
            self.netns = None

    # -- what the tests read ----------------------------------------------------------------------

    def external_metric(self, namespace: str, metric: str, scaled_object: str) -> list[dict[str, Any]]:
        """What the HPA reads: the adapter's answer through the API server (and the netns hop)."""
        assert self.cluster.api is not None
        path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}"
        selector = f"scaledobject.keda.sh/name={scaled_object}"
        return self.cluster.api.get(path, params={"labelSelector": selector}).get("items") or []

    # -- internals --------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "WATCH_NAMESPACE": "",  # every namespace
            "POD_NAMESPACE": NAMESPACE,
            "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
            "OPERATOR_NAME": OPERATOR_SERVICE,
        })
        return env

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.components[name] = spawn(name, argv, self.log_dir / f"{name}.log", run_id=self.cluster.run_id,
                                      cwd=self.dir, env=self._env())

    def _operator_argv(self, cert_dir: Path) -> list[str]:
        return [
            str(self.binaries["keda-operator"]),
            f"--metrics-bind-address=127.0.0.1:{self.ports['operator-metrics']}",
            f"--health-probe-bind-address=127.0.0.1:{self.ports['operator-probe']}",
            f"--metrics-service-bind-address=127.0.0.1:{self.ports['operator-grpc']}",
            f"--cert-dir={cert_dir}",
            "--enable-cert-rotation=false",
            "--enable-webhook-patching=false",
            "--enable-apiservice-patching=false",
            "--leader-elect=false",
            f"--ca-dir={cert_dir}",
            "--zap-log-level=info",
            "--zap-encoder=console",
        ]

    def _adapter_argv(self, certs: dict[str, Path]) -> list[str]:
        kubeconfig = str(self.cluster.kubeconfig)
        return [
            str(self.binaries["keda-adapter"]),
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['adapter']}",
            f"--cert-dir={certs['tls.crt'].parent}",
            f"--tls-cert-file={certs['tls.crt']}",
            f"--tls-private-key-file={certs['tls.key']}",
            f"--lister-kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--metrics-service-address=127.0.0.1:{self.ports['operator-grpc']}",
            f"--metrics-service-grpc-authority={OPERATOR_SERVICE}.{NAMESPACE}.svc.cluster.local",
            f"--port={self.ports['adapter-metrics']}",
            "--zap-log-level=info",
            "--zap-encoder=console",
        ]

    def _namespace(self) -> None:
        assert self.cluster.api is not None
        ensure_namespace(self.cluster.api, NAMESPACE)

    def _register(self, ca: Path) -> None:
        """The selector-less Service, its Endpoints (the namespace's address) and the APIService."""
        api = self.cluster.api
        assert api is not None and self.netns is not None
        base = f"/api/v1/namespaces/{NAMESPACE}"
        api.apply(f"{base}/services/{ADAPTER_SERVICE}", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": RELAY_PORT}]},
        })
        api.apply(f"{base}/endpoints/{ADAPTER_SERVICE}", {
            "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE},
            "subsets": [{"addresses": [{"ip": self.netns.inner_ip}], "ports": [{"name": "https", "port": RELAY_PORT}]}],
        })
        api.apply(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}", {
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": APISERVICE},
            "spec": {
                "service": {"namespace": NAMESPACE, "name": ADAPTER_SERVICE, "port": 443},
                "group": "external.metrics.k8s.io", "version": "v1beta1",
                "caBundle": base64.b64encode(ca.read_bytes()).decode(),
                "groupPriorityMinimum": 100, "versionPriority": 100,
            },
        })

    def _available(self) -> bool:
        assert self.cluster.api is not None
        obj = self.cluster.api.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
        return any(c["type"] == "Available" and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or [])

    def _alive(self) -> None:
        for c in self.components.values():
            rc = c.proc.poll()
            if rc is not None:
                raise RuntimeError(f"{c.name} exited with {rc}:\n{self.log_tails(40)}")


