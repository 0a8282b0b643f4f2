"""The PoolingJob driver's test support: its fake vLLM (``FakePooling``, served by ``fake_pooling``), its
datasets, its command line, and an independent check of its output folder (``check_vectors``: the part files
read back with the safetensors library, not with the driver's own code)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safetensors import safe_open

# The PoolingJob driver's fake vLLM: an aiohttp server on loopback, in a thread of the test process, answering
# /v1/embeddings and /pooling with encoding_format "bytes" exactly as vLLM 0.32 does (the tensors as the
# body, a ``metadata`` header with the items' byte ranges and shapes). Vectors are a function of the input:
# every value is k/128 for an integer |k| < 128, exact in float32, float16 and bfloat16, so a test knows each
# row's bytes in any dtype. Knobs: ``refuse`` (inputs that make their batch a 400, as an over-long text does),
# ``faults`` (what the next requests get: 503 with /health down for ``down_polls`` polls, 500, "drop" the
# connection, or a wrong answer: "shape", "count", "dtype", "range", "dim"), ``status`` (every request: e.g.
# 404 for an unknown model). ``requests`` records (path, body) and ``events`` the order of what happened.

POOLING_DIM = 8
POOLING_MODEL = "fake-pooling"


def fake_tokens(x: str | list[int]) -> int:
    """The fake tokenizer's count: a text's words plus two special tokens; a token-id list is itself."""
    return len(x.split()) + 2 if isinstance(x, str) else len(x)


def fake_rows(x: str | list[int], token_task: bool, dim: int = POOLING_DIM) -> list[list[float]]:
    key = x if isinstance(x, str) else json.dumps(list(x))
    rows = fake_tokens(x) if token_task else 1
    out = []
    for r in range(rows):
        digest = hashlib.sha256(f"{key}|{r}".encode()).digest() * (1 + dim // 32)
        out.append([(digest[j] - 128) / 128 for j in range(dim)])
    return out


def fake_score(query: str, document: str) -> float:
    """The fake's score of a (query, document) pair: k/128 for an integer |k| < 128, exact in float32."""
    return (hashlib.sha256(f"{query}|{document}".encode()).digest()[0] - 128) / 128


def encode_values(values: list[float], dtype: str) -> bytes:
    import struct

    if dtype == "float32":
        return struct.pack(f"<{len(values)}f", *values)
    if dtype == "float16":
        return struct.pack(f"<{len(values)}e", *values)
    assert dtype == "bfloat16"
    f32 = struct.pack(f"<{len(values)}f", *values)
    return b"".join(f32[i + 2 : i + 4] for i in range(0, len(f32), 4))


