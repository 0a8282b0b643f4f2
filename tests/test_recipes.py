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
