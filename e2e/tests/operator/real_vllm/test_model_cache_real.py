"""A ModelCache filled for real and served from by real vLLM 0.32, through the pod runner.

The fill Job runs `pooling-operator model-cache fill` (huggingface_hub's own snapshot_download and
verify_repo_checksums) against the Hub stand-in on loopback serving the packaged MiniLM files; its result comes
back as the pod's termination message; then a PoolingService with `source.cache` mounts the claim, with the
Hub offline, and answers what sentence-transformers computes. A second cache whose blob the Hub corrupts
fails with its condition and holds nothing.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.podrunner.runner_process import MACHINE_OVERRIDES, PodRunner, eager, placed
from e2e.realvllm import runtime
from e2e.standin.hub import Hub, Repo
from e2e.tests.operator.real_vllm.conftest import Deployer, oracle
from e2e.tests.operator.real_vllm.pool import slot
from e2e.tests.operator.real_vllm.test_embeddings import cosine
from e2e.tests.operator.test_services import cond, get, path
from pooling_operator.api import cache_fill_contract as F
from tests.factories import model_cache

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1500)]

POOL = [slot("model cache: the service served from the cache")]  # the pool starts one server beside it, not two

SENTENCES = ["A man is eating food.", "Kubernetes schedules pods onto nodes.", ""]


def _apply(cluster: ControlPlane, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))


def _cache(cluster: ControlPlane, namespace: str, name: str, done: str) -> dict[str, Any]:
    def settled() -> dict[str, Any] | None:
        obj = get(cluster, path(namespace, "modelcaches", name))
        return obj if cond(obj, done).get("status") == "True" else None

    return wait_for(settled, timeout=300, what=f"ModelCache {name} {done}")


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file() or p.is_symlink()}


def test_a_filled_cache_serves_real_vllm_offline_and_a_corrupt_one_fails(
    cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner, hub: Hub, vllm_runtime: runtime.Runtime
) -> None:
    ns = cluster.create_namespace("model-cache-real")
    deployer = Deployer(cluster, pod_runner)
    try:
        claim = pod_runner.data_claim(ns)  # a read-write claim the runner serves from a folder
        repo = Repo(runtime.MINILM.repo_id, vllm_runtime.model_dir(runtime.MINILM))
        hub.repos[repo.repo_id] = repo
        served_before = hub.bytes_served
        began = time.monotonic()
        _apply(cluster, placed(model_cache({"model": {"revision": "main"}, "storage": {"size": None, "claimName": "data"}},
                                           namespace=ns)))
        cache = _cache(cluster, ns, "minilm", "Ready")
        fill_seconds = time.monotonic() - began
        st = cache["status"]
        size = sum(len(v) for v in repo.files.values())
        assert st["revision"] == repo.commit and st["files"] == len(repo.files) and st["bytes"] == size, st
        assert hub.bytes_served - served_before == size  # every byte once
        storage = claim / F.HUB_FOLDER / "models--sentence-transformers--all-MiniLM-L6-v2"
        assert (storage / "snapshots" / repo.commit / "config.json").read_bytes() == repo.files["config.json"]
        assert (storage / "refs" / "main").read_text() == repo.commit
        print(f"\nModelCache fill: {len(repo.files)} files, {size} bytes in {fill_seconds:.1f} s (apply -> Ready)")
        # A Hub that serves one blob corrupted: the fill fails (after its retries), naming the file; nothing lands.
        # Before the server starts: the fill pod needs its CPU request free on the runner's node.
        bad = Repo("acme/minilm-corrupt", vllm_runtime.model_dir(runtime.MINILM), faults={"model.safetensors": "corrupt"})
        hub.repos[bad.repo_id] = bad
        _apply(cluster, placed(model_cache({"model": {"name": bad.repo_id, "revision": "main"},
                                            "storage": {"size": None, "claimName": "data"}}, name="corrupt", namespace=ns)))
        failed = _cache(cluster, ns, "corrupt", "Failed")
        c = cond(failed, "Failed")
        assert c["reason"] == F.CORRUPT and "model.safetensors" in c["message"] and "sha256" in c["message"], c
        assert cond(failed, "Ready")["status"] == "False"
        assert not (claim / F.HUB_FOLDER / "models--acme--minilm-corrupt" / "snapshots" / bad.commit).exists()
        before = _files(claim / F.HUB_FOLDER)

        service = {
            "apiVersion": "vllm-pooling.io/v1alpha1", "kind": "PoolingService",
            "metadata": {"name": "cached", "namespace": ns},
            "spec": {
                "model": {"name": runtime.MINILM.repo_id, "source": {"cache": {"name": "minilm"}}},
                "task": "embed", "pooling": {"type": "MEAN", "normalize": True},
                "engine": eager({"image": MACHINE_OVERRIDES["engine.image"], "dtype": "float32", "maxModelLen": 256}),
                "resources": MACHINE_OVERRIDES["resources"],
            },
        }  # fmt: skip
        served = deployer.serve(service)
        argv = served.plan["argv"]
        assert argv[argv.index("--revision") + 1] == repo.commit  # the commit the cache holds
        assert served.plan["hubLayout"] == []  # the runner laid nothing out: vLLM read what the fill wrote
        r = httpx.post(f"{served.url}/v1/embeddings", json={"model": "cached", "input": SENTENCES}, timeout=60)
        assert r.status_code == 200, r.text
        got = [d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
        want = oracle(vllm_runtime, "embed", str(vllm_runtime.model_dir(runtime.MINILM)), {"sentences": SENTENCES})["vectors"]
        for text, g, w in zip(SENTENCES, got, want, strict=True):
            assert len(g) == 384 and cosine(g, w) >= 0.9999, (text, cosine(g, w))
            assert abs(math.sqrt(sum(x * x for x in g)) - 1) < 1e-4
        assert _files(claim / F.HUB_FOLDER) == before  # served read-only: nothing written into the cache
        startup = served.status.get("startup") or {}
        print(f"served from the cache: apply -> Ready {served.start_seconds:.0f} s; status.startup {startup}")

    finally:
        deployer.close()
        cluster.delete_namespace(ns)
