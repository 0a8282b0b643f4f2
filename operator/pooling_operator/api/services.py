"""PoolingService and ScoringService: long-running vLLM servers."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints

from pooling_operator.api import messages as M
from pooling_operator.api.autoscaling import (  # noqa: F401  (re-exported: their users import them from here)
    AutoscalingSpec,
    AutoscalingStatus,
    Backend,
    CostStatus,
    PolicyRef,
    ScaleBehavior,
)
from pooling_operator.api.base import EngineSpec, ModelSpec, SecretKeyRef, StatusBase, TemplateSpec
from pooling_operator.api.cel import cel, validations
from pooling_operator.api.gpu import ResourcesSpec
from pooling_operator.api.routing import RoutingSpec
from pooling_operator.api.schema import Spec
from pooling_operator.api.space_check import SpaceCheckSpec, SpaceCheckStatus
from pooling_operator.api.startup import StartupStatus
from pooling_operator.api.vectors import VectorsSpec, VectorsStatus

Task = Literal["embed", "classify", "token_embed", "token_classify"]
SEQUENCE_TASKS = ("embed", "classify")
EMBEDDING_TASKS = ("embed", "token_embed")
Convert = Literal["auto", "none", "embed", "classify"]
PoolingType = Literal["CLS", "MEAN", "LAST", "ALL", "STEP"]
SEQUENCE_POOLING = ("CLS", "MEAN", "LAST")
ScoringMode = Literal["crossEncoder", "biEncoder", "lateInteraction", "generative"]


class ChunkedProcessing(Spec):
    """Embed inputs longer than maxModelLen by splitting them into chunks and averaging the results."""

    enabled: bool = Field(default=False, description="Turn chunked processing on (enable_chunked_processing).")
    max_embed_len: int | None = Field(
        default=None,
        ge=1,
        le=16777216,
        description="Longest input accepted when enabled (max_embed_len); unset means no limit.",
    )


class PoolingSpec(Spec):
    """How token states become the output (vLLM's --pooler-config)."""

    type: PoolingType | None = Field(
        default=None,
        description="CLS, MEAN or LAST for sequence tasks (embed, classify); ALL or STEP for token tasks "
        "(token_embed, token_classify). Default: the model's own (sentence-transformers config or class).",
    )
    normalize: bool | None = Field(
        default=None,
        description="Apply the pooler's activation: L2 normalisation for embedding tasks, sigmoid/softmax for "
        "classifiers (vLLM's use_activation). Default: the model's.",
    )
    dimensions: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="Default output size for embedding tasks; must be one of model.matryoshkaDimensions.",
    )
    chunked_processing: ChunkedProcessing | None = Field(default=None, description=ChunkedProcessing.__doc__)


class ServiceSpec(Spec):
    """The Kubernetes Service in front of the replicas."""

    type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        default="ClusterIP", description="Service type. With routing, the router's Service has it and the pods' own is ClusterIP."
    )
    port: int = Field(default=8000, ge=1, le=65535, description="Service and container port. Default 8000.")
    api_key_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding the API key (VLLM_API_KEY). vLLM checks it only on /v1, /v2, /inference "
        "and /cohere paths; status lists the routes it leaves open.",
    )


class MonitoringSpec(Spec):
    """prometheus-operator objects to create."""

    service_monitor: bool = Field(default=False, description="Create a ServiceMonitor for /metrics.")
    pod_monitor: bool = Field(default=False, description="Create a PodMonitor for /metrics.")


