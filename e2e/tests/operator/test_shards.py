"""Two operator shards side by side on the real control plane (``pooling-operator run --shard I/2``): each
holds a Lease of its own and reconciles only the namespaces it owns; with one shard down the other's services
keep being reconciled and the down shard's are left as they were, until it is back. Every wait polls with a
deadline; nothing sleeps to synchronise."""

from __future__ import annotations

import json
import time

from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.tests.operator.test_services import API, apply, get, path, svc
from e2e.tests.operator.test_status_truth import alone  # noqa: F401  (the fixture: the session's operator stopped)
from pooling_operator.k8s.api import FIELD_MANAGER
from pooling_operator.runtime.shards import shard_of
from tests.factories import policy

LEASE = "e2e-shards"
POLICY = "e2e-shards"


def namespaces(cluster: ControlPlane) -> dict[int, str]:
    """A fresh namespace for each of the two shards."""
    stamp = int(time.time() * 1000) % 1_000_000
    found: dict[int, str] = {}
    i = 0
    while len(found) < 2:
        found.setdefault(shard_of(f"e2e-shard-{stamp}-{i}", 2), f"e2e-shard-{stamp}-{i}")
        i += 1
    for ns in found.values():
        assert cluster.api.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201  # type: ignore[union-attr]
    return found


def deployment(cluster: ControlPlane, namespace: str, name: str) -> dict | None:  # type: ignore[type-arg]
    return get(cluster, path(namespace, "deployments", name))


def lease_holder(cluster: ControlPlane, name: str) -> str | None:
    out = cluster.kubectl("get", "lease", "-n", "default", name, "-o", "json", check=False)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout)["spec"].get("holderIdentity")


def series_namespaces(op: OperatorProcess) -> set[str]:
    """The namespaces a shard publishes resource series for: the resources it owns."""
    return {line.split('namespace="', 1)[1].split('"', 1)[0] for line in op.metrics().splitlines()
            if line.startswith("vllm_pooling_operator_condition{") and 'namespace="e2e-shard-' in line}  # fmt: skip


def ours(obj: dict) -> list[dict]:
    """The managedFields entries of the operator's field manager: any write of ours changes their time or fields."""
    return [m for m in obj["metadata"].get("managedFields") or [] if m.get("manager") == FIELD_MANAGER]


def test_two_shards_reconcile_only_their_own_and_one_down_leaves_the_other_alone(cluster: ControlPlane, alone: None) -> None:  # noqa: F811
    began = time.monotonic()
    ns = namespaces(cluster)
    shards = [OperatorProcess(cluster, f"shard-{i}", standalone=False, lease_name=LEASE, extra=["--shard", f"{i}/2"]).start()
              for i in (0, 1)]  # fmt: skip
    try:
        for i, op in enumerate(shards):
            wait_for(lambda op=op: "Acquired Lease" in op.log.read_text(), timeout=30, what=f"shard {i} holds its Lease")
        holders = [lease_holder(cluster, f"{LEASE}-shard-{i}-of-2") for i in (0, 1)]
        assert all(holders) and holders[0] != holders[1], holders

        apply(cluster, policy({"default": False}, name=POLICY))
        for i in (0, 1):
            apply(cluster, svc(ns[i], name="first", spec={"autoscaling": {"policyRef": {"name": POLICY},
                                                                          "minReplicas": 1, "maxReplicas": 2}}))
        for i in (0, 1):
            wait_for(lambda i=i: deployment(cluster, ns[i], "first"), timeout=60, what=f"first's Deployment in {ns[i]}")
        # each publishes the series of, and logs, only what it owns
        wait_for(lambda: all(series_namespaces(op) == {ns[i]} for i, op in enumerate(shards)), timeout=30,
                 what="each shard's series name its own namespace only")  # fmt: skip
        for i, op in enumerate(shards):
            assert ns[1 - i] not in op.log.read_text(), f"shard {i} acted in the other shard's namespace"
        # the cluster-scoped policy's status, written by shard 0 alone, counts the services of both shards
        wait_for(lambda: ((get(cluster, f"{API}/autoscalingpolicies/{POLICY}") or {}).get("status") or {}).get("services") == 2,
                 timeout=30, what="the policy counts both shards' services")  # fmt: skip

        # shard 1 down: its namespace keeps what it had, gets nothing new; shard 0 goes on
        kept = deployment(cluster, ns[1], "first")
        shards[1].stop()
        apply(cluster, svc(ns[1], name="second"))
        apply(cluster, svc(ns[0], name="second"))  # after shard 1's: shard 0's one watch delivers both in order
        wait_for(lambda: deployment(cluster, ns[0], "second"), timeout=60, what="shard 0 reconciles on alone")
        assert deployment(cluster, ns[1], "second") is None, "a namespace of the down shard was reconciled"
        # nobody of ours wrote it: its spec (generation) and what the operator's field manager owns are as they were
        # (its resourceVersion is not: the Deployment controller may still be writing its status as pods turn Ready;
        # a fresh-clone run of 7a97647 saw exactly that)
        now = deployment(cluster, ns[1], "first")
        assert now is not None and kept is not None
        assert now["metadata"]["generation"] == kept["metadata"]["generation"], (kept["metadata"], now["metadata"])
        assert ours(kept) and ours(now) == ours(kept), (ours(kept), ours(now))

        shards[1] = OperatorProcess(cluster, "shard-1b", standalone=False, lease_name=LEASE, extra=["--shard", "1/2"]).start()
        wait_for(lambda: deployment(cluster, ns[1], "second"), timeout=60, what="shard 1 back: its namespace caught up")
        print(f"\ntwo shards: own namespaces only, one down and back, {time.monotonic() - began:.1f} s")
    finally:
        for op in shards:
            op.stop()
        cluster.kubectl("delete", "autoscalingpolicy", POLICY, "--wait=false", check=False)
        for name in ns.values():
            cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
