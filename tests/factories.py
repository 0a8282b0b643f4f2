"""Small builders of resource dicts for tests: a valid default, deep-merged with overrides."""

from __future__ import annotations

import copy
from typing import Any

API = "vllm-pooling.io/v1alpha1"


def merge(base: dict[str, Any], over: dict[str, Any] | None) -> dict[str, Any]:
    """Deep merge; a None value in ``over`` removes the key."""
    out = copy.deepcopy(base)
    for key, value in (over or {}).items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def resource(kind: str, spec: dict[str, Any], name: str = "demo", namespace: str | None = "ns") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": API, "kind": kind, "metadata": meta, "spec": spec}


ABC_SHA = "abc1230000000000000000000000000000000000"  # a full commit sha (the rules warn on a branch or short sha)
MINILM_HINTS = {"architectures": ["BertModel"], "numHiddenLayers": 6, "hiddenSize": 384, "numAttentionHeads": 12, "maxModelLen": 256}
QWEN_HINTS = {
    "architectures": ["Qwen3ForCausalLM"],
    "numHiddenLayers": 36,
    "hiddenSize": 4096,
    "vocabSize": 151936,
    "numAttentionHeads": 32,
    "maxModelLen": 40960,
}


def pooling(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    base = {
        "model": {"name": "sentence-transformers/all-MiniLM-L6-v2", "revision": ABC_SHA, "hints": MINILM_HINTS},
        "task": "embed",
        "engine": {"image": "vllm/vllm-openai:v0.33.0"},
    }
    return resource("PoolingService", merge(base, spec), **meta)


RERANKER = {
    "name": "BAAI/bge-reranker-v2-m3",
    "revision": ABC_SHA,
    "hints": {"architectures": ["XLMRobertaForSequenceClassification"], "numLabels": 1},
}


def scoring(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    base = {"mode": "crossEncoder", "model": copy.deepcopy(RERANKER), "engine": {"image": "vllm/vllm-openai:v0.33.0"}}
    return resource("ScoringService", merge(base, spec), **meta)


def generative(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    base = {
        "mode": "generative",
        "model": {"name": "Qwen/Qwen3-1.7B", "revision": ABC_SHA, "hints": QWEN_HINTS},
        "generative": {"labels": [{"token": "Yes", "id": 9454}, {"token": "No", "id": 2753}]},
        "engine": {"image": "vllm/vllm-openai:v0.33.0"},
    }
    return resource("ScoringService", merge(base, spec), **meta)


def hidden_states(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    base = {
        "model": {"name": "Qwen/Qwen3-8B", "revision": ABC_SHA, "hints": QWEN_HINTS},
        "layers": [3, 18, 33, 36],
        "dataset": {"volume": {"claimName": "datasets", "path": "/prompts.jsonl"}},
        "output": {"volume": {"claimName": "hidden-states", "path": "/runs/qwen3-8b"}},
        "shards": 4,
        "engine": {"image": "vllm/vllm-openai:v0.33.0"},
    }
    return resource("HiddenStateJob", merge(base, spec), **meta)


def pooling_job(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    base = {
        "model": {"name": "sentence-transformers/all-MiniLM-L6-v2", "revision": "c9745ed1d9f207416be6d2e6f8de32d1f16199bf",
                  "hints": MINILM_HINTS},
        "task": "embed",
        "pooling": {"type": "MEAN", "normalize": True},
        "embeddingSpace": "minilm-v1",
        "dataset": {"volume": {"claimName": "corpus", "path": "/corpus.jsonl"}},
        "output": {"volume": {"claimName": "vectors", "path": "/runs/v1"}},
        "shards": 2,
        "engine": {"image": "vllm/vllm-openai:v0.33.0"},
    }
    return resource("PoolingJob", merge(base, spec), **meta)


def scoring_job(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    """A PoolingJob with a scoring mode: a ScoringService's model and mode, a PoolingJob's dataset and output."""
    base = {
        "mode": "crossEncoder",
        "model": copy.deepcopy(RERANKER),
        "dataset": {"volume": {"claimName": "corpus", "path": "/groups.jsonl"}},
        "output": {"volume": {"claimName": "scores", "path": "/runs/v1"}},
        "shards": 2,
        "engine": {"image": "vllm/vllm-openai:v0.33.0"},
    }
    return resource("PoolingJob", merge(base, spec), **meta)


def policy(spec: dict[str, Any] | None = None, name: str = "default") -> dict[str, Any]:
    return resource("AutoscalingPolicy", merge({"default": True}, spec), name=name, namespace=None)


MINILM_SHA = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


def model_cache(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    base = {"model": {"name": "sentence-transformers/all-MiniLM-L6-v2", "revision": MINILM_SHA},
            "storage": {"size": "1Gi"}}
    return resource("ModelCache", merge(base, spec), **{"name": "minilm", **meta})


def invalid_examples(namespace: str = "ns") -> dict[str, dict[str, Any]]:
    """One resource of every kind of ours that the CRD schema lets in and only the vLLM rules refuse (what the
    admission webhook exists for); tests/test_admission.py keeps it covering every kind."""
    encoder_batch = {"engine": {"maxModelLen": 512, "maxNumBatchedTokens": 256}}
    return {
        "PoolingService": pooling(encoder_batch, name="too-small-batch", namespace=namespace),
        "ScoringService": scoring(encoder_batch, name="too-small-batch", namespace=namespace),
        "HiddenStateJob": hidden_states({"layers": [3, 99]}, name="no-layer-99", namespace=namespace),
        "PoolingJob": pooling_job(encoder_batch, name="too-small-batch", namespace=namespace),
        "ModelCache": model_cache({"storage": {"size": None, "claimName": "shared", "storageClassName": "fast"}},
                                  name="class-on-a-claim", namespace=namespace),
        "AutoscalingPolicy": policy({"defaults": {"scaleDown": {"stabilizationSeconds": 10}},
                                     "limits": {"minScaleDownStabilizationSeconds": 120}}, name="below-its-floor"),
    }
