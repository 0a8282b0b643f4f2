"""vLLM's own pooling recipes (its docs, examples and tests, 0.32 and 0.33) written as our resources: what the
operator must accept, warn about or refuse, with the field path and the words of the message. Each case was
a fault once: accepted where vLLM fails, refused where vLLM serves, or silent where the user is misled."""

from __future__ import annotations

from typing import Any

import pytest

from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import validate
from tests.factories import pooling


def problems(obj: dict[str, Any], settings: Settings | None = None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    result = validate(obj, settings)
    return [(p.path, p.message) for p in result.errors], [(p.path, p.message) for p in result.warnings]


def at(found: list[tuple[str, str]], path: str) -> list[str]:
    return [m for p, m in found if p == path]


# ---- engine.version against the image tag --------------------------------------------------------------------


def test_a_version_contradicting_the_image_tag_is_a_warning_naming_the_field() -> None:
    errors, warnings = problems(pooling({"engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.32"}}))
    assert errors == []
    [message] = at(warnings, "spec.engine.version")
    assert "vLLM 0.33" in message and "'0.32'" in message and "set spec.engine.version to '0.33'" in message


@pytest.mark.parametrize("engine", [
    {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33"},  # agrees
    {"image": "vllm/vllm-openai:v0.33.0"},  # read from the tag
    {"image": "vllm/vllm-openai:nightly", "version": "0.32"},  # the tag says nothing
    {"image": "registry.local:5000/vllm@sha256:" + "a" * 64, "version": "0.33"},  # a digest only
])
def test_no_drift_warning_where_the_tag_agrees_or_says_nothing(engine: dict[str, Any]) -> None:
    _, warnings = problems(pooling({"engine": engine}))
    assert at(warnings, "spec.engine.version") == []


# ---- BGE-M3 token_embed without the override ----------------------------------------------------------------

BGE = {"name": "BAAI/bge-m3", "revision": "5617a9f61b028005a4858fdac845db406aefb181"}


@pytest.mark.parametrize("hints", [None, {"architectures": ["XLMRobertaModel"]}], ids=["no hints", "the repository's"])
def test_bge_m3_token_embed_without_the_override_is_served_with_a_warning(hints: dict[str, Any] | None) -> None:
    """vLLM serves it (raw per-token hidden states: its own multi-vector retrieval test does exactly this), so
    it is accepted; the warning says what the user gets and how to get BGE-M3's ColBERT vectors instead."""
    model = {**BGE, **({"hints": hints} if hints else {})}
    errors, warnings = problems(pooling({"model": model, "task": "token_embed"}))
    assert errors == []
    [message] = at(warnings, "spec.model.hfOverrides.architectures")
    assert "raw per-token hidden states" in message and "not BGE-M3's ColBERT vectors" in message
    assert "[BgeM3EmbeddingModel]" in message


def test_bge_m3_sparse_without_the_override_is_still_refused() -> None:
    errors, _ = problems(pooling({"model": BGE, "task": "token_classify"}))
    assert any("sparse (token_classify)" in m for m in at(errors, "spec.model.hfOverrides.architectures"))
    errors, warnings = problems(pooling({"model": {**BGE, "hfOverrides": {"architectures": ["BgeM3EmbeddingModel"]}}, "task": "token_embed"}))
    assert errors == [] and at(warnings, "spec.model.hfOverrides.architectures") == []


# ---- vLLM's registered reward models serve token_classify ---------------------------------------------------


def reward(arch: str, task: str = "token_classify", **model: Any) -> dict[str, Any]:
    return pooling({
        "model": {"name": "Qwen/Qwen2.5-Math-PRM-7B", "revision": "r", "hints": {"architectures": [arch]}, **model},
        "task": task, "pooling": {"type": "STEP" if task == "token_classify" else "LAST"},
    })


@pytest.mark.parametrize("arch", ["Qwen2ForProcessRewardModel", "Qwen2ForRewardModel"])
def test_registered_reward_models_serve_token_classify(arch: str) -> None:
    """vLLM registers them (0.32 model_executor/models/registry.py:282-286) and their classes build
    pooler_for_token_classify (qwen2_rm.py:102, :114): its own tests and recipes serve them with token_classify.
    The `*RewardModel -> embed` name rule is only for names the registry lacks."""
    errors, _ = problems(reward(arch))
    assert errors == []
    errors, _ = problems(reward(arch, "embed"))
    assert any("serves token_classify, not embed" in m for m in at(errors, "spec.task")), errors


def test_internlm2_reward_needs_its_repository_code() -> None:
    errors, _ = problems(reward("InternLM2ForRewardModel"))
    [message] = at(errors, "spec.model.trustRemoteCode")
    assert "internlm/internlm2-1_8b-reward" in message and "tests/models/registry.py" in message
    trusted = reward("InternLM2ForRewardModel", trustRemoteCode=True)
    assert problems(trusted, Settings(allow_trust_remote_code=True))[0] == []


def test_a_name_the_registry_lacks_keeps_vllms_suffix_rule() -> None:
    """An unregistered *RewardModel is what vLLM's suffix defaults make of it: pooling, convert embed."""
    errors, _ = problems(reward("FooForRewardModel", "embed", trustRemoteCode=True), Settings(allow_trust_remote_code=True))
    assert errors == []


# ---- models whose code or config vLLM loads from the repository ---------------------------------------------


def test_gte_new_model_needs_trust_remote_code() -> None:
    """Alibaba-NLP's gte models: GteNewModel is registered, but its config check asserts the repository's
    NewConfig class (0.32 model_executor/models/config.py:487-492), so vLLM fails at start-up without it."""
    spec = {"model": {"name": "Alibaba-NLP/gte-base-en-v1.5", "revision": "r", "hfOverrides": {"architectures": ["GteNewModel"]}}}
    errors, _ = problems(pooling(spec))
    [message] = at(errors, "spec.model.trustRemoteCode")
    assert "NewConfig" in message and "model_executor/models/config.py:" in message
    spec["model"]["trustRemoteCode"] = True
    assert problems(pooling(spec), Settings(allow_trust_remote_code=True))[0] == []


@pytest.mark.parametrize(("arch", "severity", "words"), [
    ("FooBarEmbeddingModel", "error", "neither in vLLM 0.33's model registry nor a class of transformers"),
    ("DistilBertModel", "warning", "Transformers backend"),  # transformers has it: served without remote code
    ("MPNetModel", "error", "not compatible with vLLM's Transformers backend"),
    ("Qwen3ForSequenceClassification", None, ""),  # normalised onto Qwen3ForCausalLM, converted: native
])
def test_names_the_registry_lacks(arch: str, severity: str | None, words: str) -> None:
    errors, warnings = problems(pooling({"model": {"hints": {"architectures": [arch]}}, "task": "classify" if "Classification" in arch else "embed"}))
    found = at(errors if severity == "error" else warnings, "spec.model.trustRemoteCode")
    if severity is None:
        assert at(errors, "spec.model.trustRemoteCode") == at(warnings, "spec.model.trustRemoteCode") == []
    else:
        assert any(words in m for m in found), (errors, warnings)
