"""A scoring job: a PoolingJob with spec.mode. Its rules (a ScoringService's of that mode, with the same messages,
and a job's own), what it renders (the mode for the preflight and the driver, scores in float32, no embedding
space), its lines (scoring.py: groups, pairs and Batch lines, the answers' scores, the Batch output body), and
the driver on the fake vLLM over loopback: every group's scores in its part rows, bad and refused lines failed
alone, and the Batch output file read back by vLLM's own response shape."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from pooling_operator.api import messages as M
from pooling_operator.api import pooling_job_contract as pj
from pooling_operator.api import shard_contract as hs
from pooling_operator.builders import BuildContext, plan
from pooling_operator.pods.shard.dataset import BadLine, Sample
from pooling_operator.pods.vectors.driver import PoolingConfig, PoolingDriver
from pooling_operator.pods.vectors.scoring import (
    ScoringRequest,
    parse_group,
    parse_scoring_request,
    request_body,
    scores_of,
    scoring_body,
)
from pooling_operator.status.pooling_jobs import pooling_job_status
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.validate import validate
from pooling_operator.vllm.workload import workload
from tests.factories import pooling_job, scoring, scoring_job
from tests.pooling_support import POOLING_MODEL, FakePooling, fake_pooling, fake_score, fake_tokens

QWEN = {
    "model": {"name": "Qwen/Qwen3-1.7B", "hints": {"architectures": ["Qwen3ForCausalLM"], "numLabels": None}}
}
LABELS = {"generative": {"labels": [{"token": "Yes", "id": 9454}, {"token": "No", "id": 2753}]}}


def errors(doc: dict[str, Any]) -> list[str]:
    return [str(p) for p in validate(doc).problems if p.severity == "error"]


def job_objects(spec: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    result = validate(scoring_job(spec, name="rerank-corpus", namespace="search"))
    assert result.ok, [str(p) for p in result.errors]
    result.resource.metadata.uid = "plj-uid"  # type: ignore[union-attr]
    return {o["kind"]: o for o in plan(result.resource, contract("0.33"), BuildContext()).objects}


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# ---- rules ---------------------------------------------------------------------------------------------------


def test_a_scoring_job_is_valid_and_runs_what_its_scoring_service_runs() -> None:
    result = validate(scoring_job())
    assert result.ok, [str(p) for p in result.errors]
    w = workload(result.resource)  # type: ignore[arg-type]
    assert (w.runner, w.task, w.mode, w.job) == ("pooling", "classify", "crossEncoder", True)


@pytest.mark.parametrize(
    "spec",
    [
        {"model": {"hints": {"numLabels": 2}}},  # a cross-encoder scores with one output
        {"pooling": {"type": "CLS"}},  # pooling is for a biEncoder
        {"mode": "biEncoder", "pooling": {"type": "ALL"}},  # a biEncoder pools whole sequences
        {"mode": "generative", **QWEN},  # generative without its labels
        {
            "mode": "generative",
            **QWEN,
            "generative": {"labels": [{"token": "Yes", "id": 1}, {"token": "Y", "id": 1}]},
        },
        {"mode": "lateInteraction"},  # an XLM-R classifier has no per-token embeddings
    ],
)
def test_a_scoring_job_is_refused_as_its_scoring_service_is_with_the_same_words(spec: dict[str, Any]) -> None:
    job, service = errors(scoring_job(spec)), errors(scoring(spec))
    assert service, "the case must break a ScoringService rule"
    assert set(service) <= set(job), (service, job)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"task": "embed"}, f"spec.task: {M.JOB_TASK_OR_MODE}"),
        ({"embeddingSpace": "v1"}, f"spec.embeddingSpace: {M.SCORING_JOB_NO_SPACE}"),
        ({"convert": "classify"}, f"spec.convert: {M.SCORING_JOB_CONVERT}"),
        (
            {
                "mode": "generative",
                **QWEN,
                **LABELS,
                "dataset": {"volume": {"claimName": "c", "path": "/r.jsonl"}, "format": "openaiBatch"},
            },
            f"spec.dataset.format: {M.GENERATIVE_BATCH_FILE}",
        ),
        (
            {"mode": "ranker"},
            "spec.mode: Input should be 'crossEncoder', 'biEncoder', 'lateInteraction' or 'generative'",
        ),
    ],
)
def test_what_a_scoring_job_cannot_be_is_said_with_its_field(spec: dict[str, Any], problem: str) -> None:
    assert any(e.startswith(problem) for e in errors(scoring_job(spec))), errors(scoring_job(spec))


def test_a_pooling_task_with_generative_labels_is_refused_as_the_api_server_does() -> None:
    assert f"spec.generative: {M.GENERATIVE_IFF_MODE}" in errors(pooling_job(LABELS))


def test_neither_task_nor_mode_is_refused_by_name() -> None:
    doc = scoring_job()
    del doc["spec"]["mode"]
    assert f"spec.task: {M.JOB_TASK_OR_MODE}" in errors(doc)


def test_a_batch_file_is_taken_for_the_rerank_and_score_modes() -> None:
    batch = {"dataset": {"volume": {"claimName": "c", "path": "/r.jsonl"}, "format": "openaiBatch"},
             "output": {"volume": {"claimName": "o", "path": "/runs"}, "formats": ["openaiBatch"]}}  # fmt: skip
    assert errors(scoring_job(batch)) == []
    assert (
        errors(
            scoring_job(
                {
                    **batch,
                    "mode": "biEncoder",
                    "model": {
                        "name": "BAAI/bge-m3",
                        "hints": {"architectures": ["XLMRobertaModel"], "numLabels": None},
                    },
                }
            )
        )
        == []
    )


# ---- what it renders ------------------------------------------------------------------------------------------


def test_the_preflight_and_the_driver_read_lines_by_the_mode_and_write_scores_as_float32() -> None:
    objects = job_objects({"engine": {"dtype": "bfloat16"}})
    pod = objects["Job"]["spec"]["template"]["spec"]
    preflight, driver = pod["initContainers"][0]["args"], pod["containers"][0]["args"]
    assert flag(preflight, "--mode") == flag(driver, "--mode") == "crossEncoder"
    assert "--task" not in driver and "--label-token-ids" not in driver
    assert flag(driver, "--dtype") == "float32"  # scores, whatever the engine's dtype
    info = json.loads(flag(driver, "--run-info"))
    assert info["mode"] == "crossEncoder" and "embeddingSpace" not in info and "task" not in info


def test_a_generative_job_sends_the_labels_its_scoring_service_publishes_for_clients() -> None:
    pod = job_objects(
        {
            "mode": "generative",
            **QWEN,
            **LABELS,
            "generative": {**LABELS["generative"], "applySoftmax": False, "itemFirst": True},
        }
    )
    driver = pod["Job"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert flag(driver, "--label-token-ids") == "9454,2753"
    assert "--no-apply-softmax" in driver and "--item-first" in driver
    vllm = pod["Job"]["spec"]["template"]["spec"]["initContainers"][1]
    assert vllm["args"][vllm["args"].index("--runner") + 1] == "generate"


def test_the_jobs_vllm_is_the_scoring_services_but_for_the_latency_buckets() -> None:
    """The same mode on the same model renders the same vLLM command line but for the histogram buckets a service's
    autoscaler reads (the same server answers both, and the real tier's pod runner can share one)."""
    job = job_objects()["Job"]["spec"]["template"]["spec"]["initContainers"][1]["args"]
    result = validate(scoring(name="rerank-corpus", namespace="search"))
    assert result.ok
    deployment = {o["kind"]: o for o in plan(result.resource, contract("0.33"), BuildContext()).objects}[
        "Deployment"
    ]
    served = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    at = served.index("--custom-histogram-buckets")
    assert job == served[:at] + served[at + 2 :]


def test_status_has_no_embedding_space_and_says_the_scores_are_float32() -> None:
    result = validate(scoring_job(name="rerank-corpus", namespace="search"))
    resource = result.resource
    resource.metadata.generation = 1  # type: ignore[union-attr]
    status = pooling_job_status(resource, None, None, w=workload(resource))  # type: ignore[arg-type]
    assert "embeddingSpace" not in status and status["vectors"] == {"dtype": "float32"}


# ---- lines ---------------------------------------------------------------------------------------------------


def line(doc: Any) -> bytes:
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("doc", "mode", "want"),
    [
        (
            {"id": "q", "query": "a", "documents": ["x", "y"]},
            "crossEncoder",
            Sample("q", 1, prompt="a", inputs=("x", "y"), route="rerank"),
        ),
        (
            {"id": 7, "query": "a", "documents": "x"},
            "crossEncoder",
            Sample("7", 1, prompt="a", inputs=("x",), route="rerank"),
        ),
        (
            {"id": "p", "text_1": "a", "text_2": ["x"]},
            "biEncoder",
            Sample("p", 1, prompt="a", inputs=("x",), route="score"),
        ),
        (
            {"id": "g", "query": "a", "documents": ["", "x"]},
            "generative",
            Sample("g", 1, prompt="a", inputs=("", "x"), route="generative"),
        ),
        (
            {"id": "p", "text_1": "a", "text_2": "x"},
            "generative",
            "mode generative scores documents against a query",
        ),
        ({"id": "q", "query": "a"}, "crossEncoder", "query needs documents"),
        ({"id": "q", "query": "", "documents": ["x"]}, "crossEncoder", "query must be a non-empty string"),
        (
            {"id": "q", "query": "a", "documents": []},
            "crossEncoder",
            "documents must be a string or a non-empty list",
        ),
        (
            {"id": "q", "query": "a", "documents": ["x", [1, 2]]},
            "crossEncoder",
            "documents[1] must be a string",
        ),
        ({"id": "q", "query": "a", "text_1": "b"}, "crossEncoder", "needs exactly one of query"),
        ({"id": "q", "text": "a"}, "crossEncoder", "needs exactly one of query"),
        ({"query": "a", "documents": ["x"]}, "crossEncoder", "id must be a non-empty string"),
    ],
)
def test_our_jsonl_lines(doc: dict[str, Any], mode: str, want: Sample | str) -> None:
    got = parse_group(line(doc), 1, mode)
    if isinstance(want, Sample):
        assert got == want
    else:
        assert isinstance(got, BadLine) and want in got.reason, got


