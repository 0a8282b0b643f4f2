"""Faults of the hidden-state driver: killed over and over at any point, and an output volume that fills up.

Both against the vLLM stand-in on loopback (e2e/standin). Kills are SIGKILLs at chosen system calls of the
driver (files.DISK) or at random moments; a full volume is ENOSPC injected at one exact call through the
same seam, or a real tmpfs too small for the job (when this process may mount one). Every check of the
output reads it back independently (tests/hidden_states_support.check_output).
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import random
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pooling_operator.api import shard_contract as hs
from pooling_operator.pods.hidden_states.driver import Config, Driver
from pooling_operator.pods.shard import files
from pooling_operator.pods.shard.manifest import ShardPaths
from pooling_operator.status import conditions as C
from pooling_operator.status.jobs import job_status
from pooling_operator.vllm.validate import validate
from tests import factories
from tests.crash_loop_support import run_crash_loop
from tests.hidden_states_support import (
    HIDDEN,
    check_output,
    driver_argv,
    expected_sha256,
    manifest_lines,
    run_driver,
    standin,
    write_dataset,
)
from tests.unavailable import unavailable

pytestmark = pytest.mark.integration

# ---------------------------------------------------------------------------------------------------------
# Killed again and again


def whole_lines(manifest: bytes) -> bytes:
    """What a kill left of a manifest that the next run must keep: every byte up to the last newline."""
    return manifest[: manifest.rfind(b"\n") + 1]


def kill_schedule(rng: random.Random) -> list[dict[str, Any]]:
    """11 kills at the driver's own system calls, 3 at random moments, and one while writing _SUCCESS.
    Two of the 11 are always half way through a write: one in a manifest append (without ``exdev`` every
    write is one), one where a write may as well be the copy of a file into place.

    Call counts are small so each run ends killed long before the shard is done: the manifest append is
    one write (and one fsync) per group of lines; a sample is one fsync of vLLM's file and one rename.
    With ``exdev`` the staging folder behaves as if on another filesystem, so the move is a copy to a
    temporary file and a rename, and a kill at a write can fall in the middle of that copy.
    """
    calls = [("write", "half", 8), ("write", "before", 8), ("write", "after", 8), ("fsync", "before", 20),
             ("fsync", "after", 20), ("rename", "before", 12), ("rename", "after", 12)]
    steps: list[dict[str, Any]] = []
    for _ in range(9):
        op, when, most = rng.choice(calls)
        steps.append({"op": op, "when": when, "n": rng.randint(1, most), "exdev": rng.random() < 0.4})
    for exdev in (False, True):
        steps.insert(rng.randint(0, len(steps)), {"op": "write", "when": "half", "n": rng.randint(1, 8), "exdev": exdev})
    for _ in range(3):
        steps.insert(rng.randint(0, len(steps)), {"delay": round(rng.uniform(0.05, 0.4), 3)})
    return [*steps, {"op": "replace", "when": "before", "n": 1}]  # after the last sample: the _SUCCESS marker


@pytest.mark.integration  # starts a process
@pytest.mark.parametrize("seed", [13])
def test_killed_15_times_at_random_points_the_shard_still_ends_exact(tmp_path: Path, seed: int) -> None:
    started = time.monotonic()
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_dataset(dataset, 600)
    schedule = kill_schedule(random.Random(seed))
    with standin(output / ".staging" / "shard-0", "--delay-ms", "4") as server:
        args = driver_argv(dataset, output, server.url, 0, 1, "--concurrency", "4")
        results = run_crash_loop(schedule, tmp_path / "runs", args)
        final = run_driver(*args)
    summary = [(r["step"], "killed" if r["killed"] else f"exit {r['exit']}", r["manifest"].count(b"\n")) for r in results]
    assert sum(r["killed"] for r in results) >= 13, f"seed {seed}: too few kills: {summary}"
    assert final.returncode == 0, final.stderr[-2000:]
    seen = check_output(output, 1, expected)  # every sample once, no orphan, no temporary file, no torn line
    for sample_id, entry in seen.items():
        assert entry["sha256"] == expected_sha256(expected[sample_id], tmp_path), sample_id
    # Nothing a kill left whole is ever lost or redone: each run starts from the manifest the kill left and
    # only ever drops a torn last line, so every such manifest is a prefix of the final one.
    final_manifest = (output / "shard-0" / "manifest.jsonl").read_bytes()
    for i, result in enumerate(results):
        assert final_manifest.startswith(whole_lines(result["manifest"])), f"seed {seed}, run {i} ({result['step']})"
    last = whole_lines(results[-1]["manifest"]).count(b"\n")
    success = json.loads((output / "shard-0" / "_SUCCESS").read_text())
    assert success["done"] == success["total"] == 600 and success["resumed"] == last == 600
    assert any(r["manifest"] != whole_lines(r["manifest"]) for r in results), f"no kill tore a manifest line: {summary}"
    assert time.monotonic() - started < 30


# ---------------------------------------------------------------------------------------------------------
# A full output volume: ENOSPC at one exact call


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


class Full:
    """Makes ``files.DISK.<op>`` fail with ENOSPC from its n-th call that ``match``es on, as a volume that
    fills up and stays full; ``partial``: that n-th write still puts half its bytes down (a short write)
    and only the next call fails, as the kernel does. ``free()`` makes room again."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, op: str, match: Callable[..., bool], n: int = 1,
                 *, partial: bool = False) -> None:
        self.real = getattr(files.Disk, op)
        self.match, self.n, self.partial = match, n, partial
        self.calls = 0
        self.failures = 0
        self.full = False
        self.freed = False
        monkeypatch.setattr(files.DISK, op, self)

    def __call__(self, *args: Any) -> Any:
        if self.freed or not self.match(*args):
            return self.real(*args)
        self.calls += 1
        if self.full or (self.calls >= self.n and not self.partial):
            self.full = True
            self.failures += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if self.calls == self.n:  # partial
            self.full = True
            fd, data = args
            return self.real(fd, bytes(data[: max(1, len(data) // 2)]))
        return self.real(*args)

    def free(self) -> None:
        self.freed = True


def exdev_from_staging(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's staging folder on another filesystem: the move becomes a copy (a rename would fail with EXDEV)."""
    real = files.Disk.rename

    def rename(source: Any, target: Any) -> None:
        if f"/{hs.STAGING_FOLDER}/" in str(source):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        real(source, target)

    monkeypatch.setattr(files.DISK, "rename", rename)


def hsj_resource() -> Any:
    result = validate(factories.hidden_states())
    assert result.ok, result.errors
    result.resource.metadata.generation = 1
    return result.resource


FAILED_JOB = {"status": {"failed": 1, "failedIndexes": "0", "succeeded": 3,
                         "conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}]}}


@contextmanager
def driver_setup(tmp_path: Path, n: int, **overrides: Any) -> Iterator[tuple[Config, dict[str, list[int]], dict[str, str]]]:
    """A dataset of ``n`` samples, a stand-in, the driver's config and the ConfigMap data its sink writes."""
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_dataset(dataset, n)
    data: dict[str, str] = {}
    with standin(output / ".staging" / "shard-0") as s:
        config = Config(**{"shard": 0, "shards": 1, "dataset": dataset, "output": output, "endpoint": s.url,
                           "model": "standin", "layers": (3, 18, 33, 36), "dtype_bytes": 2, "hidden_size": HIDDEN,
                           "concurrency": 4, "retry_base_seconds": 0.01, "progress_interval": 0.05, **overrides})
        yield config, expected, data


def run(config: Config, data: dict[str, str]) -> int:
    async def sink(key: str, value: str) -> None:
        data[key] = value

    return asyncio.run(Driver(config, sink).run())


def assert_stopped_clean(output: Path, expected: dict[str, list[int]], data: dict[str, str]) -> dict[str, Any]:
    """After exit 5: the output is consistent (whole lines, each naming a good file; no orphan or temporary
    file; staging empty), not marked done, and the last report says output_full with the manifest's count."""
    seen = check_output(output, 1, expected, complete=False)
    assert not (output / "shard-0" / hs.SUCCESS_MARKER).exists()
    report = json.loads(data[hs.progress_key(0)])
    assert report[hs.PROGRESS_STATE] == hs.OUTPUT_FULL and report[hs.PROGRESS_DONE] == len(seen)
    assert report[hs.PROGRESS_BYTES] == sum(e["bytes"] for e in seen.values())
    return seen


def assert_resumes_exact(config: Config, expected: dict[str, list[int]], data: dict[str, str], before: bytes,
                         tmp_path: Path) -> None:
    assert run(config, data) == hs.EXIT_OK
    seen = check_output(config.output, 1, expected)
    assert all(seen[i]["sha256"] == expected_sha256(expected[i], tmp_path) for i in seen)
    assert (config.output / "shard-0" / "manifest.jsonl").read_bytes().startswith(before)
    assert json.loads(data[hs.progress_key(0)])[hs.PROGRESS_STATE] == hs.SUCCEEDED


def manifest_fd(fd: int, *_: Any) -> bool:
    return fd_path(fd).endswith("/" + hs.MANIFEST)


@pytest.mark.integration  # starts a process
@pytest.mark.parametrize("point", ["short write", "fsync"])
def test_a_full_volume_at_the_manifest_append_stops_with_exit_5_and_a_rerun_completes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    with driver_setup(tmp_path, 60) as (config, expected, data):
        if point == "short write":
            full = Full(monkeypatch, "write", manifest_fd, n=8, partial=True)
        else:
            full = Full(monkeypatch, "fsync", manifest_fd, n=8)
        assert run(config, data) == hs.EXIT_OUTPUT_FULL
        assert full.failures >= 1
        seen = assert_stopped_clean(config.output, expected, data)
        assert 7 <= len(seen) < 60  # at least the 7 appends before; the failed one (even half written) is gone
        status = job_status(hsj_resource(), FAILED_JOB, {"data": data})
        failed = next(c for c in status["conditions"] if c["type"] == C.FAILED)
        assert (failed["status"], failed["reason"]) == ("True", C.OUTPUT_VOLUME_FULL)
        assert "hidden-states" in failed["message"] and f"{len(seen)} finished samples kept" in failed["message"]
        before = (config.output / "shard-0" / "manifest.jsonl").read_bytes()
        full.free()
        assert_resumes_exact(config, expected, data, before, tmp_path)


@pytest.mark.integration  # starts a process
@pytest.mark.parametrize("move", ["rename", "copy"])
def test_a_full_volume_at_the_file_move_stops_with_exit_5_and_a_rerun_completes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, move: str
) -> None:
    with driver_setup(tmp_path, 60) as (config, expected, data):
        folder = str(ShardPaths(config.output, 0).folder)
        if move == "rename":
            full = Full(monkeypatch, "rename", lambda _source, target: str(target).startswith(folder), n=10)
        else:
            exdev_from_staging(monkeypatch)
            full = Full(monkeypatch, "write", lambda fd, _data: fd_path(fd).endswith(".tmp"), n=10, partial=True)
        assert run(config, data) == hs.EXIT_OUTPUT_FULL
        assert full.failures >= 1
        seen = assert_stopped_clean(config.output, expected, data)
        assert 9 <= len(seen) < 60
        before = (config.output / "shard-0" / "manifest.jsonl").read_bytes()
        full.free()
        assert_resumes_exact(config, expected, data, before, tmp_path)


@pytest.mark.integration  # starts a process
def test_a_full_volume_while_resuming_leaves_the_manifest_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with driver_setup(tmp_path, 30) as (config, expected, data):
        assert run(config, data) == hs.EXIT_OK
        manifest = config.output / "shard-0" / "manifest.jsonl"
        lines = manifest.read_bytes().splitlines(keepends=True)
        (config.output / "shard-0" / "_SUCCESS").unlink()
        manifest.write_bytes(b"".join([*lines[:10], b"{not json\n", *lines[10:]]))  # only a rewrite drops it
        damaged = manifest.read_bytes()
        full = Full(monkeypatch, "write", lambda fd, _data: fd_path(fd).endswith(".tmp"))
        assert run(config, data) == hs.EXIT_OUTPUT_FULL
        assert manifest.read_bytes() == damaged and not list(manifest.parent.glob("*.tmp"))
        assert json.loads(data[hs.progress_key(0)])[hs.PROGRESS_STATE] == hs.OUTPUT_FULL
        full.free()
        assert_resumes_exact(config, expected, data, b"".join(lines[:10]), tmp_path)


@pytest.mark.integration  # starts a process
def test_a_full_volume_when_writing_success_redoes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with driver_setup(tmp_path, 20) as (config, expected, data):
        full = Full(monkeypatch, "write", lambda fd, _data: fd_path(fd).endswith(hs.SUCCESS_MARKER + ".tmp"))
        assert run(config, data) == hs.EXIT_OUTPUT_FULL
        assert len(assert_stopped_clean(config.output, expected, data)) == 20
        before = (config.output / "shard-0" / "manifest.jsonl").read_bytes()
        full.free()
        assert_resumes_exact(config, expected, data, before, tmp_path)
    assert json.loads((config.output / "shard-0" / hs.SUCCESS_MARKER).read_text())["resumed"] == 20


# ---------------------------------------------------------------------------------------------------------
# A real full volume: a tmpfs of a few hundred KiB (needs the right to mount, as root in a container)


def mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {done.stderr.strip()}")


@pytest.mark.integration  # starts a process
@pytest.mark.parametrize("where", ["output", "shard folder"])
def test_a_real_tmpfs_filling_up_stops_the_shard_and_a_bigger_one_completes(tmp_path: Path, where: str) -> None:
    """``output``: vLLM's staging folder fills the volume too, so vLLM's own write comes back partial and the
    driver tells a full volume from a bad file by the free space. ``shard folder``: staging is elsewhere,
    so the move is a copy and the copy or the manifest append meets ENOSPC itself."""
    if os.geteuid() != 0:
        unavailable("mounting a tmpfs needs root")
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_dataset(dataset, 120)
    volume = output if where == "output" else output / "shard-0"
    mount_tmpfs(volume, "192k")
    try:
        with standin(output / ".staging" / "shard-0") as s:
            args = driver_argv(dataset, output, s.url, 0, 1, "--concurrency", "4", "--max-attempts", "2")
            first = run_driver(*args)
            assert first.returncode == hs.EXIT_OUTPUT_FULL, first.stderr[-3000:]
            assert "output volume" in first.stderr and "is full" in first.stderr
            seen = check_output(output, 1, expected, complete=False)
            assert 0 < len(seen) < 120
            assert not (output / "shard-0" / hs.SUCCESS_MARKER).exists()
            before = (output / "shard-0" / "manifest.jsonl").read_bytes()
            subprocess.run(["mount", "-o", "remount,size=16m", str(volume)], check=True)
            second = run_driver(*args)
        assert second.returncode == 0, second.stderr[-3000:]
        final = check_output(output, 1, expected)
        assert (output / "shard-0" / "manifest.jsonl").read_bytes().startswith(before)
        assert all(final[i]["sha256"] == expected_sha256(expected[i], tmp_path) for i in final)
        assert manifest_lines(output, 0)[: len(seen)] == list(seen.values())
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=False)


@pytest.mark.parametrize("name", ["run.json", hs.SUCCESS_MARKER])
def test_a_record_write_that_meets_a_full_volume_leaves_no_temporary_file(tmp_path: Path, name: str) -> None:
    """The run record is rewritten in the driver's ``finally`` after the volume filled; its temporary file must
    go with the failure, as every other atomic write's does (the tmpfs case saw ``run.json.tmp`` left when
    the last sample in flight took the last bytes). /dev/full answers every write with ENOSPC."""
    from pooling_operator.pods.shard.files import write_json_atomically
    from pooling_operator.pods.shard.record import RunRecord, write_record

    target = tmp_path / name
    (tmp_path / f"{name}.tmp").symlink_to("/dev/full")  # the temporary name's bytes land on a full device
    with pytest.raises(OSError) as raised:
        if name == "run.json":
            write_record(target, RunRecord(shard=0, shards=1, layers=(0,), run_info={}), "test")
        else:
            write_json_atomically(target, {"ok": True})
    assert files.out_of_space(raised.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
