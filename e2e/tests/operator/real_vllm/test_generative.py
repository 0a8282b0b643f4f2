"""A generative ScoringService on SmolLM2-135M-Instruct, from a Hugging Face name served offline out of the
pod's own hub cache, answers /generative_scoring as transformers computes on the same weights."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from e2e.podrunner.runner_process import eager
from e2e.realvllm import runtime
from e2e.tests.operator.real_vllm.conftest import Served, ServerPool, oracle

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1500)]

# SmolLM2's tokenizer: " yes" 9805, " no" 787, " Paris" 7042, " London" 4528 (vllm-captures/generative-scoring.txt)
LABELS = [{"token": " yes", "id": 9805}, {"token": " no", "id": 787}, {"token": " Paris", "id": 7042}]
TEMPLATE = "Question: {query} Answer (yes or no):"


def judge(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "vllm-pooling.io/v1alpha1",
        "kind": "ScoringService",
        "metadata": {"name": "smollm2-judge", "namespace": namespace},
        "spec": {
            "mode": "generative",
            "model": {"name": runtime.SMOLLM2.repo_id, "revision": runtime.SMOLLM2.revision},
            "generative": {"labels": LABELS, "applySoftmax": True, "itemFirst": False, "queryTemplate": TEMPLATE},
            "engine": eager({"image": "vllm/vllm-openai:v0.32.0", "dtype": "float32", "maxModelLen": 512}),
            "resources": {"gpu": {"count": 0}, "cpu": "1", "memory": "4Gi"},
        },
    }


POOL = [judge("set-by-pool")]  # the session's server pool starts it ahead, beside the tests before this one


@pytest.fixture
def served(server_pool: ServerPool) -> Iterator[Served]:
    with server_pool.serving(POOL[0]) as s:
        yield s


def test_generative_scoring_matches_transformers_label_probabilities(served: Served, vllm_runtime: runtime.Runtime) -> None:
    # a Hugging Face source: the argv is the operator's own (only the port moved); the pod's HF_HOME got the
    # prepared folder as a hub cache at the spec's revision
    assert [r for r in served.plan["rewrites"] if r.startswith(("args", "command"))] == [
        f"args[6]: 8000 -> {served.plan['ports']['http']['local']}"
    ]
    [[hub, repo, _folder, revision]] = served.plan["hubLayout"]
    assert (repo, revision) == (runtime.SMOLLM2.repo_id, runtime.SMOLLM2.revision)
    assert hub.endswith("/volumes/cache/huggingface/hub")
    assert "HF_HUB_OFFLINE" in served.plan["envAdded"]  # the operator sets it only for volume sources

    contract = served.status["contract"]
    assert contract["route"] == "/generative_scoring"
    assert contract["labelTokenIds"] == [label["id"] for label in LABELS]
    assert "/generative_scoring" in served.status["routes"]

    items = ["", " Paris is in France.", " The moon is made of cheese."]
    for query, item_first, apply_softmax in (
        (TEMPLATE.format(query="Is Paris the capital of France?"), contract["itemFirst"], contract["applySoftmax"]),
        (" Is this sentence true?", True, True),
        (TEMPLATE.format(query="Is London in France?"), False, False),
    ):
        body = {
            "model": "smollm2-judge",
            "query": query,
            "items": items,
            "label_token_ids": contract["labelTokenIds"],
            "item_first": item_first,
            "apply_softmax": apply_softmax,
        }
        r = httpx.post(f"{served.url}{contract['route']}", json=body, timeout=120)
        assert r.status_code == 200, r.text
        got = [d["score"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
        want = oracle(
            vllm_runtime, "label-probs", str(vllm_runtime.model_dir(runtime.SMOLLM2)),
            {"query": query, "items": items, "labels": contract["labelTokenIds"], "itemFirst": item_first,
             "applySoftmax": apply_softmax},
        )["scores"]  # fmt: skip
        assert len(got) == len(items)
        for g, w in zip(got, want, strict=True):
            assert abs(g - w) <= 1e-3, (query, item_first, apply_softmax, got, want)
