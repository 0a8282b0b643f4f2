"""Pure status: conditions that move only on a flip, Ready/Progressing/Degraded from a Deployment, the
published contract, and the desired-vs-observed comparison that keeps a steady resync write-free."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pooling_operator.builders import BuildContext, build
from pooling_operator.builders.diff import HASH_ANNOTATION, needs_apply, with_hash
from pooling_operator.status import conditions
from pooling_operator.status.services import invalid_status, service_status
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.validate import validate
from pooling_operator.vllm.workload import workload
from tests.factories import generative, pooling


def parsed(obj: dict[str, Any]) -> Any:
    result = validate(obj)
    assert result.ok, result.errors
    r = result.resource
    r.metadata.generation = 3
    return r


def deployment(replicas: int, ready: int, updated: int | None = None, generation: int = 1, observed: int = 1, **cond: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "demo", "generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed, "replicas": replicas, "readyReplicas": ready,
            "updatedReplicas": replicas if updated is None else updated,
            "conditions": [{"type": "Progressing", "reason": cond.get("progress", "NewReplicaSetAvailable")}],
        },
    }


def by_type(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_ready_progressing_degraded() -> None:
    r = parsed(pooling({"replicas": 2}))
    c = contract("0.33")
    ready = by_type(service_status(r, c, [], deployment(2, 2), []))
    assert ready == {"Ready": ("True", "Available"), "SpecValid": ("True", "Valid"),
                     "Progressing": ("False", "Complete"), "Degraded": ("False", "Healthy")}
    rolling = by_type(service_status(r, c, [], deployment(2, 1, updated=1), []))
    assert rolling["Ready"] == ("False", "ReplicasNotReady") and rolling["Progressing"] == ("True", "RollingOut")
    stale = by_type(service_status(r, c, [], deployment(2, 2, generation=2, observed=1), []))
    assert stale["Ready"][0] == "False" and stale["Progressing"][0] == "True"
    late = by_type(service_status(r, c, [], deployment(2, 0, progress="ProgressDeadlineExceeded"), []))
    assert late["Degraded"] == ("True", "StartupBudgetExceeded")
    crash_pod = {"metadata": {"name": "p"}, "status": {"containerStatuses": [{"name": "vllm", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}
    assert by_type(service_status(r, c, [], deployment(2, 1), [crash_pod]))["Degraded"] == ("True", "CrashLoopBackOff")


def test_status_fields() -> None:
    r = parsed(pooling({"service": {"apiKeySecretRef": {"name": "k", "key": "k"}}, "embeddingSpace": "v1"}))
    c = contract("0.33")
    status = service_status(r, c, ["vllm", "serve"], deployment(1, 1), [])
    assert status["observedGeneration"] == 3
    assert status["endpoint"] == "http://demo.ns.svc:8000"
    assert status["routes"] == ["/v1/embeddings", "/v2/embed", "/pooling", "/score", "/rerank", "/v2/rerank"]
    assert "/pooling" in status["unprotectedRoutes"] and "/v1/embeddings" not in status["unprotectedRoutes"]
    assert status["selector"] == "app.kubernetes.io/instance=demo,app.kubernetes.io/component=pooling-service"
    assert status["effective"]["task"] == "embed" and status["effective"]["poolingType"] == "model default"
    assert status["embeddingSpace"] == {"fingerprint": embedding_fingerprint(workload(r)), "label": "v1"}
    g = service_status(parsed(generative()), c, [], deployment(1, 1), [])
    assert g["routes"][0] == "/generative_scoring"
    assert g["contract"] == {"mode": "generative", "route": "/generative_scoring", "labelTokenIds": [9454, 2753],
                             "applySoftmax": True, "itemFirst": False}


def test_fingerprint_follows_the_vector_space_only() -> None:
    base = embedding_fingerprint(workload(parsed(pooling())))
    assert embedding_fingerprint(workload(parsed(pooling({"replicas": 5, "engine": {"maxNumSeqs": 8}})))) == base
    assert embedding_fingerprint(workload(parsed(pooling({"pooling": {"normalize": False}})))) != base
    assert embedding_fingerprint(workload(parsed(pooling({"model": {"revision": "other"}})))) != base


def test_transition_time_moves_only_on_a_flip() -> None:
    first = conditions.merge(None, [conditions.condition("Ready", False, "X", "m", 1)], "t1")
    same = conditions.merge(first, [conditions.condition("Ready", False, "Y", "other", 2)], "t2")
    flipped = conditions.merge(same, [conditions.condition("Ready", True, "Z", "m", 2)], "t3")
    assert [c["lastTransitionTime"] for c in (*first, *same, *flipped)] == ["t1", "t1", "t3"]
    assert conditions.flips(first, same) == [] and [c["type"] for c in conditions.flips(same, flipped)] == ["Ready"]


def test_invalid_status_names_the_fields() -> None:
    result = validate(pooling({"pooling": {"type": "ALL"}}))
    status = invalid_status(4, result.errors)
    spec_valid = next(c for c in status["conditions"] if c["type"] == "SpecValid")
    assert spec_valid["status"] == "False" and spec_valid["message"].startswith("spec.pooling.type: ")


def test_needs_apply_ignores_server_additions_and_normalised_quantities() -> None:
    desired = next(o for o in build(parsed(pooling({"resources": {"cpu": "0.5"}})), contract("0.33"), BuildContext()) if o["kind"] == "Deployment")
    observed = copy.deepcopy(desired)
    observed["metadata"].update({"uid": "u", "resourceVersion": "9", "managedFields": []})
    observed["spec"]["progressDeadlineSeconds"] = desired["spec"]["progressDeadlineSeconds"]
    observed["spec"]["template"]["spec"]["dnsPolicy"] = "ClusterFirst"
    container = observed["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["requests"]["cpu"] = "500m"
    container["terminationMessagePath"] = "/dev/termination-log"
    assert not needs_apply(desired, observed)
    container["args"][-1] = "9999"
    assert needs_apply(desired, observed)
    assert needs_apply(desired, None)


def test_foreign_items_in_associative_lists_are_left_alone_but_our_fields_are_compared() -> None:
    desired = with_hash({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "labels": {"a": "1"}},
                         "spec": {"template": {"spec": {"containers": [
                             {"name": "vllm", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}}}})
    observed = copy.deepcopy(desired)
    pod = observed["spec"]["template"]["spec"]
    pod["containers"][0]["env"].insert(1, {"name": "VLLM_INJECTED", "value": "1"})  # kubectl set env
    pod["containers"].append({"name": "istio-proxy", "image": "proxy"})  # a sidecar injector
    observed["metadata"]["labels"]["platform"] = "gpu"  # a platform's label
    observed["metadata"].setdefault("annotations", {})["team"] = "search"
    assert not needs_apply(desired, observed)
    pod["containers"][0]["env"][0]["value"] = "changed"  # a field we own: taken back
    assert needs_apply(desired, observed)
    pod["containers"][0]["env"][0]["value"] = "1"
    pod["containers"][0]["env"].reverse()  # our order matters (later variables may refer to earlier ones)
    assert needs_apply(desired, observed)


def test_atomic_lists_are_compared_whole() -> None:
    """A RoleBinding's subjects are atomic: our forced apply replaces them, so a hand-added subject is a drift."""
    desired = with_hash({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "x"},
                         "subjects": [{"kind": "ServiceAccount", "name": "x"}]})
    observed = copy.deepcopy(desired)
    observed["subjects"].append({"kind": "User", "name": "intruder"})
    assert needs_apply(desired, observed)


