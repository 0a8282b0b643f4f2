"""OpenAI Batch files for a PoolingJob: the request lines it reads, the output lines it writes. Pure: no I/O.

The input file is the one a user hands the OpenAI Batch API for embeddings (OpenAI's Batch guide, "Preparing
your batch file", https://platform.openai.com/docs/guides/batch; vLLM 0.32's own reader is
``vllm/entrypoints/launchers/run_batch.py``, ``BatchRequestInput``, lines 159-196): one JSON object a line,

    {"custom_id": "doc-1", "method": "POST", "url": "/v1/embeddings",
     "body": {"model": "...", "input": "text" | ["text", ...] | [token ids] | [[token ids], ...],
              "encoding_format": "float" | "base64", "dimensions": N, "user": "..."}}

``body`` takes exactly the parameters of OpenAI's embeddings request (``openai.types.EmbeddingCreateParams``):
anything else is refused by name rather than dropped. A line that is not such a request becomes an error line
of the output, never a failed job; a repeated ``custom_id`` belongs to its first line (the Batch API refuses
a file with one; this job answers every line it can).

The output file is the Batch API's output file (the guide's "Retrieving the results"; run_batch.py,
``BatchResponseData`` and ``BatchRequestOutput``, lines 211-236, written by ``run_request``, lines 555-594), one
line per request line in input order:

    {"id": "vllm-<uuid>", "custom_id": "doc-1", "error": null,
     "response": {"status_code": 200, "request_id": "vllm-batch-<uuid>",
                  "body": {"id": "embd-<uuid>", "object": "list", "created": 1764806400, "model": "...",
                           "data": [{"index": 0, "object": "embedding", "embedding": [...]}],
                           "usage": {"prompt_tokens": 7, "total_tokens": 7}}}}

A request that was never answered is a line with ``"response": null`` and ``error`` in the Batch API's error
shape (``openai.types.BatchError``: code, message, line). Where vLLM's run_batch writes a 400 response with a
message string instead, we follow OpenAI's documented shape. The ids are UUIDs derived from the input file's
line and custom_id, so writing the file again (a resumed shard) gives the same lines.
"""

from __future__ import annotations

import base64
import json
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pooling_operator.pods.shard.dataset import BadLine, Sample, json_object

URL = "/v1/embeddings"
METHOD = "POST"
BODY_KEYS = frozenset({"model", "input", "encoding_format", "dimensions", "user"})  # EmbeddingCreateParams
ENCODINGS = ("float", "base64")
MAX_INPUTS = 2048  # OpenAI's limit on one embeddings request's inputs

# error.code of the output's error lines
INVALID = "invalid_request"  # the line is not a request this job can send
FAILED = "request_failed"  # vLLM refused it, or it was tried until the attempts ran out

_IDS = uuid.UUID("8f0b8f6e-6c3e-4d59-9a53-7e1b1c0a5d21")  # the namespace of the derived ids
T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    """What the output line needs of a request line besides its vectors."""

    custom_id: str
    model: str | None
    encoding: str
    dimensions: int | None
    inputs: int


def _inputs(value: Any) -> tuple[str, ...] | tuple[tuple[int, ...], ...] | str:
    """body.input as a tuple of texts or of token-id lists, or the reason it is neither."""
    if isinstance(value, str):
        return (value,) if value else "body.input must not be an empty string"
    if not isinstance(value, list) or not value:
        return "body.input must be a string, a list of strings, a list of token ids or a list of such lists"
    if len(value) > MAX_INPUTS:
        return f"body.input has {len(value)} inputs; at most {MAX_INPUTS} a request"
    if all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return (tuple(value),) if all(x >= 0 for x in value) else "body.input: token ids must not be negative"
    if all(isinstance(x, str) for x in value):
        empty = next((i for i, x in enumerate(value) if not x), None)
        return tuple(value) if empty is None else f"body.input[{empty}] must not be an empty string"
    if all(isinstance(x, list) for x in value):
        for i, ids in enumerate(value):
            if not ids or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
                return f"body.input[{i}] must be a non-empty list of non-negative token ids"
        return tuple(tuple(ids) for ids in value)
    return "body.input mixes texts, token ids and lists; a request holds one kind"


def parse_request(raw: bytes, line: int, models: Sequence[str]) -> Sample | BadLine | None:
    """One input line -> a sample (id: its custom_id; inputs: its texts or token-id lists), a bad line with its
    custom_id where it has one, or None for a blank line. ``models``: the names body.model may give."""
    checked = request_line(raw, line, lambda doc: check_request(doc, models))
    if not isinstance(checked, tuple):
        return checked
    doc, custom_id, _ = checked
    inputs = _inputs(doc["body"].get("input"))
    if isinstance(inputs, str):
        return BadLine(line, custom_id, inputs)
    return Sample(custom_id, line, inputs=inputs)


