"""HiddenStateJobs on the hidden-state stand-in image (runner_process.STANDIN_IMAGE), for the tests where the Job's
plumbing is the point, not vLLM's numbers (test_hidden_states_standin.py, test_kueue_real.py): the job's files
laid out in the runner's data claim, its body, and its manifests read back."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from e2e.podrunner.runner_process import STANDIN_IMAGE, placed

WORDS = ("a small grey cat counts seven hidden states under the winter sky near an old river bank while quiet "
         "engineers queue their batch behind a higher priority one").split()  # fmt: skip


def prompts(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": f"p{i:03d}", "prompt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30)))} for i in range(n)]


def standin_job(namespace: str, name: str, data: Path, samples: list[dict[str, Any]], *, layers: list[int],
                hidden_size: int, shards: int, queue: dict[str, str] | None = None,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """A HiddenStateJob placed on the runner, its sidecar the stand-in. Writes into `data` (the runner's data claim
    folder of the namespace) `<name>/prompts.jsonl` and a model folder holding only config.json (the stand-in
    reads hidden_size there, as vLLM would); the output goes to `<name>/out`."""
    folder = data / name
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text(json.dumps({"hidden_size": hidden_size, "num_hidden_layers": max(layers) + 1}))
    (folder / "prompts.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    rel = f"/{namespace}/{name}"
    spec: dict[str, Any] = {
        "model": {"name": "/tiny", "source": {"volume": {"claimName": "data", "path": f"{rel}/model", "readOnly": True}}},
        "layers": layers,
        "dataset": {"volume": {"claimName": "data", "path": f"{rel}/prompts.jsonl"}},
        "output": {"volume": {"claimName": "data", "path": f"{rel}/out"}},
        "shards": shards,
        "engine": {"image": STANDIN_IMAGE, "version": "0.32", "dtype": "float32", "maxModelLen": 512,
                   "env": [{"name": k, "value": v} for k, v in (env or {}).items()]},
        "resources": {"gpu": {"count": 1}, "cpu": "250m", "memory": "512Mi"},
    }  # fmt: skip
    if queue is not None:
        spec["queue"] = queue
    return placed({"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "HiddenStateJob",
                   "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def manifest(out: Path, shard: int) -> list[dict[str, Any]]:
    """The shard's manifest lines (a line being written, without its closing brace, is left out)."""
    p = out / f"shard-{shard}" / "manifest.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines() if line.endswith("}")] if p.exists() else []
