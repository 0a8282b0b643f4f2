"""Helpers for the hidden-state driver tests: stand-in processes, datasets, and an independent check of
the output folder (read back with the safetensors library, not with the driver's own code)."""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open

from e2e.harness.processes import stop_process
from e2e.standin import tokenize
from e2e.standin.server import hidden_states, save_file

ROOT = Path(__file__).resolve().parents[1]
LAYERS = "3,18,33,36"
HIDDEN = 64
# The driver on its own (the main CLI registers the same parser under `pooling-operator hidden-states`).
DRIVER = [sys.executable, "-m", "pooling_operator"]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'operator'}", "PYTHONUNBUFFERED": "1"}


@dataclass
class StandIn:
    process: subprocess.Popen[str]
    url: str

    def stop(self) -> int:
        code = stop_process(self.process, timeout=10)
        assert code is not None
        return code


def start_standin(storage: Path, *args: str, layers: int = 4, hidden: int = HIDDEN) -> StandIn:
    """A stand-in on a free loopback port; returns once it listens (or has announced it will, with a startup delay)."""
    cmd = [sys.executable, "-m", "e2e.standin", "--port", "0", "--storage-path", str(storage), "--layers", str(layers),
           "--hidden-size", str(hidden), *args]
    process = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=30):
            process.kill()
            raise AssertionError("the stand-in did not start within 30 s")
    line = process.stdout.readline()
    if "listening on " not in line:
        process.kill()
        raise AssertionError(f"the stand-in did not start: {line!r}")
    return StandIn(process, line.strip().rsplit(" ", 1)[1])


@contextmanager
def standin(storage: Path, *args: str, **kwargs: Any) -> Iterator[StandIn]:
    s = start_standin(storage, *args, **kwargs)
    try:
        yield s
    finally:
        s.stop()


def driver_argv(dataset: Path, output: Path, url: str, shard: int = 0, shards: int = 1, *extra: str) -> list[str]:
    return ["hidden-states", "run", "--shard", str(shard), "--shards", str(shards), "--dataset", str(dataset),
            "--output", str(output), "--endpoint", url, "--model", "standin", "--layers", LAYERS,
            "--progress-configmap", "", "--dtype-bytes", "2", "--hidden-size", str(HIDDEN),
            "--retry-base-seconds", "0.01", *extra]


def start_driver(*args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    out = log.open("ab") if log else subprocess.DEVNULL
    return subprocess.Popen([*DRIVER, *args], cwd=ROOT, env=env(), stdout=out, stderr=out)


def run_driver(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DRIVER, *args], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout)


def write_dataset(path: Path, n: int, *, prefix: str = "s") -> dict[str, list[int]]:
    """``n`` samples, every third pre-tokenised, ids that need cleaning now and then; id -> expected token ids."""
    expected: dict[str, list[int]] = {}
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            sample_id = f"{prefix}/{i}" if i % 7 == 0 else f"{prefix}-{i}"
            words = " ".join(f"w{(i * 31 + j) % 97}" for j in range(3 + i % 17))
            if i % 3 == 0:
                ids = tokenize(words)
                f.write(json.dumps({"id": sample_id, "token_ids": ids}) + "\n")
            else:
                ids = tokenize(words)
                f.write(json.dumps({"id": sample_id, "prompt": words}) + "\n")
            expected[sample_id] = ids
    return expected


def expected_sha256(token_ids: list[int], tmp: Path, layers: int = 4, hidden: int = HIDDEN) -> str:
    """The hash the stand-in's file for these tokens must have (its contents are a function of the tokens)."""
    path = tmp / "expected.safetensors"
    hs = hidden_states(token_ids, layers, hidden, "bfloat16")
    save_file({"hidden_states": ("bfloat16", hs), "token_ids": ("int64", np.asarray(token_ids, dtype=np.int64))}, str(path))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest_lines(output: Path, shard: int) -> list[dict[str, Any]]:
    path = output / f"shard-{shard}" / "manifest.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.endswith("}")]