@dataclass
class FakePooling:
    task: str = "embed"
    dim: int = POOLING_DIM
    refuse: set[str] = field(default_factory=set)  # a batch holding one of these texts gets a 400
    faults: list[Any] = field(default_factory=list)  # popped one a request: 503, 500, "drop", "shape", ...
    status: int | None = None  # every request answers this (with ``param``)
    param: str | None = None
    down_polls: int = 2  # /health answers 503 this many times after a 503 answer
    skew: float = 0.0  # added to every value of a JSON answer (the canaries): another engine's space
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    _down: int = 0

    @property
    def token_task(self) -> bool:
        return self.task in ("token_embed", "token_classify")

    def app(self) -> Any:
        from aiohttp import web

        async def health(request: web.Request) -> web.Response:
            if self._down > 0:
                self._down -= 1
                self.events.append("health 503")
                return web.Response(status=503)
            self.events.append("health 200")
            return web.Response(status=200)

        async def version(request: web.Request) -> web.Response:
            return web.json_response({"version": "0.32.0-fake"})

        async def pool(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            self.requests.append((request.path, body))
            self.events.append(f"post {request.path}")
            fault = self.faults.pop(0) if self.faults else None

            def error(status: int, message: str, param: str | None = None) -> web.Response:
                self.events.append(f"answer {status}")
                return web.json_response({"error": {"message": message, "type": "BadRequestError", "param": param,
                                                    "code": status}}, status=status)  # fmt: skip

            if self.status is not None:
                return error(self.status, f"refused with {self.status}", self.param)
            if fault == 503:
                self._down = self.down_polls
                return error(503, "the engine is restarting")
            if fault == 500:
                return error(500, "an internal error")
            if fault == "drop":
                assert request.transport is not None
                request.transport.close()
                return web.Response()
            inputs = body["input"]
            if body.get("encoding_format") != "bytes":  # a JSON request (the canaries of spec.spaceCheck)
                key = "embedding" if request.path == "/v1/embeddings" else "data"
                data = []
                for i, x in enumerate(inputs):
                    rows = [[v + self.skew * ((j % 3) - 1) for j, v in enumerate(row)] for row in fake_rows(x, self.token_task, self.dim)]
                    data.append({"index": i, "object": "embedding", key: rows if self.token_task else rows[0]})
                self.events.append("answer 200")
                return web.json_response({"id": "embd-fake", "object": "list", "model": body["model"], "data": data})
            too_long = [x for x in inputs if isinstance(x, str) and x in self.refuse]
            if too_long:
                return error(400, f"This model's maximum context length is 16 tokens ({too_long[0][:20]})", "input_tokens")
            dtype = body["embed_dtype"]
            chunks, items, start = [], [], 0
            for i, x in enumerate(inputs):
                rows = fake_rows(x, self.token_task, self.dim)
                shape = [len(rows), self.dim] if self.token_task else [self.dim]
                data = encode_values([v for row in rows for v in row], dtype)
                item = {"index": i, "embed_dtype": dtype, "endianness": "little", "start": start,
                        "end": start + len(data), "shape": shape}  # fmt: skip
                chunks.append(data)
                items.append(item)
                start += len(data)
            if fault == "shape":
                items[0]["shape"] = [self.dim + 1] if not self.token_task else [items[0]["shape"][0] + 1, self.dim]
            elif fault == "count":
                items.pop()
            elif fault == "dtype":
                items[0]["embed_dtype"] = "float16" if dtype != "float16" else "float32"
            elif fault == "range":
                items[-1]["end"] += 4
            elif fault == "dim":
                self.dim += 1  # from now on every answer has another dimension
            meta = {"id": "embd-fake", "created": 0, "model": body["model"], "data": items,
                    "usage": {"prompt_tokens": sum(fake_tokens(x) for x in inputs), "total_tokens": 0}}  # fmt: skip
            self.events.append("answer 200")
            return web.Response(body=b"".join(chunks), content_type="application/octet-stream",
                                headers={"metadata": json.dumps(meta)})  # fmt: skip

        async def score(request: web.Request) -> web.Response:
            """/rerank, /score and /generative_scoring as vLLM 0.32 answers them, each score fake_score's."""
            body = await request.json()
            self.requests.append((request.path, body))
            self.events.append(f"post {request.path}")
            fault = self.faults.pop(0) if self.faults else None
            if fault == 503:
                self._down = self.down_polls
                return web.json_response({"error": {"message": "the engine is restarting", "code": 503}}, status=503)
            if fault == 500:
                return web.json_response({"error": {"message": "an internal error", "code": 500}}, status=500)
            query = body.get("query", body.get("text_1"))
            docs = body.get("documents", body.get("items", body.get("text_2")))
            docs = docs if isinstance(docs, list) else [docs]
            if any(d in self.refuse for d in docs):
                return web.json_response({"error": {"message": "This model's maximum context length is 16 tokens",
                                                    "type": "BadRequestError", "param": None, "code": 400}}, status=400)  # fmt: skip
            scores = [fake_score(query, d) for d in docs]
            usage = {"prompt_tokens": sum(fake_tokens(f"{query} {d}") for d in docs)}
            usage["total_tokens"] = usage["prompt_tokens"]
            if fault == "count":
                scores.pop()
            if request.path == "/rerank":
                results = sorted(({"index": i, "document": {"text": d}, "relevance_score": s}
                                  for i, (d, s) in enumerate(zip(docs, scores, strict=False))), key=lambda r: -r["relevance_score"])  # fmt: skip
                return web.json_response({"id": "score-fake", "model": body["model"], "usage": usage, "results": results})
            return web.json_response({"id": "score-fake", "object": "list", "created": 0, "model": body["model"],
                                      "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
                                      "usage": usage})  # fmt: skip

        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_get("/version", version)
        app.router.add_post("/v1/embeddings", pool)
        app.router.add_post("/pooling", pool)
        for route in ("/rerank", "/score", "/generative_scoring"):
            app.router.add_post(route, score)
        return app


@contextmanager
def fake_pooling(fake: FakePooling) -> Iterator[str]:
    """Serve ``fake`` on a free loopback port from a thread; yields its base URL."""
    import asyncio
    import threading

    from aiohttp import web

    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, Any] = {}

    def serve() -> None:
        asyncio.set_event_loop(loop)
        runner = web.AppRunner(fake.app(), access_log=None)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        box["port"] = runner.addresses[0][1]
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=serve, name="fake-pooling", daemon=True)
    thread.start()
    assert started.wait(10), "the fake pooling server did not start"
    try:
        yield f"http://127.0.0.1:{box['port']}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def write_pooling_dataset(path: Path, n: int, *, every_tokens: int = 4, prefix: str = "") -> dict[str, str | list[int]]:
    """``n`` inputs, every ``every_tokens``-th a token-id list (runs of texts and token lists alternate), ids
    both strings and integers; id (as the manifest spells it) -> input."""
    expected: dict[str, str | list[int]] = {}
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            raw_id: str | int = i if i % 5 == 0 and not prefix else f"{prefix}x-{i}"
            x: str | list[int]
            if every_tokens and i % every_tokens == every_tokens - 1:
                x = [101, *(1000 + (i * 7 + j) % 500 for j in range(1 + i % 6)), 102]
                f.write(json.dumps({"id": raw_id, "token_ids": x}) + "\n")
            else:
                x = " ".join(f"w{(i * 31 + j) % 97}" for j in range(1 + i % 9))
                f.write(json.dumps({"id": raw_id, "text": x}) + "\n")
            expected[str(raw_id)] = x
    return expected


