"""The blocks every resource uses: model and its source, engine, env, compile cache, template, conditions and
the status base, on the base and field types of api/schema.py.

Field names are snake_case in Python and camelCase on the wire (aliases); unknown fields are errors so a
typo such as ``pooler:`` is rejected instead of ignored. Every field carries a description: it becomes the
CRD's ``kubectl explain`` text.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from pooling_operator.api import messages as M
from pooling_operator.api.cel import cel, validations
from pooling_operator.api.schema import (
    Name,
    ObjectDict,
    Quantity,
    Spec,
)


class SecretKeyRef(Spec):
    """A key of a Secret in the resource's namespace."""

    name: Name = Field(description="Name of the Secret, in the resource's namespace.")
    key: str = Field(min_length=1, max_length=253, description="Key inside the Secret.")


class HuggingFaceSource(Spec):
    """Download the model from the Hugging Face Hub."""

    token_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding a Hugging Face token; passed as the HF_TOKEN environment variable, "
        "never as an argument.",
    )


class ModelVolume(Spec):
    """A model already on a PersistentVolumeClaim."""

    claim_name: Name = Field(description="PersistentVolumeClaim holding the model files.")
    path: str = Field(
        default="/",
        pattern=r"^/",
        description="Absolute folder inside the claim that holds config.json and the weights. Default '/'.",
    )
    read_only: bool = Field(default=True, description="Mount the claim read-only. Default true.")


class ModelCacheRef(Spec):
    """A ModelCache in the resource's namespace."""

    name: Name = Field(description="Name of the ModelCache, in the resource's namespace.")


class ModelSource(Spec):
    """Where the weights come from: exactly one of huggingFace, volume or cache. Default: huggingFace, no token."""

    model_config = ConfigDict(json_schema_extra=validations(cel(
        "(has(self.huggingFace) ? 1 : 0) + (has(self.volume) ? 1 : 0) + (has(self.cache) ? 1 : 0) == 1", M.SOURCE_EXACTLY_ONE)))

    hugging_face: HuggingFaceSource | None = Field(
        default=None, description="Download from the Hugging Face Hub (the default)."
    )
    volume: ModelVolume | None = Field(
        default=None,
        description="Load from a PersistentVolumeClaim; HF_HUB_OFFLINE=1 is set so nothing is downloaded.",
    )
    cache: ModelCacheRef | None = Field(
        default=None,
        description="Load from a ModelCache of this namespace: its claim mounted read-only, the Hub offline, the "
        "revision it holds. Pods wait (Ready=False, WaitingForModelCache) until it is Ready. model.name must be "
        "the cache's; a model.revision other than the one it holds is refused.",
    )


class ModelHints(Spec):
    """Facts from the model's config.json that let validation check more before a pod exists.

    Each hint is optional; a rule that needs a missing hint is skipped.
    """

    architectures: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] | None = Field(
        default=None,
        max_length=8,
        description="config.json architectures, e.g. [XLMRobertaModel] or [Qwen3ForCausalLM]. Decides which "
        "pooling tasks the model can serve and whether vLLM can chunk its prompts.",
    )
    num_hidden_layers: int | None = Field(
        default=None, ge=1, le=1024, description="config.json num_hidden_layers: the highest valid hidden-state layer id "
        "(the last decoder layer's output, before the final norm)."
    )
    hidden_size: int | None = Field(
        default=None,
        ge=1,
        le=1048576,
        description="config.json hidden_size: estimates hidden-state file sizes, and bounds the Matryoshka sizes "
        "when nothing projects the output (see embeddingSize).",
    )
    embedding_size: int | None = Field(
        default=None,
        ge=1,
        le=1048576,
        description="The size of the vectors the model outputs when it differs from hiddenSize: config.json "
        "embedding_size, else the out_features of its last sentence-transformers Dense layer. vLLM refuses "
        "Matryoshka dimensions above it with 400 on every request.",
    )
    vocab_size: int | None = Field(
        default=None, ge=1, le=16777216, description="config.json vocab_size: label token ids must be below it."
    )
    num_labels: int | None = Field(
        default=None, ge=1, le=100000, description="Number of classifier outputs; a cross-encoder needs exactly 1."
    )
    num_attention_heads: int | None = Field(
        default=None, ge=1, le=4096, description="config.json num_attention_heads: tensorParallelSize must divide it."
    )
    max_model_len: int | None = Field(
        default=None,
        ge=1,
        le=16777216,
        description="The longest input the model allows (max_position_embeddings, or a sentence-transformers "
        "max_seq_length when smaller): engine.maxModelLen may not exceed it.",
    )
    num_parameters: int | None = Field(
        default=None,
        ge=1,
        le=2**53 - 1,
        description="Parameter count (the safetensors total, e.g. 567754752): sizes the weights of a GPU share "
        "(numParameters x the dtype's bytes).",
    )
    num_key_value_heads: int | None = Field(
        default=None, ge=1, le=4096, description="config.json num_key_value_heads (a decoder's KV cache for a "
        "GPU share). Default numAttentionHeads."
    )
    head_dim: int | None = Field(
        default=None, ge=1, le=65536, description="config.json head_dim when the model sets it (Qwen3 does). "
        "Default hiddenSize / numAttentionHeads."
    )


