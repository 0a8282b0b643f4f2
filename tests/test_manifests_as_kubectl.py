"""YAML as kubectl reads it (issue 42.4): merge keys (``<<: *base``) merged with the keys beside them winning, and
List documents (``kind: List``, ``<Kind>List``) unwrapped into their items, each judged as its own resource and
named in every problem line; every bound of manifests.py still holds for both."""

from __future__ import annotations

from pathlib import Path

import pytest

from pooling_operator.cli import main
from pooling_operator.manifests import MAX_DOCUMENTS, ManifestError, load

SERVICE = """- apiVersion: vllm-pooling.io/v1alpha1
  kind: PoolingService
  metadata: {{name: {name}, namespace: search}}
  spec:
    model: {{name: sentence-transformers/all-MiniLM-L6-v2, revision: c9745ed1d9f207416be6d2e6f8de32d1f16199bf}}
    task: embed
{engine}"""
BASE = "    engine: &engine\n      image: vllm/vllm-openai:v0.33.0\n      maxModelLen: 256\n"
MERGED_BAD = "    engine:\n      <<: *engine\n      maxModelLen: 512\n      maxNumBatchedTokens: 256\n"


def listing(*items: str, kind: str = "List", api: str = "v1") -> str:
    return f"apiVersion: {api}\nkind: {kind}\nitems:\n" + "".join(items)


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "in.yaml"
    p.write_text(text)
    return str(p)


def test_merge_keys_merge_and_the_keys_beside_them_win(tmp_path: Path) -> None:
    text = listing(SERVICE.format(name="good", engine=BASE), SERVICE.format(name="bad", engine=MERGED_BAD))
    docs = list(load([write(tmp_path, text)]))
    assert [d.body["spec"]["engine"] for d in docs] == [
        {"image": "vllm/vllm-openai:v0.33.0", "maxModelLen": 256},
        {"image": "vllm/vllm-openai:v0.33.0", "maxModelLen": 512, "maxNumBatchedTokens": 256},
    ]
    merged_list = "a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: [*a, *b]\n  z: 3\n"
    [doc] = list(load([write(tmp_path, merged_list)]))
    assert doc.body["c"] == {"x": 1, "y": 2, "z": 3}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: &a {x: 1}\nc:\n  <<: *a\n  z: 3\n  z: 4\n", "duplicate key 'z'"),  # still unique as written
        ("c:\n  <<: 5\n", "malformed YAML"),  # a merge of a scalar
        ("a: &a {k0: [1,2,3,4,5,6,7,8,9]}\n" + "".join(f"m{i}: &m{i} {{<<: *{'a' if i == 0 else f'm{i - 1}'}, k{i + 1}: [*{'a' if i == 0 else f'm{i - 1}'}, *{'a' if i == 0 else f'm{i - 1}'}, *{'a' if i == 0 else f'm{i - 1}'}]}}\n" for i in range(16)),
         "expands to more than"),  # a merge bomb: bounded like an alias bomb
    ],
)
def test_merge_keys_keep_every_bound(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ManifestError, match=words):
        list(load([write(tmp_path, text)]))


def test_a_list_is_judged_item_by_item_and_each_problem_names_its_item(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inner = "- apiVersion: vllm-pooling.io/v1alpha1\n  kind: PoolingServiceList\n  items:\n" + "\n".join(
        "  " + line for line in SERVICE.format(name="nested-bad", engine=MERGED_BAD.replace("<<: *engine\n      ", "")).splitlines()
    ) + "\n"
    text = listing(SERVICE.format(name="good", engine=BASE), SERVICE.format(name="bad", engine=MERGED_BAD), inner)
    path = write(tmp_path, text)
    assert [(d.item, d.body["metadata"]["name"]) for d in load([path])] == [
        ("items[0]", "good"), ("items[1]", "bad"), ("items[2].items[0]", "nested-bad")]
    assert main(["validate", path]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[1:3] for line in out if "maxNumBatchedTokens" in line] == [
        ["items[1]", "PoolingService/bad"], ["items[2].items[0]", "PoolingService/nested-bad"]]
    assert not any("good" in line for line in out)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (listing("- 7\n"), "items[0]: a single int value, not an object"),
        ("apiVersion: v1\nkind: List\nitems: {a: 1}\n", "items: not a list"),
        (listing(*["- {kind: K, metadata: {name: n}}\n"] * (MAX_DOCUMENTS + 1)), f"more than {MAX_DOCUMENTS:,} documents"),
    ],
)
def test_a_list_keeps_every_bound(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ManifestError, match=words.replace("[", r"\[").replace("]", r"\]")):
        list(load([write(tmp_path, text)]))


def test_an_empty_list_and_a_resource_named_like_a_list_are_what_they_are(tmp_path: Path) -> None:
    assert list(load([write(tmp_path, "apiVersion: v1\nkind: List\nitems: []\n")])) == []
    # a kind ending in List with a spec is a resource, not a List
    [doc] = list(load([write(tmp_path, "apiVersion: x/v1\nkind: WaitList\nitems: [1]\nspec: {}\n")]))
    assert doc.item == "" and doc.body["kind"] == "WaitList"
