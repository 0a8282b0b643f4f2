"""The PoolingJob driver on an OpenAI Batch input file, against the fake vLLM over loopback: each line one
request, bad lines and refused requests as error lines with their custom_id, the whole output file in input
order once the last shard is done, read back by the openai package's own types; and the shard SIGKILLed again
and again at its own system calls still writes each custom_id exactly once."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from openai.types import BatchError, CreateEmbeddingResponse

from pooling_operator.api import pooling_job_contract as pj
from pooling_operator.api import shard_contract as hs
from pooling_operator.pods.vectors.driver import PoolingConfig, PoolingDriver
from tests.crash_loop_support import run_crash_loop
from tests.hidden_states_support import run_driver
from tests.pooling_support import (
    POOLING_MODEL,
    FakePooling,
    fake_pooling,
    fake_rows,
    fake_tokens,
    pooling_argv,
)

pytestmark = pytest.mark.integration  # each test serves the fake over loopback

REFUSED = "a text the fake refuses as too long"


def request(custom_id: str, inputs: Any, **body: Any) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings",
                       "body": {"model": POOLING_MODEL, "input": inputs, **body}})  # fmt: skip


def batch_file(path: Path, n: int, seed: int = 1) -> list[tuple[str, Any, str | None]]:
    """n request lines (a text, a list of texts, token ids, lists of token ids) and among them the bad ones;
    per non-blank line: (custom_id or None, its inputs or None, the error code it must get or None)."""
    rng = random.Random(seed)
    lines: list[str] = []
    want: list[tuple[str | None, Any, str | None]] = []
    for i in range(n):
        kind = rng.randrange(4)
        words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(rng.randint(1, 6)))
        inputs: Any = [words, words + " again"] if kind == 1 else [[i, 5, 7]] if kind == 3 else [i + 1, 2] if kind == 2 else words
        lines.append(request(f"req-{i}", inputs))
        want.append((f"req-{i}", inputs, None))
    bad = [
        ("{not json", None, None, pj_invalid()),
        (request("req-3", "a second line with a custom_id already used"), "req-3", None, pj_invalid()),
        (request("wrong-url", "x").replace("/v1/embeddings", "/v1/rerank"), "wrong-url", None, pj_invalid()),
        (request("wrong-model", "x").replace(POOLING_MODEL, "gpt-4o"), "wrong-model", None, pj_invalid()),
        (request("refused", [REFUSED]), "refused", None, "request_failed"),
    ]
    for k, (raw, cid, inputs, code) in enumerate(bad):
        at = 5 + 7 * k
        lines.insert(at, raw)
        want.insert(at, (cid, inputs, code))
    lines.insert(20, "")  # a blank line: no request, no output line
    path.write_text("".join(x + "\n" for x in lines))
    return want  # type: ignore[return-value]


def pj_invalid() -> str:
    return "invalid_request"


def config(dataset: Path, output: Path, url: str, shard: int, shards: int, **overrides: Any) -> PoolingConfig:
    return PoolingConfig(**{"shard": shard, "shards": shards, "dataset": dataset, "output": output, "endpoint": url,
                            "model": POOLING_MODEL, "task": "embed", "batch_size": 4, "dtype": "float32",
                            "concurrency": 2, "retry_base_seconds": 0.01, "progress_interval": 0.05,
                            "format": pj.OPENAI_BATCH, "outputs": (pj.OPENAI_BATCH, pj.SAFETENSORS),
                            "models": ("org/fake-pooling",), **overrides})  # fmt: skip


def check_output(output: Path, want: list[tuple[str | None, Any, str | None]]) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in (output / pj.BATCH_OUTPUT).read_text().splitlines()]
    assert [x["custom_id"] for x in lines] == [w[0] for w in want], "one line per request line, in input order"
    for got, (cid, inputs, code) in zip(lines, want, strict=True):
        if code is not None:
            assert got["response"] is None, got
            error = BatchError.model_validate(got["error"])
            assert error.code == code, (cid, error)
            continue
        assert got["error"] is None and got["response"]["status_code"] == 200, got
        body = CreateEmbeddingResponse.model_validate(got["response"]["body"])
        texts = [inputs] if isinstance(inputs, str) else [inputs] if isinstance(inputs[0], int) else inputs
        assert [e.embedding for e in body.data] == [fake_rows(x, False)[0] for x in texts], cid
        assert body.usage.prompt_tokens == sum(fake_tokens(x) for x in texts), cid
    return lines


def test_a_batch_file_in_two_shards_gives_the_batch_output_file_in_input_order(tmp_path: Path) -> None:
    dataset, output = tmp_path / "batch.jsonl", tmp_path / "out"
    want = batch_file(dataset, 40)
    with fake_pooling(FakePooling(refuse={REFUSED})) as url:
        assert asyncio.run(PoolingDriver(config(dataset, output, url, 1, 2)).run()) == 0
        assert (output / "shard-1" / pj.BATCH_OUTPUT).exists()
        assert not (output / pj.BATCH_OUTPUT).exists(), "written before every shard was done"
        assert asyncio.run(PoolingDriver(config(dataset, output, url, 0, 2)).run()) == 0
    lines = check_output(output, want)
    assert sum(x["error"] is not None for x in lines) == 5
    assert list(output.glob("shard-*/part-*.safetensors")), "safetensors is among the outputs: the parts stay"
    # the refused line failed alone: its neighbours in the same batch were answered
    failed = [json.loads(x) for s in (0, 1) for x in (output / f"shard-{s}" / hs.FAILED_LOG).read_text().splitlines()]
    assert sorted(f["id"] for f in failed if f["id"]) == ["refused", "req-3", "wrong-model", "wrong-url"]


def test_with_the_batch_file_alone_the_parts_go_once_the_file_is_whole(tmp_path: Path) -> None:
    dataset, output = tmp_path / "batch.jsonl", tmp_path / "out"
    want = batch_file(dataset, 12, seed=2)
    with fake_pooling(FakePooling(refuse={REFUSED})) as url:
        assert asyncio.run(PoolingDriver(config(dataset, output, url, 0, 1, outputs=(pj.OPENAI_BATCH,))).run()) == 0
    check_output(output, want)
    assert not list(output.glob("shard-*/part-*.safetensors"))


def test_killed_again_and_again_the_shard_writes_each_custom_id_once(tmp_path: Path) -> None:
    """SIGKILLed at its n-th write, fsync or rename (a torn manifest line, a part without its lines, the
    output file half written), run after run; a last run finishes: every custom_id exactly once, in order."""
    dataset, output = tmp_path / "batch.jsonl", tmp_path / "out"
    want = batch_file(dataset, 60, seed=3)
    schedule: list[dict[str, Any]] = [
        {"op": "write", "when": "half", "n": 2, "file": hs.MANIFEST},
        {"op": "rename", "when": "after", "n": 2},
        {"op": "write", "when": "before", "n": 4},
        {"op": "fsync", "when": "after", "n": 3},
        {"op": "write", "when": "half", "n": 1, "file": pj.BATCH_OUTPUT + ".tmp"},
    ]
    with fake_pooling(FakePooling(refuse={REFUSED})) as url:
        args = pooling_argv(dataset, output, url, 0, 1, "--format", pj.OPENAI_BATCH, "--outputs",
                            f"{pj.OPENAI_BATCH},{pj.SAFETENSORS}", "--concurrency", "2")  # fmt: skip
        results = run_crash_loop(schedule, tmp_path / "runs", args)
        final = run_driver(*args)
    summary = [(r["step"], "killed" if r["killed"] else f"exit {r['exit']}") for r in results]
    assert sum(r["killed"] for r in results) >= len(schedule) - 1, summary
    assert final.returncode == 0, final.stderr[-3000:]
    check_output(output, want)