def read_part_rows(path: Path) -> tuple[str, list[int], bytes]:
    """(dtype, shape, data) of a part file, read with the safetensors library (any dtype: the raw bytes)."""
    with safe_open(str(path), framework="numpy") as st:
        assert list(st.keys()) == ["vectors"], list(st.keys())
        sl = st.get_slice("vectors")
        dtype, shape = sl.get_dtype(), sl.get_shape()
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert (8 + n) % 8 == 0, "the data is not 8-aligned"
    return dtype, shape, raw[8 + n :]


def check_vectors(output: Path, shards: int, expected: dict[str, str | list[int]], *, task: str = "embed",
                  dtype: str = "float32", complete: bool = True, dim: int = POOLING_DIM,
                  whole_parts: bool = True) -> dict[str, dict[str, Any]]:
    """Every manifest line is whole and names rows of a part file (read back with the safetensors library)
    holding exactly the fake's vectors of its input; each part's lines name its rows in order from 0 (with
    ``whole_parts``, all of them: only a crash in the middle of an append leaves rows no line names); no id
    twice across shards, no orphan part, no temporary file; with ``complete``, every expected id is there.
    Returns id -> manifest entry."""
    from safetensors.numpy import load_file

    token_task = task in ("token_embed", "token_classify")
    width = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    seen: dict[str, dict[str, Any]] = {}
    for shard in range(shards):
        folder = output / f"shard-{shard}"
        path = folder / "manifest.jsonl"
        raw = path.read_bytes() if path.exists() else b""
        assert raw == b"" or raw.endswith(b"\n"), f"shard {shard}: torn manifest"
        entries = [json.loads(line) for line in raw.decode().splitlines()]
        next_row: dict[str, int] = {}
        for entry in entries:
            assert list(entry) == ["id", "file", "row", "rows", "tokens", "bytes"], entry
            assert entry["id"] not in seen, f"{entry['id']} is in the manifests twice"
            seen[entry["id"]] = entry
            part = folder / entry["file"]
            assert part.stat().st_size == entry["bytes"], entry
            st_dtype, shape, data = read_part_rows(part)
            assert st_dtype == {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[dtype]
            assert shape[1] == dim and entry["row"] + entry["rows"] <= shape[0]
            if whole_parts:
                assert entry["row"] == next_row.get(entry["file"], 0), f"{entry}: rows out of manifest order"
            else:  # a line resume dropped leaves a gap, never an overlap
                assert entry["row"] >= next_row.get(entry["file"], 0), f"{entry}: rows out of manifest order"
            next_row[entry["file"]] = entry["row"] + entry["rows"]
            x = expected[entry["id"]]
            rows = fake_rows(x, token_task, dim)
            assert entry["rows"] == len(rows)
            begin = entry["row"] * dim * width
            got = data[begin : begin + entry["rows"] * dim * width]
            assert got == encode_values([v for r in rows for v in r], dtype), f"{entry['id']}: other vectors"
            if dtype != "bfloat16":
                vectors = load_file(str(part))["vectors"]
                assert vectors.shape == tuple(shape)
                assert vectors[entry["row"] : entry["row"] + entry["rows"]].tolist() == rows
            if token_task or not isinstance(x, str):
                assert entry["tokens"] == fake_tokens(x)
        parts = {p.name for p in folder.glob("part-*.safetensors")}
        assert parts == {e["file"] for e in entries}, f"shard {shard}: orphan or missing part files"
        for name in parts if whole_parts else ():
            assert next_row[name] == read_part_rows(folder / name)[1][0], f"{name}: rows no line names"
        assert not list(folder.glob("*.tmp")), f"shard {shard}: temporary files left"
    if complete:
        assert set(seen) == set(expected), f"missing: {sorted(set(expected) - set(seen))[:5]}"
    return seen


def pooling_argv(dataset: Path, output: Path, url: str, shard: int = 0, shards: int = 1, *extra: str,
                 task: str = "embed", dtype: str = "float32", batch: int = 4) -> list[str]:
    return ["pooling-job", "run", "--shard", str(shard), "--shards", str(shards), "--dataset", str(dataset),
            "--output", str(output), "--endpoint", url, "--model", POOLING_MODEL, "--task", task,
            "--batch-size", str(batch), "--dtype", dtype, "--retry-base-seconds", "0.01", *extra]
