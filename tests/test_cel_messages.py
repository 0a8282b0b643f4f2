"""Every CEL rule the API server enforces (crds/) has a Python rule that says the same thing.

For each CEL message an object breaking that rule goes through `pooling-operator validate`'s own code; one of
its problems must contain the CEL message verbatim (Python may add specifics: which id repeats, the sorted
order). The two rules that need the stored object (`oldSelf`) are checked where Python has it."""

from __future__ import annotations

from typing import Any

import pytest

from pooling_operator.api import messages as M
from pooling_operator.api.crd import all_crds
from pooling_operator.vllm.validate import validate
from tests.factories import (
    generative,
    hidden_states,
    model_cache,
    policy,
    pooling,
    pooling_job,
    scoring,
    scoring_job,
)

MATRYOSHKA = {"model": {"matryoshkaDimensions": [256, 128]}}

# CEL message -> an object breaking that rule (and nothing else the message could be confused with).
BREAKS: dict[str, dict[str, Any]] = {
    f"metadata.name {M.NAME_DNS1035}": pooling(name="3bge"),
    M.SOURCE_EXACTLY_ONE: pooling({"model": {"source": {"volume": {"claimName": "m"}, "huggingFace": {}}}}),
    M.ENV_SOURCE_EXACTLY_ONE: pooling({"engine": {"env": [{"name": "X", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}, "fieldRef": {"fieldPath": "metadata.name"}}}]}}),
    M.MIN_LE_MAX_REPLICAS: pooling({"autoscaling": {"minReplicas": 3, "maxReplicas": 2}}),
    M.MIN_REPLICAS_ZERO: pooling({"autoscaling": {"minReplicas": 0, "maxReplicas": 2}}),
    M.SCALE_TO_ZERO_NEEDS_MIN_ZERO: pooling({"autoscaling": {"minReplicas": 1, "maxReplicas": 2, "scaleToZero": {"idleSeconds": 600}}}),
    M.POOLING_TYPE_FOR_TASK: pooling({"pooling": {"type": "ALL"}}),
    M.MATRYOSHKA_DIMENSIONS: pooling({**MATRYOSHKA, "pooling": {"dimensions": 64}}),
    M.DIMENSIONS_EMBEDDING_ONLY: pooling({**MATRYOSHKA, "task": "classify", "pooling": {"dimensions": 128}}),
    M.LABELS_DISTINCT: generative({"generative": {"labels": [{"token": "Yes", "id": 1}, {"token": "Y", "id": 1}]}}),
    M.GENERATIVE_IFF_MODE: scoring({"generative": {"labels": [{"token": "Yes", "id": 1}]}}),
    M.POOLING_BIENCODER_ONLY: scoring({"pooling": {"type": "CLS"}}),
    M.BIENCODER_SEQUENCE_POOLING: scoring({"mode": "biEncoder", "pooling": {"type": "ALL"}}),
    M.PARALLELISM_LE_SHARDS: hidden_states({"shards": 2, "parallelism": 3}),
    M.SPACE_CHECK_NEEDS_SPACE: pooling({"spaceCheck": {}}),
    M.SCORING_VECTORS_INPUTS_ONLY: scoring({"vectors": {"queryInstruction": "query: "}}),
    M.ROUTER_NO_API_KEY: pooling({"routing": {"vllmRouter": {}}, "service": {"apiKeySecretRef": {"name": "k", "key": "k"}}}),
    M.BUDGET_NEEDS_HIDDEN_SIZE: hidden_states({"model": {"hints": {"hiddenSize": None}}, "output": {"storageBudget": "1Ti"}}),
    M.LAYERS_ASCENDING: hidden_states({"layers": [18, 3]}),
    M.ALLOWED_BACKENDS_NONEMPTY: policy({"allowedBackends": []}),
    M.BATCH_FILE_EMBED_ONLY: pooling_job({"task": "classify", "pooling": {"type": "CLS"}, "dataset": {
        "volume": {"claimName": "c", "path": "/r.jsonl"}, "format": "openaiBatch"}}),
    M.BATCH_OUTPUT_NEEDS_BATCH_INPUT: pooling_job({"output": {"volume": {"claimName": "v", "path": "/o"},
                                                              "formats": ["openaiBatch"]}}),
    M.CACHE_STORAGE_EXACTLY_ONE: model_cache({"storage": {"claimName": "c"}}),
    M.JOB_TASK_OR_MODE: scoring_job({"task": "embed"}),
    M.SCORING_JOB_NO_SPACE: scoring_job({"embeddingSpace": "v1"}),
    M.SCORING_JOB_CONVERT: scoring_job({"convert": "classify"}),
    M.GENERATIVE_BATCH_FILE: scoring_job({"mode": "generative", "model": {"name": "Qwen/Qwen3-1.7B", "hints": {
        "architectures": ["Qwen3ForCausalLM"], "numLabels": None}}, "generative": {"labels": [{"token": "Yes", "id": 9454}]},
        "dataset": {"volume": {"claimName": "c", "path": "/r.jsonl"}, "format": "openaiBatch"}}),
    **{message: pooling({"resources": {"gpu": {"product": "NVIDIA-H100-80GB-HBM3", **gpu}}}) for message, gpu in (
        (M.SHARE_NOT_COUNT, {"count": 1, "share": {"memory": "2Gi", "via": "timeSlicing"}}),
        (M.SHARE_NOT_RESOURCE_NAME, {"resourceName": "nvidia.com/gpu", "share": {"memory": "2Gi", "via": "timeSlicing"}}),
        (M.SHARE_MIG_PROFILE, {"share": {"memory": "2Gi", "via": "mig"}}),
        (M.SHARE_DRA_CLASS, {"share": {"memory": "2Gi", "via": "dra"}}),
        (M.SHARE_RESOURCE_NAME_TIME_SLICING, {"share": {"memory": "2Gi", "via": "mig", "migProfile": "1g.10gb", "resourceName": "a/b"}}),
        (M.SHARE_MIG_PROFILE_ONLY, {"share": {"memory": "2Gi", "via": "timeSlicing", "migProfile": "1g.10gb"}}),
        (M.SHARE_DRA_CLASS_ONLY, {"share": {"memory": "2Gi", "via": "timeSlicing", "deviceClassName": "gpu.nvidia.com"}}),
    )},
}
# Rules on a change (oldSelf): no single object breaks them, so the offline CLI cannot; where Python checks them.
NEEDS_THE_STORED_OBJECT = {
    M.EMBEDDING_SPACE: "the reconcile, against status.embeddingSpace (test_embedding_space_rule_in_python)",
    M.JOB_IMMUTABLE: "only the API server: a HiddenStateJob's spec is never changed by the operator",
    M.POOLING_JOB_IMMUTABLE: "only the API server: a PoolingJob's spec is never changed by the operator",
}


