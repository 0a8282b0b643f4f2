"""A HiddenStateJob run for real: the operator's Indexed Job on the pod runner, vLLM 0.32 as the native sidecar
with vLLM's own extract_hidden_states method and ExampleHiddenStatesConnector (the harness's connector shim on
its PYTHONPATH, nothing else changed), our driver as the main container, SmolLM2 in float32.

One shard and both faults in it, three vLLM starts in all (how a job splits into shards, the stand-in tiers hold
exactly: tests/test_hidden_states_driver.py runs 2,000 samples over four shards). Mid-shard, vLLM is SIGKILLed
(the sidecar restarts in its pod), then, once samples land again, the driver is SIGKILLed (the pod fails; the Job
retries the index in a new pod, which resumes from the manifest). Then every manifest line's file
exists with the right shape and dtype, token ids equal vLLM's /tokenize, layer ids below the last match
transformers' output_hidden_states (cosine >= 0.9999) and the last id matches the input of the final norm
(computed by e2e/realvllm/oracles.py, which never imports vllm), no sample is lost or duplicated, and the
resource's status counts what is on disk."""

from __future__ import annotations

import json
import os
import random
import signal
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.podrunner.runner_process import MACHINE_OVERRIDES, PodRunner, eager, placed
from e2e.realvllm import runtime
from e2e.tests.operator.real_vllm.conftest import oracle
from e2e.tests.operator.real_vllm.pool import slot

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1800)]

LAYERS = [3, 29, 30]  # SmolLM2-135M has 30 decoder layers: 30 is the last (pre-norm), 3 and 29 below it
PROMPTS = 96  # long enough to be killed in the middle of twice: samples land in tens a second once vLLM is up
KILL_AFTER = 8
WORDS = ("the quick brown fox jumps over a lazy dog while seven tired engineers count every hidden state of "
         "their small model under a grey winter sky near the river").split()  # fmt: skip


def dataset() -> list[dict[str, Any]]:
    rng = random.Random(23)
    return [{"id": f"p{i:03d}", "prompt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 90)))}
            for i in range(PROMPTS)]  # fmt: skip


def job(namespace: str) -> dict[str, Any]:
    return placed({
        "apiVersion": "vllm-pooling.io/v1alpha1",
        "kind": "HiddenStateJob",
        "metadata": {"name": "smollm2-states", "namespace": namespace},
        "spec": {
            "model": {"name": "/smollm2", "source": {"volume": {"claimName": "models", "path": "/smollm2", "readOnly": True}}},
            "layers": LAYERS,
            "dataset": {"volume": {"claimName": "data", "path": f"/{namespace}/prompts.jsonl"}},
            "output": {"volume": {"claimName": "data", "path": f"/{namespace}/out"}},
            "shards": 1,
            "parallelism": 1,
            "engine": eager({"image": MACHINE_OVERRIDES["engine.image"], "dtype": "float32", "maxModelLen": 512}),
            "resources": MACHINE_OVERRIDES["resources"],
        },
    })  # fmt: skip


def manifest(out: Path, shard: int) -> list[dict[str, Any]]:
    p = out / f"shard-{shard}" / "manifest.jsonl"
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.endswith("}")]


def shard_pod(cluster: ControlPlane, pod_runner: PodRunner, namespace: str, index: int, after: set[str]) -> dict[str, Any] | None:
    """The runner record of the pod of shard ``index`` not in ``after``, once its vLLM sidecar runs."""
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    for p in pods:
        ann = p["metadata"].get("annotations") or {}
        if ann.get("batch.kubernetes.io/job-completion-index") != str(index) or p["metadata"]["name"] in after:
            continue
        try:
            rec = pod_runner.pod(namespace, p["metadata"]["name"])
        except FileNotFoundError:
            return None
        if rec["containers"]["vllm"].get("pid"):
            return rec
    return None


def kill_group(pid: int) -> None:
    """SIGKILL a container's process group (vLLM's EngineCore and workers with it), as a crash would."""
    os.killpg(pid, signal.SIGKILL)


