"""The API server itself rejects invalid resources (schema and CEL from crds/), naming the field.

At least one case per CEL rule; every case is sent with `kubectl apply --dry-run=server --validate=strict`.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from e2e.kube.controlplane import ControlPlane
from pooling_operator.api import messages as M
from tests.factories import (
    generative,
    hidden_states,
    merge,
    policy,
    pooling,
    pooling_job,
    scoring,
    scoring_job,
)

MATRYOSHKA = {"model": {"matryoshkaDimensions": [256, 128]}}

# (id, object, words the error must contain)
CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("name DNS-1035", pooling(name="3bge"), ["metadata.name must be a DNS-1035 label"]),
    ("name length", pooling(name="a" * 64), ["at most 63 characters"]),
    ("unknown field", pooling({"pooler": {"type": "CLS"}}), ['unknown field "spec.pooler"']),
    ("task enum", pooling({"task": "score"}), ["spec.task", "Unsupported value"]),
    (
        "one model source",
        pooling({"model": {"source": {"volume": {"claimName": "m"}, "huggingFace": {}}}}),
        ["spec.model.source", M.SOURCE_EXACTLY_ONE],
    ),
    (
        "min <= max replicas",
        pooling({"autoscaling": {"minReplicas": 3, "maxReplicas": 2}}),
        ["spec.autoscaling.minReplicas", "less than or equal to maxReplicas"],
    ),
    (
        "pooling type vs task",
        pooling({"pooling": {"type": "ALL"}}),
        ["spec.pooling.type", "CLS, MEAN or LAST for the sequence tasks"],
    ),
    (
        "dimensions declared",
        pooling({**MATRYOSHKA, "pooling": {"dimensions": 64}}),
        ["spec.pooling.dimensions", "one of model.matryoshkaDimensions"],
    ),
    (
        "dimensions need a declaration",
        pooling({"pooling": {"dimensions": 64}}),
        ["spec.pooling.dimensions", "one of model.matryoshkaDimensions"],
    ),
    (
        "dimensions for embedding tasks",
        pooling({**MATRYOSHKA, "task": "classify", "pooling": {"dimensions": 128}}),
        ["spec.pooling.dimensions", "only to the embedding tasks"],
    ),
    (
        "generative iff mode",
        scoring({"generative": {"labels": [{"token": "Yes", "id": 1}]}}),
        ["spec.generative", "exactly when mode is generative"],
    ),
    (
        "generative required",
        generative({"generative": None}),
        ["spec.generative", "exactly when mode is generative"],
    ),
    (
        "pooling only for biEncoder",
        scoring({"pooling": {"type": "CLS"}}),
        ["spec.pooling", "only to mode biEncoder"],
    ),
    (
        "biEncoder sequence pooling",
        scoring({"mode": "biEncoder", "pooling": {"type": "ALL"}}),
        ["spec.pooling.type", "biEncoder embeds whole sequences"],
    ),
    (
        "biEncoder Matryoshka",
        scoring({"mode": "biEncoder", "pooling": {"dimensions": 64}}),
        ["spec.pooling.dimensions", "one of model.matryoshkaDimensions"],
    ),
    (
        "labels distinct",
        generative({"generative": {"labels": [{"token": "a", "id": 5}, {"token": "b", "id": 5}]}}),
        ["spec.generative.labels", "must be distinct"],
    ),
    (
        "labels at most 128",
        generative({"generative": {"labels": [{"token": str(i), "id": i} for i in range(129)]}}),
        ["spec.generative.labels", "129"],
    ),
    ("layers ascending", hidden_states({"layers": [9, 5, 1]}), ["spec.layers", "ascending order"]),
    ("layers unique", hidden_states({"layers": [5, 5, 9]}), ["spec.layers", "Duplicate value"]),
    (
        "parallelism <= shards",
        hidden_states({"parallelism": 9}),
        ["spec.parallelism", "less than or equal to shards"],
    ),
    (
        "budget needs hidden size",
        hidden_states({"output": {"storageBudget": "1Ti"}, "model": {"hints": {"hiddenSize": None}}}),
        ["spec.output.storageBudget", "hiddenSize"],
    ),
    ("policy backends", policy({"allowedBackends": []}), ["spec.allowedBackends", "at least one backend"]),
    ("job task and mode", scoring_job({"task": "embed"}), ["spec.task", M.JOB_TASK_OR_MODE]),
    (
        "scale to zero without min 0",
        pooling({"autoscaling": {"minReplicas": 1, "maxReplicas": 2, "scaleToZero": {"idleSeconds": 600}}}),
        ["spec.autoscaling.scaleToZero", M.SCALE_TO_ZERO_NEEDS_MIN_ZERO],
    ),
    (
        "min zero needs a wake signal",
        pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2}}),
        ["spec.autoscaling.minReplicas", "autoscaling.front.kedaHttpAddOn"],
    ),
    (
        "min zero needs a wake signal with keda too",  # issue 65: no trigger of a user's is kept on our ScaledObject
        pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "backend": "keda"}}),
        ["spec.autoscaling.minReplicas", "could never wake", "autoscaling.wake.prometheus.query"],
    ),
    (
        "front hosts a set",
        pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "front": {"kedaHttpAddOn": {"hosts": ["a.example.com", "a.example.com"]}}}}),
        ["spec.autoscaling.front.kedaHttpAddOn.hosts", "Duplicate value"],
    ),
    (
        "front host a DNS name",
        pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "front": {"kedaHttpAddOn": {"hosts": ["A_b.example.com"]}}}}),
        ["spec.autoscaling.front.kedaHttpAddOn.hosts[0]", "should match"],
    ),
    ("scoring job space", scoring_job({"embeddingSpace": "v1"}), ["spec.embeddingSpace", M.SCORING_JOB_NO_SPACE]),
    ("scoring job pooling", scoring_job({"pooling": {"type": "CLS"}}), ["spec.pooling", M.POOLING_BIENCODER_ONLY]),
    (
        "generative job batch file",
        scoring_job({"mode": "generative", "generative": {"labels": [{"token": "Yes", "id": 9454}]},
                     "dataset": {"volume": {"claimName": "c", "path": "/r.jsonl"}, "format": "openaiBatch"}}),
        ["spec.dataset.format", "/generative_scoring has no OpenAI Batch url"],
    ),
]


def dry_run(cluster: ControlPlane, obj: dict[str, Any], namespace: str | None) -> Any:
    if namespace and obj["metadata"].get("namespace"):
        obj = merge(obj, {"metadata": {"namespace": namespace}})
    return cluster.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", "-", input=yaml.safe_dump(obj), check=False
    )


@pytest.mark.parametrize(("obj", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_api_server_rejects(
    cluster: ControlPlane, crds: list[str], namespace: str, obj: dict[str, Any], words: list[str]
) -> None:
    res = dry_run(cluster, obj, namespace)
    assert res.returncode != 0, f"admitted: {res.stdout}"
    for word in words:
        assert word in res.stderr, res.stderr


def test_valid_factories_are_admitted(cluster: ControlPlane, crds: list[str], namespace: str) -> None:
    woken = pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "scaleToZero": {"idleSeconds": 600},
                                     "wake": {"prometheus": {"query": "sum(interceptor_request_concurrency)"}}}})
    fronted = pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2,
                                       "front": {"kedaHttpAddOn": {"hosts": ["a.example.com", "*.b.example.com"], "maxPendingRequests": 50}}}},
                      name="fronted")  # fmt: skip
    for obj in (pooling(), scoring(), generative(), hidden_states(), policy(name="admission-ok"), pooling_job(),
                scoring_job(), woken, fronted):
        res = dry_run(cluster, obj, namespace)
        assert res.returncode == 0, res.stderr


def test_hidden_state_job_spec_is_immutable(cluster: ControlPlane, crds: list[str], namespace: str) -> None:
    job = merge(hidden_states(), {"metadata": {"namespace": namespace}})
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(job))
    changed = merge(job, {"spec": {"shards": 8}})
    res = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(changed), check=False)
    assert res.returncode != 0 and "spec is immutable" in res.stderr, res.stderr


def test_embedding_space_transition_rule(cluster: ControlPlane, crds: list[str], namespace: str) -> None:
    svc = merge(pooling({"embeddingSpace": "v1"}), {"metadata": {"namespace": namespace, "name": "space"}})
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(svc))
    for change in (
        {"model": {"revision": "other"}},
        {"pooling": {"type": "CLS"}},
        {"model": {"name": "BAAI/bge-m3"}},
    ):
        res = cluster.kubectl(
            "apply",
            "--dry-run=server",
            "-f",
            "-",
            input=yaml.safe_dump(merge(svc, {"spec": change})),
            check=False,
        )
        assert res.returncode != 0 and "spec.embeddingSpace" in res.stderr, (change, res.stderr)
    relabelled = merge(svc, {"spec": {"embeddingSpace": "v2", "pooling": {"type": "CLS"}}})
    assert (
        cluster.kubectl(
            "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(relabelled), check=False
        ).returncode
        == 0
    )
    unrelated = merge(svc, {"spec": {"replicas": 3}})
    assert (
        cluster.kubectl(
            "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(unrelated), check=False
        ).returncode
        == 0
    )
