"""Shared helpers for the driver tests: both drivers as processes (``env``, ``run_driver``, ``start_driver``,
the manifest and failed-list readers), and for the hidden-state driver its stand-in vLLM process, datasets,
and an independent check of the output folder (read back with the safetensors library, not with the driver's
own code). The PoolingJob driver's fake vLLM and its checks are in tests/pooling_support.py; the crash loop
(the driver SIGKILLed at chosen system calls) in tests/crash_loop_support.py."""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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
