"""The hidden-state driver against the Job the operator renders: its flags are the rendered ones, the width
of a value follows engine.dtype (auto: the first file's), chunked prefill is off only where vLLM asks, vLLM and
the driver share one UID, and the run record says what made the files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from e2e.standin.server import STANDIN_VERSION
from pooling_operator.api import HiddenStateJob
from pooling_operator.builders import BuildContext, build
from pooling_operator.pods.hidden_states.cli import add_parser, config_from
from pooling_operator.pods.shard.manifest import ShardPaths
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.validate import validate
from tests import factories
from tests.hidden_states_support import (
    HIDDEN,
    driver_argv,
    failed_lines,
    manifest_lines,
    run_driver,
    standin,
    write_dataset,
)


def test_the_driver_parses_the_rendered_job_and_stages_where_vllm_writes() -> None:
    """The driver's flags are exactly what builders/ renders, and its staging folder is the
    shared_storage_path builders/ hands vLLM in the same pod."""
    result = validate(factories.hidden_states({"output": {"storageBudget": "1Gi"}}))
    assert result.ok and isinstance(result.resource, HiddenStateJob)
    job = next(o for o in build(result.resource, contract("0.33"), BuildContext()) if o["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    driver = next(c for c in pod["containers"] if c["name"] == "driver")
    vllm = next(c for c in pod["initContainers"] if c["name"] == "vllm")
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args([a.replace("$(JOB_COMPLETION_INDEX)", "3") for a in driver["args"]])
    config = config_from(args)
    transfer = json.loads(vllm["args"][vllm["args"].index("--kv-transfer-config") + 1])
    storage = transfer["kv_connector_extra_config"]["shared_storage_path"].replace("$(JOB_COMPLETION_INDEX)", "3")
    assert str(ShardPaths(config.output, config.shard).staging) == storage
    assert (config.shard, config.shards, config.layers) == (3, 4, (3, 18, 33, 36))
    # engine.dtype unset (auto): the width is what the first file holds
    assert (config.hidden_size, config.budget_bytes, config.dtype_bytes) == (4096, 2**30 // 4, None)


@pytest.mark.parametrize(("dtype", "flag"), [(None, "auto"), ("auto", "auto"), ("float32", "4"), ("bfloat16", "2"),
                                             ("float16", "2")])  # fmt: skip
def test_the_driver_width_follows_an_explicit_dtype_and_is_learned_under_auto(dtype: str | None, flag: str) -> None:
    """vLLM's auto dtype depends on the model and the device (a bfloat16 model runs float32 on a CPU), so only an
    explicit engine.dtype fixes the width; before, auto rendered 2 and the driver refused float32 files."""
    spec = {"engine": {"dtype": dtype}} if dtype else {}
    result = validate(factories.hidden_states(spec))
    assert result.ok and isinstance(result.resource, HiddenStateJob), result
    job = next(o for o in build(result.resource, contract("0.33"), BuildContext()) if o["kind"] == "Job")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--dtype-bytes") + 1] == flag


@pytest.mark.parametrize(("image", "flag"), [("vllm/vllm-openai:v0.32.0", False), ("vllm/vllm-openai:v0.33.0", True)])
def test_chunked_prefill_is_turned_off_only_where_vllm_asks_for_it(image: str, flag: bool) -> None:
    """0.33's docs ask for --no-enable-chunked-prefill; on 0.32 chunked prefill gives the same hidden states
    (bench/hidden_states_chunked_prefill.py), so neither the flag nor its batched-tokens rule applies there."""
    engine = {"image": image, "maxModelLen": 4096}
    result = validate(factories.hidden_states({"engine": engine}))
    assert result.ok and isinstance(result.resource, HiddenStateJob), result
    version = "0.32" if "0.32" in image else "0.33"
    job = next(o for o in build(result.resource, contract(version), BuildContext()) if o["kind"] == "Job")
    vllm = job["spec"]["template"]["spec"]["initContainers"][0]
    assert ("--no-enable-chunked-prefill" in vllm["args"]) is flag
    small = validate(factories.hidden_states({"engine": {**engine, "maxNumBatchedTokens": 2048}}))
    problems = [(p.path, p.message) for p in small.errors]
    if flag:
        assert [p for p, _ in problems] == ["spec.engine.maxNumBatchedTokens"], problems
        assert "chunked prefill is off for hidden-state extraction on vLLM 0.33" in problems[0][1]
    else:
        assert problems == [], problems


def test_vllm_and_the_driver_run_as_one_uid() -> None:
    """vLLM writes its hidden-state files mode 0600 (safetensors' save_file): the driver in the same pod can
    read and move them only as the same UID, which fsGroup does not replace."""
    result = validate(factories.hidden_states({"template": {"nodeSelector": {"a": "b"}}}))
    assert result.ok and isinstance(result.resource, HiddenStateJob), result
    job = next(o for o in build(result.resource, contract("0.33"), BuildContext()) if o["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    containers = [*pod["initContainers"], *pod["containers"]]
    uids = {c["name"]: (c.get("securityContext") or {}).get("runAsUser", pod["securityContext"].get("runAsUser"))
            for c in containers}  # fmt: skip
    assert set(uids) == {"vllm", "driver"} and len(set(uids.values())) == 1 and None not in uids.values(), uids
    groups = {(c.get("securityContext") or {}).get("runAsGroup", pod["securityContext"].get("runAsGroup")) for c in containers}
    assert len(groups) == 1


@pytest.mark.integration  # starts processes
@pytest.mark.parametrize(("served", "flag", "done"), [
    ("float32", "auto", 12), ("bfloat16", "auto", 12), ("float32", "4", 12), ("bfloat16", "2", 12),
    ("float32", "2", 0),  # what engine.dtype auto rendered before, against vLLM's float32 on a CPU: all refused
])  # fmt: skip
def test_auto_width_takes_the_first_files_dtype(tmp_path: Path, served: str, flag: str, done: int) -> None:
    dataset, output = tmp_path / "d.jsonl", tmp_path / "out"
    write_dataset(dataset, 12)
    info = {"model": "org/m", "revision": "r1", "image": "vllm/vllm-openai:v0.32.0", "command": ["vllm", "serve", "org/m"]}
    with standin(output / ".staging" / "shard-0", "--dtype", served) as s:
        result = run_driver(*driver_argv(dataset, output, s.url, 0, 1, "--dtype-bytes", flag, "--run-info", json.dumps(info)))
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(manifest_lines(output, 0)) == done
    # the run record beside the manifest: what made the files, and what they hold
    record = json.loads((output / "shard-0" / "run.json").read_text())
    assert record["vllm"] == {"version": STANDIN_VERSION, "image": info["image"], "command": info["command"]}
    assert record["model"] == {"name": "org/m", "revision": "r1"} and record["layers"] == [3, 18, 33, 36]
    assert (record["state"], record["shard"], record["shards"]) == ("succeeded", 0, 1) and record["finished"]
    assert record["hiddenSize"] == HIDDEN
    assert record["dtype"] == ({"float32": "F32", "bfloat16": "BF16"}[served] if done else None)  # no good file: unknown
    if flag == "auto":
        assert f"vLLM writes {'F32' if served == 'float32' else 'BF16'} hidden states" in result.stderr
    if done == 0:
        assert {f["reason"] for f in failed_lines(output, 0)} == {
            "invalid file: hidden_states is F32, expected a 2-byte float (--dtype-bytes)"}
