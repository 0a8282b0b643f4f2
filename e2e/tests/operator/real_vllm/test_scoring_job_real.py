"""A scoring job run for real: examples/tiny-rerank-job.yaml's shape (a PoolingJob with mode crossEncoder, an
OpenAI-style Batch file of /v1/rerank and /v1/score lines in, the Batch output file and the safetensors parts
out) on the pod runner, its preflight and driver from this repository, vLLM 0.32 with the tiny cross-encoder
built from the packaged MiniLM (e2e/realvllm/tiny_models.py, seed 0) as the native sidecar; beside it the
ScoringService test_scoring_families serves, the same model and mode, in its own vLLM process.

Every line's scores (its part rows, in document order) equal sentence-transformers' CrossEncoder on the same
folder (e2e/realvllm/oracles.py, no vllm) and what the ScoringService's /rerank answers; the line that is not a
scoring request is an error line with its custom_id (openai's BatchError), and every answered line's body is
read back by vLLM's own RerankResponse and ScoreResponse (in the vLLM runtime's interpreter): sorted highest
first, cut to top_n, its documents and usage."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai.types import BatchError
from safetensors.numpy import load_file

from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.podrunner.runner_process import SMALL_SERVER_RESOURCES, PodRunner, placed
from e2e.realvllm import runtime
from e2e.tests.operator.real_vllm.conftest import ServerPool, oracle
from e2e.tests.operator.real_vllm.pool import slot
from e2e.tests.operator.real_vllm.test_scoring_families import DOCS, SERVICES, _built, _engine

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(900)]

SERVICE = SERVICES["cross-encoder"]
QUERIES = ["how does kubernetes place a pod", "what is the capital of France", "what do embeddings do",
           "which animal jumps", "how are failing containers handled"]  # fmt: skip
LINES = 24
NOT_SCORING = 7  # the 0-based index of an /v1/embeddings line: an error line, never a failed job


def requests() -> list[dict[str, Any]]:
    """LINES request lines: /v1/rerank (2-6 documents, some with top_n) and /v1/score (text_2 a list or one
    text), and one /v1/embeddings line among them."""
    rng = random.Random(46)
    lines = []
    for i in range(LINES):
        query, docs = rng.choice(QUERIES), rng.sample(DOCS, rng.randint(2, len(DOCS)))
        if i % 3 == 2:
            body: dict[str, Any] = {"text_1": query, "text_2": docs if i % 2 else docs[0]}
            url = "/v1/score"
        else:
            body = {"query": query, "documents": docs, **({"top_n": 2} if i % 4 == 0 else {})}
            url = "/v1/rerank"
        lines.append({"custom_id": f"line-{i:02d}", "method": "POST", "url": url, "body": {"model": "tiny-reranker", **body}})
    lines[NOT_SCORING] = {"custom_id": "an-embedding", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}}
    return lines


def pairs_of(line: dict[str, Any]) -> list[tuple[str, str]]:
    body = line["body"]
    query = body.get("query", body.get("text_1"))
    docs = body.get("documents", body.get("text_2"))
    return [(query, d) for d in (docs if isinstance(docs, list) else [docs])]


def job(namespace: str) -> dict[str, Any]:
    """The service's model and mode as a PoolingJob: one shard, small batches, the runner's claims."""
    spec = {
        "mode": "crossEncoder", "model": _built("tiny-reranker", "cross-encoder"), "engine": _engine(),
        "resources": copy.deepcopy(SMALL_SERVER_RESOURCES), "shards": 1, "batchSize": 8,
        "dataset": {"volume": {"claimName": "data", "path": f"/{namespace}/requests.jsonl"}, "format": "openaiBatch"},
        "output": {"volume": {"claimName": "data", "path": f"/{namespace}/out"}, "formats": ["openaiBatch", "safetensors"]},
    }  # fmt: skip
    return placed({"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "PoolingJob",
                   "metadata": {"name": "rerank-corpus", "namespace": namespace}, "spec": spec})  # fmt: skip


VALIDATE = """
import json, sys
from vllm.entrypoints.pooling.scoring.protocol import RerankResponse, ScoreResponse
out = []
for line in sys.stdin:
    body = json.loads(line)
    model = RerankResponse if "results" in body else ScoreResponse
    out.append(model.model_validate(body).model_dump(mode="json"))
