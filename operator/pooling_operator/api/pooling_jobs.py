"""PoolingJob: embed (classify, or pool per token) a whole corpus once, into a volume, resumably; or, with
`mode` instead of `task`, score (query, documents) groups as a ScoringService of that mode would.

The model, task, convert, pooling and embeddingSpace fields are the PoolingService's, validated by the same rules
with the same messages; mode and generative are the ScoringService's, with its rules and messages; the dataset,
output, shards, parallelism, queue and retries are the HiddenStateJob's.

Why a mode and not a kind of its own: a scoring job differs from an embedding job only in the request each line
becomes and in what a row holds (a score, not a vector). Everything else (the Indexed Job, the preflight, the
part files and manifest that resume reads, the budget, Kueue, the run record, status, Argo CD health, alerts and
dashboards) is the same, and a second kind would have copied all of it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from pooling_operator.api import messages as M
from pooling_operator.api.base import ModelSpec, StatusBase
from pooling_operator.api.cel import cel, validations
from pooling_operator.api.job_base import (
    PARALLELISM_RULE,
    ClaimPath,
    JobSpec,
    OutputStatus,
    SampleCounts,
    ShardCounts,
)
from pooling_operator.api.schema import Quantity, Spec
from pooling_operator.api.services import (
    MATRYOSHKA_RULE,
    VECTORS_INPUTS_ONLY,
    Convert,
    EmbeddingSpaceLabel,
    EmbeddingSpaceStatus,
    GenerativeSpec,
    PoolingSpec,
    ScoringMode,
    Task,
)
from pooling_operator.api.space_check import SpaceCheckSpec
from pooling_operator.api.vectors import VectorsSpec


class CorpusSpec(Spec):
    """The corpus: JSONL lines {"id": "...", "text": "..."} or {"id": "...", "token_ids": [...]} (format jsonl;
    with mode, {"id", "query", "documents": [...]} groups or {"id", "text_1", "text_2"} pairs), or an OpenAI Batch
    input file (format openaiBatch). A line that is not an input, or repeats an earlier id, is
    recorded in its shard's failed.jsonl and skipped; a preflight init container counts the lines and reports the
    bad ones before vLLM starts."""

    volume: ClaimPath = Field(description="The file on a claim (mounted read-only).")
    format: Literal["jsonl", "openaiBatch"] = Field(
        default="jsonl",
        description="jsonl (default): one input a line, {\"id\", \"text\"} or {\"id\", \"token_ids\"}. "
        "openaiBatch: the OpenAI Batch API's input file for embeddings, one request a line: {\"custom_id\", "
        "\"method\": \"POST\", \"url\": \"/v1/embeddings\", \"body\": {\"model\", \"input\", \"encoding_format\", "
        "\"dimensions\", \"user\"}}, input a string, a list of strings, token ids or lists of them; body.model, "
        "where given, must be model.name or the served name. Each line is one request to vLLM. With mode (not "
        "generative) the lines are /v1/rerank requests ({\"model\", \"query\", \"documents\", \"top_n\"}) or "
        "/v1/score requests ({\"model\", \"text_1\", \"text_2\"}), as vLLM's run_batch takes them. Task embed or "
        "a scoring mode.",
    )


def _safetensors_only() -> list[Literal["safetensors", "openaiBatch"]]:
    return ["safetensors"]


class VectorOutputSpec(Spec):
    """Where the vectors and manifests go."""

    volume: ClaimPath = Field(
        description="Output folder on a claim: per shard shard-<i>/part-<n>.safetensors (one tensor 'vectors' "
        "[rows, dim] per batch), shard-<i>/manifest.jsonl (one line per input: id, file, row, rows, tokens, "
        "bytes), shard-<i>/run.json (vLLM version and command line, model, revision, embedding space), "
        "shard-<i>/failed.jsonl and shard-<i>/_SUCCESS. The claim is never deleted by the operator."
    )
    storage_budget: Quantity | None = Field(
        default=None,
        description="Most bytes of vectors the job may write (e.g. 200Gi), split evenly across shards; a shard "
        "stops cleanly before a part file would exceed its share.",
    )
    formats: list[Literal["safetensors", "openaiBatch"]] = Field(
        default_factory=_safetensors_only,
        min_length=1,
        max_length=2,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="What the job publishes: safetensors (default: the part files and manifests) and/or "
        "openaiBatch, the OpenAI Batch output file batch-output.jsonl in the output folder, one line per request "
        "line in input order ({\"id\", \"custom_id\", \"response\": {\"status_code\", \"request_id\", \"body\"}, "
        "\"error\"}), written per shard (shard-<i>/batch-output.jsonl) and whole by the last shard to finish; a "
        "line that could not be answered has response null and error {code, message, line}. openaiBatch needs "
        "dataset.format openaiBatch. Without safetensors the part files are removed once the file is whole.",
    )


class _PoolingJobFields(Spec):
    """A PoolingJob's own fields; JobSpec's close its spec (api/job_base.py)."""

    model: ModelSpec = Field(description="The model, as a PoolingService's.")
    task: Task | None = Field(
        default=None,
        description="The one pooling task: embed or classify (one row per input, through /v1/embeddings or "
        "/pooling), token_embed or token_classify (one row per token, through /pooling). Exactly one of task or "
        "mode.",
    )
    mode: ScoringMode | None = Field(
        default=None,
        description="Score instead of pool, as a ScoringService of this mode (the same rules and messages): "
        "crossEncoder, biEncoder or lateInteraction (through /rerank and /score) or generative (through "
        "/generative_scoring). Each dataset line is a (query, documents) group or (text_1, text_2) pairs, one "
        "request to vLLM; its row count is its documents', one float32 score a row, in the documents' order. "
        "Exactly one of task or mode.",
    )
    generative: GenerativeSpec | None = Field(
        default=None, description="Required iff mode is generative: the label tokens, as a ScoringService's."
    )
    convert: Convert = Field(
        default="auto",
        description="Adapt a model to pooling (--convert): auto, none, embed or classify. Default auto.",
    )
    pooling: PoolingSpec | None = Field(default=None, description=PoolingSpec.__doc__)
    embedding_space: EmbeddingSpaceLabel | None = Field(
        default=None,
        description="A label for the vector space the output belongs to. It goes into every shard's run.json "
        "with the space's fingerprint, the same one a PoolingService with this model and pooling publishes "
        "(status.embeddingSpace), so an index built from the output can be matched to the service that answers "
        "its queries.",
    )
    vectors: VectorsSpec | None = Field(
        default=None,
        description=(VectorsSpec.__doc__ or "") + " A job prepends documentInstruction to every text input; "
        "a scoring job (mode) declares inputs only.",
    )
    space_check: SpaceCheckSpec | None = Field(
        default=None,
        description="Refuse to mix spaces: every shard first sends the canaries (spaceCheck.canaries, else the built-in "
        "set) and compares the answers with the space's reference (a PoolingService's of the same embeddingSpace, "
        "else the first shard's own), failing with SpaceDrift before it writes a vector; each shard's run.json "
        "keeps the canaries' vectors, so an index carries its own reference. Needs embeddingSpace and a task "
        "(a scoring job has no space). onDrift does not apply: a job never writes a drifted vector.",
    )
    dataset: CorpusSpec = Field(description=CorpusSpec.__doc__)
    output: VectorOutputSpec = Field(description=VectorOutputSpec.__doc__)
    shards: int = Field(default=1, ge=1, le=10000, description="Indexed Job completions. Default 1.")
    parallelism: int | None = Field(default=None, ge=1, le=10000, description="Shards running at once. Default: shards.")
    batch_size: int = Field(
        default=64, ge=1, le=4096, description="Inputs per request to vLLM; one part file per batch. Default 64."
    )


class PoolingJobSpec(JobSpec, _PoolingJobFields):
    """An Indexed Job: each shard runs vLLM (runner pooling, one task) and a driver sending it the corpus in
    batches."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("self == oldSelf", M.POOLING_JOB_IMMUTABLE),
            PARALLELISM_RULE,
            cel("has(self.task) != has(self.mode)", M.JOB_TASK_OR_MODE, ".task"),
            cel(
                "!has(self.task) || !has(self.pooling) || !has(self.pooling.type) || "
                "(self.task in ['embed', 'classify']) == (self.pooling.type in ['CLS', 'MEAN', 'LAST'])",
                M.POOLING_TYPE_FOR_TASK,
                ".pooling.type",
            ),
            cel("(has(self.mode) && self.mode == 'generative') == has(self.generative)", M.GENERATIVE_IFF_MODE,
                ".generative"),
            cel("!has(self.mode) || !has(self.pooling) || self.mode == 'biEncoder'", M.POOLING_BIENCODER_ONLY, ".pooling"),
            cel(
                "!has(self.mode) || !has(self.pooling) || !has(self.pooling.type) || "
                "self.pooling.type in ['CLS', 'MEAN', 'LAST']",
                M.BIENCODER_SEQUENCE_POOLING,
                ".pooling.type",
            ),
            cel("!has(self.mode) || !has(self.embeddingSpace)", M.SCORING_JOB_NO_SPACE, ".embeddingSpace"),
            cel("!has(self.spaceCheck) || has(self.embeddingSpace)", M.SPACE_CHECK_NEEDS_SPACE, ".spaceCheck"),
            cel("!has(self.mode) || !has(self.convert) || self.convert == 'auto'", M.SCORING_JOB_CONVERT, ".convert"),
            MATRYOSHKA_RULE,
            cel(f"!has(self.mode) || {VECTORS_INPUTS_ONLY}", M.SCORING_VECTORS_INPUTS_ONLY, ".vectors"),
            cel(
                "has(self.mode) || (has(self.task) && self.task == 'embed') || "
                "((!has(self.dataset.format) || self.dataset.format == 'jsonl') && "
                "(!has(self.output.formats) || !('openaiBatch' in self.output.formats)))",
                M.BATCH_FILE_EMBED_ONLY,
                ".task",
            ),
            cel(
                "!has(self.mode) || self.mode != 'generative' || "
                "((!has(self.dataset.format) || self.dataset.format == 'jsonl') && "
                "(!has(self.output.formats) || !('openaiBatch' in self.output.formats)))",
                M.GENERATIVE_BATCH_FILE,
                ".dataset.format",
            ),
            cel(
                "!has(self.output.formats) || !('openaiBatch' in self.output.formats) || "
                "(has(self.dataset.format) && self.dataset.format == 'openaiBatch')",
                M.BATCH_OUTPUT_NEEDS_BATCH_INPUT,
                ".output.formats",
            ),
            cel(
                "!has(self.pooling) || !has(self.pooling.dimensions) || "
                "(has(self.task) && self.task in ['embed', 'token_embed']) || (has(self.mode) && self.mode == 'biEncoder')",
                M.DIMENSIONS_EMBEDDING_ONLY,
                ".pooling.dimensions",
            ),
        )
    )