def test_with_hash_leaves_its_input_alone_and_keeps_the_digest_children_already_carry() -> None:
    """The digest is what every child in a cluster already carries: a change of it would re-apply them all on the
    next start. The input is not written into (it shares values with the output below the annotations)."""
    plain = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "labels": {"a": "1"}}, "spec": {"ports": [{"port": 80}]}}
    annotated = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "annotations": {"b": "2"}}, "spec": {"ports": [{"port": 80}]}}
    before = copy.deepcopy([plain, annotated])
    assert with_hash(plain)["metadata"]["annotations"] == {HASH_ANNOTATION: "36060d9a3fa0d1de"}
    assert with_hash(annotated)["metadata"]["annotations"] == {"b": "2", HASH_ANNOTATION: "8eb5948dd2402051"}
    assert [plain, annotated] == before
    assert with_hash(with_hash(annotated)) == with_hash(annotated)  # its own annotation is not part of the digest


def test_a_field_we_stop_setting_is_seen_through_the_hash() -> None:
    def deployment_of(spec: dict[str, Any]) -> dict[str, Any]:
        return with_hash(next(o for o in build(parsed(pooling(spec)), contract("0.33"), BuildContext()) if o["kind"] == "Deployment"))

    before = deployment_of({"template": {"priorityClassName": "gpu-high"}, "engine": {"env": [{"name": "EMPTY", "value": ""}]}})
    observed = copy.deepcopy(before)
    observed["spec"]["template"]["spec"]["containers"][0]["env"][-1].pop("value")  # the server drops ""
    assert not needs_apply(before, observed)
    after = deployment_of({"engine": {"env": [{"name": "EMPTY", "value": ""}]}})  # priorityClassName removed
    assert needs_apply(after, observed)