class LabelSelectorRequirement(Spec):
    """One requirement of a LabelSelector."""

    key: str = Field(min_length=1, max_length=317, description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[Annotated[str, StringConstraints(max_length=63)]] | None = Field(
        default=None, max_length=64, description="The values for In and NotIn; empty for Exists and DoesNotExist."
    )


class LabelSelector(Spec):
    """A Kubernetes LabelSelector; an empty one selects everything."""

    match_labels: dict[str, Annotated[str, StringConstraints(max_length=63)]] | None = Field(
        default=None, description="Labels that must all match."
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, max_length=32, description="Requirements that must all hold."
    )


class NetworkPolicySpec(Spec):
    """A NetworkPolicy for the service's pods: ingress only on the serving port, from the client namespaces, the
    monitoring namespace and, with autoscaling.front, the front's namespace (the KEDA HTTP add-on's interceptor);
    every other ingress is refused. Absent: no NetworkPolicy (the cluster's own policies apply). Needs a network
    plugin that enforces NetworkPolicies."""

    client_namespaces: LabelSelector | None = Field(
        default=None,
        description="Namespaces (a LabelSelector) whose pods may call the service. Default: only the service's "
        "own namespace; {} allows every namespace.",
    )
    monitoring_namespace: str | None = Field(
        default="monitoring",
        max_length=63,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
        description="The namespace whose pods may scrape /metrics (it is served on the same port). Default "
        "monitoring; empty: none.",
    )


EmbeddingSpaceLabel = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")]



def _opt(path: str, field: str, absent: str, convert: str = "{}") -> str:
    """CEL for an optional field under an optional parent, with a default when absent. Ternaries on has()
    rather than optional types: the API server's cost estimator rejects `?.` chains on strings."""
    def side(root: str) -> str:
        parent = f"{root}.{path}"
        guard = f"has({root}.{path.split('.')[0]})" + (f" && has({parent})" if "." in path else "")
        return f"({guard} && has({parent}.{field}) ? {convert.format(f'{parent}.{field}')} : {absent})"

    return f"{side('self')} == {side('oldSelf')}"


_EMBEDDING_SPACE_FIELDS = " && ".join(
    (
        "self.model.name == oldSelf.model.name",
        _opt("model", "revision", "''"),
        _opt("pooling", "type", "''"),
        _opt("pooling", "normalize", "-1", "({} ? 1 : 0)"),
        _opt("pooling", "dimensions", "0"),
        _opt("vectors", "queryInstruction", "''"),
        _opt("vectors", "documentInstruction", "''"),
    )
)
_SAME_SPACE = (
    "has(self.embeddingSpace) == has(oldSelf.embeddingSpace)"
    " && (!has(self.embeddingSpace) || self.embeddingSpace == oldSelf.embeddingSpace)"
)
VECTORS_INPUTS_ONLY = (
    "!has(self.vectors) || (!has(self.vectors.outputs) && !has(self.vectors.queryInstruction) && "
    "!has(self.vectors.documentInstruction) && !has(self.vectors.ioProcessorPlugin))"
)  # what scoring may declare of vectors: a ScoringService's rule, a PoolingJob's with a mode
SCORING_VECTORS_RULE = cel(VECTORS_INPUTS_ONLY, M.SCORING_VECTORS_INPUTS_ONLY, ".vectors")
ROUTER_KEY_RULE = cel(
    "!has(self.routing) || !has(self.service) || !has(self.service.apiKeySecretRef)", M.ROUTER_NO_API_KEY, ".routing"
)
MATRYOSHKA_RULE = cel(
    "!has(self.pooling) || !has(self.pooling.dimensions) || "
    "(has(self.model.matryoshkaDimensions) && self.pooling.dimensions in self.model.matryoshkaDimensions)",
    M.MATRYOSHKA_DIMENSIONS,
    ".pooling.dimensions",
)


class ServingSpec(Spec):
    """The fields every vLLM server resource shares (PoolingService and ScoringService): how it runs and is
    reached, scaled and placed. Each kind adds what it serves."""

    model: ModelSpec = Field(description="The model to serve.")
    engine: EngineSpec = Field(default_factory=EngineSpec, description=EngineSpec.__doc__)
    resources: ResourcesSpec | None = Field(default=None, description=ResourcesSpec.__doc__)
    replicas: int = Field(
        default=1, ge=0, le=1000, description="Replicas when autoscaling is absent (the scale subresource)."
    )
    autoscaling: AutoscalingSpec | None = Field(default=None, description=AutoscalingSpec.__doc__)
    service: ServiceSpec = Field(default_factory=ServiceSpec, description=ServiceSpec.__doc__)
    monitoring: MonitoringSpec = Field(default_factory=MonitoringSpec, description=MonitoringSpec.__doc__)
    template: TemplateSpec | None = Field(default=None, description=TemplateSpec.__doc__)
    network_policy: NetworkPolicySpec | None = Field(default=None, description=NetworkPolicySpec.__doc__)
    routing: RoutingSpec | None = Field(default=None, description=RoutingSpec.__doc__)


class PoolingServiceSpec(ServingSpec):
    """A vLLM server with runner pooling serving exactly one pooling task."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.pooling) || !has(self.pooling.type) || "
                "(self.task in ['embed', 'classify']) == (self.pooling.type in ['CLS', 'MEAN', 'LAST'])",
                M.POOLING_TYPE_FOR_TASK,
                ".pooling.type",
            ),
            MATRYOSHKA_RULE,
            cel(
                "!has(self.pooling) || !has(self.pooling.dimensions) || self.task in ['embed', 'token_embed']",
                M.DIMENSIONS_EMBEDDING_ONLY,
                ".pooling.dimensions",
            ),
            cel(f"!({_SAME_SPACE}) || ({_EMBEDDING_SPACE_FIELDS})", M.EMBEDDING_SPACE, ".embeddingSpace"),
            cel("!has(self.spaceCheck) || has(self.embeddingSpace)", M.SPACE_CHECK_NEEDS_SPACE, ".spaceCheck"),
            ROUTER_KEY_RULE,
        )
    )

    task: Task = Field(
        description="The one pooling task this server exposes: embed, classify, token_embed or token_classify "
        "(set through --pooler-config task)."
    )
    convert: Convert = Field(
        default="auto",
        description="Adapt a model to pooling (--convert): auto, none, embed or classify. Default auto.",
    )
    pooling: PoolingSpec | None = Field(default=None, description=PoolingSpec.__doc__)
    embedding_space: EmbeddingSpaceLabel | None = Field(
        default=None,
        description="A label for the vector space this service produces. A change of model name or revision, "
        "pooling type, normalize, dimensions or the vectors' instructions is refused unless this label changes in "
        "the same update, so vectors from two spaces never mix in one index.",
    )
    space_check: SpaceCheckSpec | None = Field(
        default=None, description=(SpaceCheckSpec.__doc__ or "") + " Needs embeddingSpace: the reference is the space's."
    )
    vectors: VectorsSpec | None = Field(default=None, description=VectorsSpec.__doc__)


class GenerativeLabel(Spec):
    """A label token whose next-token probability is scored."""

    token: str = Field(min_length=1, max_length=256, description="The token's text (documentation for clients).")
    id: int = Field(ge=0, le=16777215, description="The token id in the model's vocabulary.")


class GenerativeSpec(Spec):
    """Generative scoring: a causal LM's next-token probabilities for declared label tokens."""

    model_config = ConfigDict(
        json_schema_extra=validations(cel("self.labels.all(l, self.labels.exists_one(m, m.id == l.id))", M.LABELS_DISTINCT, ".labels"))
    )

    labels: list[GenerativeLabel] = Field(
        min_length=1,
        max_length=128,
        description="1 to 128 label tokens with distinct ids; the first is the one scored. --max-logprobs is "
        "raised to the count when above vLLM's default of 20.",
    )
    apply_softmax: bool = Field(
        default=True, description="Softmax over the labels only (true) or full-vocabulary probability. Default true."
    )
    item_first: bool = Field(default=False, description="Put the item before the query in the prompt. Default false.")
    query_template: str | None = Field(
        default=None, max_length=8192, description="Prompt template published in status for clients."
    )


class ScoringServiceSpec(ServingSpec):
    """A vLLM server that scores query/document pairs."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("(self.mode == 'generative') == has(self.generative)", M.GENERATIVE_IFF_MODE, ".generative"),
            cel("!has(self.pooling) || self.mode == 'biEncoder'", M.POOLING_BIENCODER_ONLY, ".pooling"),
            cel(
                "!has(self.pooling) || !has(self.pooling.type) || self.pooling.type in ['CLS', 'MEAN', 'LAST']",
                M.BIENCODER_SEQUENCE_POOLING,
                ".pooling.type",
            ),
            MATRYOSHKA_RULE,
            ROUTER_KEY_RULE,
            SCORING_VECTORS_RULE,
        )
    )

    mode: ScoringMode = Field(
        description="crossEncoder (classify, num_labels 1), biEncoder (embed, cosine), lateInteraction "
        "(token_embed, MaxSim) or generative (a causal LM on /generative_scoring)."
    )
    pooling: PoolingSpec | None = Field(default=None, description="Pooler settings; biEncoder only.")
    generative: GenerativeSpec | None = Field(default=None, description=GenerativeSpec.__doc__)
    space_check: SpaceCheckSpec | None = Field(
        default=None, description=(SpaceCheckSpec.__doc__ or "") + " A ScoringService's canaries are query/document pairs and its "
        "reference the scores of its first pod; a new pod's scores may differ by the stated tolerance.",
    )
    vectors: VectorsSpec | None = Field(
        default=None,
        description="What the server takes (vectors.inputs: text, image; image for a multimodal late-interaction or "
        "bi-encoder architecture). A ScoringService returns scores, so outputs and instructions do not apply.",
    )


# ---- status ---------------------------------------------------------------------------------------------


class GpuShareStatus(Spec):
    """A GPU share as rendered: its memory, the minimum the model needs, vLLM's bound, the GPUs it counts as."""

    model_config = ConfigDict(extra="ignore")

    memory: str | None = Field(default=None, description="resources.gpu.share.memory.")
    minimum: str | None = Field(default=None, description="The least memory the server needs inside vLLM's bound.")
    basis: str | None = Field(default=None, description="The minimum's terms (weights, activations, reserve, kvCache).")
    gpu_memory_utilization: float | None = Field(default=None, description="The rendered --gpu-memory-utilization.")
    gpus: float | None = Field(
        default=None,
        description="The GPUs one pod holds as placed, for chargeback: the share's fraction, or 1 when allocation says "
        "each pod was given a whole device (the namespace budget and simulate count the share as requested).",
    )
    isolation: str | None = Field(default=None, description="What keeps co-tenants apart on the device.")
    allocation: str | None = Field(
        default=None,
        description="Set when the cluster gave each pod more than the share: a DRA claim whose capacity request the "
        "API server dropped (the DRAConsumableCapacity feature gate off) takes a whole device.",
    )


class Effective(Spec):
    """What the server actually runs with, defaults resolved."""

    model_config = ConfigDict(extra="ignore")

    vllm_version: str | None = Field(default=None, description="vLLM contract version applied.")
    runner: str | None = Field(default=None, description="vLLM runner: pooling or generate.")
    task: str | None = Field(default=None, description="The pooling task served.")
    pooling_type: str | None = Field(default=None, description="Pooling type, or 'model default'.")
    normalize: bool | None = Field(default=None, description="use_activation, when set.")
    dimensions: int | None = Field(default=None, description="Default Matryoshka size, when set.")
    max_model_len: int | None = Field(default=None, description="engine.maxModelLen, when set.")
    args: list[str] | None = Field(default=None, description="The full vLLM command line.")
    gpu_share: GpuShareStatus | None = Field(default=None, description=GpuShareStatus.__doc__)


class EmbeddingSpaceStatus(Spec):
    """The vector space served."""

    model_config = ConfigDict(extra="ignore")

    label: str | None = Field(default=None, description="spec.embeddingSpace.")
    fingerprint: str | None = Field(default=None, description="sha256 of everything that changes the vectors.")


class ServiceStatus(StatusBase):
    """Observed state of a service."""

    replicas: int | None = Field(default=None, description="Pods of the Deployment.")
    ready_replicas: int | None = Field(default=None, description="Ready pods of the Deployment.")
    selector: str | None = Field(default=None, description="Label selector of the pods (for the scale subresource).")
    endpoint: str | None = Field(
        default=None, description="Where clients send requests: the in-cluster URL of the Service, or with "
        "autoscaling.front the front's (the KEDA HTTP add-on's interceptor, with a Host header among its hosts).",
    )
    routes: list[str] | None = Field(default=None, description="HTTP routes that answer for this task and version.")
    unprotected_routes: list[str] | None = Field(
        default=None, description="Routes vLLM leaves open although an API key is set."
    )
    effective: Effective | None = Field(default=None, description=Effective.__doc__)
    autoscaling: AutoscalingStatus | None = Field(default=None, description=AutoscalingStatus.__doc__)
    cost: CostStatus | None = Field(default=None, description=CostStatus.__doc__)
    startup: StartupStatus | None = Field(default=None, description=StartupStatus.__doc__)
    space_check: SpaceCheckStatus | None = Field(default=None, description=SpaceCheckStatus.__doc__)


class PoolingServiceStatus(ServiceStatus):
    """Observed state of a PoolingService."""

    embedding_space: EmbeddingSpaceStatus | None = Field(default=None, description=EmbeddingSpaceStatus.__doc__)
    vectors: VectorsStatus | None = Field(default=None, description=VectorsStatus.__doc__)


class ScoringContract(Spec):
    """What clients must send."""

    model_config = ConfigDict(extra="ignore")

    mode: str | None = Field(default=None, description="Scoring mode.")
    route: str | None = Field(default=None, description="The route to call.")
    label_token_ids: list[int] | None = Field(default=None, description="label_token_ids to send (generative).")
    apply_softmax: bool | None = Field(default=None, description="apply_softmax to send (generative).")
    item_first: bool | None = Field(default=None, description="item_first to send (generative).")
    query_template: str | None = Field(default=None, description="Prompt template (generative).")


class ScoringServiceStatus(ServiceStatus):
    """Observed state of a ScoringService."""

    contract: ScoringContract | None = Field(default=None, description=ScoringContract.__doc__)
    vectors: VectorsStatus | None = Field(default=None, description=VectorsStatus.__doc__)