def request_line(raw: bytes, line: int, check: Callable[[dict[str, Any]], T | str]) -> tuple[dict[str, Any], str, T] | BadLine | None:
    """A Batch input line's JSON, custom_id and request as ``check`` reads it; a bad line (with its custom_id
    where it has one) saying why not; None for a blank line."""
    doc = json_object(raw, line)
    if not isinstance(doc, dict):
        return doc
    custom_id = doc.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return BadLine(line, None, "custom_id must be a non-empty string")
    request = check(doc)
    if isinstance(request, str):
        return BadLine(line, custom_id, request)
    return doc, custom_id, request


def line_problem(doc: Mapping[str, Any]) -> str | None:
    """What is wrong with a Batch line's own fields (not its url or body), if anything."""
    unknown = sorted(set(doc) - {"custom_id", "method", "url", "body"})
    if unknown:
        return f"unknown field {unknown[0]!r}; a request line has custom_id, method, url and body"
    if doc.get("method") != METHOD:
        return f"method must be {METHOD}, not {doc.get('method')!r}"
    return None


def check_request(doc: Mapping[str, Any], models: Sequence[str]) -> Request | str:
    """A parsed line's request fields, or the reason it is not a request this job sends (body.input aside)."""
    wrong = line_problem(doc)
    if wrong:
        return wrong
    if doc.get("url") != URL:
        return (f"url must be {URL} (a PoolingJob embeds), not {doc.get('url')!r}; /v1/rerank and /v1/score lines "
                "are for a scoring job")  # fmt: skip
    body = doc.get("body")
    if not isinstance(body, dict):
        return "body must be a JSON object: the embeddings request"
    extra = sorted(set(body) - BODY_KEYS)
    if extra:
        return f"body.{extra[0]} is not a parameter of the embeddings request (accepted: {', '.join(sorted(BODY_KEYS))})"
    model = body.get("model")
    if model is not None and model not in models:
        return f"body.model {model!r} is not this job's model ({' or '.join(repr(m) for m in models)})"
    encoding = body.get("encoding_format", "float")
    if encoding not in ENCODINGS:
        return f"body.encoding_format must be float or base64, not {encoding!r}"
    dimensions = body.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1):
        return "body.dimensions must be a positive integer"
    inputs = body.get("input")
    return Request(doc["custom_id"], model, encoding, dimensions, len(inputs) if isinstance(inputs, list) else 1)


def request_of(raw: bytes, models: Sequence[str]) -> Request:
    """The request fields of a line ``parse_request`` accepted."""
    request = check_request(json.loads(raw), models)
    assert isinstance(request, Request), request
    return request


def _id(prefix: str, line: int, custom_id: str | None, kind: str) -> str:
    return f"{prefix}{uuid.uuid5(_IDS, f'{kind}:{line}:{custom_id}')}"


def success_line(request: Request, line: int, vectors: Sequence[Sequence[float]], tokens: int, model: str,
                 created: int) -> dict[str, Any]:  # fmt: skip
    """The output line of an answered request: its vectors (float32 values) in the body OpenAI returns;
    ``model``: the name the body gives, else the served name."""
    data: list[Any]
    if request.encoding == "base64":  # OpenAI's: the float32 values, little-endian, base64
        data = [base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode("ascii") for v in vectors]
    else:
        data = [[float(x) for x in v] for v in vectors]
    body = {
        "id": _id("embd-", line, request.custom_id, "body"), "object": "list", "created": created,
        "model": request.model or model,
        "data": [{"index": i, "object": "embedding", "embedding": e} for i, e in enumerate(data)],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return envelope(line, request.custom_id, body)


def envelope(line: int, custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """The output line of an answered request, around the body vLLM answered it with."""
    return {
        "id": _id("vllm-", line, custom_id, "line"), "custom_id": custom_id,
        "response": {"status_code": 200, "request_id": _id("vllm-batch-", line, custom_id, "request"), "body": body},
        "error": None,
    }


def error_line(line: int, custom_id: str | None, code: str, message: str) -> dict[str, Any]:
    """The output line of a request that was not answered (OpenAI's error shape, openai.types.BatchError)."""
    return {"id": _id("vllm-", line, custom_id, "line"), "custom_id": custom_id, "response": None,
            "error": {"code": code, "message": message, "line": line}}


def dimension_mismatch(request: Request, dim: int) -> str | None:
    """Why an answered request's vectors do not answer it: a body.dimensions other than the job's."""
    if request.dimensions is not None and request.dimensions != dim:
        return (f"body.dimensions is {request.dimensions}, this job's vectors have {dim} (pooling.dimensions sets "
                "them for the whole job)")
    return None


def dumps(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
