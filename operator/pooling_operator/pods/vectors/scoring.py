"""The lines of a scoring job (a PoolingJob with spec.mode): what a line asks, the request vLLM gets, the scores
its answer holds, and the Batch output body. Pure: no I/O.

Our JSONL (dataset.format jsonl), one line a request:

    {"id": "q-1", "query": "...", "documents": ["...", ...]}   a group, as /rerank takes it (every mode)
    {"id": "p-1", "text_1": "...", "text_2": "..." | [...]}      pairs, as /score takes them (not generative)

OpenAI-style Batch lines (dataset.format openaiBatch; vLLM 0.32's run_batch routes urls ending in /rerank and
/score to its scoring handler, ``vllm/entrypoints/launchers/run_batch.py`` lines 764-777):

    {"custom_id": "q-1", "method": "POST", "url": "/v1/rerank",
     "body": {"model": "...", "query": "...", "documents": ["...", ...], "top_n": 3}}
    {"custom_id": "p-1", "method": "POST", "url": "/v1/score",
     "body": {"model": "...", "text_1": "...", "text_2": "..." | ["...", ...]}}

Each line's scores are its rows, one float32 value a row, in the order of its documents (text_2): what the part
files and the manifest hold, whatever the route. vLLM is asked for every document's score (never top_n, which
only cuts the Batch output body, after the sort vLLM does: ``vllm/entrypoints/pooling/scoring/serving.py``
lines 143-186). Text only: token ids and multimodal documents are refused by name.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from pooling_operator.api.pooling_job_contract import OPENAI_BATCH, SCORING_ROUTES
from pooling_operator.pods.shard.dataset import BadLine, Parser, Sample, json_object
from pooling_operator.pods.vectors.openai_batch import line_problem, parse_request, request_line

RERANK, SCORE, GENERATIVE = "rerank", "score", "generative"
URLS = {"/v1/rerank": RERANK, "/v1/score": SCORE}
BODY_KEYS = {
    RERANK: frozenset({"model", "query", "documents", "top_n"}),
    SCORE: frozenset({"model", "text_1", "text_2"}),
}
MAX_DOCUMENTS = 4096  # a line's documents: its rows, held in memory at once
FLOAT32_MAX = 3.4028234663852886e38  # a score the part file's float32 rows can hold

_IDS = uuid.UUID("5d1d8c57-2a8e-4f0c-b0a6-9c3b8e2f4a17")  # the namespace of the derived ids


@dataclass(frozen=True)
class ScoringRequest:
    """What the Batch output line needs of a request line besides its scores."""

    custom_id: str
    route: str  # rerank or score
    model: str | None
    documents: tuple[str, ...]
    top_n: int


def _documents(value: Any, field: str) -> tuple[str, ...] | str:
    """A string or a non-empty list of strings, as a tuple, or the reason it is neither."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not value:
        return f"{field} must be a string or a non-empty list of strings"
    if len(value) > MAX_DOCUMENTS:
        return f"{field} has {len(value)} texts; at most {MAX_DOCUMENTS} a line"
    wrong = next((i for i, x in enumerate(value) if not isinstance(x, str)), None)
    if wrong is not None:
        return f"{field}[{wrong}] must be a string (token ids and multimodal documents are not taken)"
    return tuple(value)


