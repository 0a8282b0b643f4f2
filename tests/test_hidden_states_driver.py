"""The hidden-state Job driver: pure pieces, then real driver processes against the vLLM stand-in on loopback.

The stand-in (e2e/standin, test support) writes files as vLLM's hidden-states connector does, because real
vLLM cannot on a CPU. Every wait polls with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e2e.standin import tokenize
from e2e.standin.server import hidden_states, save_file
from pooling_operator.api.shard_contract import EXIT_BUDGET_EXCEEDED, EXIT_DATASET_UNREADABLE
from pooling_operator.k8s.progress import ProgressConfigMap, pod_namespace, progress_configmap
from pooling_operator.pods.hidden_states.cli import main
from pooling_operator.pods.hidden_states.driver import Config, Driver
from pooling_operator.pods.hidden_states.files import Expectation, inspect_file
from pooling_operator.pods.shard import budget as budget_mod
from pooling_operator.pods.shard.budget import Budget, estimate_file_bytes
from pooling_operator.pods.shard.dataset import BadLine, Sample, owns, parse_line, read_shard
from pooling_operator.pods.shard.manifest import Entry, ShardPaths, file_name, resume
from pooling_operator.pods.shard.progress import Counts, Reporter
from pooling_operator.pods.shard.tensors import InvalidFile, header_length, parse_header
from tests.hidden_states_support import (
    HIDDEN,
    check_output,
    driver_argv,
    failed_lines,
    manifest_lines,
    run_driver,
    standin,
    start_driver,
    start_standin,
    write_dataset,
)

# ---------------------------------------------------------------------------------------------------------
# Pure pieces


@given(n=st.integers(0, 300), shards=st.integers(1, 9))
def test_every_line_belongs_to_exactly_one_shard(n: int, shards: int) -> None:
    for index in range(n):
        assert sum(owns(index, shard, shards) for shard in range(shards)) == 1


def test_read_shard_assigns_lines_by_index_and_numbers_them_from_one(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"id": f"x{i}", "prompt": "a b"}) + "\n" for i in range(10)))
    shards = [read_shard(path, shard, 3) for shard in range(3)]
    assert [[s.line for s in shard.samples] for shard in shards] == [[1, 4, 7, 10], [2, 5, 8], [3, 6, 9]]
    assert sorted(s.id for shard in shards for s in shard.samples) == sorted(f"x{i}" for i in range(10))


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"prompt": "a"}', "id must be"),
        (b'{"id": "", "prompt": "a"}', "id must be"),
        (b'{"id": true, "prompt": "a"}', "id must be"),
        (b'{"id": "a"}', "exactly one of"),
        (b'{"id": "a", "prompt": "x", "token_ids": [1]}', "exactly one of"),
        (b'{"id": "a", "prompt": ""}', "non-empty string"),
        (b'{"id": "a", "token_ids": []}', "non-negative integers"),
        (b'{"id": "a", "token_ids": [1, -2]}', "non-negative integers"),
        (b'{"id": "a", "token_ids": [1, true]}', "non-negative integers"),
        (b'{"id": "a", "prompt": "\xff"}', "not UTF-8"),
    ],
)
def test_malformed_lines_are_bad_lines_with_a_reason(raw: bytes, reason: str) -> None:
    parsed = parse_line(raw, 7)
    assert isinstance(parsed, BadLine) and parsed.line == 7 and reason in parsed.reason


def test_good_and_blank_lines() -> None:
    assert parse_line(b'{"id": 5, "token_ids": [1, 2]}', 1) == Sample("5", 1, token_ids=(1, 2))
    assert parse_line(b'{"id": "a", "prompt": "hi"}', 2) == Sample("a", 2, prompt="hi")
    assert parse_line(b"   ", 3) is None


def test_a_repeated_id_belongs_to_its_first_line_on_every_shard(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n'
                    '{"id": "a", "prompt": "z"}\n')
    zero, one = read_shard(path, 0, 2), read_shard(path, 1, 2)
    assert [s.id for s in zero.samples] == ["a"] and [s.id for s in one.samples] == ["b"]
    assert [(b.line, b.reason) for b in zero.bad] == [(3, "duplicate id, first at line 1")]
    assert [(b.line, b.reason) for b in one.bad] == [(4, "duplicate id, first at line 1")]


@given(st.lists(st.text(min_size=1, max_size=300), min_size=1, max_size=30, unique=True))
def test_file_names_are_safe_and_distinct(ids: list[str]) -> None:
    names = [file_name(i) for i in ids]
    assert len(set(names)) == len(names)
    for name in names:
        assert re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*\.safetensors", name)
        assert len(name.encode()) < 200


def test_plain_ids_keep_their_name() -> None:
    assert file_name("sample-17_a.b") == "sample-17_a.b.safetensors"
    assert file_name("a/b") != file_name("a_b") and file_name("a/b").startswith("a_b-")
    assert not file_name("..").startswith(".")


def _stand_in_file(path: Path, tokens: int, layers: int = 4, hidden: int = HIDDEN, dtype: str = "bfloat16") -> list[int]:
    ids = list(range(1, tokens + 1))
    hs = hidden_states(ids, layers, hidden, dtype)
    save_file({"hidden_states": (dtype, hs), "token_ids": ("int64", np.asarray(ids, dtype=np.int64))}, str(path))
    return ids


@settings(max_examples=30)
@given(tokens=st.integers(1, 300), layers=st.integers(1, 8), hidden=st.sampled_from([8, 64, 4096]),
       dtype=st.sampled_from(["bfloat16", "float16", "float32"]))
def test_the_size_estimate_bounds_the_real_file(tmp_path_factory: pytest.TempPathFactory, tokens: int, layers: int,
                                                hidden: int, dtype: str) -> None:
    path = tmp_path_factory.mktemp("est") / "f.safetensors"
    _stand_in_file(path, tokens, layers, hidden, dtype)
    size = path.stat().st_size
    estimate = estimate_file_bytes(tokens, layers, hidden, 4 if dtype == "float32" else 2)
    assert size <= estimate <= size + budget_mod.HEADER_ALLOWANCE


def test_size_estimate_formula() -> None:
    assert estimate_file_bytes(100, 4, 4096, 2) == 100 * 4 * 4096 * 2 + 100 * 8 + budget_mod.HEADER_ALLOWANCE


def test_a_good_file_passes_with_its_facts(tmp_path: Path) -> None:
    path = tmp_path / "f.safetensors"
    ids = _stand_in_file(path, 12)
    facts = inspect_file(str(path), Expectation(layers=4, dtype_bytes=2, hidden_size=HIDDEN, tokens=12, token_ids=ids))
    assert (facts.tokens, facts.bytes, facts.dtype, facts.hidden_size) == (12, path.stat().st_size, "BF16", HIDDEN)


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        (Expectation(layers=5, dtype_bytes=2), "4 layers, expected 5"),
        (Expectation(layers=4, dtype_bytes=4), "expected a 4-byte float"),
        (Expectation(layers=4, dtype_bytes=2, hidden_size=128), "hidden size 64, expected 128"),
        (Expectation(layers=4, dtype_bytes=2, tokens=11), "12 tokens, the prompt has 11"),
        (Expectation(layers=4, dtype_bytes=2, token_ids=list(range(2, 14))), "differ from the prompt"),
    ],
)
def test_a_file_that_does_not_match_the_request_is_a_permanent_failure(tmp_path: Path, expect: Expectation,
                                                                       message: str) -> None:
    path = tmp_path / "f.safetensors"
    _stand_in_file(path, 12)
    with pytest.raises(InvalidFile, match=message) as info:
        inspect_file(str(path), expect)
    assert not info.value.retryable


@pytest.mark.thorough
def test_every_truncation_is_caught_and_retryable(tmp_path: Path) -> None:
    path = tmp_path / "f.safetensors"
    _stand_in_file(path, 5)
    whole = path.read_bytes()
    for cut in range(len(whole)):
        path.write_bytes(whole[:cut])
        with pytest.raises(InvalidFile) as info:
            inspect_file(str(path), Expectation(layers=4, dtype_bytes=2))
        assert info.value.retryable, cut


def test_an_extra_tensor_or_wrong_token_dtype_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "f.safetensors"
    hs = hidden_states([1, 2], 4, HIDDEN, "bfloat16")
    save_file({"hidden_states": ("bfloat16", hs), "token_ids": ("int32", np.asarray([1, 2], dtype=np.int32))}, str(path))
    with pytest.raises(InvalidFile, match="token_ids is I32"):
        inspect_file(str(path), Expectation(layers=4, dtype_bytes=2))
    save_file({"hidden_states": ("bfloat16", hs), "token_ids": ("int64", np.asarray([1, 2])), "x": ("int64", np.asarray([1]))},
              str(path))
    with pytest.raises(InvalidFile, match="tensors are"):
        inspect_file(str(path), Expectation(layers=4, dtype_bytes=2))


@given(st.binary(max_size=400))
def test_the_header_parser_never_crashes_on_garbage(data: bytes) -> None:
    try:
        n = header_length(data, len(data))
        parse_header(data[8:8 + n], len(data) - 8 - n)
    except InvalidFile:
        pass


def test_overlapping_ranges_are_rejected() -> None:
    header = {"hidden_states": {"dtype": "BF16", "shape": [1, 1, 2], "data_offsets": [0, 4]},
              "token_ids": {"dtype": "I64", "shape": [1], "data_offsets": [2, 10]}}
    with pytest.raises(InvalidFile, match="gap or overlap"):
        parse_header(json.dumps(header).encode(), 12)


def test_a_file_is_read_only_after_the_writer_lets_go_of_its_lock(tmp_path: Path) -> None:
    import fcntl
    import threading

    path = tmp_path / "f.safetensors"
    lock = os.open(f"{path}.lock", os.O_CREAT | os.O_WRONLY, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(inspect_file(str(path), Expectation(layers=4, dtype_bytes=2))))
    reader.start()
    _stand_in_file(path, 3)  # written while the reader waits on the lock
    assert not result
    os.close(lock)
    reader.join(timeout=10)
    assert len(result) == 1 and getattr(result[0], "tokens", None) == 3


def test_a_writer_that_never_lets_go_fails_the_attempt_in_bounded_time(tmp_path: Path) -> None:
    import fcntl

    path = tmp_path / "f.safetensors"
    lock = os.open(f"{path}.lock", os.O_CREAT | os.O_WRONLY, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        with pytest.raises(InvalidFile, match="still holds the write lock") as info:
            inspect_file(str(path), Expectation(layers=4, dtype_bytes=2), lock_timeout=0.2)
        assert info.value.retryable
    finally:
        os.close(lock)


def _entry(folder: Path, sample_id: str, size: int = 10) -> Entry:
    name = file_name(sample_id)
    (folder / name).write_bytes(b"x" * size)
    return Entry(sample_id, name, 1, size, "0" * 64)


def test_resume_truncates_a_torn_last_line_and_removes_orphans_and_staging(tmp_path: Path) -> None:
    paths = ShardPaths(tmp_path, 2)
    paths.folder.mkdir(parents=True)
    paths.staging.mkdir(parents=True)
    good = [_entry(paths.folder, "a"), _entry(paths.folder, "b")]
    _entry(paths.folder, "orphan")  # renamed into place, then the driver died before the manifest line
    (paths.folder / "c.safetensors.tmp").write_bytes(b"partial copy")
    (paths.staging / "cmpl-1-0-2.safetensors").write_bytes(b"left by vLLM")
    (paths.staging / "cmpl-1-0-2.safetensors.lock").write_bytes(b"")
    paths.success.write_text("{}")
    body = b"".join(e.line() for e in good)
    paths.manifest.write_bytes(body + b'{"id":"c","file":"c.safe')
    resumed = resume(paths)
    assert set(resumed.entries) == {"a", "b"} and resumed.bytes == 20
    assert (resumed.torn, resumed.orphans, resumed.staged) == (1, 1, 1)
    assert paths.manifest.read_bytes() == body
    assert sorted(p.name for p in paths.folder.iterdir()) == ["a.safetensors", "b.safetensors", "manifest.jsonl"]
    assert list(paths.staging.iterdir()) == []


def test_resume_drops_lines_whose_file_is_gone_or_has_another_size(tmp_path: Path) -> None:
    paths = ShardPaths(tmp_path, 0)
    paths.folder.mkdir(parents=True)
    a, b, c = _entry(paths.folder, "a"), _entry(paths.folder, "b"), _entry(paths.folder, "c")
    (paths.folder / b.file).unlink()
    (paths.folder / c.file).write_bytes(b"short")
    paths.manifest.write_bytes(a.line() + b"garbage in the middle\n" + b.line() + c.line())
    resumed = resume(paths)
    assert set(resumed.entries) == {"a"} and resumed.missing == 2 and resumed.torn == 1
    assert paths.manifest.read_bytes() == a.line()  # rewritten whole, atomically
    assert sorted(p.name for p in paths.folder.iterdir()) == ["a.safetensors", "manifest.jsonl"]


def test_budget_reservations_never_exceed_the_limit() -> None:
    async def scenario() -> list[bool]:
        budget = Budget(100, used=30)
        got = [await budget.reserve(40), await budget.reserve(20)]
        waiting = asyncio.ensure_future(budget.reserve(30))  # fits only if the first comes in smaller
        await asyncio.sleep(0)
        assert not waiting.done()
        await budget.settle(40, 25)  # 30 + 25 + 20 reserved = 75: 30 more do not fit... until the next settles
        await asyncio.sleep(0)
        await budget.settle(20, 20)  # 75 used, nothing in flight: 30 more can never fit
        got.append(await waiting)
        assert budget.exhausted and budget.used == 75
        got.append(await budget.reserve(1))
        return got

    assert asyncio.run(scenario()) == [True, True, False, False]


def test_progress_is_throttled_and_its_failures_never_escape(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> list[tuple[str, dict[str, object]]]:
        writes: list[tuple[str, dict[str, object]]] = []

        async def sink(key: str, value: str) -> None:
            writes.append((key, json.loads(value)))

        async def broken(key: str, value: str) -> None:
            raise RuntimeError("API server unreachable")

        counts = Counts(total=10, done=1)
        reporter = Reporter(3, sink, counts, interval=3600)
        reporter.tick()
        reporter.tick()  # within the interval: no second write
        await reporter.final("succeeded")  # waits for the running write, then lands after it
        await Reporter(3, broken, counts).final("failed")  # logged, not raised
        return writes

    writes = asyncio.run(scenario())
    assert [(k, v["state"], v["done"]) for k, v in writes] == [("shard-3", "running", 1), ("shard-3", "succeeded", 1)]
    assert set(writes[0][1]) == {"state", "done", "failed", "bytes", "total", "updated", "tokens", "hiddenSize", "valueBytes"}
    assert "API server unreachable" in caplog.text


def test_progress_is_one_merge_patched_key_of_the_configmap(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, dict[str, object]]] = []

    class RecordingKube:
        async def request(self, method: str, path: str, **kwargs: object) -> None:
            calls.append((method, path, kwargs))

        async def close(self) -> None:
            pass

    writer = ProgressConfigMap("demo-progress", "research", kube=RecordingKube())  # type: ignore[arg-type]
    asyncio.run(writer.write("shard-2", '{"state":"running"}'))
    assert calls == [("PATCH", "/api/v1/namespaces/research/configmaps/demo-progress",
                      {"body": {"data": {"shard-2": '{"state":"running"}'}}, "content_type": "application/merge-patch+json"})]
    monkeypatch.setenv("POD_NAMESPACE", "research")
    assert pod_namespace() == "research"
    assert progress_configmap("") is None  # an empty --progress-configmap turns reporting off


# ---------------------------------------------------------------------------------------------------------
# Driver processes against the stand-in


@pytest.mark.integration  # starts a process
def test_2000_samples_over_4_shards_each_exactly_once(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_dataset(dataset, 2000)
    servers = [start_standin(output / ".staging" / f"shard-{i}", "--write-delay-ms", "2") for i in range(4)]
    try:
        drivers = [start_driver(*driver_argv(dataset, output, s.url, i, 4, "--concurrency", "16"),
                                log=tmp_path / f"driver-{i}.log") for i, s in enumerate(servers)]
        codes = [d.wait(timeout=150) for d in drivers]
    finally:
        for s in servers:
            s.stop()
    assert codes == [0, 0, 0, 0], [(tmp_path / f"driver-{i}.log").read_text()[-2000:] for i in range(4)]
    seen = check_output(output, 4, expected)
    for i in range(4):
        success = json.loads((output / f"shard-{i}" / "_SUCCESS").read_text())
        assert success["done"] == success["total"] == 500 and success["failed"] == 0
        assert success["bytes"] == sum(e["bytes"] for e in manifest_lines(output, i))
    assert len(seen) == 2000


@pytest.mark.integration  # starts a process
def test_500s_and_truncated_files_are_retried_or_recorded_never_kept(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_dataset(dataset, 300)
    with standin(output / ".staging" / "shard-0", "--fail-rate", "0.25", "--truncate-rate", "0.25", "--seed", "7") as s:
        result = run_driver(*driver_argv(dataset, output, s.url, 0, 1, "--max-attempts", "3"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "HTTP 500" in result.stderr and "truncated" in result.stderr
    seen = check_output(output, 1, expected, complete=False)
    failed = failed_lines(output, 0)
    assert failed, "with 3 attempts at 44% failure each, some samples should have failed"
    assert all(f["reason"].startswith("gave up after 3 attempts") for f in failed)
    assert {f["id"] for f in failed}.isdisjoint(seen) and len(failed) + len(seen) == 300
    lines = {f["id"]: f["line"] for f in failed}
    order = list(expected)
    assert all(order[line - 1] == sample_id for sample_id, line in lines.items())


@pytest.mark.integration  # starts a process
def test_every_file_truncated_means_every_sample_failed(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_dataset(dataset, 12)
    with standin(output / ".staging" / "shard-0", "--truncate-rate", "1") as s:
        result = run_driver(*driver_argv(dataset, output, s.url, 0, 1, "--max-attempts", "2"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert check_output(output, 1, expected, complete=False) == {}
    assert len(failed_lines(output, 0)) == 12


@pytest.mark.integration  # starts a process
def test_malformed_lines_are_failed_samples_with_their_line_number(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    lines = [
        json.dumps({"id": "a", "prompt": "one two"}),
        "{broken",
        json.dumps({"id": "b", "token_ids": [1, 5, 9]}),
        json.dumps({"id": "c"}),
        "",
        json.dumps({"id": "a", "prompt": "again"}),
        json.dumps({"id": "d", "prompt": "x " * 5000}),  # longer than the model allows: vLLM answers 400
    ]
    dataset.write_text("\n".join(lines) + "\n")
    with standin(output / ".staging" / "shard-0", "--max-model-len", "1000") as s:
        result = run_driver(*driver_argv(dataset, output, s.url, 0, 1))
    assert result.returncode == 0, result.stderr[-2000:]
    check_output(output, 1, {"a": tokenize("one two"), "b": [1, 5, 9]})
    failed = {f["line"]: f for f in failed_lines(output, 0)}
    assert sorted(failed) == [2, 4, 6, 7]
    assert failed[2]["id"] is None and "not JSON" in failed[2]["reason"]
    assert failed[4]["id"] == "c" and "exactly one of" in failed[4]["reason"]
    assert failed[6]["reason"] == "duplicate id, first at line 1"
    assert failed[7]["id"] == "d" and "HTTP 400" in failed[7]["reason"] and "maximum context length" in failed[7]["reason"]
    success = json.loads((output / "shard-0" / "_SUCCESS").read_text())
    assert (success["total"], success["done"], success["failed"]) == (6, 2, 4)


def _budget_dataset(path: Path, n: int, tokens: int) -> dict[str, list[int]]:
    expected = {}
    with path.open("w") as f:
        for i in range(n):
            ids = [1, *range(100 + i, 100 + i + tokens - 1)]
            f.write(json.dumps({"id": f"b{i}", "token_ids": ids}) + "\n")
            expected[f"b{i}"] = ids
    return expected


@pytest.mark.integration  # starts a process
def test_the_storage_budget_stops_the_shard_cleanly(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = _budget_dataset(dataset, 40, tokens=10)
    limit = 12 * estimate_file_bytes(10, 4, HIDDEN, 2) + 100
    writes: list[dict[str, object]] = []

    async def sink(key: str, value: str) -> None:
        assert key == "shard-0"
        writes.append(json.loads(value))

    with standin(output / ".staging" / "shard-0") as s:
        config = Config(shard=0, shards=1, dataset=dataset, output=output, endpoint=s.url, model="standin",
                        layers=(3, 18, 33, 36), dtype_bytes=2, hidden_size=HIDDEN, budget_bytes=limit, concurrency=4,
                        retry_base_seconds=0.01, progress_interval=0.05)
        code = asyncio.run(Driver(config, sink).run())
        again = run_driver(*driver_argv(dataset, output, s.url, 0, 1, "--budget-bytes", str(limit)))
    assert code == EXIT_BUDGET_EXCEEDED
    seen = check_output(output, 1, expected, complete=False)
    assert 12 <= len(seen) < 40
    assert sum(e["bytes"] for e in seen.values()) <= limit
    assert not (output / "shard-0" / "_SUCCESS").exists()
    assert writes[-1]["state"] == "budget_exceeded" and writes[-1]["done"] == len(seen)
    assert writes[-1]["bytes"] == sum(e["bytes"] for e in seen.values()) and writes[-1]["total"] == 40
    assert any(w["state"] == "running" for w in writes)
    # A restart finds the share used up by the files already on disk and stops again before any completion.
    assert again.returncode == EXIT_BUDGET_EXCEEDED, again.stderr[-2000:]
    assert check_output(output, 1, expected, complete=False) == seen


@pytest.mark.integration  # starts a process
def test_a_dataset_that_cannot_be_read_ends_with_exit_4(tmp_path: Path) -> None:
    writes: list[str] = []

    async def sink(key: str, value: str) -> None:
        writes.append(json.loads(value)["state"])

    config = Config(shard=0, shards=1, dataset=tmp_path / "missing.jsonl", output=tmp_path / "out",
                    endpoint="http://127.0.0.1:9", model="m", layers=(1,), dtype_bytes=2)
    assert asyncio.run(Driver(config, sink).run()) == EXIT_DATASET_UNREADABLE
    assert writes == ["dataset_unreadable"]
    result = run_driver(*driver_argv(tmp_path, tmp_path / "out", "http://127.0.0.1:9"))  # a folder
    assert result.returncode == EXIT_DATASET_UNREADABLE and "Could not read the dataset" in result.stderr


@pytest.mark.integration  # starts a process
def test_waits_for_health_and_gives_up_after_its_deadline(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_dataset(dataset, 20)
    nobody = run_driver(*driver_argv(dataset, output, "http://127.0.0.1:9", 0, 1, "--health-timeout", "0.5"))
    assert nobody.returncode == 1 and "was not healthy within" in nobody.stderr
    # Started together: the stand-in refuses connections for a second, as vLLM does while loading.
    with standin(output / ".staging" / "shard-0", "--startup-delay", "1") as s:
        result = run_driver(*driver_argv(dataset, output, s.url))
    assert result.returncode == 0, result.stderr[-2000:]
    check_output(output, 1, expected)


@pytest.mark.integration  # starts a process
def test_vllm_crashing_mid_run_fails_the_attempt_and_the_next_run_completes(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_dataset(dataset, 120)
    staging = output / ".staging" / "shard-0"
    args = driver_argv(dataset, output, "", 0, 1, "--health-timeout", "1", "--concurrency", "4")
    crashing = start_standin(staging, "--crash-after", "40")
    args[args.index("--endpoint") + 1] = crashing.url
    started = time.monotonic()
    first = run_driver(*args)
    assert crashing.process.wait(timeout=10) == 70
    assert first.returncode == 1, first.stderr[-2000:]
    assert "vLLM looks down" in first.stderr and time.monotonic() - started < 30
    assert len(manifest_lines(output, 0)) < 120
    with standin(staging) as s:
        args[args.index("--endpoint") + 1] = s.url
        second = run_driver(*args)
    assert second.returncode == 0, second.stderr[-2000:]
    check_output(output, 1, expected)


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    base = driver_argv(tmp_path / "d", tmp_path / "o", "http://127.0.0.1:9")
    no_hidden = [a for a in base if a not in ("--hidden-size", str(HIDDEN))]
    assert main([*no_hidden, "--budget-bytes", "100"]) == 2
    shard = base.copy()
    shard[shard.index("--shard") + 1] = "1"
    assert main(shard) == 2
    with pytest.raises(SystemExit) as info:
        main([*base[:-2], "--layers", "3,x"])
    assert info.value.code == 2
