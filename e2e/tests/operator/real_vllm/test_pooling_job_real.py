"""A PoolingJob run for real: examples/minilm-batch-embeddings.yaml (an OpenAI Batch input file in, the OpenAI Batch
output file and the safetensors parts out) on the pod runner, its preflight and driver
from this repository, vLLM 0.32 with all-MiniLM-L6-v2 as the native sidecar; beside it the PoolingService of
examples/minilm-embeddings.yaml, the same model and pooling, in its own vLLM process (test_examples' server of that
example, which the session's server pool keeps for this module). Both run with ``--enforce-eager`` and half a CPU (runner_process.EAGER_ARGS and
SMALL_SERVER_RESOURCES, machine overrides: outside the embedding space's fingerprint, and a start in ~45 s
instead of ~90 s for each of the job's three vLLM starts).

One shard (how a job splits into shards, the stand-in tiers and the operator tier hold: tests/test_pooling_driver*.py
and e2e/tests/operator/test_pooling_job.py), so two vLLM starts. Mid-shard the driver is SIGKILLed: the pod fails
and the Job retries the index in a new pod, which resumes from the manifest. Then every request is in exactly one manifest line, each line's
row holds a vector equal to sentence-transformers' for its text (cosine >= 0.9999; e2e/realvllm/oracles.py, which
never imports vllm) and to what the PoolingService answers, the three bad lines of the file are in failed.jsonl,
every shard's run.json carries the embedding space's fingerprint that a PoolingService declaring the same vectors
publishes, and the
Batch output file has one line per request line in input order, read back by the openai package's own types:
each answer's embedding the manifest's vector, each bad line an error line with its custom_id. The plain JSONL
corpus takes the same driver, client and vLLM route (tests/test_pooling_driver*.py and the operator tier hold
it to the stand-in).

The job declares e5-style instructions (spec.vectors, docs/vectors.md): vLLM is sent "passage: <text>" for every
input, so each vector must equal sentence-transformers' of the prefixed text and what the service answers a client
that prepends the same instruction (a query through the service, as status.vectors tells clients to); the
fingerprint in run.json is the one a service declaring the same instructions publishes, and not the plain one."""

from __future__ import annotations

import copy
import json
import math
import os
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from openai.types import BatchError, CreateEmbeddingResponse
from safetensors.numpy import load_file

from e2e.harness.poll import wait_for
from e2e.kube.controlplane import REPO_ROOT, ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.podrunner.runner_process import SMALL_SERVER_RESOURCES, PodRunner, eager, on_this_machine, placed
from e2e.realvllm import runtime
from e2e.tests.operator.real_vllm.conftest import ServerPool, oracle
from e2e.tests.operator.real_vllm.pool import slot

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1500)]

TEXTS = 600  # long enough to be killed in the middle of (the kill comes after 24)
WORDS = ("vectors index every passage of a corpus once so that queries later find the nearest few among "
         "millions while seven platform engineers watch the shards finish one after another").split()  # fmt: skip
EXAMPLES = REPO_ROOT / "examples"
INSTRUCTIONS = {"queryInstruction": "query: ", "documentInstruction": "passage: "}  # e5's (docs/vectors.md)


def example(name: str) -> dict[str, Any]:
    [doc] = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    return doc


def service() -> dict[str, Any]:
    """The example's PoolingService on this machine: test_examples' server of it, the same pool entry (the real tier
    runs this module right after test_examples, e2e/conftest.py REAL_TIER_AFTER, so the pool keeps that one server
    for both instead of starting a second MiniLM)."""
    return on_this_machine(example("minilm-embeddings.yaml"))


SERVICE = service()


def request(custom_id: str, text: str, url: str = "/v1/embeddings", model: str = runtime.MINILM.repo_id) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": {"model": model, "input": text}})


BAD_LINES = {101: (None, "invalid_request"), 302: ("doc-0007", "invalid_request"), 453: ("rerank-1", "invalid_request")}


def corpus() -> tuple[list[dict[str, Any]], list[str]]:
    """The inputs, and the file's lines: one OpenAI Batch request per input (body.model the repo id, or the served
    name: the job's) plus a line that is not JSON, a repeated custom_id and a /v1/rerank request (BAD_LINES)."""
    rng = random.Random(29)
    docs = [{"id": f"doc-{i:04d}", "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 120)))}
            for i in range(TEXTS)]  # fmt: skip
    lines = [request(d["id"], d["text"], model=runtime.MINILM.repo_id if i % 3 else "minilm-batch")
             for i, d in enumerate(docs)]  # fmt: skip
    lines.insert(100, "{not json")
    lines.insert(301, request("doc-0007", "a second line with a custom_id already used"))
    lines.insert(452, request("rerank-1", "a query for another endpoint", url="/v1/rerank"))
    return docs, lines


def job(namespace: str) -> dict[str, Any]:
    """The example, changed only where this machine and the test force it: the 0.32 image, eager, half a CPU (it
    runs beside the service), one shard in small batches, and the claims of the runner."""
    doc = placed(copy.deepcopy(example("minilm-batch-embeddings.yaml")))
    doc["metadata"]["namespace"] = namespace
    spec = doc["spec"]
    spec["engine"]["image"] = SERVICE["spec"]["engine"]["image"]
    eager(spec["engine"])
    spec["resources"] = copy.deepcopy(SMALL_SERVER_RESOURCES)
    spec.update(shards=1, parallelism=1, batchSize=8, vectors=dict(INSTRUCTIONS))
    spec["dataset"] = {"volume": {"claimName": "data", "path": f"/{namespace}/requests.jsonl"}, "format": "openaiBatch"}
    spec["output"] = {"volume": {"claimName": "data", "path": f"/{namespace}/out"}, "formats": ["openaiBatch", "safetensors"]}
    return doc


def manifest(out: Path, shard: int) -> list[dict[str, Any]]:
    p = out / f"shard-{shard}" / "manifest.jsonl"
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.endswith("}")]


