"""Real Kueue v0.17.0 beside the control plane: its one manager binary, built from the pinned module
(``e2e/kube/build.py``, ``CONTROLLERS``) and run as a local process with the admin kubeconfig.

    kueue = Kueue(cluster, build.controllers(wait_seconds=900)).start()   # webhooks answer through the API server
    kueue.queues(namespace, "lq", "cq", {"nvidia.com/gpu": "2"})
    ...
    kueue.stop()

How the pieces meet, all on loopback:
- Kueue's CRDs come from its Go module (``e2e/kube/crds.py``, ``KUEUE_CRDS``: every kind, its manager watches them all);
- the webhook server listens on ``127.0.0.1`` with a certificate of the harness's PKI (``pki.issue``, IP SAN
  ``127.0.0.1``). Internal cert management is off, so the harness registers the webhooks itself, by
  ``clientConfig.url`` with the harness CA as caBundle: only the batch/v1 Job entries and those of Kueue's own
  kinds from Kueue's ``config/components/webhook/manifests.yaml``, the Job ones only for Jobs with a queue name
  (``JOB_SELECTOR``). Its pod, Deployment, StatefulSet (and other frameworks') webhooks are left out:
  failurePolicy Fail would make every other test depend on Kueue. The
  conversion webhook of the four kinds Kueue converts (v1beta1 <-> v1beta2) is set on their CRDs the same way and
  taken off again by ``stop()``;
- with internal cert management off, Kueue reads its metrics certificate from the hard-coded
  ``/etc/kueue/metrics/certs`` (cmd/kueue/main.go) and exits without it. Nothing is written to this machine's
  /etc: Kueue runs in a private mount namespace (root: ``unshare --mount``) where /etc is an overlay of the real
  one with a tmpfs upper layer, and the harness's certificate folder is bound at that path;
- the visibility server is off (``--feature-gates=VisibilityOnDemand=false``), leader election is off, the
  health probes and the metrics server bind to ``127.0.0.1``.
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from e2e.harness.pki import issue
from e2e.harness.poll import wait_for
from e2e.harness.processes import Component, _free_ports, spawn, stop_process
from e2e.harness.rest import ApiError
from e2e.kube import build
from e2e.kube.crds import KUEUE_MODULE, install_crds, kueue_crd_files, module_files
from e2e.kube.thirdparty import Controller, ensure_namespace, http_ok
from pooling_operator.api import kueue as kueue_api

if TYPE_CHECKING:
    from e2e.kube.controlplane import ControlPlane

NAMESPACE = "kueue-system"  # Kueue's own namespace (config ``namespace``); jobs there are not managed
# Kueue's names, as the operator knows them (pooling_operator/api/kueue.py, one place)
GROUP, _, VERSION = kueue_api.API_VERSION.partition("/")  # the storage version; v1beta1 is served too, by conversion
API = f"/apis/{GROUP}/{VERSION}"
QUEUE_LABEL = kueue_api.QUEUE_LABEL
PRIORITY_CLASS_LABEL = kueue_api.PRIORITY_LABEL
MIN_PARALLELISM_ANNOTATION = kueue_api.MIN_PARALLELISM_ANNOTATION
JOB_UID_LABEL = kueue_api.JOB_UID_LABEL
RESOURCES = ("cpu", "memory", "nvidia.com/gpu")  # what a ClusterQueue of ``queues`` covers
METRICS_CERT_DIR = "/etc/kueue/metrics/certs"  # hard-coded in cmd/kueue/main.go
WEBHOOK_MANIFESTS = "config/components/webhook/manifests.yaml"
WEBHOOK_CONFIGURATIONS = {  # ours, named apart from Kueue's own so that a real install would not collide
    "MutatingWebhookConfiguration": "vpo-e2e-kueue-mutating",
    "ValidatingWebhookConfiguration": "vpo-e2e-kueue-validating",
}
WEBHOOK_GROUPS = {GROUP, "batch"}  # the rules kept from Kueue's manifests: its own kinds and batch/v1 Job
# Jobs reach Kueue's webhooks only with a queue name (Kueue's manifests send it every Job): a Kueue that died
# without its stop() (a killed run on a reused control plane) then blocks no other test's Jobs. Jobs without the
# label are not Kueue's here anyway: manageJobsWithoutQueueName is false and no LocalQueue is named "default".
JOB_SELECTOR = {"matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]}
# the kinds whose conversion Kueue serves at /convert ("Conversion webhook enabled" in its log); its kustomization
# also patches multikueueclusters, which this binary registers no converter for: left at strategy None
CONVERTED_CRDS = ("clusterqueues", "localqueues", "cohorts", "workloads")
# /etc seen by Kueue: an overlay of the real one over a private tmpfs, with the certificate folder bound inside.
MOUNT_SCRIPT = (
    'set -e; scratch=$1; certs=$2; shift 2; '
    'mount -t tmpfs -o mode=0700 vpo-e2e-kueue "$scratch"; '
    'mkdir -p "$scratch/upper/kueue/metrics/certs" "$scratch/work"; '
    'mount -t overlay vpo-e2e-kueue-etc -o "lowerdir=/etc,upperdir=$scratch/upper,workdir=$scratch/work" /etc; '
    f'mount --bind "$certs" {METRICS_CERT_DIR}; '
    'exec "$@"'
)


def mount_namespaces() -> str | None:
    """Why Kueue cannot run here (no private mount namespace with an overlay: not root), or None."""
    try:
        res = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot make a private mount namespace for Kueue's fixed metrics-cert path: {e}"
    if res.returncode != 0:
        return f"cannot make a private mount namespace for Kueue's fixed metrics-cert path: {res.stderr.strip()}"
    return None


class Kueue(Controller):
    LOGS = ("kueue",)

    def __init__(self, cluster: ControlPlane, binaries: dict[str, Path]):
        super().__init__(cluster, binaries, "kueue")
        self.component: Component | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def _start(self, timeout: float) -> None:
        install_crds(self.cluster, kueue_crd_files(), timeout=timeout)
        certs = issue(self.cluster.pki, self.dir / "certs", "kueue", ["localhost"], ["127.0.0.1"])
        self.ports = dict(zip(("webhook", "health", "metrics"), _free_ports(3), strict=True))
        self._namespace()
        config = self.dir / "config.yaml"
        config.write_text(yaml.safe_dump(self._config(certs["tls.crt"].parent)))
        scratch = self.dir / "etc-overlay"
        scratch.mkdir(exist_ok=True)
        argv = [str(self.binaries["kueue"]), f"--config={config}", "--feature-gates=VisibilityOnDemand=false",
                "--zap-log-level=info", "--zap-encoder=console"]
        wrapped = ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", MOUNT_SCRIPT, "sh",
                   str(scratch), str(certs["tls.crt"].parent), *argv]
        self.component = spawn("kueue", wrapped, self.log_dir / "kueue.log", run_id=self.cluster.run_id,
                               cwd=self.dir, env=self._env())
        probe = f"http://127.0.0.1:{self.ports['health']}/readyz"
        wait_for(lambda: http_ok(probe), timeout=timeout, what="kueue /readyz", alive=self._alive)
        self._register(certs["ca.crt"])
        wait_for(self._webhook_answers, timeout=timeout, what="Kueue's Job webhook through the API server",
                 alive=self._alive)

    def stop(self) -> None:
        """Webhooks and conversion off first (failurePolicy Fail must not outlive the server), then the process."""
        api = self.cluster.api
        if api is not None:
            for kind, name in WEBHOOK_CONFIGURATIONS.items():
                with contextlib.suppress(Exception):
                    api.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/{name}")
            for plural in CONVERTED_CRDS:
                with contextlib.suppress(Exception):
                    _merge_patch(api, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}",
                                 {"spec": {"conversion": {"strategy": "None", "webhook": None}}})
        if self.component is not None:
            stop_process(self.component.proc, 10, start_time=self.component.start_time)
            self.component = None

    # -- what the tests use -----------------------------------------------------------------------

    def queues(self, namespace: str, local_queue: str, cluster_queue: str, quota: dict[str, str],
               flavor: str = "default", preemption: bool = True) -> dict[str, Any]:
        """A ResourceFlavor ``flavor``, a ClusterQueue ``cluster_queue`` for every namespace with the nominal
        ``quota`` per resource of ``RESOURCES`` (``"0"`` where not given) and, with ``preemption``, preemption of
        lower-priority workloads within it; and a LocalQueue ``local_queue`` in ``namespace`` pointing at it.
        Returns the ClusterQueue as applied."""
        api = self._api()
        api.apply(f"{API}/resourceflavors/{flavor}", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": flavor}, "spec": {},
        })
        unknown = set(quota) - set(RESOURCES)
        if unknown:
            raise ValueError(f"quota for {sorted(unknown)}: a ClusterQueue of queues() covers {list(RESOURCES)}")
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "resourceGroups": [{
                "coveredResources": list(RESOURCES),
                "flavors": [{"name": flavor, "resources": [
                    {"name": r, "nominalQuota": quota.get(r, "0")} for r in RESOURCES
                ]}],
            }],
        }
        if preemption:
            spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
        cq = api.apply(f"{API}/clusterqueues/{cluster_queue}", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
            "spec": spec,
        })
        api.apply(f"{API}/namespaces/{namespace}/localqueues/{local_queue}", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
            "metadata": {"name": local_queue, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        })
        return cq

    def priority_class(self, name: str, value: int, description: str = "") -> dict[str, Any]:
        """A WorkloadPriorityClass; a Job takes it by the label ``PRIORITY_CLASS_LABEL``."""
        return self._api().apply(f"{API}/workloadpriorityclasses/{name}", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
            "value": value, "description": description or f"e2e priority {value}",
        })

    def workload_of(self, namespace: str, job_name: str, version: str = VERSION) -> dict[str, Any] | None:
        """The Workload Kueue made for the Job ``job_name`` (the one its owner reference names), or None."""
        items = self._api().get(f"/apis/{GROUP}/{version}/namespaces/{namespace}/workloads").get("items") or []
        for wl in items:
            for ref in wl["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1" and ref.get("name") == job_name:
                    return wl
        return None

    # -- internals --------------------------------------------------------------------------------

    def _api(self) -> Any:
        api = self.cluster.api
        assert api is not None, "the control plane is not started"
        return api

    def _env(self) -> dict[str, str]:
        return dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig))

    def _config(self, cert_dir: Path) -> dict[str, Any]:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "manageJobsWithoutQueueName": False,
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": self.ports["webhook"], "certDir": str(cert_dir)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.ports['health']}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.ports['metrics']}"},
            "leaderElection": {"leaderElect": False},
            "integrations": {"frameworks": ["batch/job"]},
        }

    def _namespace(self) -> None:
        ensure_namespace(self._api(), NAMESPACE)

    def _register(self, ca: Path) -> None:
        """Kueue's own webhook entries for its kinds and batch/v1 Job, by URL; the conversion webhook on its CRDs."""
        api = self._api()
        ca_bundle = base64.b64encode(ca.read_bytes()).decode()
        manifests = module_files(KUEUE_MODULE, build.controller_versions()["kueue"], (WEBHOOK_MANIFESTS,))[0]
        for doc in yaml.safe_load_all(manifests.read_text()):
            if not doc or doc.get("kind") not in WEBHOOK_CONFIGURATIONS:
                continue
            hooks = []
            for hook in doc["webhooks"]:
                if not all(set(rule["apiGroups"]) <= WEBHOOK_GROUPS for rule in hook["rules"]):
                    continue
                if any("batch" in rule["apiGroups"] for rule in hook["rules"]):
                    hook["objectSelector"] = JOB_SELECTOR
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{self.ports['webhook']}{path}",
                                        "caBundle": ca_bundle}
                hooks.append(hook)
            kind, name = doc["kind"], WEBHOOK_CONFIGURATIONS[doc["kind"]]
            api.apply(f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/{name}", {
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name},
                "webhooks": hooks,
            })
        for plural in CONVERTED_CRDS:
            _merge_patch(api, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}", {
                "spec": {"conversion": {"strategy": "Webhook", "webhook": {
                    "clientConfig": {"url": f"https://127.0.0.1:{self.ports['webhook']}/convert",
                                     "caBundle": ca_bundle},
                    "conversionReviewVersions": ["v1"],
                }}},
            })

    def _webhook_answers(self) -> bool:
        """A dry-run Job with a queue name comes back suspended: Kueue's mutating webhook is in the API server's
        path (the configuration is picked up by the API server a moment after it is written)."""
        job = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generateName": "kueue-probe-", "namespace": "default", "labels": {QUEUE_LABEL: "probe"}},
            "spec": {"suspend": False, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox"}]}}},
        }
        status, body = self._api().request("POST", "/apis/batch/v1/namespaces/default/jobs", job,
                                           params={"dryRun": "All"})
        if status != 201:
            raise ApiError("dry-run create", "jobs", status, body)
        return body["spec"].get("suspend") is True

    def _alive(self) -> None:
        if self.component is not None and (rc := self.component.proc.poll()) is not None:
            raise RuntimeError(f"kueue exited with {rc}:\n{self.log_tails(40)}")


def _merge_patch(api: Any, path: str, patch: dict[str, Any]) -> Any:
    status, body = api.request("PATCH", path, patch, content_type="application/merge-patch+json")
    if status != 200:
        raise ApiError("merge-patch", path, status, body)
    return body

