"""The driver ↔ operator contract (api/shard_contract.py), end to end in-process.

What the driver's own code writes (its manifest writer and failed log into a temporary output folder, its
progress reporter into a ConfigMap's data) is what status/jobs.py reads back into a HiddenStateJob's status;
every state the contract defines is handled by status or deliberately ignored; the Job ends at once on
exactly the exit codes of the states status names a reason for. No cluster, no network.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pooling_operator.api import shard_contract as hs
from pooling_operator.builders import BuildContext, build
from pooling_operator.pods.hidden_states.driver import Config, Driver
from pooling_operator.pods.shard.manifest import (
    Entry,
    FailedLog,
    ManifestWriter,
    ShardPaths,
    file_name,
    resume,
)
from pooling_operator.pods.shard.progress import Counts, Reporter
from pooling_operator.status import conditions as C
from pooling_operator.status.jobs import FAILURE_REASONS, IGNORED_STATES, job_status
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.validate import validate
from tests.factories import hidden_states

SHARDS = 4  # the factory's


def resource() -> Any:
    result = validate(hidden_states())
    assert result.ok, result.errors
    result.resource.metadata.generation = 2
    return result.resource


def configmap_sink(data: dict[str, str]) -> Any:
    """The ConfigMap as the driver's merge patch of one key leaves it."""

    async def sink(key: str, value: str) -> None:
        data[key] = value

    return sink


async def write_shard(output: Path, shard: int, samples: int, failures: int, state: str, data: dict[str, str]) -> None:
    """One shard as the driver leaves it: files renamed into place and their manifest lines, failed samples in
    failed.jsonl, then (after resume reads the folder back, as a restart does) the final progress report."""
    paths = ShardPaths(output, shard)
    paths.folder.mkdir(parents=True)
    with ThreadPoolExecutor(max_workers=2) as executor:
        manifest = ManifestWriter(paths.manifest, executor)
        for i in range(samples):
            sample_id = f"s{shard}/{i}"  # "/" is not safe in a file name: the manifest keeps the id
            body = bytes([shard, i]) * (100 + 37 * i + shard)
            name = file_name(sample_id)
            (paths.folder / name).write_bytes(body)
            await manifest.append(Entry(sample_id, name, 10 + i, len(body), hashlib.sha256(body).hexdigest()))
        manifest.close()
    failed = FailedLog(paths.failed)
    for i in range(failures):
        failed.add(f"bad{shard}/{i}", 1000 + i, "gave up after 4 attempts: HTTP 500")
    failed.close()
    resumed = resume(paths)
    counts = Counts(total=samples + failures, done=len(resumed.entries), failed=failed.count, bytes=resumed.bytes)
    await Reporter(shard, configmap_sink(data), counts).final(state)


