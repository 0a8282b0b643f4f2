"""The PoolingJob driver: pure pieces, then whole shards in this process against a fake vLLM on loopback that
answers the bytes format as vLLM 0.32 does (tests/pooling_support.FakePooling). Every output is read
back with the safetensors library and compared with the fake's vectors byte for byte. Nothing sleeps to
synchronise: the driver runs to its end, the fake records what it was asked.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

from pooling_operator.api import pooling_job_contract as pj
from pooling_operator.api import shard_contract as hs
from pooling_operator.pods.shard import files
from pooling_operator.pods.shard.dataset import BadLine, Sample, parse_line, read_shard
from pooling_operator.pods.vectors.driver import (
    NOT_INSTRUCTABLE,
    PoolingConfig,
    PoolingDriver,
    _token_ids_only,
    batches,
    instructed,
)
from pooling_operator.pods.vectors.parts import part_header, write_part
from tests.hidden_states_support import failed_lines, manifest_lines
from tests.pooling_support import (
    POOLING_DIM,
    POOLING_MODEL,
    FakePooling,
    check_vectors,
    encode_values,
    fake_pooling,
    write_pooling_dataset,
)

# ---------------------------------------------------------------------------------------------------------
# Pure pieces


def s(i: int, tokens: bool = False) -> Sample:
    return Sample(str(i), i + 1, token_ids=(1, 2)) if tokens else Sample(str(i), i + 1, prompt="a")


def test_batches_are_consecutive_bounded_and_never_mix_texts_and_token_ids() -> None:
    kinds = [False, False, False, True, True, False, True, True, True, True, True, False]
    samples = [s(i, k) for i, k in enumerate(kinds)]
    got = [[int(x.id) for x in b] for b in batches(samples, 3)]
    assert got == [[0, 1, 2], [3, 4], [5], [6, 7, 8], [9, 10], [11]]
    assert [int(x.id) for b in batches(samples, 3) for x in b] == list(range(len(kinds)))
    assert list(batches([], 4)) == []


def test_dataset_lines_take_their_text_under_text() -> None:
    assert parse_line(b'{"id": 3, "text": "hi"}', 1, pj.TEXT_KEY) == Sample("3", 1, prompt="hi")
    assert parse_line(b'{"id": "a", "token_ids": [5]}', 2, pj.TEXT_KEY) == Sample("a", 2, token_ids=(5,))
    for raw, reason in [(b'{"id": "a", "prompt": "x"}', "needs exactly one of text or token_ids"),
                        (b'{"id": "a", "text": ""}', "text must be a non-empty string"),
                        (b'{"id": "a", "text": "x", "token_ids": [1]}', "needs exactly one of text or token_ids")]:
        parsed = parse_line(raw, 4, pj.TEXT_KEY)
        assert isinstance(parsed, BadLine) and parsed.reason == reason, parsed


def test_read_shard_counts_the_whole_files_non_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": 1, "text": "a"}\n\n{"id": 2, "text": "b"}\nnot json\n  \n{"id": 1, "text": "c"}\n')
    one, two = read_shard(path, 0, 2, pj.TEXT_KEY), read_shard(path, 1, 2, pj.TEXT_KEY)
    assert one.lines == two.lines == 4
    assert [x.id for x in one.samples] == ["1", "2"] and [b.line for b in one.bad] == []
    assert [b.line for b in two.bad] == [4, 6]


@pytest.mark.parametrize(("dtype", "st_dtype"), [("float32", "F32"), ("float16", "F16"), ("bfloat16", "BF16")])
def test_a_part_written_by_hand_is_a_safetensors_file(tmp_path: Path, dtype: str, st_dtype: str) -> None:
    rows = [[(j - 3 * i) / 128 for j in range(5)] for i in range(3)]
    data = encode_values([v for r in rows for v in r], dtype)
    header = part_header(st_dtype, 3, 5, {"task": "embed"})
    assert len(header) % 8 == 0
    size = write_part(tmp_path, 7, header, data)
    path = tmp_path / pj.part_name(7)
    assert size == path.stat().st_size == len(header) + len(data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-000007.safetensors"]
    with safe_open(str(path), framework="numpy") as st:
        assert st.metadata() == {"task": "embed"}
        assert st.get_slice(pj.VECTORS).get_dtype() == st_dtype and st.get_slice(pj.VECTORS).get_shape() == [3, 5]
    if dtype != "bfloat16":  # numpy has no bfloat16
        assert load_file(str(path))[pj.VECTORS].tolist() == rows


# ---------------------------------------------------------------------------------------------------------
# Whole shards against the fake


def pooling_config(dataset: Path, output: Path, url: str, **overrides: Any) -> PoolingConfig:
    return PoolingConfig(**{"shard": 0, "shards": 1, "dataset": dataset, "output": output, "endpoint": url,
                            "model": POOLING_MODEL, "task": "embed", "batch_size": 4, "dtype": "float32",
                            "concurrency": 2, "retry_base_seconds": 0.01, "progress_interval": 0.05,
                            **overrides})  # fmt: skip


def run(config: PoolingConfig, reports: list[dict[str, Any]] | None = None) -> int:
    async def sink(key: str, value: str) -> None:
        assert key == hs.progress_key(config.shard)
        if reports is not None:
            reports.append(json.loads(value))

    return asyncio.run(PoolingDriver(config, sink).run())


def posts(fake: FakePooling) -> list[list[Any]]:
    return [body["input"] for _, body in fake.requests]


pytestmark = pytest.mark.integration  # each test serves the fake over loopback


@pytest.mark.parametrize(("task", "dtype"), [("embed", "float32"), ("classify", "float16"), ("embed", "bfloat16")])
def test_two_shards_of_a_sequence_task_embed_every_input_once(tmp_path: Path, task: str, dtype: str) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 41)
    fake = FakePooling(task=task)
    reports: list[dict[str, Any]] = []
    with fake_pooling(fake) as url:
        for shard in range(2):
            config = pooling_config(dataset, output, url, shard=shard, shards=2, task=task, dtype=dtype, batch_size=3)
            assert run(config, reports) == hs.EXIT_OK
    seen = check_vectors(output, 2, expected, task=task, dtype=dtype)
    assert len(seen) == 41
    route = pj.ROUTES[task]
    for path, body in fake.requests:
        assert path == route
        assert body["model"] == POOLING_MODEL and body["encoding_format"] == "bytes"
        assert body["embed_dtype"] == dtype and body["endianness"] == "little"
        assert body.get("task") == (None if task == "embed" else task)
        assert 1 <= len(body["input"]) <= 3
        assert len({isinstance(x, str) for x in body["input"]}) == 1, "a batch mixed texts and token ids"
    finals = [r for r in reports if r[hs.PROGRESS_STATE] != hs.RUNNING]
    assert [r[hs.PROGRESS_STATE] for r in finals] == [hs.SUCCEEDED, hs.SUCCEEDED]
    for shard, final in enumerate(finals):
        total = len(range(shard, 41, 2))
        assert final[hs.PROGRESS_DONE] == final[hs.PROGRESS_TOTAL] == total and final[hs.PROGRESS_FAILED] == 0
        assert final[hs.PROGRESS_HIDDEN_SIZE] == POOLING_DIM and final[hs.PROGRESS_VALUE_BYTES] == pj.VECTOR_BYTES[dtype]
        assert final[pj.PROGRESS_LINES] == 41
        parts = {e["file"]: e["bytes"] for e in manifest_lines(output, shard)}
        assert final[hs.PROGRESS_BYTES] == sum(parts.values())
        success = json.loads((output / f"shard-{shard}" / hs.SUCCESS_MARKER).read_text())
        assert success["done"] == success["total"] == total and success["bytes"] == sum(parts.values())
        # sequence tasks: a token-id input's tokens are its length, a text's unknown (0) in a batch of several
        for entry in manifest_lines(output, shard):
            if isinstance(expected[entry["id"]], str):
                batch_of_one = sum(e["file"] == entry["file"] for e in manifest_lines(output, shard)) == 1
                assert entry["tokens"] == (len(str(expected[entry["id"]]).split()) + 2 if batch_of_one else 0)


@pytest.mark.parametrize("task", ["token_embed", "token_classify"])
def test_a_token_task_concatenates_each_inputs_token_rows(tmp_path: Path, task: str) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 30)
    fake = FakePooling(task=task)
    reports: list[dict[str, Any]] = []
    with fake_pooling(fake) as url:
        assert run(pooling_config(dataset, output, url, task=task, batch_size=5, concurrency=3), reports) == 0
    seen = check_vectors(output, 1, expected, task=task)
    assert all(e["rows"] == e["tokens"] > 1 for e in seen.values())
    assert {path for path, _ in fake.requests} == {"/pooling"}
    assert reports[-1][hs.PROGRESS_TOKENS] == sum(e["tokens"] for e in seen.values())


def test_run_json_records_what_made_the_vectors(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    write_pooling_dataset(dataset, 5)
    info = {"model": "org/minilm", "revision": "abc123", "image": "vllm/vllm-openai:v0.32.0", "command": ["vllm", "serve"],
            "task": "embed", "embeddingSpace": {"label": "minilm-mean", "fingerprint": "sha256:00ff"}}
    with fake_pooling(FakePooling()) as url:
        assert run(pooling_config(dataset, output, url, run_info=info, dtype="float16")) == 0
    doc = json.loads((output / "shard-0" / "run.json").read_text())
    assert doc["state"] == hs.SUCCEEDED and doc["finished"] and doc["started"]
    assert doc["shard"] == 0 and doc["shards"] == 1
    assert doc["vllm"] == {"version": "0.32.0-fake", "image": info["image"], "command": info["command"]}
    assert doc["model"] == {"name": "org/minilm", "revision": "abc123"}
    assert doc["task"] == "embed" and doc["embeddingSpace"] == info["embeddingSpace"]
    assert doc["dtype"] == "float16" and doc["dimension"] == POOLING_DIM
    assert doc["driver"]["version"]


def test_which_inputs_an_instruction_can_precede_and_how_a_batch_lines_texts_take_it() -> None:
    assert not _token_ids_only(Sample("a", 1, prompt="x"))
    assert _token_ids_only(Sample("b", 2, token_ids=(5, 6)))
    assert not _token_ids_only(Sample("c", 3, inputs=("x", "y")))  # an OpenAI Batch line of texts
    assert _token_ids_only(Sample("d", 4, inputs=((5,), (6, 7))))  # ... of token-id lists
    assert not _token_ids_only(Sample("e", 5, inputs=((5,),), route="score"))  # a scoring line takes none
    assert instructed(("x", "y"), "passage: ") == ("passage: x", "passage: y")
    assert instructed(("x",), "") == ("x",)


def test_the_document_instruction_goes_before_every_text_and_an_input_of_token_ids_fails(tmp_path: Path) -> None:
    """spec.vectors.documentInstruction: vLLM sees 'passage: <text>' for every text, the vectors stored are those
    of the prefixed texts, each token-id input is listed failed (no text to prefix), and run.json keeps the
    declared contract beside the space."""
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 13)  # every 4th input is token ids
    vectors = {"outputs": ["dense"], "inputs": ["text"], "documentInstruction": "passage: "}
    info = {"model": "org/e5", "revision": "abc123", "image": "vllm/vllm-openai:v0.32.0", "command": ["vllm", "serve"],
            "task": "embed", "embeddingSpace": {"label": "e5", "fingerprint": "sha256:00ff"}, "vectors": vectors}
    fake = FakePooling()
    with fake_pooling(fake) as url:
        assert run(pooling_config(dataset, output, url, run_info=info, document_instruction="passage: ")) == hs.EXIT_OK
    sent = [x for _, body in fake.requests for x in body["input"]]
    texts = {k: v for k, v in expected.items() if isinstance(v, str)}
    assert sorted(sent) == sorted("passage: " + t for t in texts.values())
    check_vectors(output, 1, {k: "passage: " + v for k, v in texts.items()})
    failed = failed_lines(output, 0)
    assert sorted(f["id"] for f in failed) == sorted(k for k, v in expected.items() if not isinstance(v, str))
    assert {f["reason"] for f in failed} == {NOT_INSTRUCTABLE}
    assert json.loads((output / "shard-0" / "run.json").read_text())["vectors"] == vectors


def test_inputs_vllm_refuses_are_isolated_by_halving_their_batch(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 16, every_tokens=0)
    bad = {"x-2", "x-6"}
    fake = FakePooling(refuse={str(expected[i]) for i in bad})
    with fake_pooling(fake) as url:
        assert run(pooling_config(dataset, output, url, batch_size=8, concurrency=1)) == hs.EXIT_OK
    good = {k: v for k, v in expected.items() if k not in bad}
    check_vectors(output, 1, good)
    failed = failed_lines(output, 0)
    assert sorted(f["id"] for f in failed) == sorted(bad)
    assert all("maximum context length" in f["reason"] and f["reason"].startswith("HTTP 400") for f in failed)
    # [0..7] refused -> [0..3] refused -> [0,1] ok, [2,3] refused -> [2] refused, [3] ok;
    #                   [4..7] refused -> [4,5] ok, [6,7] refused -> [6] refused, [7] ok; then [8..15] ok
    sizes = [len(x) for x in posts(fake)]
    assert sizes == [8, 4, 2, 2, 1, 1, 4, 2, 2, 1, 1, 8]


def test_while_vllm_is_down_every_worker_waits_for_health(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 24)
    fake = FakePooling(faults=[503], down_polls=3)
    with fake_pooling(fake) as url:
        assert run(pooling_config(dataset, output, url, batch_size=2, concurrency=3)) == hs.EXIT_OK
    check_vectors(output, 1, expected)
    events = fake.events
    first = events.index("answer 503")
    recovered = events.index("health 200", first)
    assert events[first + 1 : recovered].count("health 503") == 3
    # only requests already past the gate when the 503 came (the other two workers) reach vLLM before it is healthy
    assert events[first:recovered].count("post /v1/embeddings") <= 2


@pytest.mark.parametrize("fault", ["drop", 500, "shape", "count", "dtype", "range"])
def test_a_failed_or_wrong_answer_is_retried_and_never_written(tmp_path: Path, fault: Any) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 12)
    fake = FakePooling(faults=[fault])
    with fake_pooling(fake) as url:
        assert run(pooling_config(dataset, output, url, batch_size=3, concurrency=1)) == hs.EXIT_OK
    seen = check_vectors(output, 1, expected)
    assert failed_lines(output, 0) == []
    parts = {e["file"] for e in seen.values()}
    assert len(fake.requests) == len(parts) + 1  # one retry, and no part of the wrong answer
    assert posts(fake)[0] == posts(fake)[1]


def test_a_token_task_answer_with_other_token_rows_than_token_ids_is_retried(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    dataset.write_text(json.dumps({"id": "a", "token_ids": [101, 5, 6, 102]}) + "\n")
    fake = FakePooling(task="token_embed", faults=["shape"])
    with fake_pooling(fake) as url:
        assert run(pooling_config(dataset, output, url, task="token_embed")) == hs.EXIT_OK
    check_vectors(output, 1, {"a": [101, 5, 6, 102]}, task="token_embed")
    assert len(fake.requests) == 2


def test_after_max_attempts_a_batchs_inputs_fail_and_the_shard_goes_on(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 9, every_tokens=0)
    fake = FakePooling(faults=[500, 500, 500])
    reports: list[dict[str, Any]] = []
    with fake_pooling(fake) as url:
        assert run(pooling_config(dataset, output, url, batch_size=3, concurrency=1, max_attempts=3), reports) == 0
    first = ["0", "x-1", "x-2"]
    check_vectors(output, 1, {k: v for k, v in expected.items() if k not in first})
    failed = failed_lines(output, 0)
    assert [f["id"] for f in failed] == first and [f["line"] for f in failed] == [1, 2, 3]
    assert all(f["reason"].startswith("gave up after 3 attempts: HTTP 500") for f in failed)
    assert reports[-1][hs.PROGRESS_FAILED] == 3 and reports[-1][hs.PROGRESS_DONE] == 6


def test_an_answer_of_another_dimension_than_the_first_is_never_written(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 6, every_tokens=0)
    fake = FakePooling(faults=["dim"])  # the first answer has 8 dimensions, every later one 9
    with fake_pooling(fake) as url:
        assert run(pooling_config(dataset, output, url, batch_size=2, concurrency=1, max_attempts=2)) == 0
    check_vectors(output, 1, {k: expected[k] for k in ("0", "x-1")})
    failed = failed_lines(output, 0)
    assert len(failed) == 4 and all("dimension 9, expected 8" in f["reason"] for f in failed)


@pytest.mark.parametrize(("status", "param"), [(404, None), (400, "task"), (501, None), (401, None)])
def test_a_refusal_no_input_could_change_stops_the_shard(tmp_path: Path, status: int, param: str | None) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    write_pooling_dataset(dataset, 10)
    fake = FakePooling(status=status, param=param)
    reports: list[dict[str, Any]] = []
    with fake_pooling(fake) as url:
        assert run(pooling_config(dataset, output, url, concurrency=1), reports) == hs.EXIT_FAILED
    assert len(fake.requests) == 1, "a misconfiguration is not retried nor bisected"
    assert reports[-1][hs.PROGRESS_STATE] == hs.FAILED and reports[-1][hs.PROGRESS_DONE] == 0
    assert failed_lines(output, 0) == [] and not list((output / "shard-0").glob("part-*"))
    assert json.loads((output / "shard-0" / "run.json").read_text())["state"] == hs.FAILED


def part_size(rows: int, dim: int = POOLING_DIM, width: int = 4) -> int:
    return len(part_header("F32", rows, dim, {"task": "embed"})) + rows * dim * width


@pytest.mark.parametrize("spare", [0, 1])
def test_the_budget_stops_before_the_part_that_would_exceed_it(tmp_path: Path, spare: int) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 20, every_tokens=0)
    size = part_size(2)
    budget = 3 * size + (size - 1 if spare else 0)  # room for 3 parts, never for a 4th
    reports: list[dict[str, Any]] = []
    with fake_pooling(FakePooling()) as url:
        config = pooling_config(dataset, output, url, batch_size=2, concurrency=1, budget_bytes=budget)
        assert run(config, reports) == hs.EXIT_BUDGET_EXCEEDED
        seen = check_vectors(output, 1, expected, complete=False)
        assert len(seen) == 6 and len({e["file"] for e in seen.values()}) == 3
        assert sum(p.stat().st_size for p in (output / "shard-0").glob("part-*")) == 3 * size <= budget
        final = reports[-1]
        assert final[hs.PROGRESS_STATE] == hs.BUDGET_EXCEEDED and final[hs.PROGRESS_DONE] == 6
        assert final[hs.PROGRESS_BYTES] == 3 * size
        assert not (output / "shard-0" / hs.SUCCESS_MARKER).exists()
        # A larger budget resumes: what is on disk counts against it, and the rest fits exactly.
        assert run(pooling_config(dataset, output, url, batch_size=2, concurrency=1, budget_bytes=10 * size)) == 0
    check_vectors(output, 1, expected)


def fd_name(fd: int) -> str:
    return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))


class Full:
    """files.DISK.<op> fails with ENOSPC from its n-th matching call on, until ``free()``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, op: str, match: Any, n: int) -> None:
        self.real, self.match, self.n, self.calls, self.freed = getattr(files.Disk, op), match, n, 0, False
        monkeypatch.setattr(files.DISK, op, self)

    def __call__(self, *args: Any) -> Any:
        if not self.freed and self.match(*args):
            self.calls += 1
            if self.calls >= self.n:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.real(*args)

    def free(self) -> None:
        self.freed = True