HfRepo = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^\s]+$")]


class ModelSpec(Spec):
    """The model to serve."""

    name: HfRepo = Field(
        description="Hugging Face repo id (e.g. BAAI/bge-m3: ASCII letters, digits, '-', '_', '.', one '/'), or a "
        "label for the model when source.volume is used (no invisible or direction-changing characters)."
    )
    revision: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Git revision (commit sha, tag or branch) to download. Pin a commit: a missing revision is "
        "reported by validation, not rejected.",
    )
    served_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        pattern=r"^[^\s]+$",
        description="Name clients send as 'model' and the model_name label of vLLM's metrics. Default: the "
        "resource's metadata.name. Always passed as --served-model-name.",
    )
    source: ModelSource | None = Field(default=None, description="Where the weights come from. Default huggingFace.")
    trust_remote_code: bool = Field(
        default=False,
        description="Run the model repository's own Python code (--trust-remote-code). Refused unless the "
        "operator is configured to allow it.",
    )
    matryoshka_dimensions: list[Annotated[int, Field(ge=1, le=65536)]] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Output sizes the model was trained for (Matryoshka representation learning). Declares "
        "Matryoshka support to vLLM (--hf-overrides matryoshka_dimensions) and is the whitelist for "
        "pooling.dimensions.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    hf_overrides: ObjectDict | None = Field(
        default=None,
        description="Keys merged over the model's config.json (--hf-overrides), e.g. {architectures: "
        "[BgeM3EmbeddingModel]} for BGE-M3's sparse and ColBERT heads. Keys owned by typed fields "
        "(matryoshka_dimensions, is_matryoshka) are refused here.",
    )
    hints: ModelHints | None = Field(default=None, description=(ModelHints.__doc__ or "").splitlines()[0])


Dtype = Literal["auto", "float16", "bfloat16", "float32"]


class KeyRef(Spec):
    """A key of a Secret or ConfigMap in the resource's namespace."""

    name: Name = Field(description="Name of the Secret or ConfigMap.")
    key: str = Field(min_length=1, max_length=253, description="The key.")
    optional: bool | None = Field(default=None, description="Start the container even when it is missing.")


class FieldRef(Spec):
    """A field of the pod (Kubernetes ObjectFieldSelector), e.g. metadata.name or status.podIP."""

    field_path: str = Field(min_length=1, max_length=256, description="The pod field's path.")
    api_version: str | None = Field(default=None, description="Schema version of the path. Default v1.")


class ResourceFieldRef(Spec):
    """A container's resource request or limit (Kubernetes ResourceFieldSelector)."""

    resource: str = Field(min_length=1, max_length=128, description="e.g. limits.memory or requests.cpu.")
    container_name: str | None = Field(default=None, max_length=63, description="Default: this container.")
    divisor: Quantity | None = Field(default=None, description="Unit the value is expressed in. Default 1.")


class EnvVarSource(Spec):
    """Where a variable's value comes from (a Kubernetes EnvVarSource): exactly one of these."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "[has(self.secretKeyRef), has(self.configMapKeyRef), has(self.fieldRef), "
                "has(self.resourceFieldRef)].filter(x, x).size() == 1",
                M.ENV_SOURCE_EXACTLY_ONE,
            )
        )
    )

    secret_key_ref: KeyRef | None = Field(default=None, description="A key of a Secret.")
    config_map_key_ref: KeyRef | None = Field(default=None, description="A key of a ConfigMap.")
    field_ref: FieldRef | None = Field(default=None, description=FieldRef.__doc__)
    resource_field_ref: ResourceFieldRef | None = Field(default=None, description=ResourceFieldRef.__doc__)

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvVarSource:
        chosen = [self.secret_key_ref, self.config_map_key_ref, self.field_ref, self.resource_field_ref]
        if sum(x is not None for x in chosen) != 1:
            raise ValueError(M.ENV_SOURCE_EXACTLY_ONE)
        return self


class EnvVar(Spec):
    """An extra environment variable for the vLLM container (a Kubernetes EnvVar)."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")] = (
        Field(description="Variable name.")
    )
    value: str | None = Field(default=None, description="Literal value.")
    value_from: EnvVarSource | None = Field(default=None, description=EnvVarSource.__doc__)


