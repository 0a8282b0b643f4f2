"""The committed architecture tables (operator/pooling_operator/vllm/registry/, made by
tools/registry from vLLM itself): what they say about the models the operator cares about,
and that both versions have one shape. No vLLM here: the real_vllm tier regenerates the 0.32 table."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import pooling_operator

REGISTRY = Path(pooling_operator.__file__).resolve().parent / "vllm" / "registry"
VERSIONS = ("0.32", "0.33")
REWARD_MODELS = ("Qwen2ForRewardModel", "Qwen2ForProcessRewardModel", "InternLM2ForRewardModel")
WHERE = re.compile(r"^(model_executor|models|config|tests)/[\w/]+\.py:\d+(-\d+)?$")


def table(version: str) -> dict[str, Any]:
    return json.loads((REGISTRY / f"vllm-{version}.json").read_text())


def transformers_table(version: str) -> dict[str, Any]:
    return json.loads((REGISTRY / f"transformers-{table(version)['transformers']}.json").read_text())


@pytest.fixture(params=VERSIONS)
def doc(request: pytest.FixtureRequest) -> dict[str, Any]:
    return table(request.param)


@pytest.mark.parametrize("arch", REWARD_MODELS)
def test_reward_models_serve_token_classify(doc: dict[str, Any], arch: str) -> None:
    # vLLM registers them in _REWARD_MODELS and their classes build pooler_for_token_classify: not embed.
    e = doc["architectures"][arch]
    assert e["runner"] == "pooling" and e["convert"] == "none"
    assert e["tasks"] == ["token_classify"] and e["task"] == "token_classify"
    assert e["pooler"].startswith(("model_executor/models/qwen2_rm.py:", "model_executor/models/internlm2.py:"))


def test_bge_m3_tasks(doc: dict[str, Any]) -> None:
    e = doc["architectures"]["BgeM3EmbeddingModel"]
    assert {"embed", "token_embed", "token_classify"} <= set(e["tasks"])
    # With no --pooler-config.task vLLM picks the combined task (contract §7, the BGE-M3 trap).
    assert e["task"] == "embed&token_classify"


def test_colbert_serves_token_embed_only(doc: dict[str, Any]) -> None:
    e = doc["architectures"]["HF_ColBERT"]
    assert e["tasks"] == ["token_embed"] and e["score"] == "late-interaction"


@pytest.mark.parametrize("arch", ["BertModel", "XLMRobertaModel"])
def test_encoders_serve_embed_and_token_embed(doc: dict[str, Any], arch: str) -> None:
    e = doc["architectures"][arch]
    assert e["runner"] == "pooling" and e["tasks"] == ["embed", "token_embed"] and e["task"] == "embed"
    assert e["seq_pooling"] == "CLS"


def test_registered_causal_lm_names_generate(doc: dict[str, Any]) -> None:
    # LlamaModel maps to LlamaForCausalLM: with runner auto and no sentence-transformers files it generates.
    for arch in ("LlamaModel", "MistralModel", "Qwen2ForCausalLM"):
        e = doc["architectures"][arch]
        assert e["generate"] and not e["pooling"] and e["runner"] == "generate", arch
    assert doc["convert"]["embed"]["tasks"] == ["embed", "token_embed"]
    assert doc["convert"]["classify"]["tasks"] == ["classify", "token_classify"]


def test_gte_new_needs_remote_code(doc: dict[str, Any]) -> None:
    items = doc["remote_code"]["GteNewModel"]
    [check] = [i for i in items if i["kind"] == "config-check"]
    assert check["where"].startswith("model_executor/models/config.py:")
    assert "NewConfig" in check["why"] and "condition" not in check
    # NewConfig is nowhere in the transformers release the version tests with.
    assert "NewConfig" not in transformers_table(doc["version"])["configs"]


def test_conditional_remote_code_says_when(doc: dict[str, Any]) -> None:
    # jina-embeddings-v3 (rotary XLMRobertaModel) needs its repository's config class; other XLM-R do not.
    [check] = [i for i in doc["remote_code"]["XLMRobertaModel"] if i["kind"] == "config-check"]
    assert "rotary" in check["condition"] and "XLMRobertaFlashConfig" in check["why"]


def test_every_entry_cites_its_source(doc: dict[str, Any]) -> None:
    for arch, e in doc["architectures"].items():
        assert WHERE.match(e["where"]) and e["where"].startswith("model_executor/models/registry.py:"), arch
        if e["runner"] == "pooling":
            assert WHERE.match(e["pooler"]), arch
            assert e["tasks"], f"{arch}: pooling without tasks ({e['read']})"
            assert e["task"] in e["tasks"], arch
    for arch, items in doc["remote_code"].items():
        assert items, arch
        for i in items:
            assert WHERE.match(i["where"]) and i["why"], (arch, i)
            assert i["kind"] in ("config-check", "model-code", "test-case"), (arch, i)


def test_tasks_are_vllm_pooling_tasks(doc: dict[str, Any]) -> None:
    tasks = doc["pooling_tasks"]["tasks"]
    assert set(tasks) == {"embed", "classify", "token_embed", "token_classify", "plugin", "embed&token_classify"}
    for arch, e in doc["architectures"].items():
        if e["runner"] == "pooling":
            assert e["tasks"] == [t for t in tasks if t in e["tasks"]], f"{arch}: not in vLLM's order"


def entry_shape(doc: dict[str, Any]) -> dict[str, set[tuple[str, str]]]:
    """The keys and value types of the entries, by runner."""
    shapes: dict[str, set[tuple[str, str]]] = {}
    for e in doc["architectures"].values():
        shapes.setdefault(e["runner"], set()).update((k, type(v).__name__) for k, v in e.items() if v is not None)
    return shapes


def test_both_versions_have_one_schema() -> None:
    a, b = table("0.32"), table("0.33")
    assert a["schema"] == b["schema"]
    assert set(a) == set(b)
    assert entry_shape(a) == entry_shape(b)
    assert {k for e in a["remote_code"].values() for i in e for k in i} == {
        k for e in b["remote_code"].values() for i in e for k in i
    }
    assert (a["version"], b["version"]) == VERSIONS
    for doc in (a, b):
        t = transformers_table(doc["version"])
        assert t["version"] == doc["transformers"]
        assert set(t) == {"version", "source", "architectures", "configs"}


def test_files_are_canonical_json() -> None:
    """json.dump(indent=1, sort_keys=True) and a newline: what the generator writes, so a regeneration that
    changes nothing changes no byte."""
    files = sorted(REGISTRY.glob("*.json"))
    assert {p.name for p in files} >= {f"vllm-{v}.json" for v in VERSIONS}
    for p in files:
        text = p.read_text()
        assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n", p.name


def test_tables_are_package_data() -> None:
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "vllm/registry/*.json" in pyproject["tool"]["setuptools"]["package-data"]["pooling_operator"]