def test_hidden_state_job_status() -> None:
    import json

    from pooling_operator.status.jobs import count_indexes, job_status
    from tests.factories import hidden_states

    r = parsed(hidden_states())
    cm = {"data": {"shard-0": json.dumps({"state": "budget_exceeded", "done": 5, "failed": 1, "bytes": 700}),
                   "shard-1": json.dumps({"state": "running", "done": 7, "failed": 0, "bytes": 300}), "shard-x": "junk"}}
    failed_job = {"status": {"failed": 1, "failedIndexes": "0", "succeeded": 1,
                             "conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}]}}
    status = job_status(r, failed_job, cm)
    assert by_type(status)["Failed"] == ("True", "StorageBudgetExceeded")
    assert status["samples"] == {"done": 12, "failed": 1} and status["bytesWritten"] == 1000
    assert status["shards"] == {"total": 4, "succeeded": 1, "failed": 1, "active": 0}
    running = job_status(r, {"status": {"active": 4}}, None)
    assert by_type(running)["Progressing"] == ("True", "Running") and by_type(running)["Ready"][0] == "True"
    assert count_indexes("1,3-5,9") == 5 and count_indexes("") == 0


def _report(done: int, total: int, tokens: int, hidden: int = 64, width: int = 4) -> dict[str, int]:
    return {"done": done, "total": total, "tokens": tokens, "hiddenSize": hidden, "valueBytes": width}


@pytest.mark.parametrize(("progress", "shards", "want"), [
    ({}, 2, None),  # nothing reported
    ({0: _report(0, 10, 0)}, 1, None),  # no sample done yet
    ({0: _report(5, 10, 50, hidden=0, width=0)}, 1, None),  # width and hidden size not known yet
    ({0: _report(10, 10, 100)}, 1, 100 * 3 * 64 * 4),  # all done: exactly tokens x layers x hidden x width
    ({0: _report(5, 10, 50)}, 1, 100 * 3 * 64 * 4),  # half done: doubled
    ({0: _report(5, 10, 50)}, 2, 2 * 100 * 3 * 64 * 4),  # the other shard counts as this one's mean
    ({0: _report(5, 10, 50), 1: _report(10, 10, 100, width=2)}, 2, round((50 * 3 * 64 * 4 + 100 * 3 * 64 * 2) / 15 * 20)),
])  # fmt: skip
def test_the_storage_estimate_projects_what_is_seen_over_the_dataset(
    progress: dict[int, dict[str, int]], shards: int, want: int | None
) -> None:
    from pooling_operator.status.jobs import storage_estimate

    got = storage_estimate(progress, 3, shards)
    assert (got[0] if got else None) == want


@pytest.mark.parametrize(("n", "text"), [(0, "0"), (1023, "1023"), (1536, "1.5Ki"), (5 * 2**30, "5Gi"), (int(2.25 * 2**40), "2.2Ti")])
def test_binary_quantity(n: int, text: str) -> None:
    from pooling_operator.api.quantity import binary_quantity

    assert binary_quantity(n) == text


def test_hidden_state_job_status_shows_the_storage_estimate_next_to_the_budget() -> None:
    import json

    from pooling_operator.status.jobs import job_status
    from tests.factories import hidden_states

    r = parsed(hidden_states({"output": {"storageBudget": "2Ti"}}))  # 4 layers, 4 shards
    cm = {"data": {"shard-0": json.dumps({"state": "running", **_report(10, 100, 1000, hidden=4096, width=2)})}}
    storage = job_status(r, {"status": {"active": 4}}, cm)["storage"]
    per_sample = 1000 * 4 * 4096 * 2 / 10
    assert storage["estimatedBytes"] == round(per_sample * 100 * 4) and storage["budget"] == "2Ti"
    assert storage["estimate"] == "1.2Gi" and "1 of 4 shards reporting" in storage["basis"]
    assert "storage" not in job_status(parsed(hidden_states()), None, None)  # no budget, nothing seen


def test_degraded_after_the_startup_budget_even_when_the_rollout_finished() -> None:
    from datetime import UTC, datetime

    from pooling_operator.status.services import degraded_by_time

    r = parsed(pooling({"replicas": 2, "engine": {"startupTimeoutSeconds": 600}}))
    c = contract("0.33")
    old = [{"type": "Ready", "status": "False", "reason": "ReplicasNotReady", "lastTransitionTime": "2026-11-29T10:00:00Z"}]
    status = service_status(r, c, [], deployment(2, 1), [])
    degraded_by_time(status, old, datetime(2026, 11, 29, 10, 5, tzinfo=UTC), 600)
    assert by_type(status)["Degraded"] == ("False", "Healthy")
    degraded_by_time(status, old, datetime(2026, 11, 29, 10, 11, tzinfo=UTC), 600)
    assert by_type(status)["Degraded"] == ("True", "ReplicasUnavailable")
    fine = service_status(r, c, [], deployment(2, 2), [])
    degraded_by_time(fine, old, datetime(2026, 11, 29, 11, 0, tzinfo=UTC), 600)
    assert by_type(fine)["Degraded"][0] == "False"


def test_the_operating_docs_list_every_condition_reason() -> None:
    """docs/operating.md's Conditions section names every reason status/conditions.py defines (one place, documented)."""
    from pathlib import Path

    from pooling_operator.status import conditions as C

    doc = (Path(__file__).resolve().parents[1] / "docs" / "operating.md").read_text()
    section = doc.split("\n## Conditions\n", 1)[1].split("\n## ", 1)[0]
    reasons = {v for k, v in vars(C).items() if k.isupper() and isinstance(v, str) and k not in ("TYPES_ORDER",)}
    missing = sorted(r for r in reasons if f"`{r}`" not in section)
    assert not missing, missing


def test_placement_problems_in_the_controllers_own_words() -> None:
    from pooling_operator.status.placement import placement_problem

    failure = {"status": {"conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                          "message": "pods \"x\" is forbidden: exceeded quota: q"}]}}
    assert placement_problem(failure, []).reason == "FailedCreate"  # type: ignore[union-attr]
    pending = {"metadata": {"name": "p"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/5 nodes are available"}]}}
    found = placement_problem({}, [pending])
    assert found is not None and found.reason == "Unschedulable" and "0/5 nodes" in found.message
    refusal = [{"reason": "FailedCreate", "message": "Error creating: exceeded quota", "lastTimestamp": "2026-01-01T00:00:00Z"}]
    assert placement_problem({}, [], refusal).reason == "FailedCreate"  # type: ignore[union-attr]
    running = {"metadata": {"name": "r"}, "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    assert placement_problem({}, [running], refusal) is None  # a refusal is stale once a pod exists


def test_first_visit_is_unknown_not_false() -> None:
    from pooling_operator.status.conditions import CREATING, DEGRADED, READY
    from pooling_operator.vllm.contract import contract
    from pooling_operator.vllm.validate import validate as _validate
    from tests.factories import pooling as _pooling

    r = _validate(_pooling()).resource
    assert r is not None
    st = service_status(r, contract("0.33"), [], None, [])  # type: ignore[arg-type]
    conds = {x["type"]: x for x in st["conditions"]}
    assert (conds[READY]["status"], conds[READY]["reason"]) == ("Unknown", CREATING)
    assert (conds[DEGRADED]["status"], conds[DEGRADED]["reason"]) == ("Unknown", CREATING)


def test_first_visit_announces_only_bad_news_and_validity() -> None:
    from pooling_operator.status import conditions as C

    first = [C.condition(C.READY, "Unknown", C.CREATING, "creating", 1), C.condition(C.SPEC_VALID, False, C.CHILD_REJECTED, "no", 1),
             C.condition(C.DEGRADED, "Unknown", C.CREATING, "?", 1)]  # fmt: skip
    assert C.announced(None, first) == [("Warning", C.CHILD_REJECTED, "SpecValid is False: no")]
    later = [C.condition(C.READY, True, C.AVAILABLE, "1 of 1", 1), *first[1:]]
    assert C.announced(first, later) == [("Normal", C.AVAILABLE, "Ready is True: 1 of 1")]


def _pod(uid: str, created: str, ready: str | None) -> dict[str, Any]:
    conds = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}] if ready else [{"type": "Ready", "status": "False"}]
    return {"metadata": {"uid": uid, "name": uid, "creationTimestamp": created}, "status": {"conditions": conds}}


def test_startup_is_measured_from_pod_created_to_ready() -> None:
    from pooling_operator.status.startup import merged, pod_startups

    pods = [_pod("b", "2026-12-01T10:00:00Z", "2026-12-01T10:01:30Z"), _pod("a", "2026-12-01T10:00:00Z", "2026-12-01T10:01:00Z"),
            _pod("c", "2026-12-01T10:00:00Z", None)]
    assert [(p.uid, p.seconds) for p in pod_startups(pods)] == [("a", 60.0), ("b", 90.0)]  # oldest Ready first; c not yet
    first = merged(None, [60.0, 90.0])
    assert first == {"lastSeconds": 90.0, "typicalSeconds": 75.0, "samples": 2}
    assert merged(first, []) is first
    many = first
    for _ in range(40):
        many = merged(many, [30.0])
    assert many is not None and many["samples"] == 42 and abs(many["typicalSeconds"] - 30.0) < 0.5  # follows the recent ones


def _phased(uid: str, scheduled: str | None, initialized: str | None, started: str | None, ready: str | None,
            other_container_started: str | None = None) -> dict[str, Any]:
    conds = [{"type": t, "status": "True", "lastTransitionTime": at}
             for t, at in (("PodScheduled", scheduled), ("Initialized", initialized), ("Ready", ready)) if at]
    statuses = [{"name": "vllm", "state": {"running": {"startedAt": started}} if started else {"waiting": {"reason": "ContainerCreating"}}}]
    if other_container_started:
        statuses.insert(0, {"name": "proxy", "state": {"running": {"startedAt": other_container_started}}})
    return {"metadata": {"uid": uid, "creationTimestamp": "2026-12-01T10:00:00Z"},
            "status": {"conditions": conds, "containerStatuses": statuses}}


@pytest.mark.parametrize(("pod", "phases"), [
    (_phased("a", "2026-12-01T10:00:02Z", "2026-12-01T10:00:09Z", "2026-12-01T10:00:40Z", "2026-12-01T10:01:30Z"),
     {"scheduled": 2.0, "initialized": 9.0, "started": 40.0, "ready": 90.0}),
    # what the pod does not record is absent, never filled in from its neighbours
    (_phased("b", "2026-12-01T10:00:02Z", None, None, "2026-12-01T10:00:30Z"), {"scheduled": 2.0, "ready": 30.0}),
    # only the vLLM container's start counts, not a sidecar's
    (_phased("c", None, None, "2026-12-01T10:00:20Z", "2026-12-01T10:00:50Z", other_container_started="2026-12-01T10:00:05Z"),
     {"started": 20.0, "ready": 50.0}),
])
def test_each_start_up_phase_is_read_from_the_pod(pod: dict[str, Any], phases: dict[str, float]) -> None:
    from pooling_operator.status.startup import pod_startups

    [sample] = pod_startups([pod])
    assert sample.phases == phases and list(sample.phases) == [p for p in ("scheduled", "initialized", "started", "ready") if p in phases]
    assert sample.seconds == phases["ready"]


def test_phases_are_folded_each_with_its_own_count() -> None:
    from pooling_operator.status.startup import merged, pod_startups

    full = pod_startups([_phased("a", "2026-12-01T10:00:02Z", "2026-12-01T10:00:10Z", "2026-12-01T10:00:40Z", "2026-12-01T10:01:30Z")])
    sparse = pod_startups([_phased("b", "2026-12-01T10:00:04Z", None, None, "2026-12-01T10:01:00Z")])
    st = merged(None, full + sparse)
    assert st is not None and st["samples"] == 2 and st["typicalSeconds"] == 75.0 and st["lastSeconds"] == 60.0
    assert st["phases"] == {
        "scheduled": {"lastSeconds": 4.0, "typicalSeconds": 3.0, "samples": 2},
        "initialized": {"lastSeconds": 10.0, "typicalSeconds": 10.0, "samples": 1},
        "started": {"lastSeconds": 40.0, "typicalSeconds": 40.0, "samples": 1},
        "ready": {"lastSeconds": 60.0, "typicalSeconds": 75.0, "samples": 2},
    }
    # an old status without phases (written before they existed) gains them; plain numbers add none
    assert "phases" not in merged({"lastSeconds": 5, "typicalSeconds": 5, "samples": 1}, [7.0])  # type: ignore[operator]
    again = merged({"lastSeconds": 5, "typicalSeconds": 5, "samples": 1}, sparse)
    assert again is not None and again["samples"] == 2 and again["phases"]["ready"]["samples"] == 1


@pytest.mark.parametrize(("status", "expect"), [
    ({"startup": {"typicalSeconds": 42.5, "samples": 3}}, 42.5),
    ({"startup": {"typicalSeconds": 0}}, None),  # no start-up is instant: nothing learned
    ({"startup": {"typicalSeconds": "42"}}, None),  # a hand-edited status is not trusted
    ({"startup": {"typicalSeconds": True}}, None),
    ({}, None),
    (None, None),
])
def test_the_autoscaler_reads_the_typical_start_up_from_the_status(status: Any, expect: float | None) -> None:
    from pooling_operator.status.startup import typical_seconds

    assert typical_seconds({"status": status} if status is not None else {}) == expect