class CompileCacheSpec(Spec):
    """vLLM's compile cache on a volume, shared by the replicas of one service."""

    claim_name: Name = Field(
        description="PersistentVolumeClaim holding the cache (ReadWriteMany for replicas on several nodes). Each "
        "pod restores the entry of its key (the image, device, model, revision and vLLM argv) before vLLM starts "
        "and one pod saves it once vLLM is up. Compiled artifacts are code vLLM runs: one claim per service."
    )


class EngineSpec(Spec):
    """The vLLM server: image, contract version and engine settings. Unset values keep vLLM's defaults."""

    image: str = Field(
        default="vllm/vllm-openai:v0.33.0",
        min_length=1,
        max_length=512,
        description="Container image running `vllm serve`. Default vllm/vllm-openai:v0.33.0.",
    )
    version: str | None = Field(
        default=None,
        pattern=r"^[0-9]+\.[0-9]+$",
        description="vLLM contract version whose rules apply (e.g. '0.33'). Default: read from the image tag.",
    )
    dtype: Dtype | None = Field(default=None, description="Weight and activation dtype (--dtype). Default auto.")
    max_model_len: int | None = Field(
        default=None, ge=1, le=16777216, description="Longest input in tokens (--max-model-len). Default: the model's."
    )
    max_num_batched_tokens: int | None = Field(
        default=None,
        ge=1,
        le=16777216,
        description="Tokens per engine step (--max-num-batched-tokens). Must be >= maxModelLen where vLLM cannot "
        "chunk a prompt (encoder models; MEAN, CLS or STEP pooling).",
    )
    max_num_seqs: int | None = Field(
        default=None, ge=1, le=65536, description="Sequences per engine step (--max-num-seqs)."
    )
    tensor_parallel_size: int | None = Field(
        default=None, ge=1, le=64, description="GPUs one model replica spans (--tensor-parallel-size). Default 1."
    )
    gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Fraction of GPU memory vLLM may use, in (0, 1] (--gpu-memory-utilization). Default: vLLM's.",
    )
    load_format: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="How vLLM reads the weights (--load-format): auto, safetensors, pt, fastsafetensors, "
        "runai_streamer, tensorizer, ... A format whose loader needs a package vLLM does not require is accepted "
        "with a warning naming the package. Default: vLLM's (auto).",
    )
    compile_cache: CompileCacheSpec | None = Field(
        default=None, description="vLLM's compile cache on a volume, so a new replica loads its compiled graphs "
        "instead of compiling them (services only). Default: each pod compiles into its own emptyDir."
    )
    startup_timeout_seconds: int = Field(
        default=1800,
        ge=60,
        le=86400,
        description="How long a pod may take to download and load the model before it is restarted (startup "
        "probe budget and VLLM_ENGINE_READY_TIMEOUT_S). Default 1800.",
    )
    extra_args: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list,
        max_length=128,
        description="Extra `vllm serve` flags and their values. Flags the operator owns (those typed fields "
        "set), secrets, and flags the target vLLM version does not have are refused.",
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=128,
        description="Extra environment variables for the vLLM container. Secrets must come from valueFrom.",
    )


class Toleration(Spec):
    """A Kubernetes Toleration: which node taints the pods accept."""

    key: str | None = Field(default=None, max_length=316, description="The taint key; empty with Exists: every taint.")
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Exists or Equal. Default Equal.")
    value: str | None = Field(default=None, max_length=63, description="The taint value (Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The taint effect; empty: every effect."
    )
    toleration_seconds: int | None = Field(
        # An int64 in Kubernetes; bounded by JSON's exact integers (2**53), as the schema's bounds are read as
        # float64 (2**63 - 1 there becomes -2**63 and would refuse every value).
        default=None, ge=-(2**53 - 1), le=2**53 - 1, description="How long a NoExecute taint is tolerated, in seconds."
    )


