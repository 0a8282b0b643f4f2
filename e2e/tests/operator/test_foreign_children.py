"""A child's name already held by an object the resource does not control (issue 42.1), on the API server, for every
child kind the operator makes: the object is never written, adopted or deleted; the resource says Ready=False
ChildNameTaken naming it and who holds it, with one Warning event; what would name it is not created; once the
object is gone the resource goes on by itself. And between our own kinds: a ScoringService named like a
PoolingService takes none of its children, and deleting it leaves them alone.

The children are the operator's own rendering (``pooling-operator render``) of four resources that between them
have every child kind: a PoolingService with monitors, a NetworkPolicy, a PodDisruptionBudget and KEDA; one on a
DRA share (its ResourceClaimTemplate); a HiddenStateJob; a ModelCache. The foreign object is that child with its
labels and selectors changed to someone else's and no owner, created before the resource. Every wait polls with
a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from e2e.harness.config import GPU_PRODUCT
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.tests.operator.test_services import apply, cond, events, get, svc
from pooling_operator.api.kinds import KINDS
from pooling_operator.k8s.api import FIELD_MANAGER
from tests.factories import hidden_states, model_cache, pooling

GPU = {"gpu": {"count": 1, "product": GPU_PRODUCT}}
FOREIGN = {"app": "someone-else"}


def owners(namespace: str) -> list[dict[str, Any]]:
    share = {"product": GPU_PRODUCT, "share": {"memory": "4Gi", "via": "dra", "deviceClassName": "gpu.example.com"}}
    return [
        pooling({"resources": GPU, "monitoring": {"serviceMonitor": True, "podMonitor": True}, "networkPolicy": {},
                 "autoscaling": {"minReplicas": 2, "maxReplicas": 3, "backend": "keda",
                                 "front": {"kedaHttpAddOn": {"hosts": ["svc.example.com"]}}}}, name="svc", namespace=namespace),
        pooling({"model": {"hints": {"numParameters": 22713216, "maxModelLen": 512}}, "engine": {"maxModelLen": 512},
                 "resources": {"gpu": share}}, name="shared", namespace=namespace),
        hidden_states({"resources": GPU}, name="states", namespace=namespace),
        model_cache({"storage": {"size": "2Gi"}}, name="cache", namespace=namespace),
    ]  # fmt: skip


def rendered(docs: list[dict[str, Any]], tmp: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(owner, child) for each child the operator renders for `docs`, as `pooling-operator render` prints them."""
    pairs = []
    for i, doc in enumerate(docs):
        f = tmp / f"owner-{i}.yaml"
        f.write_text(yaml.safe_dump(doc))
        out = subprocess.run([sys.executable, "-m", "pooling_operator", "render", str(f)], capture_output=True, text=True, check=True)
        pairs += [(doc, child) for child in yaml.safe_load_all(out.stdout)]
    return pairs


def foreign(child: dict[str, Any]) -> dict[str, Any]:
    """The child as someone else would have made it: no owner, none of our labels or annotations, selectors of its own."""
    obj = copy.deepcopy(child)
    obj.pop("status", None)
    obj["metadata"] = {"name": child["metadata"]["name"], "namespace": child["metadata"]["namespace"], "labels": dict(FOREIGN)}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("labels", "matchLabels"):
                if isinstance(node.get(key), dict):
                    node[key] = dict(FOREIGN)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj.get("spec"))
    if obj["kind"] == "Service":
        obj["spec"]["selector"] = dict(FOREIGN)
    if obj["kind"] == "Job":
        obj["spec"].pop("selector", None)
        obj["spec"].pop("manualSelector", None)
    return obj


def at(obj: dict[str, Any]) -> str:
    return KINDS[obj["kind"]].path(obj["metadata"]["namespace"], obj["metadata"]["name"])


def untouched(cluster: ControlPlane, obj: dict[str, Any]) -> dict[str, Any]:
    now = get(cluster, at(obj))
    assert now is not None, f"{obj['kind']} {obj['metadata']['name']} is gone"
    meta = now["metadata"]
    assert not meta.get("ownerReferences"), f"{obj['kind']} {meta['name']} was given owners: {meta['ownerReferences']}"
    assert meta.get("labels") == FOREIGN, f"{obj['kind']} {meta['name']}'s labels changed: {meta.get('labels')}"
    managers = {m.get("manager") for m in meta.get("managedFields") or []}
    assert FIELD_MANAGER not in managers, f"the operator wrote {obj['kind']} {meta['name']}: {managers}"
    return now