def batch(url: str = "/v1/rerank", **body: Any) -> dict[str, Any]:
    return {"custom_id": "c-1", "method": "POST", "url": url, "body": {"model": "m", **body}}


@pytest.mark.parametrize(
    ("doc", "want"),
    [
        (
            batch(query="a", documents=["x", "y"], top_n=1),
            Sample("c-1", 1, prompt="a", inputs=("x", "y"), route="rerank"),
        ),
        (
            batch("/v1/score", text_1="a", text_2="x"),
            Sample("c-1", 1, prompt="a", inputs=("x",), route="score"),
        ),
        (batch("/v1/embeddings", input="a"), "url must be /v1/rerank or /v1/score"),
        (
            batch(query="a", documents=["x"], return_documents=True),
            "body.return_documents is not a parameter of the rerank request",
        ),
        (
            batch("/v1/score", query="a", documents=["x"]),
            "body.documents is not a parameter of the score request",
        ),
        (batch(query="a", documents=["x"], top_n=-1), "body.top_n must be a non-negative integer"),
        (batch(documents=["x"]), "body.query must be a non-empty string"),
        (batch("/v1/score", text_1="a", text_2=[]), "body.text_2 must be a string or a non-empty list"),
        (
            {
                **batch(query="a", documents=["x"]),
                "body": {"model": "gpt-4o", "query": "a", "documents": ["x"]},
            },
            "body.model 'gpt-4o' is not this job's model",
        ),
        ({**batch(query="a", documents=["x"]), "method": "GET"}, "method must be POST"),
    ],
)
def test_batch_lines(doc: dict[str, Any], want: Sample | str) -> None:
    got = parse_scoring_request(line(doc), 1, ("m",), "crossEncoder")
    if isinstance(want, Sample):
        assert got == want
    else:
        assert isinstance(got, BadLine) and got.id == "c-1" and want in got.reason, got