def _group(
    doc: Mapping[str, Any], line: int, sample_id: str, mode: str, prefix: str = ""
) -> Sample | BadLine:
    """(query, documents) or (text_1, text_2) from a line's fields; ``prefix`` names them in messages."""
    has_group, has_pairs = "query" in doc, "text_1" in doc
    if has_group == has_pairs:
        return BadLine(line, sample_id, f"needs exactly one of {prefix}query (with {prefix}documents) or "
                                        f"{prefix}text_1 (with {prefix}text_2)")  # fmt: skip
    if has_pairs and mode == "generative":
        return BadLine(line, sample_id, f"mode generative scores documents against a query: {prefix}query and "
                                        f"{prefix}documents, not text_1 and text_2")  # fmt: skip
    key_1, key_2, route = ("query", "documents", RERANK) if has_group else ("text_1", "text_2", SCORE)
    query = doc.get(key_1)
    if not isinstance(query, str) or not query:
        return BadLine(line, sample_id, f"{prefix}{key_1} must be a non-empty string")
    if key_2 not in doc:
        return BadLine(line, sample_id, f"{prefix}{key_1} needs {prefix}{key_2}")
    documents = _documents(doc[key_2], prefix + key_2)
    if isinstance(documents, str):
        return BadLine(line, sample_id, documents)
    return Sample(sample_id, line, prompt=query, inputs=documents,
                  route=GENERATIVE if mode == "generative" else route)  # fmt: skip


def parse_group(raw: bytes, line: int, mode: str) -> Sample | BadLine | None:
    """One line of our JSONL for a scoring job -> a sample (prompt: the query or text_1; inputs: the documents or
    text_2; route: rerank, score or generative), a bad line, or None for a blank line."""
    doc = json_object(raw, line)
    if not isinstance(doc, dict):
        return doc
    raw_id = doc.get("id")
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or not str(raw_id):
        return BadLine(line, None, "id must be a non-empty string")
    return _group(doc, line, str(raw_id), mode)


def check_scoring_request(doc: Mapping[str, Any], models: Sequence[str]) -> ScoringRequest | str:
    """A parsed Batch line's request, or the reason it is not one a scoring job sends."""
    wrong = line_problem(doc)
    if wrong:
        return wrong
    route = URLS.get(doc.get("url"))  # type: ignore[arg-type]
    if route is None:
        return f"url must be /v1/rerank or /v1/score (a scoring job scores), not {doc.get('url')!r}"
    body = doc.get("body")
    if not isinstance(body, dict):
        return f"body must be a JSON object: the {route} request"
    extra = sorted(set(body) - BODY_KEYS[route])
    if extra:
        return f"body.{extra[0]} is not a parameter of the {route} request (accepted: {', '.join(sorted(BODY_KEYS[route]))})"
    model = body.get("model")
    if model is not None and model not in models:
        return f"body.model {model!r} is not this job's model ({' or '.join(repr(m) for m in models)})"
    top_n = body.get("top_n", 0)
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0:
        return "body.top_n must be a non-negative integer (0: every document)"
    documents: Any = body.get("documents" if route == RERANK else "text_2")  # JSON: _group checks it afterwards
    return ScoringRequest(doc["custom_id"], route, model, tuple(documents) if isinstance(documents, list) else (documents,),
                          top_n)  # fmt: skip


def parse_scoring_request(raw: bytes, line: int, models: Sequence[str], mode: str) -> Sample | BadLine | None:
    """One Batch input line of a scoring job -> a sample (as ``parse_group``), a bad line with its custom_id where
    it has one, or None for a blank line."""
    checked = request_line(raw, line, lambda doc: check_scoring_request(doc, models))
    if not isinstance(checked, tuple):
        return checked
    doc, custom_id, request = checked
    body = doc["body"]
    first = "query" if request.route == RERANK else "text_1"
    if first not in body:
        return BadLine(line, custom_id, f"body.{first} must be a non-empty string")
    expected = {"query", "documents"} if request.route == RERANK else {"text_1", "text_2"}
    return _group({k: v for k, v in body.items() if k in expected}, line, custom_id, mode, prefix="body.")


def line_parser(fmt: str, mode: str | None, models: Sequence[str]) -> tuple[Parser | None, str]:
    """How a job's dataset lines are read, and what their id field is called: our JSONL of texts (the default
    reader), of scoring groups, or an OpenAI Batch file of embeddings or scoring requests."""
    if fmt == OPENAI_BATCH:
        if mode is not None:
            return partial(parse_scoring_request, models=tuple(models), mode=mode), "custom_id"
        return partial(parse_request, models=tuple(models)), "custom_id"
    if mode is not None:
        return partial(parse_group, mode=mode), "id"
    return None, "id"


