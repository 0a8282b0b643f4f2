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


# ---------------------------------------------------------------------------------------------------------
# Crash loop: the driver killed (SIGKILL) over and over at chosen system calls, without paying its start-up
# each time. `python -m tests.hidden_states_support crash-loop SCHEDULE RUNS_DIR -- DRIVER ARGS` imports the
# driver once, then forks one child per schedule entry (the parent has no thread, so forking is safe):
#   {"op": "write"|"fsync"|"rename"|"replace", "when": "before"|"after"|"half", "n": N, "exdev": bool}
#       the child SIGKILLs itself at its N-th call of files.DISK.<op> ("half": writes half the bytes first);
#       with "exdev", vLLM's staging folder behaves as if on another filesystem (the move is a copy);
#   {"delay": S}   the parent SIGKILLs the child S seconds after the fork.
# After each child ends, its exit status and a copy of the manifest as the kill left it are written to
# RUNS_DIR/<i>.json and RUNS_DIR/<i>.manifest (the child's log: RUNS_DIR/<i>.log).

KILL_OPS = ("write", "fsync", "rename", "replace")


def _arm(op: str, when: str, n: int) -> None:
    import threading

    from pooling_operator.hidden_states import files

    real = getattr(files.DISK, op)
    lock = threading.Lock()
    calls = 0

    def hooked(*args: Any) -> Any:
        nonlocal calls
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

    from pooling_operator.hidden_states import cli, driver  # noqa: F401 (imported once, before the forks)

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
                    _arm(step["op"], step["when"], int(step["n"]))
                code = cli.main(driver_args)
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


if __name__ == "__main__":
    if sys.argv[1:2] != ["crash-loop"] or sys.argv[4:5] != ["--"]:
        raise SystemExit("usage: python -m tests.hidden_states_support crash-loop SCHEDULE RUNS_DIR -- DRIVER ARGS")
    crash_loop(json.loads(sys.argv[2]), Path(sys.argv[3]), sys.argv[5:])
