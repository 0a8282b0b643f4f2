"""Operator shards (runtime/shards.py): which shard owns a namespace, the Lease each holds, and what one shard's
watches keep of another shard's objects: nothing, but for shard 0 a slim record of each owner for the
AutoscalingPolicies' counts. The two-shard run on a real control plane: e2e/tests/operator/test_shards.py."""

from __future__ import annotations

import collections
import hashlib
from typing import Any

import pytest

from pooling_operator.api.kinds import KINDS
from pooling_operator.k8s.cache import Cache
from pooling_operator.k8s.informer import Event
from pooling_operator.runtime.shards import Sharding, parse, shard_of
from pooling_operator.runtime.watches import Watches
from tests.factories import pooling


def test_a_namespace_has_one_shard_stable_across_runs_and_spread_evenly() -> None:
    # sha256, not Python's salted hash(): the same on every replica, restart and release
    assert shard_of("search", 4) == int.from_bytes(hashlib.sha256(b"search").digest()[:8], "big") % 4
    assert [shard_of(ns, 4) for ns in ("search", "team-a", "team-b", "default")] == [3, 0, 2, 1]  # pinned: a change moves namespaces
    counts = collections.Counter(shard_of(f"team-{i}", 8) for i in range(8000))
    assert set(counts) == set(range(8)) and max(counts.values()) < 1.1 * 1000 and min(counts.values()) > 0.9 * 1000
    shards = [Sharding(i, 3) for i in range(3)]
    for ns in (f"ns-{i}" for i in range(300)):
        assert sum(s.owns(ns) for s in shards) == 1
    assert all(s.owns(None) for s in shards)  # cluster-scoped: every shard reads it
    assert Sharding().owns("anything") and not Sharding().sharded


def test_each_shard_holds_a_lease_of_its_own_and_shard_zero_writes_the_policies() -> None:
    assert Sharding().lease_name("vllm-pooling-operator") == "vllm-pooling-operator"  # one operator: as before
    assert Sharding(1, 4).lease_name("vllm-pooling-operator") == "vllm-pooling-operator-shard-1-of-4"
    assert [Sharding(i, 3).writes_policy_status for i in range(3)] == [True, False, False]


@pytest.mark.parametrize(("text", "message"), [
    ("2", "expected I/N"), ("a/2", "expected I/N"), ("2/2", "below the count"), ("0/0", "below the count (at least 1)"),
])  # fmt: skip
def test_a_bad_shard_says_what_is_accepted(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(text)


class Runtime:
    """What the watches hand events to, recorded."""

    def __init__(self) -> None:
        self.ctx = type("Ctx", (), {"kube": None, "cache": Cache()})()
        self.calls: list[tuple[str, Any]] = []

    def on_owner(self, body: dict[str, Any], deleted: bool) -> None:
        self.calls.append(("owner", body["metadata"]["name"]))

    def on_foreign_owner(self, body: dict[str, Any], deleted: bool) -> None:
        self.calls.append(("foreign", body["metadata"]["name"]))

    def on_child(self, body: dict[str, Any], deleted: bool) -> None:
        self.calls.append(("child", body["metadata"]["name"]))


def owners_of(namespace_for: dict[int, str], shard: Sharding) -> tuple[Watches, Runtime]:
    runtime = Runtime()
    watches = Watches(runtime, [], shard)  # type: ignore[arg-type]
    handle = watches._handler(KINDS["PoolingService"])
    child = watches._handler(KINDS["Deployment"])
    for index, ns in namespace_for.items():
        body = pooling({"autoscaling": {"minReplicas": 1, "maxReplicas": 3}}, name=f"svc-{index}", namespace=ns)
        body["metadata"].update(uid=f"uid-{index}", resourceVersion="1")
        handle(Event("ADDED", body))
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
            "name": f"dep-{index}", "namespace": ns, "uid": f"d-{index}",
            "labels": {"app.kubernetes.io/managed-by": "vllm-pooling-operator"}}}  # fmt: skip
        child(Event("ADDED", dep))
    return watches, runtime


def namespaces_of_each_shard() -> dict[int, str]:
    out: dict[int, str] = {}
    i = 0
    while len(out) < 2:
        out.setdefault(shard_of(f"team-{i}", 2), f"team-{i}")
        i += 1
    return out


def test_the_informers_remember_only_the_identity_of_another_shards_objects() -> None:
    namespaces = namespaces_of_each_shard()
    watches, _ = owners_of({}, Sharding(0, 2))
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 3, "template": {"spec": {}}},
           "metadata": {"name": "d", "uid": "u", "resourceVersion": "7", "labels": {"a": "b"}}}  # fmt: skip
    project = watches._sharded(KINDS["Deployment"], watches._projection(KINDS["Deployment"]))
    mine = project({**dep, "metadata": {**dep["metadata"], "namespace": namespaces[0]}})
    other = project({**dep, "metadata": {**dep["metadata"], "namespace": namespaces[1]}})
    assert mine["spec"]["replicas"] == 3 and mine["metadata"]["labels"] == {"a": "b"}
    assert other == {"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": "d", "namespace": namespaces[1], "uid": "u", "resourceVersion": "7"}}
    alone, _ = owners_of({}, Sharding())
    one = alone._projection(KINDS["Deployment"])
    assert alone._sharded(KINDS["Deployment"], one) is one  # one operator: projected as before


def test_a_shard_keeps_and_reconciles_only_its_own_and_shard_zero_counts_the_others_slimly() -> None:
    namespaces = namespaces_of_each_shard()
    zero, zero_runtime = owners_of(namespaces, Sharding(0, 2))
    assert zero_runtime.calls == [("owner", "svc-0"), ("child", "dep-0"), ("foreign", "svc-1")]
    assert zero.owners.objects() == 1  # its own only; the other shard's Deployment never reached on_child
    [slim] = [b for key in zero.foreign for b in zero.foreign[key]]
    assert slim["metadata"]["namespace"] == namespaces[1] and set(slim["spec"]) == {"autoscaling"}  # no model, no engine
    one, one_runtime = owners_of(namespaces, Sharding(1, 2))
    assert one_runtime.calls == [("owner", "svc-1"), ("child", "dep-1")]
    assert one.foreign.objects() == 0, "only shard 0 writes the policies' status, so only it keeps the record"
    _, alone_runtime = owners_of(namespaces, Sharding())
    assert [c for c in alone_runtime.calls if c[0] == "owner"] == [("owner", "svc-0"), ("owner", "svc-1")]
