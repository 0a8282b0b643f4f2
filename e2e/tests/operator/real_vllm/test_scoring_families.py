"""Each scoring family no other test serves, served for real: a crossEncoder, a lateInteraction (ColBERT)
ScoringService, a token_classify PoolingService, a sparse one (a one-label token head declared as
``vectors.outputs: [sparse]``, docs/vectors.md), a CLIP dual encoder declared ``vectors.inputs: [image, text]`` and
an embed PoolingService with a declared Matryoshka size.

The models are built at test time from the packaged MiniLM (e2e/realvllm/tiny_models.py, seed 0; seed 1 only
for its reference answers) into the runner's ``built-models`` claim; the Matryoshka service is MiniLM itself
with ``model.matryoshkaDimensions``. Every answer is compared with transformers or sentence-transformers on
the same folder (e2e/realvllm/oracles.py, without vLLM). The four servers come from the session's pool (``POOL``), two
at a time, with ``--enforce-eager`` and half a CPU (runner_process.EAGER_ARGS and SMALL_SERVER_RESOURCES,
machine overrides like the image).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import subprocess
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e.kube.controlplane import REPO_ROOT
from e2e.podrunner.runner_process import (
    BUILT_CLAIM,
    EAGER_ARGS,
    MACHINE_OVERRIDES,
    MODEL_CLAIM,
    SMALL_SERVER_RESOURCES,
)
from e2e.realvllm import built, runtime
from e2e.tests.operator.real_vllm.conftest import Served, ServerPool
from e2e.tests.operator.real_vllm.routes import PROBES, probe
from pooling_operator.vllm.contract import ALWAYS_ROUTES, DEPRECATED_SCORE_ROUTES

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1500)]

ORACLES = REPO_ROOT / "e2e" / "realvllm" / "oracles.py"
QUERY = "how does kubernetes place a pod"
DOCS = [
    "The scheduler assigns each pod to a node with enough free resources.",
    "A man is eating food.",
    "Kubernetes restarts containers that fail their liveness probe.",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map text to vectors.",
    "Paris is the capital of France.",
]
TEXTS = [QUERY, *DOCS]
MATRYOSHKA = [384, 128, 64]
IMAGE_SEEDS = [0, 1, 2]  # the oracle draws each seed's noise image and hands back its PNG


def _engine(max_model_len: int = 256) -> dict[str, Any]:
    return {"image": MACHINE_OVERRIDES["engine.image"], "dtype": "float32", "maxModelLen": max_model_len,
            "extraArgs": list(EAGER_ARGS)}


def _built(name: str, folder: str) -> dict[str, Any]:
    return {"name": name, "source": {"volume": {"claimName": BUILT_CLAIM, "path": f"/seed-0/{folder}", "readOnly": True}}}


def _doc(kind: str, name: str, spec: dict[str, Any], max_model_len: int = 256) -> dict[str, Any]:
    return {
        "apiVersion": "vllm-pooling.io/v1alpha1", "kind": kind, "metadata": {"name": name, "namespace": "set-by-pool"},
        "spec": {**spec, "engine": _engine(max_model_len), "resources": copy.deepcopy(SMALL_SERVER_RESOURCES)},
    }  # fmt: skip


SERVICES = {
    "cross-encoder": _doc("ScoringService", "tiny-reranker", {"mode": "crossEncoder", "model": _built("tiny-reranker", "cross-encoder")}),
    "colbert": _doc("ScoringService", "tiny-colbert", {"mode": "lateInteraction", "model": _built("tiny-colbert", "colbert")}),
    "token-classifier": _doc("PoolingService", "tiny-tagger", {"task": "token_classify", "model": _built("tiny-tagger", "token-classifier")}),
    "sparse-head": _doc("PoolingService", "tiny-sparse", {
        "task": "token_classify", "vectors": {"outputs": ["sparse"]},
        "model": {**_built("tiny-sparse", "sparse-head"), "hints": {"architectures": ["BertForTokenClassification"], "numLabels": 1}},
    }),
    "dual-encoder": _doc("PoolingService", "tiny-clip", {
        "task": "embed", "vectors": {"outputs": ["dense"], "inputs": ["image", "text"]},
        "model": {**_built("tiny-clip", "dual-encoder"), "hints": {"architectures": ["CLIPModel"]}},
    }, max_model_len=77),  # CLIP's text positions
    "matryoshka": _doc("PoolingService", "minilm-mrl", {
        "task": "embed",
        "model": {"name": runtime.MINILM.repo_id, "matryoshkaDimensions": MATRYOSHKA,
                  "source": {"volume": {"claimName": MODEL_CLAIM, "path": f"/{runtime.MINILM.key}", "readOnly": True}}},
        "pooling": {"type": "MEAN", "normalize": True, "dimensions": 128},
        "embeddingSpace": "minilm-mrl-128",
    }),
}  # fmt: skip


def references(rt: runtime.Runtime, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every reference answer in one interpreter (torch is imported once)."""
    res = subprocess.run(
        [str(rt.python), str(ORACLES), "batch", "-"], input=json.dumps({"jobs": jobs}), capture_output=True,
        text=True, env=rt.env(), timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)["results"]