def cel_messages() -> set[str]:
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            found.update(v["message"] for v in node.get("x-kubernetes-validations") or [])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(all_crds())
    return found


def test_every_cel_rule_is_covered_here() -> None:
    assert cel_messages() == set(BREAKS) | set(NEEDS_THE_STORED_OBJECT)


@pytest.mark.parametrize("message", sorted(BREAKS))
def test_python_says_what_the_api_server_says(message: str) -> None:
    result = validate(BREAKS[message])
    texts = [str(p) for p in result.problems if p.severity == "error"]
    assert any(message.removeprefix("metadata.name ") in t for t in texts), texts


def test_embedding_space_rule_in_python() -> None:
    from pooling_operator.reconcile.services import _embedding_space_problems
    from pooling_operator.vllm.embedding_space import embedding_fingerprint
    from pooling_operator.vllm.workload import workload

    before = validate(pooling({"embeddingSpace": "v1"})).resource
    after = validate(pooling({"embeddingSpace": "v1", "pooling": {"type": "CLS"}})).resource
    stored = {"embeddingSpace": {"label": "v1", "fingerprint": embedding_fingerprint(workload(before))}}  # type: ignore[arg-type]
    [problem] = _embedding_space_problems(after, stored)  # type: ignore[arg-type]
    assert problem.message == M.EMBEDDING_SPACE and problem.path == "spec.embeddingSpace"
