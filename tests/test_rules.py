"""Every rule: an accepted case and a rejected one, asserting the field path and the message."""

from __future__ import annotations

from typing import Any

import pytest

from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import validate
from tests.factories import generative, hidden_states, policy, pooling, scoring

BGE = {"name": "BAAI/bge-m3", "revision": "r", "hints": {"architectures": ["XLMRobertaModel"], "numAttentionHeads": 16}}
QWEN_EMB = {"name": "Qwen/Qwen3-Embedding-0.6B", "revision": "r", "hints": {"architectures": ["Qwen3ForCausalLM"], "maxModelLen": 32768}}

# (id, valid object, invalid object, path of the problem, words the message must contain)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
    ("unknown field", pooling(), pooling({"pooler": {"type": "CLS"}}), "spec.pooler", "did you mean 'pooling'"),
    ("task enum", pooling({"task": "token_embed"}), pooling({"task": "score"}), "spec.task", "'embed', 'classify', 'token_embed' or 'token_classify'"),
    ("convert enum", pooling({"convert": "embed"}), pooling({"convert": "reward"}), "spec.convert", "'auto', 'none', 'embed' or 'classify'"),
    ("resource name DNS-1035", pooling(name="bge-m3-dense"), pooling(name="3-bge"), "metadata.name", "DNS-1035"),
    ("resource name length", pooling(name="a" * 63), pooling(name="a" * 64), "metadata.name", "at most 63"),
    ("sequence pooling for sequence tasks", pooling({"pooling": {"type": "CLS"}}), pooling({"pooling": {"type": "ALL"}}), "spec.pooling.type", "CLS, MEAN or LAST"),
    ("token pooling for token tasks", pooling({"task": "token_embed", "pooling": {"type": "ALL"}}), pooling({"task": "token_embed", "pooling": {"type": "MEAN"}}), "spec.pooling.type", "ALL or STEP"),
    ("dimensions need Matryoshka", pooling({"model": {"matryoshkaDimensions": [384, 128]}, "pooling": {"dimensions": 128}}), pooling({"pooling": {"dimensions": 128}}), "spec.pooling.dimensions", "declares no Matryoshka"),
    ("dimensions in the whitelist", pooling({"model": {"matryoshkaDimensions": [384, 128]}, "pooling": {"dimensions": 384}}), pooling({"model": {"matryoshkaDimensions": [384, 128]}, "pooling": {"dimensions": 64}}), "spec.pooling.dimensions", "64 is not in [128, 384]"),
    ("dimensions only for embedding tasks", pooling({"task": "token_embed", "model": {"matryoshkaDimensions": [128]}, "pooling": {"dimensions": 128}}), pooling({"task": "classify", "model": {"hints": {"architectures": ["BertForSequenceClassification"]}, "matryoshkaDimensions": [128]}, "pooling": {"dimensions": 128}}), "spec.pooling.dimensions", "only to the embedding tasks"),
    ("hfOverrides may not own Matryoshka keys", pooling({"model": {"hfOverrides": {"head_dtype": "model"}}}), pooling({"model": {"hfOverrides": {"matryoshka_dimensions": [64]}}}), "spec.model.hfOverrides.matryoshka_dimensions", "model.matryoshkaDimensions"),
    ("BGE-M3 sparse needs the override", pooling({"model": {**BGE, "hfOverrides": {"architectures": ["BgeM3EmbeddingModel"]}}, "task": "token_classify"}), pooling({"model": BGE, "task": "token_classify"}), "spec.model.hfOverrides.architectures", "BgeM3EmbeddingModel"),
    ("task the model supports", pooling({"task": "token_embed"}), pooling({"task": "classify"}), "spec.task", "Unsupported task: classify"),
    ("convert none on a causal LM", pooling({"model": QWEN_EMB, "convert": "embed"}), pooling({"model": QWEN_EMB, "convert": "none"}), "spec.convert", "generative model"),
    ("convert embed fits embedding tasks", pooling({"model": QWEN_EMB, "convert": "embed", "task": "token_embed"}), pooling({"model": QWEN_EMB, "convert": "embed", "task": "classify"}), "spec.convert", "convert embed adapts"),
    ("convert on a native pooling model", pooling({"convert": "embed"}), pooling({"convert": "classify", "task": "classify"}), "spec.convert", "has no effect on BertModel"),
    ("batched tokens >= max len for MEAN", pooling({"pooling": {"type": "MEAN"}, "engine": {"maxModelLen": 256, "maxNumBatchedTokens": 256}}), pooling({"pooling": {"type": "MEAN"}, "engine": {"maxModelLen": 256, "maxNumBatchedTokens": 128}}), "spec.engine.maxNumBatchedTokens", "at least 256"),
    ("a decoder with LAST pooling chunks", pooling({"model": QWEN_EMB, "pooling": {"type": "LAST"}, "engine": {"maxModelLen": 8192, "maxNumBatchedTokens": 2048}}), pooling({"model": QWEN_EMB, "pooling": {"type": "MEAN"}, "engine": {"maxModelLen": 8192, "maxNumBatchedTokens": 2048}}), "spec.engine.maxNumBatchedTokens", "MEAN pooling"),
    ("batched tokens >= max seqs", pooling({"engine": {"maxNumBatchedTokens": 256, "maxNumSeqs": 256}}), pooling({"engine": {"maxModelLen": 128, "maxNumBatchedTokens": 128, "maxNumSeqs": 256}}), "spec.engine.maxNumBatchedTokens", "maxNumSeqs"),
    ("max len within the model's", pooling({"engine": {"maxModelLen": 256}}), pooling({"engine": {"maxModelLen": 512}}), "spec.engine.maxModelLen", "at most 256"),
    ("tensor parallel divides heads", pooling({"engine": {"tensorParallelSize": 4}, "resources": {"gpu": {"count": 4}}}), pooling({"engine": {"tensorParallelSize": 5}}), "spec.engine.tensorParallelSize", "12 attention heads"),
    ("gpu memory utilization in (0, 1]", pooling({"engine": {"gpuMemoryUtilization": 1}}), pooling({"engine": {"gpuMemoryUtilization": 1.5}}), "spec.engine.gpuMemoryUtilization", "less than or equal to 1"),
    ("extraArgs: no owned flags", pooling({"engine": {"extraArgs": ["--enable-log-requests"]}}), pooling({"engine": {"extraArgs": ["--max-model-len", "512"]}}), "spec.engine.extraArgs[0]", "spec.engine.maxModelLen"),
    ("extraArgs: no --task", pooling(), pooling({"engine": {"extraArgs": ["--task", "embed"]}}), "spec.engine.extraArgs[0]", "no --task flag"),
    ("extraArgs: version has the flag", pooling({"engine": {"image": "vllm/vllm-openai:v0.33.0", "extraArgs": ["--disable-log-requests"]}}), pooling({"engine": {"image": "vllm/vllm-openai:v0.32.0", "extraArgs": ["--disable-log-requests"]}}), "spec.engine.extraArgs[0]", "no --disable-log-requests"),
    ("extraArgs: unknown flag with a hint", pooling(), pooling({"engine": {"extraArgs": ["--enable-prefix-cachin"]}}), "spec.engine.extraArgs[0]", "did you mean --enable-prefix-caching"),
    ("extraArgs: value choices", pooling({"engine": {"extraArgs": ["--uvicorn-log-level", "warning"]}}), pooling({"engine": {"extraArgs": ["--uvicorn-log-level", "loud"]}}), "spec.engine.extraArgs[0]", "accepts one of"),
    ("extraArgs: no secrets", pooling(), pooling({"engine": {"extraArgs": ["--api-key", "s3cret"]}}), "spec.engine.extraArgs[0]", "secrets never go in arguments"),
    ("extraArgs: no repeats", pooling({"engine": {"extraArgs": ["--enable-log-requests"]}}), pooling({"engine": {"extraArgs": ["--enable-log-requests", "--no-enable-log-requests"]}}), "spec.engine.extraArgs[1]", "repeats extraArgs[0]"),
    ("extraArgs: positional values", pooling(), pooling({"engine": {"extraArgs": ["BAAI/bge-m3"]}}), "spec.engine.extraArgs[0]", "not a flag"),
    ("extraArgs: log outputs need log requests", pooling({"engine": {"extraArgs": ["--enable-log-outputs", "--enable-log-requests"]}}), pooling({"engine": {"extraArgs": ["--enable-log-outputs"]}}), "spec.engine.extraArgs", "requires --enable-log-requests"),
    ("extraArgs: metrics kept when autoscaling", pooling({"engine": {"extraArgs": ["--disable-log-stats"]}}), pooling({"engine": {"extraArgs": ["--disable-log-stats"]}, "autoscaling": {"maxReplicas": 2}}), "spec.engine.extraArgs[0]", "autoscaling and monitoring"),
    ("secret env from a Secret", pooling({"engine": {"env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}}]}}), pooling({"engine": {"env": [{"name": "HF_TOKEN", "value": "hf_x"}]}}), "spec.engine.env[0].value", "from a Secret"),
    ("VLLM_PORT is a port", pooling({"engine": {"env": [{"name": "VLLM_PORT", "value": "8000"}]}}), pooling({"engine": {"env": [{"name": "VLLM_PORT", "value": "tcp://10.0.0.1:8000"}]}}), "spec.engine.env[0].value", "appears to be a URI"),
    ("version from the image tag", pooling({"engine": {"image": "registry.local:5000/vllm/vllm-openai:v0.32.1"}}), pooling({"engine": {"image": "vllm/vllm-openai:latest"}}), "spec.engine.image", "set spec.engine.version"),
    ("supported versions only", pooling({"engine": {"version": "0.32", "image": "vllm/vllm-openai:nightly"}}), pooling({"engine": {"version": "0.31"}}), "spec.engine.version", "supported versions: 0.32, 0.33"),
    ("trust remote code needs the setting", pooling(), pooling({"model": {"trustRemoteCode": True}}), "spec.model.trustRemoteCode", "not allowed"),
    ("one model source", pooling({"model": {"revision": None, "source": {"volume": {"claimName": "models", "path": "/minilm"}}}}), pooling({"model": {"source": {"volume": {"claimName": "models"}, "huggingFace": {}}}}), "spec.model.source", "exactly one"),
    ("min <= max replicas", pooling({"autoscaling": {"minReplicas": 2, "maxReplicas": 2}}), pooling({"autoscaling": {"minReplicas": 3, "maxReplicas": 2}}), "spec.autoscaling.minReplicas", "less than or equal to maxReplicas"),
    ("quantities", pooling({"resources": {"memory": "64Gi", "cpu": "500m"}}), pooling({"resources": {"memory": "64 GB"}}), "spec.resources.memory", "not a Kubernetes quantity"),
    ("one GPU per vLLM worker", pooling({"engine": {"tensorParallelSize": 2}, "resources": {"gpu": {"count": 2}}}), pooling({"engine": {"tensorParallelSize": 2, "extraArgs": ["--pipeline-parallel-size", "2"]}, "resources": {"gpu": {"count": 2}}}), "spec.resources.gpu.count", "vLLM needs 4"),
    ("the listener is the operator's", pooling({"engine": {"extraArgs": ["-O3"]}}), pooling({"engine": {"extraArgs": ["--uds", "/tmp/s"]}}), "spec.engine.extraArgs[0]", "serves HTTP"),
    ("a causal *Model chunks with LAST pooling", pooling({"model": {"hints": {"architectures": ["MistralModel"], "maxModelLen": 32768}}, "pooling": {"type": "LAST"}, "engine": {"maxModelLen": 32768, "maxNumBatchedTokens": 8192}}), pooling({"model": {"hints": {"architectures": ["XLMRobertaModel"], "maxModelLen": 8192}}, "pooling": {"type": "LAST"}, "engine": {"maxModelLen": 8192, "maxNumBatchedTokens": 4096}}), "spec.engine.maxNumBatchedTokens", "XLMRobertaModel is an encoder"),
    # ScoringService
    ("generative iff mode generative", scoring(), scoring({"generative": {"labels": [{"token": "Yes", "id": 1}]}}), "spec.generative", "exactly when mode is generative"),
    ("pooling only for biEncoder", scoring({"mode": "biEncoder", "model": {"hints": {"architectures": ["BertModel"]}}, "pooling": {"type": "CLS"}}), scoring({"pooling": {"type": "CLS"}}), "spec.pooling", "only to mode biEncoder"),
    ("cross-encoder needs one label", scoring(), scoring({"model": {"hints": {"numLabels": 3}}}), "spec.model.hints.numLabels", "num_labels == 1"),
    ("cross-encoder needs a classifier", scoring(), scoring({"model": {"hints": {"architectures": ["BertModel"]}}}), "spec.mode", "not classify"),
    ("late interaction needs token embeddings", scoring({"mode": "lateInteraction", "model": {"hints": {"architectures": ["HF_ColBERT"]}}}), scoring({"mode": "lateInteraction"}), "spec.model.hints.architectures", "token_embed"),
    ("generative needs a causal LM", generative(), generative({"model": {"hints": {"architectures": ["BertModel"]}}}), "spec.model.hints.architectures", "causal LM"),
    ("labels distinct", generative(), generative({"generative": {"labels": [{"token": "Yes", "id": 9454}, {"token": "yes", "id": 9454}]}}), "spec.generative.labels[1].id", "distinct"),
    ("labels in the vocabulary", generative(), generative({"generative": {"labels": [{"token": "x", "id": 151936}]}}), "spec.generative.labels[0].id", "[0, 151936)"),
    ("labels non-negative", generative(), generative({"generative": {"labels": [{"token": "x", "id": -1}]}}), "spec.generative.labels[0].id", "greater than or equal to 0"),
    ("1..128 labels", generative({"generative": {"labels": [{"token": str(i), "id": i} for i in range(128)]}}), generative({"generative": {"labels": [{"token": str(i), "id": i} for i in range(129)]}}), "spec.generative.labels", "at most 128"),
    ("max logprobs covers the labels", generative({"engine": {"extraArgs": ["--max-logprobs", "-1"]}}), generative({"engine": {"extraArgs": ["--max-logprobs", "1"]}}), "spec.engine.extraArgs", "below the 2 label tokens"),
    # HiddenStateJob
    ("layers non-empty", hidden_states(), hidden_states({"layers": []}), "spec.layers", "at least 1"),
    ("layers unique", hidden_states(), hidden_states({"layers": [5, 5, 9]}), "spec.layers", "unique"),
    ("layers ascending", hidden_states(), hidden_states({"layers": [9, 5, 1]}), "spec.layers", "ascending"),
    ("layers within the model", hidden_states({"layers": [0, 36]}), hidden_states({"layers": [0, 37]}), "spec.layers[1]", "0 (the embeddings) to 36"),
    ("layers non-negative", hidden_states(), hidden_states({"layers": [-1]}), "spec.layers[0]", "greater than or equal to 0"),
    ("hidden states need a generate model", hidden_states(), hidden_states({"model": {"hints": {"architectures": ["BertModel"]}}}), "spec.model.hints.architectures", "pooling model"),
    ("no MLA models", hidden_states(), hidden_states({"model": {"hints": {"architectures": ["DeepseekV3ForCausalLM"]}}}), "spec.model.hints.architectures", "latent attention"),
    ("hidden-state connectors only", hidden_states(), hidden_states({"connector": {"name": "NixlConnector"}}), "spec.connector.name", "ExampleHiddenStatesConnector"),
    ("storage path owned", hidden_states({"connector": {"extraConfig": {"num_writer_threads": 4}}}), hidden_states({"connector": {"extraConfig": {"shared_storage_path": "/tmp"}}}), "spec.connector.extraConfig.shared_storage_path", "inside spec.output.volume"),
    ("lock kept", hidden_states(), hidden_states({"connector": {"extraConfig": {"use_synchronization_lock": False}}}), "spec.connector.extraConfig.use_synchronization_lock", "must stay true"),
    ("one speculative token (owned)", hidden_states(), hidden_states({"engine": {"extraArgs": ["--speculative-config", "{}"]}}), "spec.engine.extraArgs[0]", "spec.layers"),
    ("budget needs hidden size", hidden_states({"output": {"storageBudget": "2Ti"}}), hidden_states({"output": {"storageBudget": "2Ti"}, "model": {"hints": {"hiddenSize": None}}}), "spec.output.storageBudget", "hiddenSize"),
    ("parallelism <= shards", hidden_states({"parallelism": 4}), hidden_states({"parallelism": 5}), "spec.parallelism", "less than or equal to shards"),
    ("dataset outside the output", hidden_states(), hidden_states({"dataset": {"volume": {"claimName": "hidden-states", "path": "/runs/qwen3-8b/in.jsonl"}}}), "spec.output.volume.path", "inside the output folder"),
    # AutoscalingPolicy
    ("policy backends", policy({"allowedBackends": ["operator"]}), policy({"allowedBackends": []}), "spec.allowedBackends", "at least one"),
]


@pytest.mark.parametrize(("valid", "invalid", "path", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(valid: dict[str, Any], invalid: dict[str, Any], path: str, words: str) -> None:
    ok = validate(valid)
    assert ok.errors == [], [str(p) for p in ok.errors]
    bad = validate(invalid)
    matching = [p for p in bad.errors if p.path == path]
    assert matching, f"no problem at {path}: {[str(p) for p in bad.problems]}"
    assert any(words in p.message for p in matching), [p.message for p in matching]


def test_trust_remote_code_allowed_by_setting() -> None:
    assert validate(pooling({"model": {"trustRemoteCode": True}}), Settings(allow_trust_remote_code=True)).ok


def test_missing_revision_is_a_warning_not_an_error() -> None:
    result = validate(pooling({"model": {"revision": None}}))
    assert result.ok
    assert [p.path for p in result.warnings] == ["spec.model.revision"]


def test_policy_backend_checked_against_the_referenced_policy() -> None:
    from pooling_operator.api.policy import AutoscalingPolicySpec

    policies = {"strict": AutoscalingPolicySpec.model_validate({"allowedBackends": ["operator"]})}
    svc = pooling({"autoscaling": {"maxReplicas": 2, "backend": "keda", "policyRef": {"name": "strict"}}})
    problems = validate(svc, policies=policies).errors
    assert [(p.path, "allowed: operator" in p.message) for p in problems] == [("spec.autoscaling.backend", True)]
    missing = pooling({"autoscaling": {"maxReplicas": 2, "policyRef": {"name": "nope"}}})
    assert [p.path for p in validate(missing, policies=policies).errors] == ["spec.autoscaling.policyRef.name"]
    assert [p.path for p in validate(missing, policies={}).errors] == ["spec.autoscaling.policyRef.name"]
    capped = {"default": AutoscalingPolicySpec.model_validate({"default": True, "limits": {"maxReplicas": 4}})}
    above = pooling({"autoscaling": {"minReplicas": 6, "maxReplicas": 10}})
    assert [p.path for p in validate(above, policies=capped).errors] == ["spec.autoscaling.minReplicas"]


def test_bad_input_never_raises() -> None:
    for junk in (None, 3, [], "text", {"kind": "PoolingService"}, {"apiVersion": "v1", "kind": "Pod"},
                 pooling({"model": None}), pooling({"engine": {"extraArgs": "not-a-list"}})):
        result = validate(junk)
        assert not result.ok and all(p.path for p in result.errors)
