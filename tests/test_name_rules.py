"""What a name a user writes may hold (issue 42.5, vllm/name_rules.py): a Hugging Face repository id has the Hub's
alphabet; any other name holds no invisible or direction-changing character. Each refusal names the field, the
position and the character."""

from __future__ import annotations

from typing import Any

import pytest

from pooling_operator.vllm.validate import validate
from tests.factories import model_cache, pooling, pooling_job, scoring

VOLUME = {"volume": {"claimName": "models", "path": "/m"}}


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("sentence-transformers/all-MiniLM-L6-v\u0430", "character 38 of "),  # a Cyrillic look-alike of 'a'
        ("BAAI/bge\u200b-m3", "U+200B ZERO WIDTH SPACE"),
        ("BAAI/\u202ebge-m3", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("BAAI/bge\u00ad-m3", "U+00AD SOFT HYPHEN"),
        ("org/m\u00f6del", "U+00F6 LATIN SMALL LETTER O WITH DIAERESIS"),
        ("a/b/c", "is not a Hugging Face repository id: Repo id must be in the form 'repo_name' or 'namespace/repo_name'"),
        ("org/", "cannot start or end with '-' or '.'"),
        ("org/-model", "cannot start or end with '-' or '.'"),
        ("org/model.", "cannot start or end with '-' or '.'"),
        ("org/x--y", "Cannot have -- or .. in repo_id"),
        ("org/x.git", "cannot end by '.git'"),
        ("org/" + "m" * 97, "the maximum length is 96"),
    ],
)
def test_a_hub_model_name_outside_the_hubs_alphabet_is_refused_naming_the_character(name: str, words: str) -> None:
    for doc in (pooling({"model": {"name": name}}), scoring({"model": {"name": name}}), pooling_job({"model": {"name": name}}),
                pooling({"model": {"name": name, "source": {"cache": {"name": "c"}}, "revision": None}}),
                model_cache({"model": {"name": name}})):
        errors = [p for p in validate(doc).errors if p.path == "spec.model.name"]
        assert errors and words in errors[0].message, (doc["kind"], errors)


@pytest.mark.parametrize("name", ["BAAI/bge-m3", "Qwen/Qwen3-Embedding-0.6B", "gpt2", "intfloat/e5_small.v2", "A1/b_2-c.3"])
def test_hub_names_in_the_alphabet_pass(name: str) -> None:
    assert not [p for p in validate(pooling({"model": {"name": name}})).problems if p.path == "spec.model.name"]


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        ({"model": {"name": "/models/\u202eledom", "source": VOLUME, "revision": None}}, "spec.model.name", "character 9 is U+202E"),
        ({"model": {"servedName": "emb\u200b"}}, "spec.model.servedName", "character 4 is U+200B"),
        ({"model": {"revision": "main\u2028"}}, "spec.model.revision", "U+2028 LINE SEPARATOR"),
    ],
)
def test_other_names_hold_no_invisible_or_direction_changing_character(spec: dict[str, Any], path: str, words: str) -> None:
    errors = [p for p in validate(pooling(spec)).errors if p.path == path]
    assert errors and words in errors[0].message, errors


def test_a_volume_label_may_be_any_visible_text() -> None:
    doc = pooling({"model": {"name": "/models/München-model", "source": VOLUME, "revision": None}})
    assert not [p for p in validate(doc).problems if p.path == "spec.model.name"]