print(json.dumps(out))
"""


def read_back(rt: runtime.Runtime, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bodies through vLLM's own response models, in the runtime's interpreter."""
    res = subprocess.run([str(rt.python), "-c", VALIDATE], input="".join(json.dumps(b) + "\n" for b in bodies),
                         capture_output=True, text=True, env=rt.env(), timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


POOL = [slot("the scoring job's vLLM sidecar"), SERVICE]


def test_a_scoring_job_scores_as_transformers_and_the_scoring_service(
    cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner, namespace: str,
    vllm_runtime: runtime.Runtime, server_pool: ServerPool, built_models: Path,
) -> None:  # fmt: skip
    began = time.monotonic()
    lines = requests()
    data = pod_runner.data_claim(namespace) / namespace
    data.mkdir(parents=True)
    pod_runner.built_claim(namespace)  # the tiny cross-encoder, built by the session (built_models)
    (data / "requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = data / "out"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job(namespace)))
    scored = [x for i, x in enumerate(lines) if i != NOT_SCORING]
    pairs = [p for x in scored for p in pairs_of(x)]
    reference = ThreadPoolExecutor(1).submit(oracle, vllm_runtime, "cross-encoder",
                                             str(built_models / "seed-0" / "cross-encoder"), {"pairs": pairs})  # fmt: skip

    def succeeded() -> dict[str, Any] | None:
        obj = json.loads(cluster.kubectl("get", "poolingjob", "rerank-corpus", "-n", namespace, "-o", "json").stdout)
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        if conds.get("Failed", {}).get("status") == "True":
            logs = "\n".join(pod_runner.container_log(namespace, p["name"]) for p in pod_runner.pods(namespace))
            raise AssertionError(f"the job failed: {conds['Failed']}\n{logs}")
        return obj if conds.get("Succeeded", {}).get("status") == "True" else None

    obj = wait_for(succeeded, timeout=420, what="the scoring job Succeeded")
    print(f"scoring job: Succeeded {time.monotonic() - began:.0f} s after apply")
    status = obj["status"]
    assert status["samples"] == {"done": len(scored), "failed": 1}, status
    assert status["vectors"] == {"dtype": "float32", "dimension": 1} and "embeddingSpace" not in status, status

    # every line's scores from its part rows, in document order
    shard = out / "shard-0"
    scores: dict[str, list[float]] = {}
    ids = []
    for raw in (shard / "manifest.jsonl").read_text().splitlines():
        e = json.loads(raw)
        rows = load_file(str(shard / e["file"]))["vectors"][e["row"] : e["row"] + e["rows"], 0]
        scores[e["id"]] = [float(x) for x in rows]
        ids.append(e["id"])
    assert sorted(ids) == sorted(x["custom_id"] for x in scored), "every scoring line once (batches land in any order)"
    record = json.loads((shard / "run.json").read_text())
    assert record["mode"] == "crossEncoder" and record["vllm"]["version"].startswith("0.32"), record

    # against sentence-transformers, and against the ScoringService's /rerank for the same groups
    flat = [s for x in scored for s in scores[x["custom_id"]]]
    want = reference.result(timeout=600)["scores"]
    worst_reference = max(abs(g - w) for g, w in zip(flat, want, strict=True))
    assert worst_reference <= 1e-4, (worst_reference, flat[:5], want[:5])
    with server_pool.serving(SERVICE) as served:
        answered: list[float] = []
        for x in scored:
            [(query, _), *_] = pairs_of(x)
            docs = [d for _, d in pairs_of(x)]
            r = httpx.post(f"{served.url}/rerank", json={"model": served.name, "query": query, "documents": docs}, timeout=120)
            assert r.status_code == 200, r.text
            answered += [d["relevance_score"] for d in sorted(r.json()["results"], key=lambda d: d["index"])]
    worst_service = max(abs(g - a) for g, a in zip(flat, answered, strict=True))
    assert worst_service <= 1e-5, worst_service

    # the Batch output file: one line per request line, in order; bodies read by vLLM's own response models
    written = [json.loads(x) for x in (out / "batch-output.jsonl").read_text().splitlines()]
    assert [w["custom_id"] for w in written] == [x["custom_id"] for x in lines]
    error = BatchError.model_validate(written[NOT_SCORING]["error"])
    assert error.code == "invalid_request" and error.line == NOT_SCORING + 1 and "url must be" in (error.message or "")
    bodies = [w["response"]["body"] for i, w in enumerate(written) if i != NOT_SCORING]
    for body, back, x in zip(bodies, read_back(vllm_runtime, bodies), scored, strict=True):
        assert back == body, "vLLM's own model reads the body as written"
        got = scores[x["custom_id"]]
        if x["url"] == "/v1/rerank":
            order = sorted(range(len(got)), key=lambda i: -got[i])[: x["body"].get("top_n") or None]
            assert [r["index"] for r in body["results"]] == order and body["usage"]["prompt_tokens"] > 0
            assert [r["document"]["text"] for r in body["results"]] == [x["body"]["documents"][i] for i in order]
        else:
            assert [d["score"] for d in body["data"]] == got
    print(f"scoring job: {len(scored)} lines, {len(flat)} scores; worst |difference| {worst_reference:.2e} against "
          f"sentence-transformers and {worst_service:.2e} against the ScoringService's /rerank; "
          f"{time.monotonic() - began:.0f} s in all")
