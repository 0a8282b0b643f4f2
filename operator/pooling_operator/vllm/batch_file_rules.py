"""The rules of a PoolingJob's own choices: exactly one of task or mode, what a scoring job (mode) leaves out,
and its OpenAI Batch files (spec.dataset.format, spec.output.formats): embeddings or a scoring mode, and an
output file only for an input file. The CRD's CEL says the same (api/pooling_jobs.py). Pure."""

from __future__ import annotations

from collections.abc import Iterator

from pooling_operator.api import PoolingJob
from pooling_operator.api import messages as M
from pooling_operator.api.problems import Problem


def batch_file_problems(resource: PoolingJob) -> Iterator[Problem]:
    """Task or mode, and OpenAI Batch files in and out: embeddings or scoring, an output file only for an input
    file."""
    spec = resource.spec
    if (spec.task is None) == (spec.mode is None):
        yield Problem("spec.task", M.JOB_TASK_OR_MODE)
    if spec.mode is None and spec.generative is not None:
        yield Problem("spec.generative", M.GENERATIVE_IFF_MODE)
    if spec.space_check is not None and not spec.embedding_space:
        yield Problem("spec.spaceCheck", M.SPACE_CHECK_NEEDS_SPACE)
    if spec.mode is not None:
        if spec.embedding_space is not None:
            yield Problem("spec.embeddingSpace", M.SCORING_JOB_NO_SPACE)
        if spec.convert != "auto":
            yield Problem("spec.convert", M.SCORING_JOB_CONVERT)
    batch_in, batch_out = spec.dataset.format == "openaiBatch", "openaiBatch" in spec.output.formats
    if (batch_in or batch_out) and spec.task is not None and spec.task != "embed":
        yield Problem("spec.task", M.BATCH_FILE_EMBED_ONLY)
    if (batch_in or batch_out) and spec.mode == "generative":
        yield Problem("spec.dataset.format", M.GENERATIVE_BATCH_FILE)
    if batch_out and not batch_in:
        yield Problem("spec.output.formats", M.BATCH_OUTPUT_NEEDS_BATCH_INPUT)
    if len(set(spec.output.formats)) != len(spec.output.formats):
        yield Problem("spec.output.formats", "each format once: safetensors and/or openaiBatch")