POOL = list(SERVICES.values())  # one use each, in the order of the tests below


@pytest.fixture(scope="module")
def refs(built_models: Path, vllm_runtime: runtime.Runtime) -> dict[str, Any]:
    """The references of both seeds (in one interpreter)."""
    pairs = [[QUERY, d] for d in DOCS]
    late = {"texts": TEXTS, "pairs": [[0, j] for j in range(1, len(TEXTS))]}
    jobs, names = [], []
    for seed in built.SEEDS:
        root = built_models / f"seed-{seed}"
        for family, command, req in (
            ("cross-encoder", "cross-encoder", {"pairs": pairs}),
            ("colbert", "late-interaction", late),
            ("token-classifier", "token-classify", {"texts": TEXTS}),
            ("sparse-head", "token-classify", {"texts": TEXTS}),
            ("dual-encoder", "dual-encoder", {"texts": TEXTS, "image_seeds": IMAGE_SEEDS}),
        ):
            jobs.append({"command": command, "model_dir": str(root / family), "request": req})
            names.append(f"{family}@{seed}")
    jobs.append({"command": "embed", "model_dir": str(vllm_runtime.model_dir(runtime.MINILM)), "request": {"sentences": TEXTS}})
    names.append("matryoshka")
    return dict(zip(names, references(vllm_runtime, jobs), strict=True))


@pytest.fixture
def served(request: pytest.FixtureRequest, server_pool: ServerPool) -> Iterator[Served]:
    with server_pool.serving(SERVICES[request.param]) as s:
        yield s


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def varied(values: list[float], other_seed: list[float]) -> None:
    """What makes a built model count: its answers spread, and another seed answers otherwise."""
    assert max(values) - min(values) > 1e-3, values
    assert max(abs(a - b) for a, b in zip(values, other_seed, strict=True)) > 1e-3, (values, other_seed)