def failed_lines(output: Path, shard: int) -> list[dict[str, Any]]:
    path = output / f"shard-{shard}" / "failed.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def check_output(output: Path, shards: int, expected: dict[str, list[int]], *, complete: bool = True) -> dict[str, dict[str, Any]]:
    """Every manifest line names a good file of the right tokens and hash, no id twice across shards, no
    orphan or temporary file, an empty staging folder; with ``complete``, every expected id is there.
    Returns id -> manifest entry."""
    seen: dict[str, dict[str, Any]] = {}
    for shard in range(shards):
        folder = output / f"shard-{shard}"
        entries = manifest_lines(output, shard)
        raw = (folder / "manifest.jsonl").read_bytes() if (folder / "manifest.jsonl").exists() else b""
        assert raw == b"" or raw.endswith(b"\n"), f"shard {shard}: torn manifest"
        assert len(entries) == raw.count(b"\n"), f"shard {shard}: unreadable manifest lines"
        for entry in entries:
            assert set(entry) == {"id", "file", "tokens", "bytes", "sha256"}
            assert entry["id"] not in seen, f"{entry['id']} is in the manifests twice"
            seen[entry["id"]] = entry
            path = folder / entry["file"]
            data = path.read_bytes()
            assert len(data) == entry["bytes"]
            assert hashlib.sha256(data).hexdigest() == entry["sha256"], f"{entry['id']}: sha256 differs"
            with safe_open(str(path), framework="numpy") as st:
                assert sorted(st.keys()) == ["hidden_states", "token_ids"]
                hs = st.get_slice("hidden_states")
                assert hs.get_dtype() == "BF16"
                assert hs.get_shape() == [entry["tokens"], 4, HIDDEN]
                assert st.get_tensor("token_ids").tolist() == expected[entry["id"]]
            assert entry["tokens"] == len(expected[entry["id"]])
        files = {p.name for p in folder.iterdir() if p.name.endswith(".safetensors")}
        assert files == {e["file"] for e in entries}, f"shard {shard}: orphan or missing files"
        assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")], f"shard {shard}: temporary files left"
        staging = output / ".staging" / f"shard-{shard}"
        assert not staging.exists() or not list(staging.iterdir()), f"shard {shard}: staging not empty"
    if complete:
        assert set(seen) == set(expected), f"missing: {sorted(set(expected) - set(seen))[:5]}"
    return seen


# ---------------------------------------------------------------------------------------------------------
# Crash loop: the driver killed (SIGKILL) over and over at chosen system calls, without paying its start-up
# each time. `python -m tests.hidden_states_support crash-loop SCHEDULE RUNS_DIR -- DRIVER ARGS` imports the
# driver once, then forks one child per schedule entry (the parent has no thread, so forking is safe):
#   {"op": "write"|"fsync"|"rename"|"replace", "when": "before"|"after"|"half", "n": N, "exdev": bool, "file": NAME}
#       the child SIGKILLs itself at its N-th call of files.DISK.<op> ("half": writes half the bytes first);
#       with "file", only calls on that file name count (the written file's, or the rename's target);
#       with "exdev", vLLM's staging folder behaves as if on another filesystem (the move is a copy);
#   {"delay": S}   the parent SIGKILLs the child S seconds after the fork.
# After each child ends, its exit status and a copy of the manifest as the kill left it are written to
# RUNS_DIR/<i>.json and RUNS_DIR/<i>.manifest (the child's log: RUNS_DIR/<i>.log).

KILL_OPS = ("write", "fsync", "rename", "replace")