def running_driver(cluster: ControlPlane, pod_runner: PodRunner, namespace: str, index: int) -> dict[str, Any] | None:
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    for p in pods:
        if (p["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-completion-index") != str(index):
            continue
        try:
            rec = pod_runner.pod(namespace, p["metadata"]["name"])
        except FileNotFoundError:
            continue
        if (rec["containers"].get("driver") or {}).get("pid"):
            return rec
    return None


def cosine(a: Any, b: Any) -> float:
    dot = sum(float(x) * float(y) for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(float(x) ** 2 for x in a)) * math.sqrt(sum(float(y) ** 2 for y in b)))


def declared_fingerprint() -> str:
    """What the PoolingService of this module publishes once it declares the job's instructions (the operator's
    own function: the unit tier holds service and job to it)."""
    from pooling_operator.vllm.embedding_space import embedding_fingerprint
    from pooling_operator.vllm.validate import validate
    from pooling_operator.vllm.workload import workload

    doc = copy.deepcopy(SERVICE)
    doc["spec"]["vectors"] = dict(INSTRUCTIONS)
    result = validate(doc)
    assert result.resource is not None and not [p for p in result.problems if p.severity == "error"], result.problems
    return embedding_fingerprint(workload(result.resource))  # type: ignore[arg-type]


POOL = [slot("the PoolingJob's vLLM sidecar"), SERVICE]