def test_every_document_is_asked_for_in_its_order_whatever_top_n() -> None:
    sample = Sample("q", 1, prompt="a", inputs=("x", "y"), route="rerank")
    assert request_body(sample, "m") == ("/rerank", {"model": "m", "query": "a", "documents": ["x", "y"]})
    pairs = Sample("p", 1, prompt="a", inputs=("x",), route="score")
    assert request_body(pairs, "m") == ("/score", {"model": "m", "text_1": "a", "text_2": ["x"]})
    g = Sample("g", 1, prompt="a", inputs=("x",), route="generative")
    assert request_body(g, "m", (5, 6), False, True) == (
        "/generative_scoring",
        {
            "model": "m",
            "query": "a",
            "items": ["x"],
            "label_token_ids": [5, 6],
            "apply_softmax": False,
            "item_first": True,
        },
    )


@pytest.mark.parametrize(
    ("route", "answer", "count", "want"),
    [
        (
            "/rerank",
            {
                "results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}],
                "usage": {"prompt_tokens": 12},
            },
            2,
            ([0.1, 0.9], 12),
        ),
        ("/score", {"data": [{"index": 0, "score": 1}], "usage": {}}, 1, ([1.0], None)),
        (
            "/rerank",
            {"results": [{"index": 0, "relevance_score": 0.9}]},
            2,
            "answered 1 results for 2 documents",
        ),
        (
            "/rerank",
            {"results": [{"index": 0, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]},
            2,
            "not a new index",
        ),
        ("/score", {"data": [{"index": 3, "score": 0.5}]}, 1, "not a new index"),
        ("/score", {"data": [{"index": 0, "score": "high"}]}, 1, "float32 score"),
        ("/score", {"data": [{"index": 0, "score": 10**400}]}, 1, "float32 score"),  # float() would overflow
        ("/score", {"data": [{"index": 0, "score": 1e39}]}, 1, "float32 score"),  # struct.pack would overflow
        ("/score", {"data": [{"index": 0, "score": float("nan")}]}, 1, "float32 score"),
        ("/generative_scoring", {"results": []}, 1, "answered no data"),
    ],
)
def test_an_answer_gives_one_score_per_document_or_is_not_taken(route: str, answer: dict[str, Any], count: int,
                                                                 want: Any) -> None:  # fmt: skip
    if isinstance(want, str):
        with pytest.raises(ValueError, match=want):
            scores_of(route, answer, count)
    else:
        assert scores_of(route, answer, count) == want


def test_the_rerank_body_is_sorted_highest_first_ties_in_document_order_and_cut_to_top_n() -> None:
    request = ScoringRequest("c", "rerank", None, ("a", "b", "c", "d"), top_n=3)
    body = scoring_body(request, 4, [0.5, 0.9, 0.5, 0.1], 20, "served", 0)
    assert [(r["index"], r["document"]["text"]) for r in body["results"]] == [(1, "b"), (0, "a"), (2, "c")]
    assert body["model"] == "served" and body["usage"] == {"prompt_tokens": 20, "total_tokens": 20}
    again = scoring_body(request, 4, [0.5, 0.9, 0.5, 0.1], 20, "served", 0)
    assert again["id"] == body["id"], "a rewritten file has the same ids"
    score = scoring_body(ScoringRequest("c", "score", "m", ("a", "b"), 0), 4, [0.5, 0.9], 8, "served", 17)
    assert score["data"] == [
        {"index": 0, "object": "score", "score": 0.5},
        {"index": 1, "object": "score", "score": 0.9},
    ]
    assert score["model"] == "m" and score["created"] == 17


# ---- the driver on the fake vLLM -------------------------------------------------------------------------------

REFUSED = "a document the fake refuses as too long"


def scoring_config(
    dataset: Path, output: Path, url: str, shard: int, shards: int, **overrides: Any
) -> PoolingConfig:
    return PoolingConfig(**{"shard": shard, "shards": shards, "dataset": dataset, "output": output, "endpoint": url,
                            "model": POOLING_MODEL, "task": None, "mode": "crossEncoder", "batch_size": 8,
                            "dtype": "float32", "concurrency": 2, "retry_base_seconds": 0.01,
                            "progress_interval": 0.05, **overrides})  # fmt: skip


def groups(n: int) -> list[tuple[str, str, list[str], str]]:
    """(id, query, documents, route) for n lines: groups of 1-5 documents, every third as pairs."""
    out = []
    for i in range(n):
        docs = [f"doc {i} {j} " + "word " * (j % 3) for j in range(1 + i % 5)]
        out.append((f"g-{i}", f"query {i}", docs, "score" if i % 3 == 2 else "rerank"))
    return out


@pytest.mark.integration
def test_two_shards_score_every_group_into_rows_in_document_order(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    dataset, output = tmp_path / "groups.jsonl", tmp_path / "out"
    want = groups(30)
    lines = [{"id": g, "query": q, "documents": d} if r == "rerank" else {"id": g, "text_1": q, "text_2": d}
             for g, q, d, r in want]  # fmt: skip
    lines.insert(4, {"id": "refused", "query": "q", "documents": ["fine", REFUSED]})
    lines.insert(9, {"id": "bad", "query": "q"})
    dataset.write_text("".join(json.dumps(x) + "\n" for x in lines))
    fake = FakePooling(refuse={REFUSED})
    with fake_pooling(fake) as url:
        for shard in (0, 1):
            assert asyncio.run(PoolingDriver(scoring_config(dataset, output, url, shard, 2)).run()) == 0
    assert {path for path, _ in fake.requests} == {"/rerank", "/score"}
    entries = {}
    for shard in (0, 1):
        folder = output / f"shard-{shard}"
        for raw in (folder / hs.MANIFEST).read_text().splitlines():
            entry = json.loads(raw)
            vectors = load_file(str(folder / entry["file"]))["vectors"]
            entries[entry["id"]] = (entry, vectors[entry["row"] : entry["row"] + entry["rows"], 0].tolist())
        record = json.loads((folder / "run.json").read_text())
        assert (record["mode"], record["dtype"], record["dimension"]) == ("crossEncoder", "float32", 1)
    assert set(entries) == {g for g, *_ in want}, "every good group once, the refused and the bad one failed"
    for g, q, docs, _ in want:
        entry, scores = entries[g]
        assert entry["rows"] == len(docs) and scores == [fake_score(q, d) for d in docs], g
        assert entry["tokens"] == sum(fake_tokens(f"{q} {d}") for d in docs)
    failed = [
        json.loads(x)
        for s in (0, 1)
        for x in (output / f"shard-{s}" / hs.FAILED_LOG).read_text().splitlines()
    ]
    assert sorted(f["id"] for f in failed) == ["bad", "refused"]


@pytest.mark.integration
def test_a_batch_file_of_rerank_and_score_lines_gives_vllms_response_bodies_in_input_order(
    tmp_path: Path,
) -> None:
    dataset, output = tmp_path / "batch.jsonl", tmp_path / "out"
    want = groups(12)
    lines = []
    for g, q, d, r in want:
        body = {"query": q, "documents": d, "top_n": 2} if r == "rerank" else {"text_1": q, "text_2": d}
        lines.append(
            {"custom_id": g, "method": "POST", "url": f"/v1/{r}", "body": {"model": POOLING_MODEL, **body}}
        )
    lines.insert(3, {"custom_id": "emb", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}})
    dataset.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with fake_pooling(FakePooling()) as url:
        config = scoring_config(
            dataset, output, url, 0, 1, format=pj.OPENAI_BATCH, outputs=(pj.OPENAI_BATCH,)
        )
        assert asyncio.run(PoolingDriver(config).run()) == 0
    got = [json.loads(x) for x in (output / pj.BATCH_OUTPUT).read_text().splitlines()]
    assert [x["custom_id"] for x in got] == [x["custom_id"] for x in lines]
    assert got[3]["response"] is None and got[3]["error"]["code"] == "invalid_request"
    assert "url must be /v1/rerank or /v1/score" in got[3]["error"]["message"]
    answered = [x for x in got if x["error"] is None]
    for out, (g, q, docs, route) in zip(answered, want, strict=True):
        body = out["response"]["body"]
        scores = [fake_score(q, d) for d in docs]
        if route == "rerank":
            order = sorted(range(len(docs)), key=lambda i: -scores[i])[:2]
            assert [(r["index"], r["document"]["text"], r["relevance_score"]) for r in body["results"]] == [
                (i, docs[i], scores[i]) for i in order
            ], g
        else:
            assert [d["score"] for d in body["data"]] == scores, g
    assert not list(output.glob("shard-*/part-*.safetensors")), "safetensors was not asked for"


def test_the_driver_takes_scores_in_float32_only() -> None:
    from pooling_operator.api.shard_contract import EXIT_USAGE
    from pooling_operator.pods.vectors.cli import main

    argv = ["pooling-job", "run", "--shard", "0", "--shards", "1", "--dataset", "/nonexistent", "--output", "/o",
            "--endpoint", "http://127.0.0.1:9", "--model", "m", "--mode", "crossEncoder", "--batch-size", "4"]  # fmt: skip
    assert main([*argv, "--dtype", "float16"]) == EXIT_USAGE
    assert main([*argv, "--dtype", "float32", "--task", "embed"]) == EXIT_USAGE  # task and mode


@pytest.mark.integration
def test_a_rerun_keeps_what_was_scored_and_a_line_changed_since_is_an_error_line(tmp_path: Path) -> None:
    """A second run over the same folder sends nothing already in the manifest; a line whose documents changed in
    between gets an error line, not a traceback or another line's scores."""
    dataset, output = tmp_path / "batch.jsonl", tmp_path / "out"
    lines = [{"custom_id": g, "method": "POST", "url": "/v1/rerank", "body": {"query": q, "documents": d}}
             for g, q, d, _ in groups(6)]  # fmt: skip
    dataset.write_text("".join(json.dumps(x) + "\n" for x in lines))
    fake = FakePooling()
    with fake_pooling(fake) as url:
        config = scoring_config(dataset, output, url, 0, 1, format=pj.OPENAI_BATCH, outputs=(pj.OPENAI_BATCH, pj.SAFETENSORS))
        assert asyncio.run(PoolingDriver(config).run()) == 0
        sent = len(fake.requests)
        lines[2]["body"]["documents"] = [*lines[2]["body"]["documents"], "a document added later"]
        dataset.write_text("".join(json.dumps(x) + "\n" for x in lines))
        (output / "shard-0" / "_SUCCESS").unlink()
        assert asyncio.run(PoolingDriver(config).run()) == 0
    assert len(fake.requests) == sent, "nothing scored twice"
    got = [json.loads(x) for x in (output / pj.BATCH_OUTPUT).read_text().splitlines()]
    assert [x["error"] is None for x in got] == [True, True, False, True, True, True]
    assert "the file changed between runs" in got[2]["error"]["message"]
