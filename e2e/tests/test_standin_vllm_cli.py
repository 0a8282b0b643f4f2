"""The stand-in's ``vllm`` (e2e/standin/vllm_cli.py) on the argv the operator renders for a HiddenStateJob: pure,
plus one run of the generated bin folder's script on a command it must refuse."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from e2e.podrunner.runner_process import STANDIN_IMAGE
from e2e.standin import vllm_cli
from pooling_operator import OPERATOR_IMAGE
from pooling_operator.builders import BuildContext, plan
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import validate


def rendered(spec: dict[str, Any]) -> list[str]:
    doc = {"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "HiddenStateJob", "metadata": {"name": "hs", "namespace": "ns"},
           "spec": {"model": {"name": "/tiny", "source": {"volume": {"claimName": "data", "path": "/m"}}},
                    "layers": [2, 5, 7], "dataset": {"volume": {"claimName": "data", "path": "/p.jsonl"}},
                    "output": {"volume": {"claimName": "data", "path": "/out"}}, "shards": 2,
                    "engine": {"image": STANDIN_IMAGE, "version": "0.32", "maxModelLen": 512, **spec}}}  # fmt: skip
    result = validate(doc, Settings())
    assert result.ok and result.resource is not None and result.contract is not None, result.problems
    return plan(result.resource, result.contract, BuildContext(operator_image=OPERATOR_IMAGE), result.workload).argv


def test_the_rendered_sidecar_becomes_the_standin(tmp_path: Path) -> None:
    argv = rendered({"dtype": "float32", "extraArgs": ["--enforce-eager"]})
    assert argv[:2] == ["vllm", "serve"]
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 48}))
    assert argv[2] == "/models/m"
    argv[2] = str(tmp_path)  # the model folder, as the runner maps the mount
    out, ignored = vllm_cli.translate(argv[1:], {})
    flags = dict(zip(out[::2], out[1::2], strict=True))
    storage = json.loads(argv[argv.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]["shared_storage_path"]
    assert flags == {"--host": "127.0.0.1", "--port": "8000", "--storage-path": storage, "--layers": "3",
                     "--hidden-size": "48", "--dtype": "float32", "--model": "hs", "--max-model-len": "512"}  # fmt: skip
    assert "--enforce-eager" in ignored and "--runner" in ignored
    # the environment wins over the model folder; without either, the default
    assert vllm_cli.translate(argv[1:], {vllm_cli.HIDDEN_SIZE_ENV: "80"})[0][9] == "80"
    assert vllm_cli.translate([a.replace(str(tmp_path), "/nowhere") for a in argv[1:]], {})[0][9] == str(vllm_cli.DEFAULT_HIDDEN_SIZE)
    assert dict(zip(*[iter(vllm_cli.translate(rendered({})[1:], {})[0])] * 2, strict=True))["--dtype"] == "bfloat16"  # auto
    # a slower stand-in where the container's env asks for one (a job to preempt mid-shard)
    assert vllm_cli.translate(argv[1:], {vllm_cli.DELAY_ENV: "250"})[0][-2:] == ["--delay-ms", "250.0"]


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["bench", "serve"], "only `vllm serve`"),
        (["serve", "/m", "--kv-transfer-config", '{"kv_connector_extra_config": {"shared_storage_path": "/s"}}'], "extract_hidden_states"),
        (["serve", "/m", "--speculative-config", '{"method": "extract_hidden_states"}'], "layer_ids"),
        (["serve", "/m", "--speculative-config", '{"method": "extract_hidden_states", "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1]}}}'], "shared_storage_path"),
    ],
)  # fmt: skip
def test_commands_it_cannot_honour_are_refused(argv: list[str], reason: str) -> None:
    with pytest.raises(vllm_cli.Unsupported, match=reason):
        vllm_cli.translate(argv, {})


def test_the_bin_folder_runs_it(tmp_path: Path) -> None:
    folder = vllm_cli.write_bin(tmp_path / "bin")
    res = subprocess.run([str(folder / "vllm"), "serve", "/m"], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "/elsewhere"})  # fmt: skip
    assert res.returncode == vllm_cli.USAGE_EXIT_CODE, res
    assert "vllm (test stand-in): --speculative-config method None" in res.stderr, res.stderr