def tokenize(url: str, model: str, prompt: str) -> list[int]:
    req = urllib.request.Request(f"{url}/tokenize", data=json.dumps({"model": model, "prompt": prompt}).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["tokens"]


POOL = [slot("the HiddenStateJob's vLLM sidecar")]  # the server pool starts one server beside it, not two



def test_hidden_state_job_through_vllms_own_connector(
    cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner, namespace: str, vllm_runtime: runtime.Runtime
) -> None:
    began = time.monotonic()
    pod_runner.model_claim(namespace)
    data = pod_runner.data_claim(namespace) / namespace
    data.mkdir(parents=True)
    samples = dataset()
    (data / "prompts.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    out = data / "out"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job(namespace)))

    # once samples are landing, read /tokenize for every prompt, then kill vLLM mid-shard
    rec0 = wait_for(lambda: shard_pod(cluster, pod_runner, namespace, 0, set()), timeout=120, what="the shard's vLLM started")
    wait_for(lambda: len(manifest(out, 0)) >= KILL_AFTER, timeout=900, what="the shard writing samples (vLLM start-up)",
             interval=0.05, max_interval=0.05)  # fmt: skip
    url = f"http://127.0.0.1:{rec0['ports']['http']['local']}"
    with ThreadPoolExecutor(8) as pool:  # quickly: the shard goes on meanwhile, and must be killed in its middle
        expected = dict(zip((s["id"] for s in samples), pool.map(lambda s: tokenize(url, "smollm2-states", s["prompt"]), samples), strict=True))
    landed = len(manifest(out, 0))
    assert landed < PROMPTS - KILL_AFTER, "the shard got too far before vLLM could be killed in its middle"
    kill_group(rec0["containers"]["vllm"]["pid"])
    print(f"hidden states: killed vLLM after {landed} samples, {time.monotonic() - began:.0f} s in")

    # vLLM restarts in the pod and the driver goes on; once samples land again, kill the driver: the pod fails and
    # the Job retries the index in a new pod
    wait_for(lambda: len(manifest(out, 0)) >= landed + KILL_AFTER, timeout=900, what="samples landing again (vLLM restarted)",
             interval=0.05, max_interval=0.05)  # fmt: skip
    landed1 = len(manifest(out, 0))
    assert landed1 < PROMPTS, "the shard finished before its driver could be killed in its middle"
    kill_group(pod_runner.pod(namespace, rec0["name"])["containers"]["driver"]["pid"])
    print(f"hidden states: killed the driver after {landed1} samples, {time.monotonic() - began:.0f} s in")

    def succeeded() -> dict[str, Any] | None:
        res = cluster.kubectl("get", "hiddenstatejob", "smollm2-states", "-n", namespace, "-o", "json")
        obj = json.loads(res.stdout)
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        if conds.get("Failed", {}).get("status") == "True":
            logs = "\n".join(pod_runner.container_log(namespace, p["name"]) for p in pod_runner.pods(namespace))
            raise AssertionError(f"the job failed: {conds['Failed']}\n{logs}")
        return obj if conds.get("Succeeded", {}).get("status") == "True" else None

    obj = wait_for(succeeded, timeout=1200, what="the HiddenStateJob Succeeded")
    print(f"hidden states: Succeeded {time.monotonic() - began:.0f} s after apply")

    # vLLM was restarted in the first pod, which then failed with its driver; a second pod finished the shard
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    assert {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods} == {"0"}
    [p0] = [p for p in pods if p["metadata"]["name"] == rec0["name"]]
    assert p0["status"]["phase"] == "Failed" and p0["status"]["initContainerStatuses"][0]["restartCount"] >= 1
    assert sorted(p["status"]["phase"] for p in pods) == ["Failed", "Succeeded"]

    # the shim was active in vLLM's processes, and only there
    logs = {c: Path(r["log"]).read_text(errors="replace") for c, r in pod_runner.pod(namespace, p0["metadata"]["name"])["containers"].items()}
    assert "[vpo-connector-shim]" in logs["vllm"] and "[vpo-connector-shim]" not in logs["driver"]

    # no sample lost, none duplicated, every file where its line says
    lines = manifest(out, 0)
    ids = [e["id"] for e in lines]
    assert len(ids) == len(set(ids)) == PROMPTS, (len(ids), len(set(ids)))
    assert set(ids) == set(expected)
    files = []
    for shard in (0,):
        for e in manifest(out, shard):
            f = out / f"shard-{shard}" / e["file"]
            assert f.stat().st_size == e["bytes"], e
            assert e["tokens"] == len(expected[e["id"]])
            files.append((e["id"], f))
    status = obj["status"]
    assert status["samples"] == {"done": PROMPTS, "failed": 0}, status
    assert status["bytesWritten"] == sum(f.stat().st_size for _, f in files)
    leftovers = [p for p in out.rglob("*.safetensors") if p not in {f for _, f in files}]
    assert not leftovers, leftovers[:5]
    # provenance: each shard's run record says what made its files; the estimate is what they hold
    for shard in (0,):
        record = json.loads((out / f"shard-{shard}" / "run.json").read_text())
        assert record["state"] == "succeeded" and record["vllm"]["version"].startswith("0.32"), record
        assert record["vllm"]["command"][:2] == ["vllm", "serve"] and "--kv-transfer-config" in record["vllm"]["command"]
        assert (record["dtype"], record["hiddenSize"], record["layers"]) == ("F32", 576, LAYERS)
        assert record["model"]["name"] == "/smollm2"
    value_bytes = sum(e["tokens"] for e in lines) * len(LAYERS) * 576 * 4
    assert status["storage"]["estimatedBytes"] == value_bytes, status["storage"]

    # the numbers: every file against transformers, in a process without vllm
    ref = oracle(vllm_runtime, "hidden-states", str(vllm_runtime.model_dir(runtime.SMOLLM2)),
                 {"files": [str(f) for _, f in files], "layers": LAYERS})  # fmt: skip
    assert ref["num_hidden_layers"] == 30
    assert set(ref["dtypes"]) == {"float32"}
    assert all(shape == [len(expected[i]), len(LAYERS), ref["hidden_size"]] for (i, _), shape in zip(files, ref["shapes"], strict=True))
    assert [t for t in ref["tokens"]] == [expected[i] for i, _ in files]  # token_ids are /tokenize's
    assert min(ref["layers"]["3"], ref["layers"]["29"]) >= 0.9999, ref["layers"]
    assert ref["layers"]["30"] >= 0.9999, ref["layers"]  # the last id: before the final norm
    print(f"hidden states: min cosine {ref['layers']}; last id against after-norm {ref['last_after_norm']:.3f}; "
          f"{len(files)} files, {status['bytesWritten']} bytes, {time.monotonic() - began:.0f} s in all")
