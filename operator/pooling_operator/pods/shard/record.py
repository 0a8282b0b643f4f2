"""The run record beside a shard's manifest (``shard-<i>/run.json``): what produced the files.

The manifest says what each sample's file is (name, tokens, bytes, sha256); the record says how the files
were made, so a reader months later can tell two runs apart and reproduce one: vLLM's version (its
``/version``) and full command line, the image, the model's name and revision, the layer ids, the dtype and
hidden size the files hold (from the first file of this run when the engine's dtype was auto), the driver's
version, and when the run started and ended. Written atomically at the start of each run, when the first
file has told the dtype, and at the end; a resumed shard's record is the last run's.

A PoolingJob's record (``task`` set: the vectors mode) has no layers and hidden size; instead it carries the
task, the embedding space (label and fingerprint, from --run-info) and the vectors' dtype (the requested
one: float32, float16 or bfloat16) and dimension (from the first answer, or the files a resumed run kept).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pooling_operator.api.clock import rfc3339


@dataclass
class RunRecord:
    shard: int
    shards: int
    layers: tuple[int, ...]
    run_info: dict[str, Any]  # from the operator (--run-info, api/shard_contract.run_info)
    dtype: str | None = None  # safetensors' name (F32, BF16, F16); None until a file or the flags say
    hidden_size: int | None = None
    vllm_version: str | None = None
    started: str = field(default_factory=rfc3339)
    finished: str | None = None
    state: str = "running"
    task: str | None = None  # the vectors mode (a PoolingJob) when set
    mode: str | None = None  # a scoring job's (a PoolingJob with spec.mode): its rows are scores
    dimension: int | None = None  # the vectors' last axis, once known
    space_check: dict[str, Any] | None = None  # a PoolingJob's canaries and what they were compared with (spec.spaceCheck)

    def doc(self, driver_version: str) -> dict[str, Any]:
        """run.json: what ran, then what the shard's files hold (hidden states: layers, dtype, hidden size; a
        PoolingJob's vectors: task, embedding space, dtype, dimension; a scoring job's: mode, dtype, dimension 1)."""
        ran = {
            "shard": self.shard,
            "shards": self.shards,
            "state": self.state,
            "started": self.started,
            "finished": self.finished,
            "vllm": {"version": self.vllm_version, "image": self.run_info.get("image"),
                     "command": self.run_info.get("command")},
            "model": {"name": self.run_info.get("model"), "revision": self.run_info.get("revision")},
        }  # fmt: skip
        held: dict[str, Any]
        if self.mode is not None:
            held = {"mode": self.mode, "dtype": self.dtype, "dimension": self.dimension}
        elif self.task is None:
            held = {"layers": list(self.layers), "dtype": self.dtype, "hiddenSize": self.hidden_size}
        else:
            space = self.run_info.get("embeddingSpace")
            held = {"task": self.task, "embeddingSpace": space if isinstance(space, dict) else None,
                    "dtype": self.dtype, "dimension": self.dimension}
            vectors = self.run_info.get("vectors")  # spec.vectors as declared: the instruction every input had
            if isinstance(vectors, dict):
                held["vectors"] = vectors
        if self.space_check is not None:
            held["spaceCheck"] = self.space_check
        return {**ran, **held, "driver": {"version": driver_version}}


def write_record(path: Path, record: RunRecord, driver_version: str) -> None:
    """Atomically: a reader sees the previous record or this one, never a torn one. A write that fails (the
    driver rewrites the record after the volume filled up) takes its temporary file with it. The record is
    provenance, not output: it bypasses ``files.DISK``, the seam where tests fill the volume for the samples."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(record.doc(driver_version), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def finish(record: RunRecord, state: str) -> None:
    record.state, record.finished = state, rfc3339()
