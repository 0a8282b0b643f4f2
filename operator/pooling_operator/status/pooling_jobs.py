"""Status of a PoolingJob: a job kind's (status/jobs.py), plus what the corpus held, what the vectors are, the
embedding space they belong to and the output's projected size."""

from __future__ import annotations

import posixpath
from typing import Any

from pooling_operator.api import PoolingJob
from pooling_operator.api import shard_contract as hs
from pooling_operator.api.pooling_job_contract import (
    BATCH_OUTPUT,
    CHECKED,
    OPENAI_BATCH,
    PROGRESS_LINES,
    rows_dtype,
)
from pooling_operator.status.jobs import common_job_status, storage_status
from pooling_operator.status.queue import QueueObserved
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.workload import Workload


def _int(p: dict[str, Any], key: str) -> int:
    value = p.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def vector_estimate(progress: dict[int, dict[str, Any]], shards: int) -> tuple[int, str] | None:
    """(bytes, basis): bytes written per input done, over the inputs of the reporting shards, and of the shards
    not reporting yet at their mean. None until some shard has written a part file."""
    done = written = total = 0
    for p in progress.values():
        done, written, total = done + _int(p, hs.PROGRESS_DONE), written + _int(p, hs.PROGRESS_BYTES), total + _int(p, hs.PROGRESS_TOTAL)
    if not done or not written or not progress:
        return None
    projected = written / done * total * max(shards, len(progress)) / len(progress)
    basis = f"{written} bytes for {done} inputs done; {total} inputs in the {len(progress)} of {shards} shards reporting"
    return round(projected), basis


def pooling_job_status(
    resource: PoolingJob, job: dict[str, Any] | None, configmap: dict[str, Any] | None,
    pods: list[dict[str, Any]] | None = None, refusals: list[dict[str, Any]] | None = None,
    queue: QueueObserved | None = None, *, w: Workload,
) -> dict[str, Any]:
    """`w`: the job's workload as the plan serves it (builders.common.served), whose fingerprint its run records carry."""
    status, progress = common_job_status(resource, job, configmap, pods, refusals, queue)
    spec = resource.spec
    lines = [_int(p, PROGRESS_LINES) for p in progress.values() if _int(p, PROGRESS_LINES)]
    if lines:
        checked = sum(1 for p in progress.values() if p.get(hs.PROGRESS_STATE) == CHECKED or _int(p, PROGRESS_LINES))
        status["dataset"] = {"lines": max(lines), "checkedShards": checked}
    vectors: dict[str, Any] = {"dtype": rows_dtype(spec.engine.dtype, spec.mode)}
    dims = {_int(p, hs.PROGRESS_HIDDEN_SIZE) for p in progress.values()} - {0}
    if dims:
        vectors["dimension"] = max(dims)
    status["vectors"] = vectors
    if spec.mode is None:  # a scoring job's rows are scores: no vector space
        space: dict[str, Any] = {"fingerprint": embedding_fingerprint(w)}
        if spec.embedding_space:
            space["label"] = spec.embedding_space
        status["embeddingSpace"] = space
    storage = storage_status(vector_estimate(progress, spec.shards), spec.output.storage_budget)
    if storage is not None:
        status["storage"] = storage
    if OPENAI_BATCH in spec.output.formats:
        out = spec.output.volume
        status["output"]["batchOutput"] = f"{out.claim_name}:{posixpath.join(out.path, BATCH_OUTPUT)}"
    return status