def post(s: Served, route: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{s.url}{route}", json={"model": s.name, **body}, timeout=120)
    assert r.status_code == 200, (route, r.status_code, r.text[:500])
    return r.json()


def assert_routes(s: Served) -> None:
    """Every route in status.routes answers 200; every route of the probe table the server does not serve
    answers 404 or 501, never 200 (the always-mounted routes and the deprecated score aliases are served)."""
    routes = s.status["routes"]
    for route in routes:
        resp = probe(s.url, route, s.name)
        assert resp.status_code == 200, (route, resp.status_code, resp.text[:300])
    served_too = {*ALWAYS_ROUTES, *(DEPRECATED_SCORE_ROUTES if "/score" in routes else ())}
    for route in sorted(set(PROBES) - set(routes) - served_too):
        resp = probe(s.url, route, s.name)
        assert resp.status_code in (404, 501), (route, resp.status_code, resp.text[:300])


def test_built_models_are_deterministic_and_seeded(built_models: Path, vllm_runtime: runtime.Runtime, tmp_path: Path) -> None:
    def sha(folder: Path) -> str:
        return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()

    again = built.build(vllm_runtime, tmp_path / "again", 0)
    assert sorted(again) == ["colbert", "cross-encoder", "dual-encoder", "sparse-head", "token-classifier"]
    for family, model in again.items():
        folder, seed0, seed1 = Path(model["dir"]), built_models / "seed-0" / family, built_models / "seed-1" / family
        assert json.loads((folder / "config.json").read_text())["architectures"] == [model["architecture"]]
        assert (seed0 / "config.json").read_bytes() == (folder / "config.json").read_bytes()
        assert model["sha256"] == sha(seed0) != sha(seed1), family


@pytest.mark.parametrize("served", ["cross-encoder"], indirect=True)
def test_cross_encoder_scores_and_reranks_as_sentence_transformers(served: Served, refs: dict[str, Any]) -> None:
    want = refs["cross-encoder@0"]["scores"]
    varied(want, refs["cross-encoder@1"]["scores"])
    assert served.status["contract"]["mode"] == "crossEncoder"
    score = post(served, "/score", {"text_1": QUERY, "text_2": DOCS})["data"]
    rerank = post(served, "/rerank", {"query": QUERY, "documents": DOCS})["results"]
    got_score = [d["score"] for d in sorted(score, key=lambda d: d["index"])]
    got_rerank = [d["relevance_score"] for d in sorted(rerank, key=lambda d: d["index"])]
    assert [d["index"] for d in rerank] == sorted(range(len(DOCS)), key=lambda i: -want[i])  # best first
    for got in (got_score, got_rerank):
        assert max(abs(g - w) for g, w in zip(got, want, strict=True)) <= 1e-4, (got, want)
    assert_routes(served)


@pytest.mark.parametrize("served", ["colbert"], indirect=True)
def test_late_interaction_token_vectors_and_maxsim_as_transformers(served: Served, refs: dict[str, Any]) -> None:
    ref = refs["colbert@0"]
    varied(ref["scores"], refs["colbert@1"]["scores"])
    means = [[sum(col) / len(v) for col in zip(*v, strict=True)] for v in ref["vectors"]]
    assert max(cosine(a, b) for a, b in combinations(means, 2)) < 0.999
    pooled = post(served, "/pooling", {"input": TEXTS})["data"]
    for text, got, want in zip(TEXTS, [d["data"] for d in sorted(pooled, key=lambda d: d["index"])], ref["vectors"], strict=True):
        assert len(got) == len(want), text  # every token, [CLS] and [SEP] included
        assert min(cosine(g, w) for g, w in zip(got, want, strict=True)) >= 0.9999, text
        assert all(abs(math.sqrt(sum(x * x for x in g)) - 1) < 1e-4 for g in got)
    score = post(served, "/score", {"text_1": QUERY, "text_2": DOCS})["data"]
    rerank = post(served, "/rerank", {"query": QUERY, "documents": DOCS})["results"]
    for got in ([d["score"] for d in sorted(score, key=lambda d: d["index"])],
                [d["relevance_score"] for d in sorted(rerank, key=lambda d: d["index"])]):  # fmt: skip
        assert max(abs(g - w) / abs(w) for g, w in zip(got, ref["scores"], strict=True)) <= 1e-4, (got, ref["scores"])
    assert_routes(served)


@pytest.mark.parametrize("served", ["token-classifier"], indirect=True)
def test_token_classify_probabilities_per_token_as_transformers(served: Served, refs: dict[str, Any]) -> None:
    want = refs["token-classifier@0"]["probs"]
    first = [p[0] for text in want for p in text]
    varied(first, [p[0] for text in refs["token-classifier@1"]["probs"] for p in text])
    assert served.status["effective"]["task"] == "token_classify"
    pooled = post(served, "/pooling", {"input": TEXTS})["data"]
    for text, got, w in zip(TEXTS, [d["data"] for d in sorted(pooled, key=lambda d: d["index"])], want, strict=True):
        assert len(got) == len(w), text
        worst = max(abs(a - b) for g_tok, w_tok in zip(got, w, strict=True) for a, b in zip(g_tok, w_tok, strict=True))
        assert worst <= 1e-4, (text, worst)
    assert_routes(served)


@pytest.mark.parametrize("served", ["sparse-head"], indirect=True)
def test_a_declared_sparse_output_is_one_weight_a_token_as_transformers(served: Served, refs: dict[str, Any]) -> None:
    """vectors.outputs [sparse] on a one-label token head: /pooling answers one weight for each token (the sigmoid of
    its logit), equal to transformers', and status.vectors publishes the contract."""
    want = refs["sparse-head@0"]["probs"]
    weights = [p[0] for text in want for p in text]
    varied(weights, [p[0] for text in refs["sparse-head@1"]["probs"] for p in text])
    assert served.status["vectors"] == {"outputs": ["sparse"], "inputs": ["text"]}
    assert served.status["effective"]["task"] == "token_classify"
    pooled = post(served, "/pooling", {"input": TEXTS})["data"]
    for text, got, w in zip(TEXTS, [d["data"] for d in sorted(pooled, key=lambda d: d["index"])], want, strict=True):
        assert len(got) == len(w) and {len(tok) for tok in got} == {1}, text  # one weight a token
        worst = max(abs(g[0] - x[0]) for g, x in zip(got, w, strict=True))
        assert worst <= 1e-4, (text, worst)
    assert_routes(served)


@pytest.mark.parametrize("served", ["dual-encoder"], indirect=True)
def test_a_dual_encoder_embeds_images_and_texts_as_transformers(served: Served, refs: dict[str, Any]) -> None:
    """vectors.inputs [image, text] on a CLIP dual encoder: an image sent as a data URL in a chat message (as
    vLLM's examples/pooling/embed/vision_embedding_online.py does) and texts as plain input each answer the vector
    transformers' CLIPModel computes, within 1e-4; status.vectors publishes what the server takes."""
    ref, other = refs["dual-encoder@0"], refs["dual-encoder@1"]
    varied([v[0] for v in ref["image_vectors"]], [v[0] for v in other["image_vectors"]])
    assert served.status["vectors"] == {"outputs": ["dense"], "inputs": ["image", "text"]}
    for png, want in zip(ref["images"], ref["image_vectors"], strict=True):
        image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}  # nothing is fetched
        [got] = post(served, "/v1/embeddings", {"messages": [{"role": "user", "content": [image]}],
                                                "encoding_format": "float"})["data"]  # fmt: skip
        assert max(abs(g - w) for g, w in zip(got["embedding"], want, strict=True)) <= 1e-4, (got["embedding"][:4], want[:4])
    texts = post(served, "/v1/embeddings", {"input": TEXTS, "encoding_format": "float"})["data"]
    for got, want in zip(sorted(texts, key=lambda d: d["index"]), ref["text_vectors"], strict=True):
        assert max(abs(g - w) for g, w in zip(got["embedding"], want, strict=True)) <= 1e-4


