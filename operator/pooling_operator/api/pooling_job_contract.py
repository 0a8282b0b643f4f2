"""The contract between the PoolingJob driver (pods/vectors/) and the operator (builders/,
status/).

A PoolingJob's shard keeps the contract every job kind shares (api/shard_contract) wherever the kinds agree:
the progress ConfigMap's keys and fields, the shard states, the exit codes and which of them end the Job,
``failed.jsonl`` and ``_SUCCESS``. What differs is the output folder:

- per shard ``shard-<I>/part-<NNNNNN>.safetensors``: one file per batch, holding one tensor ``vectors``
  ``[rows, dim]`` (rows in the order of the batch's manifest lines) in the vector dtype;
- ``shard-<I>/manifest.jsonl``: one line per finished input, fields ``MANIFEST_FIELDS``: its id, the part
  file (relative to the manifest's folder), its first row there and its row count (1 for the sequence tasks,
  embed and classify; its token count for token_embed and token_classify, whose rows are concatenated), its
  prompt tokens and the part file's size in bytes (what resume checks);
- ``shard-<I>/run.json``: the run record, which for a PoolingJob also carries the task and the embedding
  space (label and fingerprint, the same fingerprint a PoolingService with the same model and pooling
  publishes in status.embeddingSpace).

The driver has two commands: ``pooling-job preflight`` (an init container that runs before vLLM starts: it
reads the whole dataset, counts its lines and reports this shard's samples and bad lines, state CHECKED) and
``pooling-job run`` (the main container).

Pure data: no I/O.
"""

from __future__ import annotations

VECTORS = "vectors"  # the one tensor of a part file
PART_PREFIX = "part-"
PART_SUFFIX = ".safetensors"
MANIFEST_FIELDS = ("id", "file", "row", "rows", "tokens", "bytes")

# The dataset's JSONL: {"id": ..., "text": ...} or {"id": ..., "token_ids": [...]}.
TEXT_KEY = "text"

# spec.dataset.format and spec.output.formats. An OpenAI Batch input file (openaiBatch) is read by
# pods/vectors/openai_batch.py; the OpenAI Batch output file is shard-<I>/BATCH_OUTPUT per shard and BATCH_OUTPUT
# beside the shard folders for the whole job, in input order (pods/vectors/batch_output.py).
JSONL = "jsonl"
OPENAI_BATCH = "openaiBatch"
SAFETENSORS = "safetensors"
DATASET_FORMATS = (JSONL, OPENAI_BATCH)
OUTPUT_FORMATS = (SAFETENSORS, OPENAI_BATCH)
BATCH_OUTPUT = "batch-output.jsonl"

# The shard state the preflight reports (not final, not a failure): the dataset was read and counted.
CHECKED = "checked"
PROGRESS_LINES = "lines"  # the dataset's non-blank lines (the whole file), from the preflight

# The vector dtypes: the driver asks vLLM for exactly this (embed_dtype, little-endian) and writes it as is.
VECTOR_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
VECTOR_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

# Where each task's inputs go.
ROUTES = {"embed": "/v1/embeddings", "classify": "/pooling", "token_embed": "/pooling", "token_classify": "/pooling"}
TOKEN_TASKS = ("token_embed", "token_classify")
# A scoring job (spec.mode): each line's scores are rows of one value, float32 whatever engine.dtype (vLLM answers
# them as JSON numbers), and go where the line's shape says (pods/vectors/scoring.py).
SCORE_DTYPE = "float32"
SCORING_MODES = ("crossEncoder", "biEncoder", "lateInteraction", "generative")
SCORING_ROUTES = {"rerank": "/rerank", "score": "/score", "generative": "/generative_scoring"}


# spec.spaceCheck of a PoolingJob: where the space's reference ConfigMap and the user's canaries are mounted in a
# shard's pod (both optional volumes: a reference may not exist yet), and the run record's key for the canaries.
SPACE_REFERENCE_MOUNT = "/space-reference"
SPACE_CANARIES_MOUNT = "/space-canaries"
RUN_RECORD_SPACE_CHECK = "spaceCheck"


def part_name(index: int) -> str:
    """The name of a shard's ``index``-th part file (0-based)."""
    return f"{PART_PREFIX}{index:06d}{PART_SUFFIX}"


def part_index(name: str) -> int | None:
    """The index of a part file's name, or None for any other name."""
    if not (name.startswith(PART_PREFIX) and name.endswith(PART_SUFFIX)):
        return None
    digits = name[len(PART_PREFIX) : -len(PART_SUFFIX)]
    return int(digits) if digits.isdigit() else None


def vector_dtype(engine_dtype: str | None) -> str:
    """The vectors' dtype for an engine.dtype, by the HiddenStateJob driver's rule: an explicit dtype is
    written as is; ``auto`` (whose width depends on the model and the device) is written as float32, which
    holds every value vLLM computes in float16, bfloat16 or float32 exactly."""
    return {"float16": "float16", "bfloat16": "bfloat16"}.get(engine_dtype or "auto", "float32")


def rows_dtype(engine_dtype: str | None, mode: str | None) -> str:
    """What a job's part files hold: vectors in ``vector_dtype``, or a scoring job's (``mode``) scores, SCORE_DTYPE."""
    return SCORE_DTYPE if mode is not None else vector_dtype(engine_dtype)