FULL_AT = {
    "part data": ("write", lambda fd, data: fd_name(fd).startswith("part-"), 5),
    "part fsync": ("fsync", lambda fd: fd_name(fd).startswith("part-"), 3),
    "part rename": ("rename", lambda src, dst: True, 2),
    "manifest append": ("write", lambda fd, data: fd_name(fd) == hs.MANIFEST, 2),
    "failed.jsonl": ("write", lambda fd, data: fd_name(fd) == hs.FAILED_LOG, 1),
    "_SUCCESS": ("replace", lambda src, dst: str(dst).endswith(hs.SUCCESS_MARKER), 1),
}


@pytest.mark.parametrize("where", sorted(FULL_AT))
def test_a_full_volume_stops_the_shard_consistent_and_the_next_run_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 24)
    with dataset.open("a") as f:
        f.write("not json\n")  # one bad line, so failed.jsonl has something to write
    op, match, n = FULL_AT[where]
    full = Full(monkeypatch, op, match, n)
    reports: list[dict[str, Any]] = []
    with fake_pooling(FakePooling()) as url:
        assert run(pooling_config(dataset, output, url, batch_size=3, concurrency=2), reports) == hs.EXIT_OUTPUT_FULL
        seen = check_vectors(output, 1, expected, complete=False)
        final = reports[-1]
        assert final[hs.PROGRESS_STATE] == hs.OUTPUT_FULL and final[hs.PROGRESS_DONE] == len(seen)
        assert not (output / "shard-0" / hs.SUCCESS_MARKER).exists()
        assert json.loads((output / "shard-0" / "run.json").read_text())["state"] == hs.OUTPUT_FULL
        full.free()
        assert run(pooling_config(dataset, output, url, batch_size=3, concurrency=2)) == hs.EXIT_OK
    check_vectors(output, 1, expected)
    assert json.loads((output / "shard-0" / hs.SUCCESS_MARKER).read_text())["resumed"] == len(seen)
