"""The rules of a PoolingJob's OpenAI Batch files (spec.dataset.format, spec.output.formats): embeddings only,
and an output file only for an input file. The CRD's CEL says the same (api/pooling_jobs.py). Pure."""

from __future__ import annotations

from collections.abc import Iterator

from pooling_operator.api import PoolingJob
from pooling_operator.api import messages as M
from pooling_operator.api.problems import Problem


def batch_file_problems(resource: PoolingJob) -> Iterator[Problem]:
    """OpenAI Batch files in and out: embeddings only, and an output file only for an input file."""
    spec = resource.spec
    batch_in, batch_out = spec.dataset.format == "openaiBatch", "openaiBatch" in spec.output.formats
    if (batch_in or batch_out) and spec.task != "embed":
        yield Problem("spec.task", M.BATCH_FILE_EMBED_ONLY)
    if batch_out and not batch_in:
        yield Problem("spec.output.formats", M.BATCH_OUTPUT_NEEDS_BATCH_INPUT)
    if len(set(spec.output.formats)) != len(spec.output.formats):
        yield Problem("spec.output.formats", "each format once: safetensors and/or openaiBatch")
