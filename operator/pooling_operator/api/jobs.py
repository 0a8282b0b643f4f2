"""HiddenStateJob: extract a verifier model's hidden states for a whole prompt dataset."""

from __future__ import annotations

from typing import Annotated

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
from pooling_operator.api.schema import ObjectDict, Quantity, Spec


class DatasetSpec(Spec):
    """The prompts: JSONL lines {"id": "...", "prompt": "..."} or {"id": "...", "token_ids": [...]}."""

    volume: ClaimPath = Field(description="The JSONL file on a claim (mounted read-only).")


class OutputSpec(Spec):
    """Where the safetensors files and manifests go."""

    volume: ClaimPath = Field(
        description="Output folder on a claim: shard-<i>/<id>.safetensors, shard-<i>/manifest.jsonl, "
        "shard-<i>/_SUCCESS. The claim is never deleted by the operator."
    )
    storage_budget: Quantity | None = Field(
        default=None,
        description="Most bytes the job may write (e.g. 2Ti), split evenly across shards; a shard stops "
        "cleanly before exceeding its share. Needs model.hints.hiddenSize.",
    )


class ConnectorSpec(Spec):
    """The vLLM KV connector that writes hidden states."""

    name: str = Field(
        default="ExampleHiddenStatesConnector",
        min_length=1,
        max_length=128,
        description="A hidden-state KV connector. Default ExampleHiddenStatesConnector.",
    )
    extra_config: ObjectDict | None = Field(
        default=None,
        description="kv_connector_extra_config keys (e.g. num_writer_threads). shared_storage_path is set by the "
        "operator inside the output volume.",
    )


class _HiddenStateJobFields(Spec):
    """A HiddenStateJob's own fields; JobSpec's close its spec (api/job_base.py)."""

    model: ModelSpec = Field(
        description="A generate model implementing vLLM's EAGLE-3 hidden-state interface (e.g. Llama, Qwen3)."
    )
    layers: list[Annotated[int, Field(ge=0, le=1024)]] = Field(
        min_length=1,
        max_length=64,
        description="Layer ids to extract: non-empty, unique, ascending. Id k is the residual stream after k "
        "decoder layers: 0 the embeddings, model.hints.numHiddenLayers the last decoder layer's output before "
        "the final norm (vLLM's EAGLE-3 convention; transformers' last hidden_states entry is after the norm).",
        json_schema_extra={"x-kubernetes-list-type": "set", **validations(cel("self.isSorted()", M.LAYERS_ASCENDING))},
    )
    dataset: DatasetSpec = Field(description=DatasetSpec.__doc__)
    output: OutputSpec = Field(description=OutputSpec.__doc__)
    shards: int = Field(default=1, ge=1, le=10000, description="Indexed Job completions. Default 1.")
    parallelism: int | None = Field(default=None, ge=1, le=10000, description="Shards running at once. Default: shards.")
    connector: ConnectorSpec = Field(default_factory=ConnectorSpec, description=ConnectorSpec.__doc__)


class HiddenStateJobSpec(JobSpec, _HiddenStateJobFields):
    """An Indexed Job: each shard runs vLLM with extract_hidden_states and a driver feeding it prompts."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("self == oldSelf", M.JOB_IMMUTABLE),
            PARALLELISM_RULE,
            cel(
                "!has(self.output.storageBudget) || (has(self.model.hints) && has(self.model.hints.hiddenSize))",
                M.BUDGET_NEEDS_HIDDEN_SIZE,
                ".output.storageBudget",
            ),
        )
    )


class StorageStatus(Spec):
    """What the output will take: the estimate next to the budget."""

    model_config = ConfigDict(extra="ignore")

    estimated_bytes: int | None = Field(
        default=None,
        description="Projected bytes of hidden states for the whole dataset: prompt tokens seen x layers x hidden "
        "size x bytes per value, per sample done, times the dataset's samples (shards not yet reporting count "
        "as the mean of those that do). Absent until a shard has finished a sample.",
    )
    estimate: str | None = Field(default=None, description="estimatedBytes as a quantity (e.g. 1.5Ti).")
    budget: str | None = Field(default=None, description="spec.output.storageBudget, as written.")
    basis: str | None = Field(default=None, description="What the estimate is projected from.")


class HiddenStateJobStatus(StatusBase):
    """Observed state of a HiddenStateJob."""

    shards: ShardCounts | None = Field(default=None, description=ShardCounts.__doc__)
    samples: SampleCounts | None = Field(default=None, description=SampleCounts.__doc__)
    bytes_written: int | None = Field(default=None, description="Bytes of safetensors written.")
    output: OutputStatus | None = Field(default=None, description=OutputStatus.__doc__)
    storage: StorageStatus | None = Field(default=None, description=StorageStatus.__doc__)
    start_time: str | None = Field(default=None, description="When the Job started.")
    completion_time: str | None = Field(default=None, description="When the Job finished.")