def on_disk(output: Path, manifest: str) -> list[dict[str, Any]]:
    lines = (output / manifest).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def by_type(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def failed_job() -> dict[str, Any]:
    return {"status": {"failed": 1, "failedIndexes": "0", "succeeded": SHARDS - 1,
                       "conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}]}}


def test_what_the_driver_writes_is_what_status_reads(tmp_path: Path) -> None:
    output = tmp_path / "out"
    data: dict[str, str] = {}
    shape = {0: (5, 1), 1: (3, 0), 2: (0, 2), 3: (7, 3)}  # shard -> (finished, failed samples)
    for shard, (samples, failures) in shape.items():
        asyncio.run(write_shard(output, shard, samples, failures, hs.SUCCEEDED, data))
    assert sorted(data) == sorted(hs.progress_key(i) for i in shape)
    for value in data.values():
        assert tuple(json.loads(value)) == hs.PROGRESS_FIELDS

    done = {"status": {"succeeded": SHARDS, "conditions": [{"type": "Complete", "status": "True"}]}}
    status = job_status(resource(), done, {"data": data})

    manifests = status["output"]["manifests"]
    assert manifests == [hs.manifest_path(i) for i in sorted(shape)]
    lines = [line for m in manifests for line in on_disk(output, m)]
    failed = [json.loads(line) for i in shape for line in (output / hs.shard_folder(i) / hs.FAILED_LOG).read_text().splitlines()]
    assert all(tuple(line) == hs.MANIFEST_FIELDS for line in lines)
    assert all(tuple(line) == hs.FAILED_FIELDS for line in failed)
    assert status["samples"] == {"done": len(lines), "failed": len(failed)} == {"done": 15, "failed": 6}
    files = [p for i in shape for p in (output / hs.shard_folder(i)).glob(f"*{hs.SAMPLE_SUFFIX}")]
    assert status["bytesWritten"] == sum(line["bytes"] for line in lines) == sum(p.stat().st_size for p in files)
    assert by_type(status)["Succeeded"] == ("True", C.ALL_SHARDS_SUCCEEDED)


@pytest.mark.parametrize("state", hs.STATES)
def test_each_state_a_shard_reports_gives_the_failed_job_its_reason(tmp_path: Path, state: str) -> None:
    data: dict[str, str] = {}
    asyncio.run(write_shard(tmp_path / "out", 0, 2, 1, state, data))
    asyncio.run(write_shard(tmp_path / "out", 1, 4, 0, hs.SUCCEEDED, data))
    status = job_status(resource(), failed_job(), {"data": data})
    expected = {hs.BUDGET_EXCEEDED: C.STORAGE_BUDGET_EXCEEDED, hs.DATASET_UNREADABLE: C.DATASET_UNREADABLE,
                hs.OUTPUT_FULL: C.OUTPUT_VOLUME_FULL, hs.SPACE_DRIFT: C.SPACE_DRIFT_FAILED}
    assert by_type(status)["Failed"] == ("True", expected.get(state, C.SHARD_FAILED))
    assert status["samples"] == {"done": 6, "failed": 1}


def test_the_real_driver_reports_an_unreadable_dataset_as_status_reads_it(tmp_path: Path) -> None:
    data: dict[str, str] = {}
    config = Config(shard=2, shards=SHARDS, dataset=tmp_path / "missing.jsonl", output=tmp_path / "out",
                    endpoint="http://127.0.0.1:9", model="m", layers=(1,), dtype_bytes=2)
    code = asyncio.run(Driver(config, configmap_sink(data)).run())  # fails before it would talk to anything
    assert code == hs.JOB_ENDING_EXIT_CODES[hs.DATASET_UNREADABLE]
    assert list(data) == [hs.progress_key(2)]
    status = job_status(resource(), failed_job(), {"data": data})
    assert by_type(status)["Failed"] == ("True", C.DATASET_UNREADABLE)


def test_status_handles_or_deliberately_ignores_every_state() -> None:
    handled = set(FAILURE_REASONS)
    assert handled | IGNORED_STATES == set(hs.STATES), "a state status neither maps to a reason nor ignores"
    assert not handled & IGNORED_STATES
    assert len(set(hs.STATES)) == len(hs.STATES) and set(hs.FAILURE_STATES) <= set(hs.STATES)
    # The states that end the Job at once are exactly those status names a reason for.
    assert list(hs.JOB_ENDING_EXIT_CODES) == list(FAILURE_REASONS)
    reasons = {v for k, v in vars(C).items() if k.isupper() and isinstance(v, str)}
    assert set(FAILURE_REASONS.values()) <= reasons


def test_the_job_ends_at_once_on_exactly_the_job_ending_exit_codes() -> None:
    objects = build(resource(), contract("0.33"), BuildContext())
    job = next(o for o in objects if o["kind"] == "Job")
    rule = next(r for r in job["spec"]["podFailurePolicy"]["rules"] if r["action"] == "FailJob")
    assert rule["onExitCodes"]["values"] == list(hs.JOB_ENDING_EXIT_CODES.values())
    codes = [hs.EXIT_OK, hs.EXIT_FAILED, hs.EXIT_USAGE, hs.EXIT_BUDGET_EXCEEDED, hs.EXIT_DATASET_UNREADABLE,
             hs.EXIT_OUTPUT_FULL]
    assert len(set(codes)) == len(codes) and hs.EXIT_OK == 0
    assert hs.EXIT_FAILED not in rule["onExitCodes"]["values"]  # a shard that failed is retried


def test_the_driver_records_carry_exactly_the_contract_fields(tmp_path: Path) -> None:
    assert tuple(f.name for f in dataclasses.fields(Entry)) == hs.MANIFEST_FIELDS
    paths = ShardPaths(tmp_path, 7)
    assert paths.folder == tmp_path / hs.shard_folder(7)
    assert paths.manifest == tmp_path / hs.manifest_path(7)
    assert (paths.failed.name, paths.success.name) == (hs.FAILED_LOG, hs.SUCCESS_MARKER)
    assert [hs.progress_shard(k) for k in (hs.progress_key(12), "shard-x", "other-1")] == [12, None, None]