def test_pooling_job_embeds_a_corpus_once_through_a_sigkill(
    cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner, namespace: str,
    vllm_runtime: runtime.Runtime, server_pool: ServerPool,
) -> None:  # fmt: skip
    began = time.monotonic()
    docs, lines = corpus()
    data = pod_runner.data_claim(namespace) / namespace
    data.mkdir(parents=True)
    (data / "requests.jsonl").write_text("".join(line + "\n" for line in lines))
    out = data / "out"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job(namespace)))
    # sentence-transformers' vectors (a process without vllm) computed while the job runs, not after it, of the
    # texts as vLLM is sent them: the document instruction before each
    texts = [INSTRUCTIONS["documentInstruction"] + d["text"] for d in docs]
    reference = ThreadPoolExecutor(1).submit(
        oracle, vllm_runtime, "embed", str(vllm_runtime.model_dir(runtime.MINILM)), {"sentences": texts}
    )  # fmt: skip

    # once a few batches have landed, SIGKILL the driver; the Job retries the index in a new pod
    wait_for(lambda: len(manifest(out, 0)) >= 24, timeout=900, what="the shard writing vectors (vLLM start-up)")
    rec = running_driver(cluster, pod_runner, namespace, 0)
    assert rec is not None
    landed = len(manifest(out, 0))
    assert landed < TEXTS, "the shard finished before its driver could be killed in its middle"
    os.killpg(rec["containers"]["driver"]["pid"], signal.SIGKILL)
    print(f"pooling job: killed the driver after {landed} inputs, {time.monotonic() - began:.0f} s in")

    def succeeded() -> dict[str, Any] | None:
        obj = json.loads(cluster.kubectl("get", "poolingjob", "minilm-batch", "-n", namespace, "-o", "json").stdout)
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        if conds.get("Failed", {}).get("status") == "True":
            logs = "\n".join(pod_runner.container_log(namespace, p["name"]) for p in pod_runner.pods(namespace))
            raise AssertionError(f"the job failed: {conds['Failed']}\n{logs}")
        return obj if conds.get("Succeeded", {}).get("status") == "True" else None

    obj = wait_for(succeeded, timeout=1200, what="the PoolingJob Succeeded")
    print(f"pooling job: Succeeded {time.monotonic() - began:.0f} s after apply")
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    index0 = [p for p in pods if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "0"]
    assert sorted(p["status"]["phase"] for p in index0) == ["Failed", "Succeeded"]

    # nothing lost, nothing duplicated: every input in exactly one line, each line's row in its part file
    vectors: dict[str, Any] = {}
    parts: dict[Path, dict[str, Any]] = {}
    for shard in (0,):
        for e in manifest(out, shard):
            path = out / f"shard-{shard}" / e["file"]
            if path not in parts:
                parts[path] = load_file(str(path))
            assert e["rows"] == 1 and path.stat().st_size == e["bytes"], e
            assert e["id"] not in vectors, f"{e['id']} is in two manifest lines"
            vectors[e["id"]] = parts[path]["vectors"][e["row"]]
    assert set(vectors) == {d["id"] for d in docs}, (len(vectors), TEXTS)
    assert {str(t["vectors"].dtype) for t in parts.values()} == {"float32"}
    assert {t["vectors"].shape[1] for t in parts.values()} == {384}
    leftovers = [p for p in out.rglob("*.safetensors") if p not in parts]
    assert not leftovers, leftovers[:5]
    failed = [json.loads(x) for s in (0,) for x in (out / f"shard-{s}" / "failed.jsonl").read_text().splitlines()]
    assert sorted(f["line"] for f in failed) == sorted(BAD_LINES), failed  # the bad lines, numbered from 1

    status = obj["status"]
    assert status["samples"] == {"done": TEXTS, "failed": len(BAD_LINES)}, status
    assert status["output"]["batchOutput"] == f"data:/{namespace}/out/batch-output.jsonl", status["output"]
    assert status["dataset"]["lines"] == len(lines) and status["vectors"] == {"dtype": "float32", "dimension": 384}
    assert status["bytesWritten"] == sum(p.stat().st_size for p in parts)

    # every vector against sentence-transformers (no vllm in that process) and against the PoolingService
    want = reference.result(timeout=600)["vectors"]
    worst_reference = min(cosine(vectors[d["id"]], w) for d, w in zip(docs, want, strict=True))
    with server_pool.serving(SERVICE) as served:
        answered: list[list[float]] = []
        for i in range(0, TEXTS, 100):
            r = httpx.post(f"{served.url}/v1/embeddings", json={"model": served.name, "input": texts[i : i + 100]}, timeout=300)
            assert r.status_code == 200, r.text
            answered += [d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
        plain = served.status["embeddingSpace"]["fingerprint"]
        # a client's query, with the query instruction, through the service finds its passage in the job's index
        asked = docs[::30]
        r = httpx.post(f"{served.url}/v1/embeddings", timeout=300, json={
            "model": served.name, "input": [INSTRUCTIONS["queryInstruction"] + d["text"] for d in asked]})  # fmt: skip
        assert r.status_code == 200, r.text
        queries = [d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
    fingerprint = declared_fingerprint()
    assert fingerprint != plain, "the instructions are part of the space"
    worst_service = min(cosine(vectors[d["id"]], a) for d, a in zip(docs, answered, strict=True))
    found = [max(docs, key=lambda d, q=q: cosine(vectors[d["id"]], q))["id"] for q in queries]  # type: ignore[misc]
    assert found == [d["id"] for d in asked], list(zip(found, [d["id"] for d in asked], strict=True))
    assert worst_reference >= 0.9999, worst_reference
    assert worst_service >= 0.9999, worst_service

    # provenance: each shard's run record names the space the PoolingService serves
    for shard in (0,):
        record = json.loads((out / f"shard-{shard}" / "run.json").read_text())
        assert record["embeddingSpace"] == {"label": "minilm-v1", "fingerprint": fingerprint}, record
        assert record["vllm"]["version"].startswith("0.32") and record["vllm"]["command"][:2] == ["vllm", "serve"]
        assert record["model"] == {"name": runtime.MINILM.repo_id, "revision": SERVICE["spec"]["model"]["revision"]}
        assert record["vectors"] == {"outputs": ["dense"], "inputs": ["text"], **INSTRUCTIONS}, record
    assert status["embeddingSpace"]["fingerprint"] == fingerprint

    # the OpenAI Batch output file: one line per request line, in input order, read by openai's own types
    written = [json.loads(x) for x in (out / "batch-output.jsonl").read_text().splitlines()]
    assert len(written) == len(lines)
    answered = 0
    for number, (raw, got) in enumerate(zip(lines, written, strict=True), start=1):
        if number in BAD_LINES:
            custom_id, code = BAD_LINES[number]
            error = BatchError.model_validate(got["error"])
            assert (got["custom_id"], got["response"], error.code, error.line) == (custom_id, None, code, number), got
            continue
        custom_id = json.loads(raw)["custom_id"]
        assert got["custom_id"] == custom_id and got["error"] is None and got["response"]["status_code"] == 200, got
        body = CreateEmbeddingResponse.model_validate(got["response"]["body"])
        assert body.model == json.loads(raw)["body"]["model"] and body.usage.prompt_tokens > 0
        [embedding] = body.data
        assert embedding.embedding == [float(x) for x in vectors[custom_id]], custom_id
        answered += 1
    assert answered == TEXTS
    print(f"pooling job: {TEXTS} vectors, min cosine {worst_reference:.6f} against sentence-transformers and "
          f"{worst_service:.6f} against the PoolingService; {len(parts)} part files, {status['bytesWritten']} bytes; "
          f"the Batch output file {len(written)} lines; "
          f"{time.monotonic() - began:.0f} s in all")