def request_body(sample: Sample, model: str, labels: Sequence[int] = (), apply_softmax: bool = True,
                 item_first: bool = False) -> tuple[str, dict[str, Any]]:  # fmt: skip
    """The route and body that score one line: every document, in order."""
    documents = list(sample.inputs or ())
    if sample.route == RERANK:
        return SCORING_ROUTES[RERANK], {"model": model, "query": sample.prompt, "documents": documents}
    if sample.route == SCORE:
        return SCORING_ROUTES[SCORE], {"model": model, "text_1": sample.prompt, "text_2": documents}
    assert sample.route == GENERATIVE, sample.route
    return SCORING_ROUTES[GENERATIVE], {"model": model, "query": sample.prompt, "items": documents,
                                   "label_token_ids": list(labels), "apply_softmax": apply_softmax,
                                   "item_first": item_first}  # fmt: skip


def scores_of(route: str, answer: Any, count: int) -> tuple[list[float], int | None]:
    """The scores of an answer, in document order, and its prompt tokens; ValueError saying what is wrong with
    an answer that is not one score for each of ``count`` documents (/rerank: ``results`` with ``index`` and
    ``relevance_score``, sorted by score; /score and /generative_scoring: ``data`` with ``index`` and ``score``)."""
    key, value = ("results", "relevance_score") if route == SCORING_ROUTES[RERANK] else ("data", "score")
    items = answer.get(key) if isinstance(answer, dict) else None
    if not isinstance(items, list) or len(items) != count:
        raise ValueError(
            f"{route} answered {len(items) if isinstance(items, list) else 'no'} {key} for {count} documents"
        )
    scores: list[float | None] = [None] * count
    for item in items:
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get(value) if isinstance(item, dict) else None
        if (isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count or scores[index] is not None
                or isinstance(score, bool) or not isinstance(score, int | float)
                or not abs(score) <= FLOAT32_MAX):  # fmt: skip  (NaN, infinities and what float32 cannot hold too)
            raise ValueError(f"{route}: an item of {key} is not a new index below {count} with a float32 {value}")
        scores[index] = float(score)
    usage = answer.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return [s for s in scores if s is not None], tokens if isinstance(tokens, int) and not isinstance(
        tokens, bool
    ) else None


def pack(scores: Sequence[float]) -> bytes:
    """Scores as a part file's rows: float32, little-endian."""
    return struct.pack(f"<{len(scores)}f", *scores)


def _id(prefix: str, line: int, custom_id: str, kind: str) -> str:
    return f"{prefix}{uuid.uuid5(_IDS, f'{kind}:{line}:{custom_id}')}"


def scoring_body(request: ScoringRequest, line: int, scores: Sequence[float], tokens: int, model: str,
                 created: int) -> dict[str, Any]:  # fmt: skip
    """The body vLLM answers the request with (RerankResponse or ScoreResponse, as model_dump writes them):
    /rerank's results sorted by score, highest first, ties in document order, cut to top_n when set."""
    assert len(scores) == len(request.documents), (len(scores), len(request.documents))
    name = request.model or model
    if request.route == RERANK:
        results: list[dict[str, Any]] = [
            {"index": i, "document": {"text": d, "multi_modal": None}, "relevance_score": s}
            for i, (d, s) in enumerate(zip(request.documents, scores, strict=True))]  # fmt: skip
        results.sort(key=lambda r: r["relevance_score"], reverse=True)  # stable: ties keep document order
        if request.top_n:
            results = results[: request.top_n]
        return {"id": _id("score-", line, request.custom_id, "body"), "model": name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}, "results": results}  # fmt: skip
    return {
        "id": _id("score-", line, request.custom_id, "body"), "object": "list", "created": created, "model": name,
        "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0,
                  "prompt_tokens_details": None, "completion_tokens_details": None},
    }  # fmt: skip
