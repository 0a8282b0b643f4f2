"""The PoolingJob driver's side of vLLM's pooling API: one batch of inputs -> their vectors, as raw bytes; and a
scoring job's (``ScoringClient``): one line's documents -> their scores.

``embed`` goes to ``/v1/embeddings``, the other tasks to ``/pooling`` (which also gets ``task``, so that a
vLLM pooling for another task refuses rather than answering with other vectors). The body asks for
``encoding_format: bytes`` in the vector dtype, little-endian; vLLM 0.32 answers with the tensors
concatenated as the body (application/octet-stream) and a ``metadata`` header holding JSON
``{"id", "created", "model", "data": [{"index", "embed_dtype", "endianness", "start", "end", "shape"}],
"usage": {"prompt_tokens", ...}}`` (vllm/entrypoints/pooling/utils.py, build_pooling_bytes_streaming_response).

Every answer is checked against its request before anyone writes it: one item per input in index order,
the asked dtype and endianness, byte ranges that tile the body exactly, shapes of the task's rank ([dim] for
embed and classify, [tokens, dim] for the token tasks, whose token count must match token-id inputs) and
one dimension for all. An answer that fails is Transient (retried): a wrong file is never written.

Errors (client.py's kinds, refined): Refused, a 400 or 422 about the inputs (one input too long, a token id
out of the vocabulary): the caller splits the batch to find the input(s) at fault; Misconfigured, an answer
no input could change (an unknown model, a task vLLM does not pool, an endpoint it does not serve): the
shard stops; Transient as in client.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pooling_operator.api.pooling_job_contract import ROUTES, TOKEN_TASKS, VECTOR_BYTES
from pooling_operator.pods.shard.client import Permanent, Transient, VllmClient, error_message
from pooling_operator.pods.shard.dataset import Sample
from pooling_operator.pods.vectors.scoring import pack, request_body, scores_of

METADATA_HEADER = "metadata"
# aiohttp refuses a response header line longer than 8190 bytes by default; vLLM's metadata header takes
# about 110 bytes an input. Room for the largest batch with a wide margin (aiohttp's limit is a maximum,
# not an allocation).
HEADER_BASE_BYTES = 1 << 20
HEADER_BYTES_PER_INPUT = 512
# Request fields an input cannot change: vLLM refusing one of them means the shard cannot succeed.
CONFIG_PARAMS = frozenset({"model", "task", "encoding_format", "embed_dtype", "endianness", "dimensions"})


class Refused(Permanent):
    """vLLM refused the batch for something in its inputs (400 or 422)."""


class Misconfigured(Permanent):
    """vLLM refused the request for a reason no input could change: the job or its vLLM is misconfigured."""


@dataclass(frozen=True)
class Vectors:
    """One batch's answer, checked: ``data`` is the body, the items' rows concatenated in input order."""

    data: bytes
    rows: tuple[int, ...]  # per input: 1 for the sequence tasks, its token count for the token tasks
    dim: int
    prompt_tokens: int | None  # vLLM's total for the batch


def header_limit(batch_size: int) -> int:
    return HEADER_BASE_BYTES + HEADER_BYTES_PER_INPUT * batch_size


def _param(body: bytes) -> str | None:
    """The ``param`` of vLLM's error JSON ({"error": {"message", "type", "param", "code"}}), if any."""
    try:
        doc = json.loads(body[:4000])
    except ValueError:
        return None
    error = doc.get("error") if isinstance(doc, dict) else None
    param = error.get("param") if isinstance(error, dict) else None
    return param if isinstance(param, str) else None


def raise_for(status: int, data: bytes, path: str, config: frozenset[str]) -> None:
    """Nothing for a 200; else the error's kind: Transient (408, 429, a 5xx but 501), Refused (a 400 or 422
    about the inputs) or Misconfigured (a refusal of a field in ``config``, which no input could change, or any
    other answer)."""
    if status == 200:
        return
    message = error_message(status, data)
    if status in (408, 429) or (status >= 500 and status != 501):
        raise Transient(message, server_down=status == 503)
    if status in (400, 422) and _param(data) not in config:
        raise Refused(message)
    raise Misconfigured(f"{path}: {message}")


