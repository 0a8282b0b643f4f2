"""Flags vLLM implements per architecture (issue 50, item 2): --enable-lora needs SupportsLoRA, a pipeline-parallel
size above 1 needs SupportsPP, both of the class the declared version loads for the architecture, as the registry
tables read them from vLLM (tools/registry: the 0.32 table from the real runtime, whose source reading of
these interfaces agrees with it on all 391 names; the 0.33 one from its source)."""

from __future__ import annotations

from typing import Any

import pytest

from pooling_operator.api.problems import Problem
from pooling_operator.vllm.registry import registry
from pooling_operator.vllm.validate import validate
from tests.factories import hidden_states, pooling, scoring

V032, V033 = "vllm/vllm-openai:v0.32.0", "vllm/vllm-openai:v0.33.0"


def gated(obj: dict[str, Any]) -> list[Problem]:
    return [p for p in validate(obj).problems if "Supports" in p.message]


def service(arch: str | None, image: str, *extra: str, **spec: Any) -> dict[str, Any]:
    hints = {"architectures": [arch]} if arch else None
    return pooling({"model": {"hints": hints}, "engine": {"image": image, "extraArgs": list(extra)}, **spec})


@pytest.mark.parametrize(("obj", "index", "flag", "interface", "where"), [
    (service("NomicBertModel", V032, "--enable-lora"), 0, "--enable-lora", "SupportsLoRA", "vLLM 0.32"),
    (service("GteNewModel", V033, "--max-loras", "2", "--enable-lora"), 2, "--enable-lora", "SupportsLoRA", "vLLM 0.33"),
    (service("BertModel", V033, "--pipeline-parallel-size", "2", resources={"gpu": {"count": 2}}), 0,
     "--pipeline-parallel-size", "SupportsPP", "vLLM 0.33"),
    (service("BertModel", V032, "-pp", "1", "-pp", "4", resources={"gpu": {"count": 4}}), 2,
     "--pipeline-parallel-size", "SupportsPP", "vLLM 0.32"),  # the last occurrence, as vLLM reads it
])  # fmt: skip
def test_a_flag_whose_interface_the_class_lacks_is_refused_naming_flag_architecture_and_version(
    obj: dict[str, Any], index: int, flag: str, interface: str, where: str
) -> None:
    [p] = gated(obj)
    arch = obj["spec"]["model"]["hints"]["architectures"][0]
    assert p.severity == "error" and p.path == f"spec.engine.extraArgs[{index}]"
    assert flag in p.message and arch in p.message and interface in p.message and where in p.message, p.message


def test_a_class_that_gains_the_interface_in_the_next_version_is_refused_only_where_it_lacks_it() -> None:
    """BertForSequenceClassification implements SupportsLoRA in 0.33, not in 0.32 (read from each version)."""
    arch = "BertForSequenceClassification"
    assert (registry("0.32").entry(arch).lora, registry("0.33").entry(arch).lora) == (False, True)
    def obj(image: str) -> dict[str, Any]:
        return scoring({"model": {"hints": {"architectures": [arch]}}, "engine": {"image": image, "extraArgs": ["--enable-lora"]}})
    [p] = gated(obj(V032))
    assert "vLLM 0.32" in p.message and "vLLM 0.33 implements it for this architecture" in p.message
    assert gated(obj(V033)) == []


@pytest.mark.parametrize("obj", [
    service("BertModel", V032, "--enable-lora"),  # BertEmbeddingModel has SupportsLoRA in 0.32
    service("Qwen2Model", V033, "--enable-lora", "--pipeline-parallel-size", "2", resources={"gpu": {"count": 2}}),
    service("NomicBertModel", V032, "--pipeline-parallel-size", "1"),  # not above 1: nothing gated
    service("NomicBertModel", V032, "--no-enable-lora"),
    service("SomeoneElsesModel", V033, "--enable-lora"),  # not in the registry (Transformers backend): not known here
    hidden_states({"engine": {"extraArgs": ["--enable-lora"]}}),  # Qwen3ForCausalLM
])  # fmt: skip
def test_what_the_class_implements_or_cannot_be_known_from_the_table_passes(obj: dict[str, Any]) -> None:
    assert gated(obj) == []


def test_an_unknown_architecture_is_a_warning_that_says_how_to_make_it_checkable() -> None:
    [p] = gated(service(None, V033, "--enable-lora"))
    assert p.severity == "warning" and "spec.model.hints.architectures" in p.message and p.path == "spec.engine.extraArgs[0]"


@pytest.mark.parametrize("version", ["0.32", "0.33"])
def test_every_registered_name_says_whether_its_class_implements_each_interface(version: str) -> None:
    archs = registry(version).data["architectures"]
    assert all(isinstance(e["lora"], bool) and isinstance(e["pp"], bool) for e in archs.values())
    assert not archs["NomicBertModel"]["lora"] and archs["Qwen3ForCausalLM"]["lora"] and archs["Qwen3ForCausalLM"]["pp"]
