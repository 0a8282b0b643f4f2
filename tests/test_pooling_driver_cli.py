"""``pooling-operator pooling-job run|preflight``: the flags the operator renders, usage errors (exit 2), the
preflight's report (state checked) and exit 4, and whole driver processes against the fake vLLM."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pooling_operator.api import pooling_job_contract as pj
from pooling_operator.api import shard_contract as hs
from pooling_operator.cli import main as operator_main
from pooling_operator.cli import parser as operator_parser
from pooling_operator.pods.vectors.cli import config_from
from pooling_operator.pods.vectors.driver import preflight
from tests.hidden_states_support import (
    DRIVER,
    ROOT,
    env,
    run_driver,
)
from tests.pooling_support import (
    FakePooling,
    check_vectors,
    fake_pooling,
    pooling_argv,
    write_pooling_dataset,
)

RUN = ["pooling-job", "run", "--shard", "1", "--shards", "3", "--dataset", "/data/d.jsonl", "--output", "/out",
       "--endpoint", "http://127.0.0.1:8000", "--model", "minilm", "--task", "embed", "--batch-size", "64",
       "--dtype", "float16"]  # fmt: skip


def exit_code(argv: list[str]) -> int:
    try:
        return operator_main(argv)
    except SystemExit as exc:  # argparse's usage errors
        return int(exc.code or 0)


def test_the_operator_cli_parses_exactly_the_rendered_flags() -> None:
    info = {"model": "m", "revision": "r", "image": "i", "command": ["vllm"], "task": "embed",
            "embeddingSpace": {"label": "l", "fingerprint": "f"}}  # fmt: skip
    args = operator_parser().parse_args([*RUN, "--progress-configmap", "job-progress", "--run-info", json.dumps(info),
                                         "--budget-bytes", "1000"])  # fmt: skip
    config = config_from(args)
    assert (config.shard, config.shards, config.task, config.batch_size, config.dtype) == (1, 3, "embed", 64, "float16")
    assert config.dataset == Path("/data/d.jsonl") and config.output == Path("/out") and config.model == "minilm"
    assert config.run_info == info and config.budget_bytes == 1000 and args.progress_configmap == "job-progress"
    assert (config.concurrency, config.max_attempts, config.retry_base_seconds) == (4, 4, 0.5)
    assert (config.health_timeout, config.request_timeout, config.progress_interval) == (1800.0, 600.0, 5.0)
    pre = operator_parser().parse_args(["pooling-job", "preflight", "--shard", "0", "--shards", "2", "--dataset", "/d",
                                        "--progress-configmap", "p"])  # fmt: skip
    assert (pre.shard, pre.shards, pre.dataset, pre.progress_configmap) == (0, 2, Path("/d"), "p")


def without(flag: str) -> list[str]:
    i = RUN.index(flag)
    return RUN[:i] + RUN[i + 2 :]


def replaced(flag: str, value: str) -> list[str]:
    i = RUN.index(flag)
    return [*RUN[: i + 1], value, *RUN[i + 2 :]]


@pytest.mark.parametrize(
    "argv",
    [
        without("--task"), without("--dtype"), without("--batch-size"), without("--model"),
        replaced("--task", "score"), replaced("--dtype", "float64"), replaced("--batch-size", "0"),
        replaced("--shard", "3"), replaced("--shard", "-1"), replaced("--shards", "0"),
        [*RUN, "--run-info", "{not json"], [*RUN, "--run-info", "[1]"],
        [*RUN, "--run-info", '{"task": "classify"}'],  # the operator's run info disagrees with --task
        [*RUN, "--concurrency", "0"], [*RUN, "--health-timeout", "0"], [*RUN, "--budget-bytes", "-5"],
        ["pooling-job", "preflight", "--shard", "2", "--shards", "2", "--dataset", "/d"],
        ["pooling-job", "preflight", "--shards", "2", "--dataset", "/d"],
        ["pooling-job"],
    ],
)  # fmt: skip
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    assert exit_code(argv) == hs.EXIT_USAGE


def preflight_reports(dataset: Path, shard: int, shards: int) -> tuple[int, list[dict[str, Any]]]:
    reports: list[dict[str, Any]] = []

    async def sink(key: str, value: str) -> None:
        assert key == hs.progress_key(shard)
        reports.append(json.loads(value))

    return asyncio.run(preflight(dataset, shard, shards, sink)), reports


def test_the_preflight_reports_the_shards_inputs_bad_lines_and_the_datasets_lines(tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    lines = ['{"id": 1, "text": "a"}', "", '{"id": 2, "token_ids": [5, 6]}', "{oops", '{"id": 3, "prompt": "p"}',
             '{"id": 1, "text": "again"}', "   ", '{"id": 4, "text": "d"}', '{"id": 5, "text": "e"}']  # fmt: skip
    dataset.write_text("\n".join(lines) + "\n")
    # shard 0 of 2 owns lines 1, 3, 5, 7, 9; shard 1 owns 2, 4, 6, 8 (blank lines keep their index)
    code, reports = preflight_reports(dataset, 0, 2)
    assert code == hs.EXIT_OK and len(reports) == 1
    report = reports[0]
    assert report[hs.PROGRESS_STATE] == pj.CHECKED
    assert report[hs.PROGRESS_TOTAL] == 4 and report[hs.PROGRESS_FAILED] == 1  # line 5: prompt is not text
    assert report[pj.PROGRESS_LINES] == 7 and report[hs.PROGRESS_DONE] == 0
    code, reports = preflight_reports(dataset, 1, 2)
    assert code == 0 and reports[0][hs.PROGRESS_TOTAL] == 3 and reports[0][hs.PROGRESS_FAILED] == 2  # {oops, dup 1
    assert reports[0][pj.PROGRESS_LINES] == 7


def test_an_unreadable_dataset_ends_the_preflight_with_4(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.jsonl", tmp_path):
        code, reports = preflight_reports(path, 0, 1)
        assert code == hs.EXIT_DATASET_UNREADABLE
        assert [r[hs.PROGRESS_STATE] for r in reports] == [hs.DATASET_UNREADABLE]
        assert hs.EXIT_DATASET_UNREADABLE in hs.JOB_ENDING_EXIT_CODES.values()


def test_the_preflight_through_the_operator_cli(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"id": 1, "text": "a"}\nnot json\n')
    argv = ["pooling-job", "preflight", "--shard", "0", "--shards", "1", "--dataset", str(dataset)]
    with caplog.at_level("INFO"):
        assert exit_code(argv) == hs.EXIT_OK
    assert "Line 2 of the dataset (shard 0) will be skipped: not JSON" in caplog.text
    assert exit_code([*argv[:-1], str(tmp_path / "nope")]) == hs.EXIT_DATASET_UNREADABLE


@pytest.mark.integration  # starts processes and serves the fake over loopback
def test_two_driver_processes_embed_their_shards(tmp_path: Path) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    expected = write_pooling_dataset(dataset, 50)
    with fake_pooling(FakePooling(task="token_embed")) as url:
        procs = [subprocess.Popen([*DRIVER, *pooling_argv(dataset, output, url, shard, 2, "--concurrency", "3",
                                                          task="token_embed", dtype="float16", batch=6)],
                                  cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for shard in range(2)]  # fmt: skip
        outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    check_vectors(output, 2, expected, task="token_embed", dtype="float16")
    assert "Finished shard 1: 25 done (0 from earlier runs), 0 failed" in outs[1]


@pytest.mark.integration  # starts a process
def test_a_driver_process_exits_4_on_an_unreadable_dataset_and_1_without_vllm(tmp_path: Path) -> None:
    done = run_driver(*pooling_argv(tmp_path / "missing.jsonl", tmp_path / "out", "http://127.0.0.1:9"))
    assert done.returncode == hs.EXIT_DATASET_UNREADABLE, done.stderr[-2000:]
    dataset = tmp_path / "d.jsonl"
    write_pooling_dataset(dataset, 3)
    done = run_driver(*pooling_argv(dataset, tmp_path / "out", "http://127.0.0.1:9", 0, 1, "--health-timeout", "0.2"))
    assert done.returncode == hs.EXIT_FAILED and "was not healthy within" in done.stderr, done.stderr[-2000:]
