"""Resume of the PoolingJob driver: whatever a crash left (a part file with no lines, torn lines, temporary
files, a part file lost or cut short by the volume) the next run loses nothing and duplicates nothing; then
the real thing: the driver SIGKILLed at its own system calls (files.DISK), again and again, in a fresh
process each time, and a last run that finishes the shard exactly.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from pooling_operator.api import pooling_job_contract as pj
from pooling_operator.api import shard_contract as hs
from pooling_operator.pods.shard.manifest import ShardPaths
from pooling_operator.pods.vectors.driver import PoolingConfig, PoolingDriver
from pooling_operator.pods.vectors.parts import parse_vector_entry, resume_vectors
from tests.crash_loop_support import run_crash_loop
from tests.hidden_states_support import manifest_lines, run_driver
from tests.pooling_support import (
    POOLING_MODEL,
    FakePooling,
    check_vectors,
    fake_pooling,
    pooling_argv,
    write_pooling_dataset,
)

pytestmark = pytest.mark.integration  # each test serves the fake over loopback


def config(dataset: Path, output: Path, url: str, **overrides: Any) -> PoolingConfig:
    return PoolingConfig(**{"shard": 0, "shards": 1, "dataset": dataset, "output": output, "endpoint": url,
                            "model": POOLING_MODEL, "task": "embed", "batch_size": 3, "dtype": "float32",
                            "concurrency": 2, "retry_base_seconds": 0.01, "progress_interval": 0.05,
                            **overrides})  # fmt: skip


def run(cfg: PoolingConfig) -> int:
    return asyncio.run(PoolingDriver(cfg).run())


def asked(fake: FakePooling, since: int = 0) -> list[Any]:
    """Every input the fake was asked for since request ``since``, in order."""
    return [x for _, body in fake.requests[since:] for x in body["input"]]


def finished(tmp_path: Path, n: int = 20, every_tokens: int = 4, **overrides: Any) -> tuple[Path, Path, dict[str, Any]]:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, n, every_tokens=every_tokens)
    with fake_pooling(FakePooling(**overrides)) as url:
        assert run(config(dataset, output, url, task=overrides.get("task", "embed"))) == 0
    return dataset, output, expected


def manifest(output: Path) -> Path:
    return output / "shard-0" / hs.MANIFEST


def rerun(dataset: Path, output: Path, **overrides: Any) -> FakePooling:
    fake = FakePooling(task=overrides.get("task", "embed"))
    with fake_pooling(fake) as url:
        assert run(config(dataset, output, url, **overrides)) == hs.EXIT_OK
    return fake


def test_a_part_renamed_before_its_lines_is_removed_and_its_inputs_redone(tmp_path: Path) -> None:
    dataset, output, expected = finished(tmp_path)
    lines = manifest(output).read_bytes().splitlines(keepends=True)
    last = json.loads(lines[-1])["file"]
    kept = [line for line in lines if json.loads(line)["file"] != last]
    lost = [json.loads(line)["id"] for line in lines if json.loads(line)["file"] == last]
    manifest(output).write_bytes(b"".join(kept))  # the crash came between the rename and the append
    fake = rerun(dataset, output)
    assert asked(fake) == [expected[i] for i in lost]
    seen = check_vectors(output, 1, expected)
    assert {seen[i]["file"] for i in lost} != {last}, "the redone inputs went to a new part"
    assert not (output / "shard-0" / last).exists()


def test_a_torn_last_line_is_cut_and_its_input_redone_into_a_new_part(tmp_path: Path) -> None:
    dataset, output, expected = finished(tmp_path, every_tokens=0)  # every part has 2 or 3 inputs
    data = manifest(output).read_bytes()
    torn = json.loads(data.splitlines()[-1])
    manifest(output).write_bytes(data[: len(data) - 9])  # a kill half way through the append
    fake = rerun(dataset, output)
    assert asked(fake) == [expected[torn["id"]]]
    seen = check_vectors(output, 1, expected, whole_parts=False)  # the torn line's rows stay in its old part
    assert seen[torn["id"]]["file"] != torn["file"] and (output / "shard-0" / torn["file"]).exists()
    assert manifest(output).read_bytes().startswith(data[: data.rfind(b"\n", 0, len(data) - 1) + 1])


def test_temporary_files_are_removed_and_new_parts_number_above_every_seen(tmp_path: Path) -> None:
    dataset, output, expected = finished(tmp_path)
    folder = output / "shard-0"
    (folder / "part-000042.safetensors.tmp").write_bytes(b"half a part")
    (folder / "manifest.jsonl.tmp").write_bytes(b"half a manifest")
    (folder / "part-000040.safetensors").write_bytes(b"an orphan")
    lines = manifest(output).read_bytes().splitlines(keepends=True)
    manifest(output).write_bytes(b"".join(lines[:-1]))  # so that the next run has an input to redo
    alone = sum(json.loads(line)["file"] == json.loads(lines[-1])["file"] for line in lines) == 1
    copy = tmp_path / "copy"
    shutil.copytree(output, copy)
    resumed = resume_vectors(ShardPaths(copy, 0), "F32")
    assert resumed.next_part == 43 and resumed.leftovers == 2 and resumed.orphans == 1 + alone
    # _SUCCESS goes too: the shard is not done until this run says so
    assert sorted(p.name for p in (copy / "shard-0").iterdir() if not p.name.startswith("part-")) == [
        "failed.jsonl", "manifest.jsonl", "run.json"]
    fake = rerun(dataset, output)
    assert asked(fake) == [expected[json.loads(lines[-1])["id"]]]
    check_vectors(output, 1, expected, whole_parts=False)
    assert json.loads(manifest(output).read_bytes().splitlines()[-1])["file"] == pj.part_name(43)


def test_lines_whose_part_is_lost_or_cut_short_are_dropped_and_redone(tmp_path: Path) -> None:
    dataset, output, expected = finished(tmp_path, 30)
    entries = manifest_lines(output, 0)
    parts = sorted({e["file"] for e in entries})
    gone, short = parts[1], parts[3]
    folder = output / "shard-0"
    (folder / gone).unlink()
    data = (folder / short).read_bytes()
    (folder / short).write_bytes(data[:-4])
    redo = [e["id"] for e in entries if e["file"] in (gone, short)]
    resumed = resume_vectors(ShardPaths(output, 0), "F32")
    assert resumed.missing == len(redo) and set(resumed.entries) == {e["id"] for e in entries} - set(redo)
    assert not (folder / short).exists(), "a part no kept line names is removed"
    # the manifest was rewritten without those lines, atomically
    assert [json.loads(line)["id"] for line in manifest(output).read_bytes().splitlines()] == [
        e["id"] for e in entries if e["id"] not in redo]
    fake = rerun(dataset, output)
    assert sorted(map(str, asked(fake))) == sorted(str(expected[i]) for i in redo)
    check_vectors(output, 1, expected)


def test_lines_naming_rows_past_their_parts_end_are_dropped(tmp_path: Path) -> None:
    dataset, output, expected = finished(tmp_path)
    lines = manifest(output).read_bytes().splitlines(keepends=True)
    doc = json.loads(lines[0])
    lines[0] = (json.dumps({**doc, "row": doc["row"] + 50}, separators=(",", ":")) + "\n").encode()
    manifest(output).write_bytes(b"".join(lines))
    fake = rerun(dataset, output)
    assert asked(fake) == [expected[doc["id"]]]
    check_vectors(output, 1, expected, whole_parts=False)


def test_a_run_asking_for_another_dtype_redoes_the_shard(tmp_path: Path) -> None:
    dataset, output, expected = finished(tmp_path)
    fake = rerun(dataset, output, dtype="float16")
    assert len(asked(fake)) == len(expected)
    check_vectors(output, 1, expected, dtype="float16")


def test_manifest_lines_are_parsed_strictly() -> None:
    good = {"id": "a", "file": "part-000001.safetensors", "row": 0, "rows": 1, "tokens": 0, "bytes": 9}
    assert parse_vector_entry(json.dumps(good).encode()) is not None
    for bad in [{"file": "../part-000001.safetensors"}, {"file": "x.safetensors"}, {"rows": 0}, {"row": -1},
                {"bytes": True}, {"id": 5}, {"tokens": 1.5}]:
        assert parse_vector_entry(json.dumps({**good, **bad}).encode()) is None, bad
    assert parse_vector_entry(b'{"id": "a"}') is None and parse_vector_entry(b"{torn") is None


# ---------------------------------------------------------------------------------------------------------
# Killed again and again at the driver's own system calls


def whole_lines(data: bytes) -> bytes:
    return data[: data.rfind(b"\n") + 1]


@pytest.mark.parametrize(("seed", "task"), [(3, "embed"), (5, "token_embed")])
def test_killed_at_every_kind_of_write_the_shard_still_ends_exact(tmp_path: Path, seed: int, task: str) -> None:
    """Each run is SIGKILLed at its n-th call of write (before, after, or half way through its bytes: a torn
    part or manifest line), fsync, rename or replace; small n so every run ends killed before the shard is
    done. A last run finishes it: every input once, each vector the fake's, nothing a kill left whole lost."""
    rng = random.Random(seed)
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 90)
    calls = [("write", "half", 6), ("write", "before", 6), ("write", "after", 6), ("fsync", "before", 8),
             ("fsync", "after", 8), ("rename", "before", 3), ("rename", "after", 3)]
    # Always: a manifest append torn half way (its first, then its second), and a kill right after a rename.
    schedule: list[dict[str, Any]] = [{"op": "write", "when": "half", "n": 1, "file": hs.MANIFEST},
                                      {"op": "write", "when": "half", "n": 2, "file": hs.MANIFEST},
                                      {"op": "rename", "when": "after", "n": 1}]  # fmt: skip
    for _ in range(9):
        op, when, most = rng.choice(calls)
        schedule.insert(rng.randint(0, len(schedule)), {"op": op, "when": when, "n": rng.randint(1, most)})
    schedule.append({"op": "replace", "when": "before", "n": 1})  # _SUCCESS (or a manifest rewrite)
    with fake_pooling(FakePooling(task=task)) as url:
        args = pooling_argv(dataset, output, url, task=task, batch=4)
        results = run_crash_loop(schedule, tmp_path / "runs", [*args, "--concurrency", "3"])
        final = run_driver(*args)
    summary = [(r["step"], "killed" if r["killed"] else f"exit {r['exit']}", r["manifest"].count(b"\n")) for r in results]
    assert sum(r["killed"] for r in results) >= len(schedule) - 1, summary
    assert final.returncode == 0, final.stderr[-3000:]
    check_vectors(output, 1, expected, task=task, whole_parts=False)
    final_manifest = manifest(output).read_bytes()
    for i, result in enumerate(results):
        assert final_manifest.startswith(whole_lines(result["manifest"])), f"run {i} ({result['step']}): {summary}"
    assert any(r["manifest"] != whole_lines(r["manifest"]) for r in results), f"no kill tore a line: {summary}"
    success = json.loads((output / "shard-0" / hs.SUCCESS_MARKER).read_text())
    assert success["done"] == success["total"] == 90