class PoolingClient(VllmClient):
    def __init__(self, endpoint: str, model: str, *, task: str, dtype: str, batch_size: int, concurrency: int,
                 request_timeout: float) -> None:
        super().__init__(endpoint, model, concurrency=concurrency, request_timeout=request_timeout,
                         max_field_size=header_limit(batch_size))  # fmt: skip
        self.task = task
        self.dtype = dtype
        self.width = VECTOR_BYTES[dtype]
        self.route = ROUTES[task]
        self.token_task = task in TOKEN_TASKS

    def body(self, inputs: Sequence[str] | Sequence[Sequence[int]]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "input": [x if isinstance(x, str) else list(x) for x in inputs],
            "encoding_format": "bytes",
            "embed_dtype": self.dtype,
            "endianness": "little",
        }
        if self.route != ROUTES["embed"]:
            body["task"] = self.task
        return body

    async def encode(self, inputs: Sequence[str] | Sequence[Sequence[int]], dim: int | None = None) -> Vectors:
        """The vectors of ``inputs`` (all texts or all token-id lists); ``dim``: the dimension every earlier
        answer had, which this one must have too."""
        path = self.route
        status, data, headers = await self._send(path, self.body(inputs))
        raise_for(status, data, path, CONFIG_PARAMS)
        return self._check(inputs, data, headers.get(METADATA_HEADER), dim)

    def _check(self, inputs: Sequence[str] | Sequence[Sequence[int]], data: bytes, metadata: str | None,
               dim: int | None) -> Vectors:
        path = self.route
        if metadata is None:
            raise Transient(f"{path} answered without a {METADATA_HEADER} header (is vLLM older than 0.32?)")
        try:
            doc = json.loads(metadata)
        except ValueError as exc:
            raise Transient(f"{path}: the {METADATA_HEADER} header is not JSON") from exc
        items = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(items, list) or len(items) != len(inputs):
            count = len(items) if isinstance(items, list) else "no"
            raise Transient(f"{path} answered {count} items for {len(inputs)} inputs")
        items = sorted(items, key=lambda i: i.get("index", -1) if isinstance(i, dict) else -1)
        rows: list[int] = []
        position = 0
        for index, (item, given) in enumerate(zip(items, inputs, strict=True)):
            try:
                shape = [int(d) for d in item["shape"]]
                ok = (item["index"] == index and item["embed_dtype"] == self.dtype
                      and item["endianness"] == "little" and item["start"] == position)  # fmt: skip
                end = int(item["end"])
            except (KeyError, TypeError, ValueError) as exc:
                raise Transient(f"{path}: item {index} of the {METADATA_HEADER} header is malformed") from exc
            if not ok:
                raise Transient(f"{path}: item {index} is not the asked {self.dtype}, little-endian, at byte {position}")
            rank = 2 if self.token_task else 1
            if len(shape) != rank or min(shape, default=0) < 1:
                raise Transient(f"{path}: item {index} has shape {shape}, expected {rank} positive dimensions for {self.task}")
            if dim is None:
                dim = shape[-1]
            if shape[-1] != dim:
                raise Transient(f"{path}: item {index} has dimension {shape[-1]}, expected {dim}")
            if self.token_task and not isinstance(given, str) and shape[0] != len(given):
                raise Transient(f"{path}: item {index} has {shape[0]} token rows for {len(given)} token ids")
            if end - position != math.prod(shape) * self.width:
                raise Transient(f"{path}: item {index} spans {end - position} bytes, its shape {shape} needs "
                                f"{math.prod(shape) * self.width}")  # fmt: skip
            rows.append(shape[0] if self.token_task else 1)
            position = end
        if position != len(data):
            raise Transient(f"{path}: the items describe {position} bytes, the body has {len(data)}")
        usage = doc.get("usage")
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        assert dim is not None  # inputs are never empty
        return Vectors(data, tuple(rows), dim, tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None)


# A scoring line's request fields it cannot change: vLLM refusing one of them means the job is misconfigured.
SCORING_CONFIG_PARAMS = CONFIG_PARAMS | {"label_token_ids", "apply_softmax", "item_first"}


class ScoringClient(VllmClient):
    """A scoring job's side of vLLM: one line (a query and its documents) -> its scores, one row each (score.py's
    request and answer)."""

    def __init__(self, endpoint: str, model: str, *, concurrency: int, request_timeout: float,
                 labels: Sequence[int] = (), apply_softmax: bool = True, item_first: bool = False) -> None:
        super().__init__(endpoint, model, concurrency=concurrency, request_timeout=request_timeout)
        self.labels, self.apply_softmax, self.item_first = tuple(labels), apply_softmax, item_first
        self.route = "/rerank, /score or /generative_scoring"

    async def score(self, sample: Sample) -> Vectors:
        """The scores of ``sample``'s documents, in their order, as a one-column tensor's rows."""
        path, body = request_body(sample, self.model, self.labels, self.apply_softmax, self.item_first)
        status, data, _ = await self._send(path, body)
        raise_for(status, data, path, SCORING_CONFIG_PARAMS)
        try:
            scores, tokens = scores_of(path, json.loads(data), len(sample.inputs or ()))
        except ValueError as exc:  # not JSON, or not one score a document: never written
            raise Transient(str(exc) if not isinstance(exc, json.JSONDecodeError) else f"{path} answered no JSON") from exc
        return Vectors(pack(scores), (len(scores),), 1, tokens)
