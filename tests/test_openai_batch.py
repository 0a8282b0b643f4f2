"""OpenAI Batch files for a PoolingJob: the request lines it accepts and refuses (each refusal naming the field
and what would be accepted), and the output lines read back by the openai package's own types."""

from __future__ import annotations

import base64
import json
import struct
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from openai.types import BatchError, CreateEmbeddingResponse

from pooling_operator.pods.shard.dataset import BadLine, Sample, read_shard
from pooling_operator.pods.vectors.openai_batch import (
    FAILED,
    INVALID,
    dimension_mismatch,
    error_line,
    parse_request,
    request_of,
    success_line,
)

MODELS = ("minilm", "sentence-transformers/all-MiniLM-L6-v2")


def line(body: dict[str, Any] | None = None, **fields: Any) -> bytes:
    doc = {"custom_id": "r-1", "method": "POST", "url": "/v1/embeddings",
           "body": {"model": "minilm", "input": "a text"} if body is None else body, **fields}  # fmt: skip
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("body", "inputs"),
    [
        ({"model": "minilm", "input": "one text"}, ("one text",)),
        ({"model": "sentence-transformers/all-MiniLM-L6-v2", "input": ["a", "b"]}, ("a", "b")),
        ({"input": [101, 2023, 102]}, ((101, 2023, 102),)),
        ({"model": "minilm", "input": [[101, 102], [7]], "encoding_format": "base64", "user": "u"}, ((101, 102), (7,))),
    ],
)
def test_a_request_line_becomes_one_sample_holding_its_inputs(body: dict[str, Any], inputs: tuple[Any, ...]) -> None:
    parsed = parse_request(line(body), 3, MODELS)
    assert parsed == Sample("r-1", 3, inputs=inputs)


@pytest.mark.parametrize(
    ("raw", "custom_id", "reason"),
    [
        (b"{not json", None, "not JSON"),
        (b"[1, 2]", None, "not a JSON object but list"),
        (line(custom_id=""), None, "custom_id must be a non-empty string"),
        (line(custom_id=7), None, "custom_id must be a non-empty string"),
        (line(method="GET"), "r-1", "method must be POST, not 'GET'"),
        (line(url="/v1/chat/completions"), "r-1", "url must be /v1/embeddings (a PoolingJob embeds)"),
        (line(url="/v1/rerank"), "r-1", "/v1/rerank and /v1/score lines are for a scoring job"),
        (line(extra=1), "r-1", "unknown field 'extra'; a request line has custom_id, method, url and body"),
        (line(body=[1]), "r-1", "body must be a JSON object"),
        (line({"model": "minilm", "input": "x", "truncate_prompt_tokens": 8}), "r-1",
         "body.truncate_prompt_tokens is not a parameter of the embeddings request (accepted: dimensions, "
         "encoding_format, input, model, user)"),
        (line({"model": "gpt-4o", "input": "x"}), "r-1",
         "body.model 'gpt-4o' is not this job's model ('minilm' or 'sentence-transformers/all-MiniLM-L6-v2')"),
        (line({"input": "x", "encoding_format": "bytes"}), "r-1", "body.encoding_format must be float or base64"),
        (line({"input": "x", "dimensions": 0}), "r-1", "body.dimensions must be a positive integer"),
        (line({"input": ""}), "r-1", "body.input must not be an empty string"),
        (line({"input": []}), "r-1", "body.input must be a string, a list of strings"),
        (line({"input": ["a", ""]}), "r-1", "body.input[1] must not be an empty string"),
        (line({"input": ["a", [1]]}), "r-1", "body.input mixes texts, token ids and lists"),
        (line({"input": [[1], []]}), "r-1", "body.input[1] must be a non-empty list of non-negative token ids"),
        (line({"input": [1, -2]}), "r-1", "token ids must not be negative"),
        (line({"input": ["x"] * 2049}), "r-1", "body.input has 2049 inputs; at most 2048 a request"),
    ],
)
def test_a_line_that_is_not_a_request_says_why_with_its_custom_id(raw: bytes, custom_id: str | None, reason: str) -> None:
    parsed = parse_request(raw, 9, MODELS)
    assert isinstance(parsed, BadLine), parsed
    assert (parsed.line, parsed.id) == (9, custom_id)
    assert reason in parsed.reason, parsed.reason


def test_blank_lines_are_no_requests() -> None:
    assert parse_request(b"  \t", 1, MODELS) is None


def test_a_custom_id_belongs_to_its_first_line_even_a_bad_one(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_bytes(line(url="/v1/rerank") + b"\n" + line() + b"\n")
    found = read_shard(path, 0, 1, parse=partial(parse_request, models=MODELS), id_field="custom_id")
    assert found.samples == [] and [(b.line, b.id) for b in found.bad] == [(1, "r-1"), (2, "r-1")]
    assert found.bad[1].reason == "duplicate custom_id, first at line 1"


def test_an_answer_is_the_body_openai_returns_and_the_client_types_read_it() -> None:
    raw = line({"model": "sentence-transformers/all-MiniLM-L6-v2", "input": ["a", "b"]})
    doc = success_line(request_of(raw, MODELS), 4, [[0.5, -0.25], [1.0, 0.0]], 7, "minilm", 1764806400)
    assert doc["custom_id"] == "r-1" and doc["error"] is None and doc["response"]["status_code"] == 200
    assert doc["id"].startswith("vllm-") and doc["response"]["request_id"].startswith("vllm-batch-")
    body = CreateEmbeddingResponse.model_validate(json.loads(json.dumps(doc["response"]["body"])))
    assert body.model == "sentence-transformers/all-MiniLM-L6-v2"  # the body's name, as OpenAI echoes it
    assert [e.embedding for e in body.data] == [[0.5, -0.25], [1.0, 0.0]] and [e.index for e in body.data] == [0, 1]
    assert (body.usage.prompt_tokens, body.usage.total_tokens) == (7, 7)
    # the same line written again (a resumed shard) is the same line
    assert success_line(request_of(raw, MODELS), 4, [[0.5, -0.25], [1.0, 0.0]], 7, "minilm", 1764806400) == doc


def test_base64_is_the_little_endian_float32_values() -> None:
    raw = line({"input": "x", "encoding_format": "base64"})
    doc = success_line(request_of(raw, MODELS), 1, [[0.5, -0.25, 3.0]], 3, "minilm", 0)
    assert doc["response"]["body"]["model"] == "minilm"  # no body.model: the served name
    # as the openai client decodes what it asked for in base64 (resources/embeddings.py: float32 from base64)
    encoded = doc["response"]["body"]["data"][0]["embedding"]
    assert struct.unpack("<3f", base64.b64decode(encoded)) == (0.5, -0.25, 3.0)


def test_an_unanswered_request_is_an_error_line_in_openais_shape() -> None:
    doc = error_line(12, "r-9", FAILED, "vLLM refused the request: too long")
    assert doc["response"] is None and doc["custom_id"] == "r-9"
    error = BatchError.model_validate(doc["error"])
    assert (error.code, error.line, error.message) == (FAILED, 12, "vLLM refused the request: too long")
    assert error_line(2, None, INVALID, "not JSON")["custom_id"] is None


def test_dimensions_other_than_the_jobs_are_refused_naming_both() -> None:
    request = request_of(line({"input": "x", "dimensions": 256}), MODELS)
    assert dimension_mismatch(request, 256) is None
    assert dimension_mismatch(request, 384) == ("body.dimensions is 256, this job's vectors have 384 "
                                                "(pooling.dimensions sets them for the whole job)")  # fmt: skip