def test_every_child_kind_whose_name_is_held_is_left_alone_said_and_then_made(
    cluster: ControlPlane, operator: OperatorProcess, tmp_path: Path
) -> None:
    cases = []  # (namespace, owner, foreign child): one namespace a child kind, the first resource that makes it
    seen: set[str] = set()
    for owner, child in rendered(owners("placeholder"), tmp_path):
        if child["kind"] in seen:
            continue
        seen.add(child["kind"])
        ns = cluster.create_namespace(f"taken-{child['kind'].lower()}")
        owner, child = copy.deepcopy(owner), copy.deepcopy(child)
        owner["metadata"]["namespace"] = child["metadata"]["namespace"] = ns
        front = ((owner["spec"].get("autoscaling") or {}).get("front") or {}).get("kedaHttpAddOn")
        if front:  # a front host belongs to one service cluster-wide (issue 65): each namespace's owner its own
            front["hosts"] = [f"svc.{ns}.example.com"]
            for rule in (child["spec"].get("rules") or []) if child["kind"] == "InterceptorRoute" else []:
                rule["hosts"] = list(front["hosts"])  # the taken route names the same host, as one left behind would
        cases.append((ns, owner, foreign(child)))
    assert seen == {k for k, kind in KINDS.items() if kind.role == "child"}, "a child kind no case makes"
    try:
        for _, _, obj in cases:
            cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(obj))
        for _, owner, _ in cases:
            apply(cluster, owner)

        def warnings(ns: str, owner: dict[str, Any]) -> list[dict[str, Any]]:
            return [e for e in events(cluster, ns, owner["metadata"]["name"]) if e["reason"] == "ChildNameTaken" and e["type"] == "Warning"]

        def said(ns: str, owner: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any] | None:
            body = get(cluster, f"{at(owner)}")
            ready = cond(body, "Ready")
            return body if ready.get("reason") == "ChildNameTaken" and f"{obj['kind']} {obj['metadata']['name']} exists with no controller" in ready.get("message", "") else None

        for ns, owner, obj in cases:
            body = wait_for(lambda ns=ns, owner=owner, obj=obj: said(ns, owner, obj), timeout=60,
                            what=f"{owner['kind']} {ns}/{owner['metadata']['name']} saying {obj['kind']} {obj['metadata']['name']} is taken")
            assert cond(body, "Ready")["status"] == "False"
            untouched(cluster, obj)
            wait_for(lambda ns=ns, owner=owner: warnings(ns, owner), timeout=30, what=f"a ChildNameTaken event in {ns}")
        # what names a taken object was not created: a Job's RoleBinding and Job, a ModelCache's fill Job, the
        # ScaledObject of a Deployment
        for ns, owner, obj in cases:
            assert len(warnings(ns, owner)) == 1, "one Warning a taken object, not one a reconcile"
            untouched(cluster, obj)
            if obj["kind"] in ("ServiceAccount", "Role", "ConfigMap", "PersistentVolumeClaim", "ResourceClaimTemplate", "Deployment"):
                later = {"ServiceAccount": ["RoleBinding", "Job"], "Role": ["RoleBinding", "Job"], "ConfigMap": ["Job"],
                         "PersistentVolumeClaim": ["Job"], "ResourceClaimTemplate": [], "Deployment": ["ScaledObject"]}[obj["kind"]]
                for kind in later:
                    items = get(cluster, KINDS[kind].path(ns))["items"]
                    assert not [i for i in items if i["metadata"].get("labels") != FOREIGN], f"{kind} created beside a taken {obj['kind']}"
        # the names freed, every resource goes on by itself and the child it makes is its own
        for _, _, obj in cases:
            cluster.api.request("DELETE", at(obj))  # type: ignore[union-attr]
        for ns, owner, obj in cases:
            def ours(owner: dict[str, Any] = owner, obj: dict[str, Any] = obj) -> bool:
                uid = get(cluster, at(owner))["metadata"]["uid"]
                child = get(cluster, at(obj))
                refs = (child or {}).get("metadata", {}).get("ownerReferences") or []
                return any(r.get("controller") and r.get("uid") == uid for r in refs)

            wait_for(ours, timeout=60, what=f"{obj['kind']} {ns}/{obj['metadata']['name']} made by its {owner['kind']} once free")
            # the status follows the child in the same reconcile, after its later waves: waited for, not raced
            wait_for(lambda owner=owner: cond(get(cluster, at(owner)), "Ready").get("reason") != "ChildNameTaken", timeout=30,
                     what=f"{owner['kind']} {ns}/{owner['metadata']['name']} no longer saying a name is taken")
    finally:
        for ns, _, _ in cases:
            cluster.delete_namespace(ns)


def test_a_scoring_service_named_like_a_pooling_service_takes_none_of_its_children(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, svc(namespace, "twin"))
    wait_for(lambda: get(cluster, KINDS["Service"].path(namespace, "twin")), timeout=60, what="the PoolingService's Service")
    before = {kind: get(cluster, KINDS[kind].path(namespace, "twin")) for kind in ("Deployment", "Service")}
    apply(cluster, svc(namespace, "twin", kind="scs"))

    def taken() -> dict[str, Any] | None:
        body = get(cluster, KINDS["ScoringService"].path(namespace, "twin"))
        return body if cond(body, "Ready").get("reason") == "ChildNameTaken" else None

    body = wait_for(taken, timeout=60, what="the ScoringService saying its names are taken")
    assert "exists controlled by PoolingService twin" in cond(body, "Ready")["message"]
    cluster.kubectl("delete", "scoringservices.vllm-pooling.io/twin", "-n", namespace, "--wait=true")
    # the garbage collector has nothing of the PoolingService's to take with the ScoringService
    for kind, obj in before.items():
        now = get(cluster, KINDS[kind].path(namespace, "twin"))
        assert now is not None and now["metadata"]["uid"] == obj["metadata"]["uid"], f"the PoolingService's {kind} was replaced or deleted"
        assert [r["kind"] for r in now["metadata"]["ownerReferences"]] == ["PoolingService"]
