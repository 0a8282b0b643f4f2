"""vLLM's own pooling recipes (its docs, examples and tests, 0.32 and 0.33) written as our resources: what the
operator must accept, warn about or refuse, with the field path and the words of the message. Each case was
a fault once: accepted where vLLM fails, refused where vLLM serves, or silent where the user is misled."""

from __future__ import annotations

from typing import Any

import pytest

from pooling_operator.vllm.rules import Settings
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
