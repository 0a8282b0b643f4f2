"""PoolingService and ScoringService reconciled by the running operator on the real control plane.

Every wait polls with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import concurrent.futures
import re
import statistics
import time
from typing import Any

import yaml

from e2e.harness.audit import split
from e2e.harness.config import GPU_PRODUCT, GPU_PRODUCT_LABEL
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from pooling_operator.api.kinds import KINDS
from tests.factories import pooling, scoring

API = "/apis/vllm-pooling.io/v1alpha1"
GPU = {"gpu": {"count": 1, "product": GPU_PRODUCT}, "cpu": "1", "memory": "1Gi"}


def apply(cluster: ControlPlane, obj: dict[str, Any], *, check: bool = True) -> Any:
    return cluster.kubectl(
        "apply",
        "--server-side",
        "--field-manager=e2e-user",
        "--force-conflicts",
        "-f",
        "-",
        input=yaml.safe_dump(obj),
        check=check,
    )


def svc(
    namespace: str, name: str = "emb", spec: dict[str, Any] | None = None, kind: str = "pls"
) -> dict[str, Any]:
    factory = pooling if kind == "pls" else scoring
    obj = factory({"resources": GPU, **(spec or {})}, name=name, namespace=namespace)
    return obj


def path(namespace: str, plural: str, name: str = "") -> str:
    """The API path of any kind the operator knows, by its plural (api/kinds.py: one table, so no kind falls
    through to a path that only 404s)."""
    kind = next((k for k in KINDS.values() if k.plural == plural), None)
    assert kind is not None, f"{plural}: not a kind of api/kinds.KINDS"
    return kind.path(namespace, name or None)


def get(cluster: ControlPlane, p: str) -> Any:
    status, body = cluster.api.request("GET", p)  # type: ignore[union-attr]
    return body if status == 200 else None


def cond(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return c
    return {}


def ready(
    cluster: ControlPlane, namespace: str, name: str, plural: str = "poolingservices"
) -> dict[str, Any] | None:
    obj = get(cluster, path(namespace, plural, name))
    if (
        obj
        and cond(obj, "Ready").get("status") == "True"
        and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
    ):
        return obj
    return None


def events(cluster: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    items = get(cluster, path(namespace, "events"))["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


def test_create_to_ready_with_owned_children(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    apply(
        cluster,
        svc(
            namespace,
            spec={"service": {"apiKeySecretRef": {"name": "k", "key": "k"}}, "embeddingSpace": "v1"},
        ),
    )
    obj = wait_for(lambda: ready(cluster, namespace, "emb"), timeout=90, what="PoolingService Ready")
    uid = obj["metadata"]["uid"]
    for plural in ("deployments", "services", "poddisruptionbudgets"):
        child = get(cluster, path(namespace, plural, "emb"))
        assert child is not None, plural
        [ref] = child["metadata"]["ownerReferences"]
        assert (ref["uid"], ref["controller"], ref["kind"]) == (uid, True, "PoolingService")
    pods = get(cluster, path(namespace, "pods"))["items"]
    assert pods and all(p["status"]["phase"] == "Running" for p in pods)
    nodes = {n["metadata"]["name"]: n for n in get(cluster, "/api/v1/nodes")["items"]}
    assert all(
        nodes[p["spec"]["nodeName"]]["metadata"]["labels"].get(GPU_PRODUCT_LABEL) == GPU_PRODUCT for p in pods
    )
    status = obj["status"]
    assert status["replicas"] == 1 and status["readyReplicas"] == 1
    assert status["endpoint"] == f"http://emb.{namespace}.svc:8000"
    assert status["effective"]["args"][:3] == ["vllm", "serve", "sentence-transformers/all-MiniLM-L6-v2"]
    assert "/pooling" in status["unprotectedRoutes"] and "/v1/embeddings" in status["routes"]
    assert status["embeddingSpace"]["label"] == "v1" and status["embeddingSpace"]["fingerprint"].startswith(
        "sha256:"
    )
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "True",
        "SpecValid": "True",
        "Progressing": "False",
        "Degraded": "False",
    }
    assert "finalizers" not in obj["metadata"]
    # Events follow the writes they tell of (posted in the background): wait for them, not race them.
    wait_for(lambda: {"Created", "RoutesNotProtected", "Available"} <= {e["reason"] for e in events(cluster, namespace, "emb")},
             timeout=15, what="the Created, RoutesNotProtected and Available events")
    table = cluster.kubectl("get", "pooling", "-n", namespace).stdout
    assert re.search(r"emb\s+sentence-transformers/all-MiniLM-L6-v2\s+embed\s+True\s+Available\s+1\s+1", table), table


def test_update_rolls_out_and_scale_subresource(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, svc(namespace))
    wait_for(lambda: ready(cluster, namespace, "emb"), timeout=90, what="Ready")
    apply(cluster, svc(namespace, spec={"engine": {"maxNumSeqs": 64}}))

    def rolled() -> dict[str, Any] | None:
        obj = ready(cluster, namespace, "emb")
        return obj if obj and "--max-num-seqs" in obj["status"]["effective"]["args"] else None

    obj = wait_for(rolled, timeout=90, what="new effective args")
    args = obj["status"]["effective"]["args"]
    assert args[args.index("--max-num-seqs") + 1] == "64"
    dep = get(cluster, path(namespace, "deployments", "emb"))
    assert "64" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    cluster.kubectl("scale", "pls/emb", "-n", namespace, "--replicas=2")
    wait_for(
        lambda: (o := ready(cluster, namespace, "emb")) and o["status"]["readyReplicas"] == 2,
        timeout=90,
        what="2 replicas",
    )


def test_embedding_space_rule_enforced_by_the_api_server(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, svc(namespace, spec={"embeddingSpace": "v1"}))
    res = apply(
        cluster, svc(namespace, spec={"embeddingSpace": "v1", "pooling": {"normalize": False}}), check=False
    )
    assert res.returncode != 0 and "change embeddingSpace to a new label" in res.stderr, res.stderr
    ok = apply(
        cluster, svc(namespace, spec={"embeddingSpace": "v2", "pooling": {"normalize": False}}), check=False
    )
    assert ok.returncode == 0, ok.stderr


def test_invalid_spec_gets_spec_valid_false_and_no_children(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    # Admitted by the API server (CEL cannot know BertModel serves no classify), refused by the operator.
    apply(cluster, svc(namespace, name="bad", spec={"task": "classify"}))

    def invalid() -> dict[str, Any] | None:
        obj = get(cluster, path(namespace, "poolingservices", "bad"))
        return obj if cond(obj, "SpecValid").get("status") == "False" else None

    obj = wait_for(invalid, timeout=60, what="SpecValid=False")
    message = cond(obj, "SpecValid")["message"]
    assert message.startswith("spec.task: BertModel") and "Unsupported task: classify" in message
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert get(cluster, path(namespace, "deployments", "bad")) is None
    wait_for(lambda: any(e["type"] == "Warning" and e["reason"] == "InvalidSpec" for e in events(cluster, namespace, "bad")),
             timeout=15, what="the InvalidSpec event")
    # Fixing the spec is enough: no retries were pending, the update itself triggers the reconcile.
    apply(cluster, svc(namespace, name="bad", spec={"task": "embed"}))
    wait_for(lambda: ready(cluster, namespace, "bad"), timeout=90, what="Ready after the fix")


def test_drift_is_reverted(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    apply(cluster, svc(namespace))
    wait_for(lambda: ready(cluster, namespace, "emb"), timeout=90, what="Ready")
    cluster.kubectl(
        "patch",
        "deployment/emb",
        "-n",
        namespace,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/strategy/rollingUpdate/maxSurge","value":3}]',
    )
    cluster.kubectl("delete", "service/emb", "-n", namespace)
    wait_for(lambda: get(cluster, path(namespace, "services", "emb")), timeout=60, what="Service recreated")
    wait_for(
        lambda: (
            get(cluster, path(namespace, "deployments", "emb"))["spec"]["strategy"]["rollingUpdate"][
                "maxSurge"
            ]
            == 0
        ),
        timeout=60,
        what="maxSurge reverted",
    )


def test_switched_off_child_is_deleted(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, svc(namespace, spec={"monitoring": {"serviceMonitor": True}}))
    wait_for(
        lambda: get(cluster, path(namespace, "servicemonitors", "emb")), timeout=60, what="ServiceMonitor"
    )
    apply(cluster, svc(namespace, spec={"monitoring": {"serviceMonitor": False}}))
    wait_for(
        lambda: get(cluster, path(namespace, "servicemonitors", "emb")) is None,
        timeout=60,
        what="ServiceMonitor deleted",
    )


def test_a_front_host_belongs_to_one_service(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    """Issue 65: the KEDA HTTP add-on routes a host to one InterceptorRoute, cluster-wide. A second service naming a host
    the first one's route holds gets no route (Ready False, FrontHostClaimed, naming the first) while the first keeps its
    own; once the first lets the host go, the second takes it by itself."""
    host = f"{namespace}.example.com"
    routes = f"/apis/http.keda.sh/v1beta1/namespaces/{namespace}/interceptorroutes"
    front = {"minReplicas": 1, "maxReplicas": 2, "front": {"kedaHttpAddOn": {"hosts": [host]}}}
    apply(cluster, svc(namespace, name="first", spec={"autoscaling": front}))
    wait_for(lambda: get(cluster, f"{routes}/first"), timeout=60, what="the first service's InterceptorRoute")
    apply(cluster, svc(namespace, name="second", spec={"autoscaling": front}))

    def held() -> dict[str, Any] | None:
        c = cond(get(cluster, path(namespace, "poolingservices", "second")), "Ready")
        return c if c.get("reason") == "FrontHostClaimed" else None

    said = wait_for(held, timeout=60, what="Ready False, FrontHostClaimed, on the second claimant")
    assert said["status"] == "False" and f"{host} (PoolingService {namespace}/first routes it)" in said["message"], said
    assert get(cluster, f"{routes}/second") is None  # never written
    assert get(cluster, f"{routes}/first")["spec"]["rules"] == [{"hosts": [host]}]
    assert "FrontHostClaimed" in {e["reason"] for e in events(cluster, namespace, "second")}
    apply(cluster, svc(namespace, name="first", spec={"autoscaling": {**front, "front": {"kedaHttpAddOn": {"hosts": [f"other.{host}"]}}}}))
    taken = wait_for(lambda: get(cluster, f"{routes}/second"), timeout=60, what="the second service's route, once the host is free")
    assert taken["spec"]["rules"] == [{"hosts": [host]}]


def test_delete_garbage_collects(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    apply(cluster, svc(namespace, kind="scs", name="rerank"))
    wait_for(
        lambda: ready(cluster, namespace, "rerank", "scoringservices"),
        timeout=90,
        what="ScoringService Ready",
    )
    obj = get(cluster, path(namespace, "scoringservices", "rerank"))
    assert obj["status"]["contract"] == {"mode": "crossEncoder", "route": "/rerank"}
    cluster.kubectl("delete", "scs/rerank", "-n", namespace, "--wait=true")
    for plural in ("deployments", "services", "poddisruptionbudgets"):
        wait_for(
            lambda p=plural: get(cluster, path(namespace, p, "rerank")) is None,
            timeout=60,
            what=f"{plural} collected",
        )


def _writes(cluster: ControlPlane) -> dict[str, float]:
    """Mutating requests the API server counted, by resource, from its own metrics."""
    status, text = cluster.api.request("GET", "/metrics")  # type: ignore[union-attr]
    assert status == 200
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if labels.get("verb") in ("POST", "PUT", "PATCH", "APPLY", "DELETE", "CREATE", "UPDATE"):
            key = f"{labels.get('group', '')}/{labels.get('resource')}/{labels.get('subresource', '')}"
            out[key] = out.get(key, 0) + float(line.rsplit(" ", 1)[1])
    return out


WATCHED = (
    "vllm-pooling.io/poolingservices/",
    "vllm-pooling.io/poolingservices/status",
    "vllm-pooling.io/scoringservices/",
    "vllm-pooling.io/scoringservices/status",
    "apps/deployments/",
    "/services/",
    "policy/poddisruptionbudgets/",
    "/events/",
    "events.k8s.io/events/",
    "monitoring.coreos.com/servicemonitors/",
)


def test_fifty_services_then_a_write_free_resync(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    names = [f"svc-{i:02d}" for i in range(50)]
    errors_before = _count(operator, "error")
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda n: apply(
                    cluster,
                    svc(
                        namespace,
                        name=n,
                        spec={"resources": {"gpu": {"count": 0}, "cpu": "10m", "memory": "16Mi"}},
                    ),
                ),
                names,
            )
        )

    def all_ready() -> bool:
        items = get(cluster, path(namespace, "poolingservices"))["items"]
        return len(items) == 50 and all(cond(o, "Ready").get("status") == "True" for o in items)

    wait_for(all_ready, timeout=240, what="50 services Ready")
    elapsed = time.monotonic() - started

    def settled() -> bool:
        items = get(cluster, path(namespace, "poolingservices"))["items"]
        return all(cond(o, "Progressing").get("status") == "False" for o in items)

    wait_for(settled, timeout=60, what="every rollout complete")

    def complete_events() -> bool:
        # Events follow the status write that flipped Progressing: wait for all 50 before measuring.
        items = get(cluster, path(namespace, "events"))["items"]
        return len({e["involvedObject"]["name"] for e in items if e["reason"] == "Complete"}) == 50

    wait_for(complete_events, timeout=60, what="the 50 Complete events")
    assert _count(operator, "error") == errors_before
    # Steady state: nothing reconciles an idle service, so the operator sends nothing at all about this
    # namespace (the API server's audit log of the operator's requests) over two recheck periods (3 s each).
    created = split(cluster.audit.since(0, namespace))[2]  # the log is written: the creation is in it
    assert created.get("patch deployments", 0) >= 50 and created.get("patch services", 0) >= 50, created
    mark = cluster.audit.mark()
    window = time.monotonic() + 6
    wait_for(lambda: time.monotonic() >= window, timeout=30, what="a 6 s steady-state window")
    assert split(cluster.audit.since(mark, namespace))[2] == {}
    # An event that changes nothing of ours (a foreign label on every Deployment) reconciles each service once,
    # from the cache: not one read, not one write.
    visits = _count(operator, "ok")
    for n in names:
        cluster.kubectl("label", "deployment", "-n", namespace, n, "platform.example/seen=yes")
    wait_for(lambda: _count(operator, "ok") >= visits + 50, timeout=60, what="50 reconciles after the foreign labels")
    assert split(cluster.audit.since(mark, namespace))[2] == {}
    print(f"\n50 services Ready in {elapsed:.1f}s; operator RSS {operator.rss_bytes() / 2**20:.0f} MiB")


def test_a_restarted_operator_is_back_in_sync_without_a_request(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    """Restart with existing services: the first full pass reconciles every one of them from the cache and
    sends nothing about them (the audit log of the operator's requests), then reports that it is done."""
    names = [f"r{i}" for i in range(10)]
    for n in names:
        apply(cluster, svc(namespace, name=n, spec={"resources": {"gpu": {"count": 0}, "cpu": "10m", "memory": "16Mi"}}))

    def settled() -> bool:
        items = get(cluster, path(namespace, "poolingservices"))["items"]
        return len(items) == 10 and all(cond(o, "Ready").get("status") == "True" and cond(o, "Progressing").get("status") == "False"
                                        for o in items)

    wait_for(settled, timeout=120, what="10 services Ready and rolled out")
    operator.stop()
    mark = cluster.audit.mark()
    operator.start()
    first_pass = r"^vllm_pooling_operator_first_pass_seconds (\S+)$"
    wait_for(lambda: float((re.search(first_pass, operator.metrics(), re.M) or [0, 0])[1]) > 0, timeout=60, what="the first full pass")
    assert _count(operator, "ok") >= 10  # a new process: every service of ours was visited in that pass
    assert split(cluster.audit.since(mark, namespace))[2] == {}
    seconds = float(re.search(first_pass, operator.metrics(), re.M)[1])  # type: ignore[index]
    print(f"\nrestart: first full pass {seconds:.1f}s after start, no request about the 10 services")


def operator_writes(operator: OperatorProcess) -> float:
    """Objects the operator created, changed or deleted, statuses it wrote and the autoscaler's scale and status
    writes, by its own metrics (the API server's counters cannot tell clients apart, and other tests'
    controllers write too)."""
    pattern = r"^vllm_pooling_operator_(?:autoscaler_)?writes_total\{[^}]*\} (\S+)$"
    return sum(float(m.group(1)) for m in re.finditer(pattern, operator.metrics(), re.M))


def _count(operator: OperatorProcess, result: str) -> float:
    pattern = r'vllm_pooling_operator_reconciles_total\{kind="PoolingService",result="' + result + r'"\} (\S+)'
    return sum(float(m.group(1)) for m in re.finditer(pattern, operator.metrics()))


def _resyncs(operator: OperatorProcess) -> float:
    return _count(operator, "ok")


def test_time_to_ready(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    """Figures: apply -> Deployment created and apply -> Ready, median of 20 (printed, asserted only loosely)."""
    created, readies = [], []
    for i in range(20):
        name = f"t{i:02d}"
        t0 = time.monotonic()
        apply(cluster, svc(namespace, name=name))
        wait_for(
            lambda n=name: get(cluster, path(namespace, "deployments", n)),
            timeout=60,
            what="Deployment",
            interval=0.02,
            max_interval=0.05,
        )
        created.append(time.monotonic() - t0)
        wait_for(
            lambda n=name: ready(cluster, namespace, n),
            timeout=90,
            what="Ready",
            interval=0.02,
            max_interval=0.1,
        )
        readies.append(time.monotonic() - t0)
    print(
        f"\napply->Deployment median {statistics.median(created):.2f}s; apply->Ready median {statistics.median(readies):.2f}s"
    )
    assert statistics.median(readies) < 30


def test_startup_is_learned_from_the_pods(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    """kwok holds each pod 5 s before it turns Ready (the model-loading stand-in): status.startup learns 5 s
    within one second (the API's timestamps have whole seconds), per phase too, and the operator's histogram
    holds each pod's every phase."""
    from e2e.standin.exporters import READY_AFTER_ANNOTATION

    apply(cluster, svc(namespace, name="slow", spec={"replicas": 2, "template": {"annotations": {READY_AFTER_ANNOTATION: "5s"}}}))

    def learned() -> dict[str, Any] | None:
        obj = ready(cluster, namespace, "slow")
        st = ((obj or {}).get("status") or {}).get("startup") or {}
        return st if st.get("samples") == 2 else None

    st = wait_for(learned, timeout=60, what="status.startup with both pods")
    assert abs(st["typicalSeconds"] - 5.0) <= 1.0 and abs(st["lastSeconds"] - 5.0) <= 1.0, st
    # Per phase, from what the scheduler and kwok record: bound at once, the container started (kwok's pod-ready
    # stage) only after the 5 s stand-in, Ready with it.
    phases = st["phases"]
    assert set(phases) == {"scheduled", "initialized", "started", "ready"}, phases  # the API server sorts the keys
    assert phases["scheduled"]["typicalSeconds"] <= 1.0 and phases["started"]["typicalSeconds"] >= 4.0, phases
    assert phases["ready"]["typicalSeconds"] == st["typicalSeconds"] and all(p["samples"] == 2 for p in phases.values())
    metrics = operator.metrics()
    for phase in phases:
        series = (f'vllm_pooling_operator_replica_startup_seconds_count{{kind="PoolingService",name="slow",'
                  f'namespace="{namespace}",phase="{phase}"}}')
        assert f"{series} 2.0" in metrics, phase


def test_a_child_the_api_server_refuses_becomes_a_condition(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    """A free-form field (here a node-affinity operator) passes our schema but not the Deployment's."""
    # typed fields are refused at admission already (a toleration's effect is an enum in our schema)
    typo = svc(namespace, name="tol", spec={"template": {"tolerations": [{"key": "x", "operator": "Exists", "effect": "NoSchedul"}]}})
    res = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(typo), check=False)
    assert res.returncode != 0 and "NoSchedul" in res.stderr, res.stderr
    term = {"matchExpressions": [{"key": "x", "operator": "Bogus"}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    apply(cluster, svc(namespace, name="tol", spec={"template": {"affinity": affinity}}))

    def refused() -> dict[str, Any] | None:
        obj = get(cluster, path(namespace, "poolingservices", "tol"))
        return obj if cond(obj, "SpecValid").get("reason") == "ChildRejected" else None

    obj = wait_for(refused, timeout=60, what="SpecValid=False ChildRejected")
    assert "Bogus" in cond(obj, "SpecValid")["message"]
    # the Warning event is posted after the status write: wait for it, do not race it
    wait_for(
        lambda: any(e["reason"] == "ChildRejected" and e["type"] == "Warning" for e in events(cluster, namespace, "tol")),
        timeout=30, what="a ChildRejected Warning event",
    )


def test_autoscaling_takes_over_the_replica_count(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    """Turning autoscaling on must not drop the Deployment to 1 replica while no autoscaler has written yet."""
    apply(cluster, svc(namespace, spec={"replicas": 3}))
    wait_for(lambda: (o := ready(cluster, namespace, "emb")) and o["status"]["readyReplicas"] == 3, timeout=90, what="3 replicas")
    apply(cluster, svc(namespace, spec={"replicas": 3, "autoscaling": {"minReplicas": 1, "maxReplicas": 4}}))

    def handed_over() -> dict[str, Any] | None:
        dep = get(cluster, path(namespace, "deployments", "emb"))
        managers = {m["manager"] for m in dep["metadata"]["managedFields"] if "f:replicas" in m.get("fieldsV1", {}).get("f:spec", {})}
        return dep if managers == {"vllm-pooling-operator-autoscaler"} else None

    dep = wait_for(handed_over, timeout=60, what="replicas owned by the autoscaler's field manager")
    assert dep["spec"]["replicas"] == 3
