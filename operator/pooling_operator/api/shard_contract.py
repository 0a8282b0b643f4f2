"""The shard contract: what one shard of a job writes and the operator reads, for every job kind (the
HiddenStateJob's driver, pods/hidden_states/, and the PoolingJob's, pods/vectors/, over pods/shard/), defined
once for both sides. A kind adds only what differs (api/pooling_job_contract.py: the PoolingJob's output folder):

- the progress ConfigMap: one data key per shard, ``shard-<I>``, holding a compact JSON record with
  the keys ``PROGRESS_FIELDS`` and a state from ``STATES``;
- the output folder: per shard ``shard-<I>/`` with one ``.safetensors`` file per finished sample,
  ``manifest.jsonl`` (one line per finished sample, fields ``MANIFEST_FIELDS``), ``failed.jsonl`` (fields
  ``FAILED_FIELDS``) and the ``_SUCCESS`` marker, written last;
- the driver's exit codes, and which of them end the whole Job at once.

Pure data: no I/O. The condition reasons a failure state maps to are status's business
(status/jobs.py maps these states to status/conditions.py's reasons).
"""

from __future__ import annotations

import json
from typing import Any

# --- The progress ConfigMap --------------------------------------------------------------------------

PROGRESS_KEY_PREFIX = "shard-"


def progress_key(shard: int) -> str:
    """The ConfigMap data key of one shard's progress record."""
    return f"{PROGRESS_KEY_PREFIX}{shard}"


def progress_shard(key: str) -> int | None:
    """The shard a data key belongs to, or None for a key that is not a shard's."""
    if not key.startswith(PROGRESS_KEY_PREFIX):
        return None
    try:
        return int(key.removeprefix(PROGRESS_KEY_PREFIX))
    except ValueError:
        return None


# The keys of a progress record.
PROGRESS_STATE = "state"
PROGRESS_DONE = "done"  # samples finished, earlier runs included
PROGRESS_FAILED = "failed"  # samples that failed in the latest run
PROGRESS_BYTES = "bytes"  # bytes of the finished samples' files
PROGRESS_TOTAL = "total"  # samples of the shard
PROGRESS_UPDATED = "updated"  # RFC 3339 time of the write
PROGRESS_TOKENS = "tokens"  # prompt tokens of the finished samples
PROGRESS_HIDDEN_SIZE = "hiddenSize"  # the files' hidden size, 0 until known
PROGRESS_VALUE_BYTES = "valueBytes"  # bytes of one hidden-state value (2 or 4), 0 until known
PROGRESS_FIELDS = (PROGRESS_STATE, PROGRESS_DONE, PROGRESS_FAILED, PROGRESS_BYTES, PROGRESS_TOTAL, PROGRESS_UPDATED,
                   PROGRESS_TOKENS, PROGRESS_HIDDEN_SIZE, PROGRESS_VALUE_BYTES)  # fmt: skip

# The states of a shard. Only RUNNING is not final.
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"  # vLLM unavailable or an unexpected error: the Job retries the shard
BUDGET_EXCEEDED = "budget_exceeded"  # stopped before exceeding its share of the storage budget
DATASET_UNREADABLE = "dataset_unreadable"
OUTPUT_FULL = "output_full"  # the output volume ran out of space (ENOSPC); what was finished is kept
SPACE_DRIFT = "space_drift"  # a PoolingJob's canaries drifted from the space's reference: nothing was written
STATES = (RUNNING, SUCCEEDED, FAILED, BUDGET_EXCEEDED, DATASET_UNREADABLE, OUTPUT_FULL, SPACE_DRIFT)
FAILURE_STATES = (FAILED, BUDGET_EXCEEDED, DATASET_UNREADABLE, OUTPUT_FULL, SPACE_DRIFT)

# --- The driver's exit codes --------------------------------------------------------------------------

EXIT_OK = 0  # done; failed samples are listed in failed.jsonl and do not fail the shard
EXIT_FAILED = 1  # vLLM unavailable or an unexpected error: the Job retries the shard
EXIT_USAGE = 2  # bad arguments
EXIT_BUDGET_EXCEEDED = 3
EXIT_DATASET_UNREADABLE = 4
EXIT_OUTPUT_FULL = 5
EXIT_SPACE_DRIFT = 6

# The failure states that end the whole Job at once (a retry cannot help), with the exit code of each;
# the Job's podFailurePolicy fails the Job on exactly these codes. In the order status looks for them.
# A full output volume ends the Job too: every shard writes to the same volume, and a retry would only fill
# it again; once space is freed, running the job again resumes every shard from its manifest.
JOB_ENDING_EXIT_CODES = {
    BUDGET_EXCEEDED: EXIT_BUDGET_EXCEEDED,
    DATASET_UNREADABLE: EXIT_DATASET_UNREADABLE,
    OUTPUT_FULL: EXIT_OUTPUT_FULL,
    SPACE_DRIFT: EXIT_SPACE_DRIFT,  # the engine computes another space: a retry computes the same
}

# --- The output folder --------------------------------------------------------------------------------

SAMPLE_SUFFIX = ".safetensors"  # one file per finished sample, in its shard's folder
MANIFEST = "manifest.jsonl"
FAILED_LOG = "failed.jsonl"
SUCCESS_MARKER = "_SUCCESS"  # JSON counts, written last: the shard is done
# One manifest line per finished sample; ``file`` is relative to the manifest's folder.
MANIFEST_FIELDS = ("id", "file", "tokens", "bytes", "sha256")
# One failed.jsonl line per failed sample of the latest run.
FAILED_FIELDS = ("id", "line", "reason")


RUN_RECORD = "run.json"  # beside each shard's manifest: what ran (the drivers write it; nothing in the operator reads it)


def run_info(model: str, revision: str | None, image: str, command: list[str], **more: Any) -> str:
    """The ``--run-info`` document the operator hands a driver for its run record: the model, its revision, the
    image and vLLM's full command line (Kubernetes expands $(JOB_COMPLETION_INDEX) in it, as in vLLM's), plus
    what a mode adds (a PoolingJob: its task and embedding space). The record reads these keys back."""
    return json.dumps({"model": model, "revision": revision, "image": image, "command": command, **more},
                      separators=(",", ":"))


STAGING_FOLDER = ".staging"  # vLLM's shared_storage_path lives under it, one folder per shard


def shard_folder(shard: int | str) -> str:
    """A shard's folder, relative to the output folder (or to STAGING_FOLDER); the index may be the pod's
    `$(JOB_COMPLETION_INDEX)`, expanded by the kubelet."""
    return f"shard-{shard}"


def manifest_path(shard: int) -> str:
    """A shard's manifest, relative to the output folder."""
    return f"{shard_folder(shard)}/{MANIFEST}"