def _arm(op: str, when: str, n: int, file: str | None = None) -> None:
    import threading

    from pooling_operator.hidden_states import files

    real = getattr(files.DISK, op)
    lock = threading.Lock()
    calls = 0

    def named(args: tuple[Any, ...]) -> str:
        if op in ("write", "fsync"):
            return os.path.basename(os.readlink(f"/proc/self/fd/{args[0]}"))
        return os.path.basename(str(args[1]))

    def hooked(*args: Any) -> Any:
        nonlocal calls
        if file is not None and named(args) != file:
            return real(*args)
        with lock:
            calls += 1
            hit = calls == n
        if hit and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        if hit and when == "half":
            fd, data = args
            cut = max(1, len(data) // 2)
            if data[cut - 1 : cut] == b"\n" and cut > 1:  # half of two equal lines: still tear one
                cut -= 1
            os.write(fd, bytes(data[:cut]))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            return real(*args)
        finally:  # "after" also when the call failed (a rename across filesystems does, by design)
            if hit:
                os.kill(os.getpid(), signal.SIGKILL)

    setattr(files.DISK, op, hooked)


def _exdev() -> None:
    """vLLM's staging folder as if on another filesystem: the move becomes a copy and a rename."""
    import errno

    from pooling_operator.hidden_states import files

    real = files.Disk.rename

    def rename(source: Any, target: Any) -> None:
        if "/.staging/" in str(source):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        real(source, target)

    files.DISK.rename = rename  # type: ignore[method-assign]


def crash_loop(schedule: list[dict[str, Any]], runs: Path, driver_args: list[str]) -> None:
    import shutil
    import time

    from pooling_operator.hidden_states import cli, driver, pooling_cli, pooling_driver  # noqa: F401 (imported once, before the forks)

    main = pooling_cli.main if driver_args[:1] == ["pooling-job"] else cli.main

    output = Path(driver_args[driver_args.index("--output") + 1])
    shard = int(driver_args[driver_args.index("--shard") + 1])
    manifest = output / f"shard-{shard}" / "manifest.jsonl"
    runs.mkdir(parents=True, exist_ok=True)
    for i, step in enumerate(schedule):
        pid = os.fork()
        if pid == 0:  # the child: one driver run
            code = 70
            try:
                log_fd = os.open(runs / f"{i}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                if step.get("exdev"):
                    _exdev()
                if "op" in step:
                    _arm(step["op"], step["when"], int(step["n"]), step.get("file"))
                code = main(driver_args)
            finally:
                os._exit(code)
        deadline = time.monotonic() + float(step.get("delay", 60))
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.002)
        signalled = os.WIFSIGNALED(status)
        result = {"step": step, "killed": signalled and os.WTERMSIG(status) == signal.SIGKILL,
                  "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None}
        if manifest.exists():
            shutil.copyfile(manifest, runs / f"{i}.manifest")
        (runs / f"{i}.json").write_text(json.dumps(result))


def run_crash_loop(schedule: list[dict[str, Any]], runs: Path, driver_args: list[str], timeout: float = 120) -> list[dict[str, Any]]:
    """The crash loop in a fresh process; one result per schedule entry (with ``manifest``: the bytes the kill left)."""
    cmd = [sys.executable, "-m", "tests.hidden_states_support", "crash-loop", json.dumps(schedule), str(runs), "--",
           *driver_args]
    done = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    results = []
    for i in range(len(schedule)):
        result = json.loads((runs / f"{i}.json").read_text())
        path = runs / f"{i}.manifest"
        result["manifest"] = path.read_bytes() if path.exists() else b""
        results.append(result)
    return results


# ---------------------------------------------------------------------------------------------------------
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

        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_get("/version", version)
        app.router.add_post("/v1/embeddings", pool)
        app.router.add_post("/pooling", pool)
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


if __name__ == "__main__":
    if sys.argv[1:2] != ["crash-loop"] or sys.argv[4:5] != ["--"]:
        raise SystemExit("usage: python -m tests.hidden_states_support crash-loop SCHEDULE RUNS_DIR -- DRIVER ARGS")
    crash_loop(json.loads(sys.argv[2]), Path(sys.argv[3]), sys.argv[5:])
