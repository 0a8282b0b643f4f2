"""TEST SUPPORT ONLY: the vLLM stand-in's HTTP server (see e2e/standin/__init__.py for what it mimics)."""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import random
import signal
import sys
import threading
import time
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web
from safetensors import _safetensors_rust as safetensors_rust

from e2e.standin import tokenize

CRASH_EXIT_CODE = 70
NUMPY_DTYPES = {"float16": np.float16, "float32": np.float32}


STANDIN_VERSION = "0.32.0+standin"


@dataclass(frozen=True)
class Options:
    host: str
    port: int
    storage_path: str
    layers: int
    hidden_size: int
    dtype: str
    model: str | None
    max_model_len: int
    startup_delay: float
    delay_ms: float
    write_delay_ms: float
    fail_rate: float
    truncate_rate: float
    crash_after: int
    seed: int
    num_writer_threads: int


def hidden_states(token_ids: list[int], layers: int, hidden: int, dtype: str) -> np.ndarray:
    """Deterministic stand-in activations [tokens, layers, hidden]: same tokens, same bytes."""
    rng = np.random.default_rng(zlib.crc32(np.asarray(token_ids, dtype=np.int64).tobytes()))
    base = rng.standard_normal((layers, hidden), dtype=np.float32)
    scale = 1.0 + np.arange(len(token_ids), dtype=np.float32) / max(len(token_ids), 1)
    values = base[None, :, :] * scale[:, None, None]
    if dtype == "bfloat16":
        # bfloat16 is the upper half of a float32 (numpy has no bf16 type; the bytes are what torch writes).
        return (values.view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(NUMPY_DTYPES[dtype])


def save_file(tensors: dict[str, tuple[str, np.ndarray]], filename: str) -> None:
    """safetensors' own serializer, as safetensors.torch.save_file (the connector's writer) calls it.

    Goes below safetensors.numpy because numpy has no bfloat16; the dtype is given by name instead.
    """
    arrays = {name: np.ascontiguousarray(a) for name, (_, a) in tensors.items()}
    spec = getattr(safetensors_rust, "TensorSpec", None)
    if spec is not None:  # safetensors >= 0.7
        flat = {
            name: spec(
                dtype=dtype,
                shape=list(arrays[name].shape),
                data_ptr=arrays[name].ctypes.data,
                data_len=arrays[name].nbytes,
            )
            for name, (dtype, _) in tensors.items()
        }
    else:
        flat = {
            name: {"dtype": dtype, "shape": list(arrays[name].shape), "data": arrays[name].tobytes()}
            for name, (dtype, _) in tensors.items()
        }
    safetensors_rust.serialize_file(flat, filename, None)


class StandIn:
    def __init__(self, options: Options) -> None:
        self.o = options
        self.rng = random.Random(options.seed)
        self.writers = ThreadPoolExecutor(
            max_workers=options.num_writer_threads, thread_name_prefix="standin-write"
        )
        self.completions = 0
        self.crashing = threading.Event()
        os.makedirs(options.storage_path, exist_ok=True)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/v1/completions", self.complete)
        return app

    async def version(self, request: web.Request) -> web.Response:
        # vLLM answers {"version": "<its version>"}; the real_vllm tier checks the real one in the run record
        return web.json_response({"version": STANDIN_VERSION})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=503 if self.crashing.is_set() else 200)

    @staticmethod
    def error(status: int, message: str, type_: str = "BadRequestError") -> web.Response:
        return web.json_response(
            {"error": {"message": message, "type": type_, "param": None, "code": status}}, status=status
        )

    async def _body(self, request: web.Request) -> tuple[dict[str, Any] | None, web.Response | None]:
        try:
            body = json.loads(await request.read())
        except ValueError:
            return None, self.error(400, "JSON decode error")
        if not isinstance(body, dict):
            return None, self.error(400, "the request body must be a JSON object")
        model = body.get("model")
        if self.o.model is not None and model is not None and model != self.o.model:
            return None, self.error(
                404, f"The model `{model}` does not exist. Valid aliases: {self.o.model}.", "NotFoundError"
            )
        return body, None

    def _prompt_ids(self, prompt: Any) -> list[int] | None:
        if isinstance(prompt, str):
            return tokenize(prompt)
        if (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            return list(prompt)
        return None

    async def tokenize(self, request: web.Request) -> web.Response:
        body, problem = await self._body(request)
        if problem:
            return problem
        assert body is not None
        ids = self._prompt_ids(body.get("prompt"))
        if ids is None or not isinstance(body.get("prompt"), str):
            return self.error(400, "prompt must be a string")
        return web.json_response(
            {"count": len(ids), "max_model_len": self.o.max_model_len, "tokens": ids, "token_strs": None}
        )

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body, problem = await self._body(request)
        if problem:
            return problem
        assert body is not None
        ids = self._prompt_ids(body.get("prompt"))
        if ids is None:
            # vLLM would batch a list of prompts but return only the first one's file: one prompt per request.
            return self.error(
                400, "the stand-in takes one prompt per request: a string or a list of token ids"
            )
        if len(ids) + int(body.get("max_tokens") or 1) > self.o.max_model_len:
            return self.error(
                400,
                f"This model's maximum context length is {self.o.max_model_len} tokens. However, your "
                f"request has {len(ids)} input tokens.",
            )
        if self.o.delay_ms:
            await asyncio.sleep(self.o.delay_ms / 1000 * self.rng.uniform(0.5, 1.5))
        if self.crashing.is_set():
            return self.error(
                500,
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                "InternalServerError",
            )
        if self.rng.random() < self.o.fail_rate:
            return self.error(
                500,
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                "InternalServerError",
            )
        self.completions += 1
        crash = self.o.crash_after > 0 and self.completions >= self.o.crash_after
        if crash:
            self.crashing.set()
        # Decided here, not in the writer thread: one thread draws from the seeded generator.
        truncate_to = self.rng.random() if self.rng.random() < self.o.truncate_rate else None
        request_id = f"cmpl-{uuid.uuid4().hex[:16]}-0-{uuid.uuid4().hex[:8]}"
        filename = os.path.join(self.o.storage_path, f"{request_id}.safetensors")
        # As the connector's wait_for_save: the lock exists and is held before the client hears the path.
        lock_fd = os.open(filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        answer = {
            "id": request_id.rsplit("-0-", 1)[0],
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "text": " x",
                    "logprobs": None,
                    "finish_reason": "length",
                    "stop_reason": None,
                    "token_ids": None,
                    "prompt_logprobs": None,
                    "prompt_token_ids": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": "standin",
            "usage": {
                "prompt_tokens": len(ids),
                "total_tokens": len(ids) + 1,
                "completion_tokens": 1,
                "prompt_tokens_details": None,
            },
            "kv_transfer_params": {"hidden_states_path": filename},
            "ec_transfer_params": None,
        }
        response = web.json_response(answer)
        try:
            await response.prepare(request)
            await response.write_eof()
        finally:
            # The write starts only after the answer is out, as the connector's async writer does.
            asyncio.get_running_loop().run_in_executor(
                self.writers, self._write, filename, ids, lock_fd, truncate_to, crash
            )
        return response

    def _write(
        self, filename: str, ids: list[int], lock_fd: int, truncate_to: float | None, crash: bool
    ) -> None:
        try:
            if self.o.write_delay_ms:
                time.sleep(self.o.write_delay_ms / 1000)
            hs = hidden_states(ids, self.o.layers, self.o.hidden_size, self.o.dtype)
            dtype = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}[self.o.dtype]
            save_file(
                {"hidden_states": (dtype, hs), "token_ids": ("int64", np.asarray(ids, dtype=np.int64))},
                filename,
            )
            if truncate_to is not None or crash:
                size = os.path.getsize(filename)
                os.truncate(filename, int(size * truncate_to) if truncate_to is not None else size // 2)
            if crash:
                print(
                    f"Stand-in crashing on purpose after {self.completions} completions",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(CRASH_EXIT_CODE)
        finally:
            os.close(lock_fd)  # releases LOCK_EX: readers sleeping on LOCK_SH wake up


def parse_args(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(
        prog="python -m e2e.standin",
        description="TEST SUPPORT ONLY: a vLLM stand-in that "
        "writes hidden-state files as ExampleHiddenStatesConnector does",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--port", type=int, required=True, help="0 picks a free port (printed on the first stdout line)"
    )
    p.add_argument("--storage-path", required=True, help="the connector's shared_storage_path")
    p.add_argument("--layers", type=int, required=True, help="number of extracted layers")
    p.add_argument("--hidden-size", type=int, required=True)
    p.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    p.add_argument("--model", help="served model name; other names get 404 (default: accept any)")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument(
        "--startup-delay", type=float, default=0.0, help="seconds before the port listens (model loading)"
    )
    p.add_argument("--delay-ms", type=float, default=0.0, help="mean extra latency of each completion")
    p.add_argument(
        "--write-delay-ms", type=float, default=0.0, help="time between the answer and the file write"
    )
    p.add_argument(
        "--fail-rate", type=float, default=0.0, help="fraction of completions answered with HTTP 500"
    )
    p.add_argument("--truncate-rate", type=float, default=0.0, help="fraction of files cut short")
    p.add_argument("--crash-after", type=int, default=0, help="exit mid-write of this completion (0: never)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-writer-threads", type=int, default=8)
    a = p.parse_args(argv)
    return Options(
        host=a.host,
        port=a.port,
        storage_path=a.storage_path,
        layers=a.layers,
        hidden_size=a.hidden_size,
        dtype=a.dtype,
        model=a.model,
        max_model_len=a.max_model_len,
        startup_delay=a.startup_delay,
        delay_ms=a.delay_ms,
        write_delay_ms=a.write_delay_ms,
        fail_rate=a.fail_rate,
        truncate_rate=a.truncate_rate,
        crash_after=a.crash_after,
        seed=a.seed,
        num_writer_threads=a.num_writer_threads,
    )


async def serve(options: Options) -> None:
    if options.startup_delay:
        await asyncio.sleep(options.startup_delay)  # like vLLM loading its model: connections are refused
    standin = StandIn(options)
    runner = web.AppRunner(standin.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, options.host, options.port)
    await site.start()
    port = runner.addresses[0][1]
    print(f"Stand-in listening on http://{options.host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    standin.writers.shutdown(wait=True)


def main(argv: list[str] | None = None) -> int:
    asyncio.run(serve(parse_args(argv)))
    return 0