class CorpusStatus(Spec):
    """What the preflight found in the corpus, before vLLM started."""

    model_config = ConfigDict(extra="ignore")

    lines: int | None = Field(default=None, description="Non-blank lines in the corpus file. Lines that are not an "
                              "input count in samples.failed and are listed in their shard's failed.jsonl.")  # fmt: skip
    checked_shards: int | None = Field(default=None, description="Shards whose preflight has reported.")


class VectorsStatus(Spec):
    """What the output holds."""

    model_config = ConfigDict(extra="ignore")

    dtype: str | None = Field(default=None, description="The vectors' dtype: float32, float16 or bfloat16 "
                              "(engine.dtype; float32 when auto).")  # fmt: skip
    dimension: int | None = Field(default=None, description="Values per row, once a shard has written one.")


class VectorStorageStatus(Spec):
    """What the output will take: the estimate next to the budget."""

    model_config = ConfigDict(extra="ignore")

    estimated_bytes: int | None = Field(
        default=None,
        description="Projected bytes of part files for the whole corpus: bytes written per input done, times the "
        "corpus's inputs. Absent until a shard has written a part file.",
    )
    estimate: str | None = Field(default=None, description="estimatedBytes as a quantity (e.g. 1.5Ti).")
    budget: str | None = Field(default=None, description="spec.output.storageBudget, as written.")
    basis: str | None = Field(default=None, description="What the estimate is projected from.")


class VectorOutputStatus(OutputStatus):
    """Where the results are."""

    batch_output: str | None = Field(
        default=None,
        description="With output.formats openaiBatch: the OpenAI Batch output file (claim:path), whole once the "
        "job has Succeeded.",
    )


class PoolingJobStatus(StatusBase):
    """Observed state of a PoolingJob."""

    shards: ShardCounts | None = Field(default=None, description=ShardCounts.__doc__)
    samples: SampleCounts | None = Field(default=None, description=SampleCounts.__doc__)
    dataset: CorpusStatus | None = Field(default=None, description=CorpusStatus.__doc__)
    vectors: VectorsStatus | None = Field(default=None, description=VectorsStatus.__doc__)
    bytes_written: int | None = Field(default=None, description="Bytes of part files written.")
    output: VectorOutputStatus | None = Field(default=None, description=VectorOutputStatus.__doc__)
    storage: VectorStorageStatus | None = Field(default=None, description=VectorStorageStatus.__doc__)
    embedding_space: EmbeddingSpaceStatus | None = Field(default=None, description=EmbeddingSpaceStatus.__doc__)
    start_time: str | None = Field(default=None, description="When the Job started.")
    completion_time: str | None = Field(default=None, description="When the Job finished.")