@pytest.mark.parametrize("served", ["matryoshka"], indirect=True)
def test_matryoshka_dimensions_default_and_per_request_as_sentence_transformers(served: Served, refs: dict[str, Any]) -> None:
    full = refs["matryoshka"]["vectors"]
    assert max(cosine(a, b) for a, b in combinations(full, 2)) < 0.999
    assert served.status["effective"]["dimensions"] == 128

    def truncated(v: list[float], n: int) -> list[float]:
        norm = math.sqrt(sum(x * x for x in v[:n]))
        return [x / norm for x in v[:n]]

    for dims, body in ((128, {}), (64, {"dimensions": 64}), (384, {"dimensions": 384})):
        data = post(served, "/v1/embeddings", {"input": TEXTS, **body})["data"]
        got = [d["embedding"] for d in sorted(data, key=lambda d: d["index"])]
        for text, g, w in zip(TEXTS, got, full, strict=True):
            assert len(g) == dims, (text, dims, len(g))
            assert cosine(g, truncated(w, dims)) >= 0.9999, (text, dims)
            assert abs(math.sqrt(sum(x * x for x in g)) - 1) < 1e-4
    r = httpx.post(f"{served.url}/v1/embeddings", json={"model": served.name, "input": "x", "dimensions": 100}, timeout=60)
    assert r.status_code == 400 and "[" in r.json()["error"]["message"], r.text  # names the declared sizes
    assert_routes(served)
