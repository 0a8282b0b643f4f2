"""The crash loop: the hidden-state or PoolingJob driver killed (SIGKILL) over and over at chosen system
calls, without paying its start-up each time (``run_crash_loop`` from a test; this module is also the
process it starts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.hidden_states_support import ROOT, env

# Crash loop: the driver killed (SIGKILL) over and over at chosen system calls, without paying its start-up
# each time. `python -m tests.crash_loop_support crash-loop SCHEDULE RUNS_DIR -- DRIVER ARGS` imports the
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

    from pooling_operator.pods.shard import files

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

    from pooling_operator.pods.shard import files

    real = files.Disk.rename

    def rename(source: Any, target: Any) -> None:
        if "/.staging/" in str(source):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        real(source, target)

    files.DISK.rename = rename  # type: ignore[method-assign]


def crash_loop(schedule: list[dict[str, Any]], runs: Path, driver_args: list[str]) -> None:
    import shutil
    import time

    from pooling_operator.pods.hidden_states import cli, driver  # noqa: F401 (imported once, before the forks)
    from pooling_operator.pods.vectors import cli as pooling_cli
    from pooling_operator.pods.vectors import driver as pooling_driver  # noqa: F401

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
    cmd = [sys.executable, "-m", "tests.crash_loop_support", "crash-loop", json.dumps(schedule), str(runs), "--",
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
        raise SystemExit("usage: python -m tests.crash_loop_support crash-loop SCHEDULE RUNS_DIR -- DRIVER ARGS")
    crash_loop(json.loads(sys.argv[2]), Path(sys.argv[3]), sys.argv[5:])