class Affinity(Spec):
    """Kubernetes Affinity: node affinity and pod (anti-)affinity terms, as in a pod spec."""

    node_affinity: ObjectDict | None = Field(default=None, description="Kubernetes NodeAffinity.")
    pod_affinity: ObjectDict | None = Field(default=None, description="Kubernetes PodAffinity.")
    pod_anti_affinity: ObjectDict | None = Field(default=None, description="Kubernetes PodAntiAffinity.")


class LocalObjectReference(Spec):
    """A reference to an object by name in the resource's namespace."""

    name: Name = Field(description="Name of the object, in the resource's namespace.")


class TopologySpreadConstraint(Spec):
    """Kubernetes TopologySpreadConstraint: how the pods spread across zones or nodes. Without a labelSelector the
    constraint counts this resource's own pods (its instance and component labels)."""

    max_skew: int = Field(ge=1, le=2**31 - 1, description="The most the pod count may differ between two domains.")
    topology_key: str = Field(min_length=1, max_length=316, description="Node label whose values are the domains, e.g. "
                              "topology.kubernetes.io/zone.")
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(
        description="DoNotSchedule (the pod waits) or ScheduleAnyway (placed, preferring less skew)."
    )
    label_selector: ObjectDict | None = Field(
        default=None, description="Kubernetes LabelSelector of the pods counted. Default: this resource's pods."
    )
    min_domains: int | None = Field(default=None, ge=1, le=2**31 - 1, description="Fewest eligible domains (DoNotSchedule only).")
    match_label_keys: list[Annotated[str, StringConstraints(min_length=1, max_length=316)]] | None = Field(
        default=None, max_length=32, description="Pod label keys whose values narrow the pods counted (e.g. pod-template-hash)."
    )
    node_affinity_policy: Literal["Honor", "Ignore"] | None = Field(default=None, description="Whether nodeAffinity "
                                                                     "and nodeSelector limit the domains. Default Honor.")
    node_taints_policy: Literal["Honor", "Ignore"] | None = Field(default=None, description="Whether node taints limit the "
                                                                    "domains. Default Ignore.")


class TemplateSpec(Spec):
    """Pod placement and metadata added to every pod the resource makes (vLLM, job drivers, cache fills)."""

    node_selector: dict[str, str] | None = Field(default=None, description="Extra node selector labels.")
    tolerations: list[Toleration] | None = Field(default=None, description="Pod tolerations (Kubernetes Toleration).")
    affinity: Affinity | None = Field(default=None, description=Affinity.__doc__)
    priority_class_name: str | None = Field(default=None, max_length=253, description="PriorityClass of the pods.")
    labels: dict[str, str] | None = Field(
        default=None, description="Extra pod labels (never used in selectors)."
    )
    annotations: dict[str, str] | None = Field(default=None, description="Extra pod annotations.")
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, max_length=32, description="Secrets with registry credentials for the pods' images (a private "
        "mirror of vLLM's image, of the operator's).", json_schema_extra={"x-kubernetes-list-type": "map",
                                                                           "x-kubernetes-list-map-keys": ["name"]},
    )
    runtime_class_name: Name | None = Field(
        default=None, max_length=253, description="RuntimeClass of the pods, e.g. nvidia where GPU nodes run the NVIDIA "
        "container runtime behind a runtime class."
    )
    @field_validator("image_pull_secrets")
    @classmethod
    def _distinct_secrets(cls, refs: list[LocalObjectReference] | None) -> list[LocalObjectReference] | None:
        names = [r.name for r in refs or []]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"{', '.join(twice)} appear more than once; name each Secret once")
        return refs

    topology_spread_constraints: list[TopologySpreadConstraint] | None = Field(
        default=None, max_length=16, description="How the pods spread across topology domains (as the PodSpec field; "
        "a constraint without labelSelector counts this resource's pods)."
    )


class Condition(Spec):
    """A Kubernetes condition."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(description="Condition type: Ready, SpecValid, Progressing, Degraded, ...")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str | None = Field(default=None, description="CamelCase reason.")
    message: str | None = Field(default=None, description="Human-readable detail.")
    last_transition_time: str | None = Field(default=None, description="When status last changed.")
    observed_generation: int | None = Field(default=None, description="Generation the condition was computed from.")


class StatusBase(Spec):
    """Fields every status has."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = Field(default=None, description="The spec generation last reconciled.")
    conditions: list[Condition] | None = Field(
        default=None,
        description="Ready, SpecValid, Progressing, Degraded, MetricsAvailable, ScalingLimited (services); "
        "Succeeded, Failed (jobs).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
