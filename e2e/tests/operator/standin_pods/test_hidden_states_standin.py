"""A HiddenStateJob's pods through the pod runner with the vLLM hidden-state stand-in as the sidecar, in seconds.

The operator renders its Indexed Job as for real vLLM (a GPU requested, the sidecar's startup probe on /health,
our driver as the main container); the image ``runner_process.STANDIN_IMAGE`` maps the sidecar's ``vllm serve
...`` to ``python -m e2e.standin`` (e2e/standin/vllm_cli.py), which writes files in the connector's format. The
runner's node advertises fake GPUs, so the GPU request schedules there. Nothing here checks vLLM's numbers
(test_hidden_states_real.py does); this checks the plumbing a faster test (Kueue admission) builds on: every
prompt lands once, each manifest line's hash and size are the file's, the file holds the stand-in's token ids
and the layer count and hidden size vLLM would have been told (the layer ids from the spec, the hidden size from
the model folder's config.json), and the resource's status counts it.

Resources: each pod requests 250m (the sidecar, spec.resources) + 500m (the driver, the operator's fixed
request); the operator tier's pod runner runs no vLLM beside them (the real_vllm tier has its own), so both
shards run at once.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from safetensors.numpy import load_file

from e2e.harness.config import GPU_RESOURCE
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.podrunner.runner_process import STANDIN_IMAGE, PodRunner
from e2e.standin import tokenize
from e2e.tests.operator.standin_pods.standin_jobs import manifest, prompts, standin_job

pytestmark = [pytest.mark.timeout(300)]

NAME = "standin-states"
LAYERS = [2, 5, 7]
HIDDEN_SIZE = 48  # the model folder's config.json says so; the shim's default (64) would fail the shape check
PROMPTS = 20


def test_hidden_state_job_on_the_standin(
    cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner, namespace: str
) -> None:
    began = time.monotonic()
    data = pod_runner.data_claim(namespace) / namespace
    samples = prompts(PROMPTS, seed=7)
    job = standin_job(namespace, NAME, data, samples, layers=LAYERS, hidden_size=HIDDEN_SIZE, shards=2)
    out = data / NAME / "out"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job))

    def succeeded() -> dict[str, Any] | None:
        obj = json.loads(cluster.kubectl("get", "hiddenstatejob", NAME, "-n", namespace, "-o", "json").stdout)
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        if conds.get("Failed", {}).get("status") == "True":
            logs = "\n".join(f"--- {p['name']}/{c}\n" + Path(r["log"]).read_text(errors="replace")[-3000:]
                             for p in pod_runner.pods(namespace) for c, r in p["containers"].items())  # fmt: skip
            raise AssertionError(f"the job failed: {conds['Failed']}\n{logs}")
        return obj if conds.get("Succeeded", {}).get("status") == "True" else None

    obj = wait_for(succeeded, timeout=240, what=f"HiddenStateJob {namespace}/{NAME} Succeeded")
    print(f"hidden states (stand-in): Succeeded {time.monotonic() - began:.1f} s after apply")

    # the pods asked for a GPU, were bound to the runner's node, and their sidecar was the stand-in
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    assert {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods} == {"0", "1"}
    for p in pods:
        assert p["spec"]["nodeName"] == pod_runner.node, p["spec"].get("nodeName")
        [sidecar] = [c for c in p["spec"]["initContainers"] if c["name"] == "vllm"]
        assert sidecar["image"] == STANDIN_IMAGE and sidecar["resources"]["requests"][GPU_RESOURCE] == "1"
        rec = pod_runner.pod(namespace, p["metadata"]["name"])["containers"]["vllm"]
        assert rec["argv"][0] == str(pod_runner.standin_bin / "vllm"), rec["argv"][:2]
        log = Path(rec["log"]).read_text(errors="replace")
        assert f"--layers {len(LAYERS)} --hidden-size {HIDDEN_SIZE} --dtype float32 --model {NAME}" in log, log[-2000:]

    # every prompt once; each line's hash and size are its file's; each file is what the stand-in writes
    by_id = {s["id"]: s["prompt"] for s in samples}
    lines = [(shard, e) for shard in (0, 1) for e in manifest(out, shard)]
    ids = [e["id"] for _, e in lines]
    assert len(ids) == len(set(ids)) == PROMPTS and set(ids) == set(by_id), sorted(ids)
    total, files = 0, set()
    for shard, e in lines:
        f = out / f"shard-{shard}" / e["file"]
        raw = f.read_bytes()
        assert hashlib.sha256(raw).hexdigest() == e["sha256"] and len(raw) == e["bytes"], e
        tensors = load_file(str(f))
        expected_ids = tokenize(by_id[e["id"]])
        assert tensors["token_ids"].tolist() == expected_ids and e["tokens"] == len(expected_ids), e
        assert tensors["hidden_states"].shape == (len(expected_ids), len(LAYERS), HIDDEN_SIZE)
        assert str(tensors["hidden_states"].dtype) == "float32"
        total += len(raw)
        files.add(f)
    leftovers = [p for p in out.rglob("*.safetensors") if p not in files]  # the staging folder emptied too
    assert not leftovers, leftovers[:5]

    status = obj["status"]
    assert status["samples"] == {"done": PROMPTS, "failed": 0}, status
    assert status["bytesWritten"] == total, status
    for shard in (0, 1):
        record = json.loads((out / f"shard-{shard}" / "run.json").read_text())
        assert record["state"] == "succeeded" and record["vllm"]["version"].endswith("+standin"), record
        assert (record["dtype"], record["hiddenSize"], record["layers"]) == ("F32", HIDDEN_SIZE, LAYERS), record
    print(f"hidden states (stand-in): {PROMPTS} samples, {total} bytes, {time.monotonic() - began:.1f} s in all")
