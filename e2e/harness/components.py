"""The command line of each control-plane component: which flags etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok run with, given their binaries, the ports, the PKI and the
admin kubeconfig. Starting them, waiting for them and stopping them is ``e2e.kube.controlplane.ControlPlane``'s job.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from e2e.harness.pki import SERVICE_CIDR

POD_CIDR = "10.244.0.0/16"
# kube-controller-manager's HPA sync period (15 s by default): short, so that a test of real KEDA (whose
# HorizontalPodAutoscaler this controller runs) takes minutes; the simulator's keda baseline is told the same
HPA_SYNC_SECONDS = 5


def etcd_argv(etcd: Path, ports: dict[str, int], data_dir: Path) -> list[str]:
    client = f"http://127.0.0.1:{ports['etcd-client']}"
    peer = f"http://127.0.0.1:{ports['etcd-peer']}"
    return [
        str(etcd),
        "--name=vpo-e2e",
        f"--data-dir={data_dir}",
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
    ]


def apiserver_argv(apiserver: Path, ports: dict[str, int], p: dict[str, Path], cert_dir: Path) -> list[str]:
    return [
        str(apiserver),
        f"--etcd-servers=http://127.0.0.1:{ports['etcd-client']}",
        "--etcd-prefix=/registry",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['kube-apiserver']}",
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
        f"--cert-dir={cert_dir}",
        "--profiling=false",
        "--event-ttl=30m",
        # an aggregated API (KEDA's metrics adapter) is dialled at its Service's endpoint address, not at a
        # ClusterIP nobody routes here (e2e/harness/netns.py gives that address)
        "--enable-aggregator-routing=true",
    ]


def _serving(p: dict[str, Path]) -> list[str]:
    return [f"--tls-cert-file={p['serving.crt']}", f"--tls-private-key-file={p['serving.key']}"]


def _delegated(kubeconfig: Path) -> list[str]:
    return [f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}"]


def controller_manager_argv(
    binary: Path, ports: dict[str, int], p: dict[str, Path], kubeconfig: Path
) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        *_delegated(kubeconfig),
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['kube-controller-manager']}",
        *_serving(p),
        "--leader-elect=false",
        "--controllers=*",
        f"--root-ca-file={p['ca.crt']}",
        f"--service-account-private-key-file={p['sa.key']}",
        f"--cluster-signing-cert-file={p['ca.crt']}",
        f"--cluster-signing-key-file={p['ca.key']}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--node-monitor-period=2s",
        f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_SECONDS}s",
        "--profiling=false",
    ]


def scheduler_argv(binary: Path, ports: dict[str, int], p: dict[str, Path], kubeconfig: Path) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        *_delegated(kubeconfig),
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['kube-scheduler']}",
        *_serving(p),
        "--leader-elect=false",
        "--profiling=false",
    ]


def kwok_argv(
    kwok: Path, ports: dict[str, int], p: dict[str, Path], kubeconfig: Path, stages: Iterable[Path]
) -> list[str]:
    return [
        str(kwok),
        f"--kubeconfig={kubeconfig}",
        *[f"--config={s}" for s in stages],
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        f"--tls-cert-file={p['serving.crt']}",
        f"--tls-private-key-file={p['serving.key']}",
        "--node-ip=127.0.0.1",
        f"--node-port={ports['kwok']}",
        f"--server-address=127.0.0.1:{ports['kwok']}",
        "--node-lease-duration-seconds=40",
        f"--cidr={POD_CIDR}",
    ]
