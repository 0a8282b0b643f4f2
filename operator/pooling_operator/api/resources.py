"""The six kinds: metadata, spec and status models, the families as types, and what their CRDs look like."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypeIs

from pooling_operator.api.base import StatusBase
from pooling_operator.api.caches import ModelCacheSpec, ModelCacheStatus
from pooling_operator.api.jobs import HiddenStateJobSpec, HiddenStateJobStatus
from pooling_operator.api.policy import AutoscalingPolicySpec, AutoscalingPolicyStatus
from pooling_operator.api.pooling_jobs import PoolingJobSpec, PoolingJobStatus
from pooling_operator.api.schema import Spec
from pooling_operator.api.services import (
    PoolingServiceSpec,
    PoolingServiceStatus,
    ScoringServiceSpec,
    ScoringServiceStatus,
)

DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class ObjectMeta(BaseModel):
    """The parts of metadata the operator reads; everything else is kept as is."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str = Field(min_length=1, max_length=63, pattern=DNS1035_LABEL)
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


S = TypeVar("S", bound=Spec)
T = TypeVar("T", bound=StatusBase)


class Resource(BaseModel, Generic[S, T]):
    """A whole object as read from YAML or the API server."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["vllm-pooling.io/v1alpha1"] = Field(alias="apiVersion")
    kind: str
    metadata: ObjectMeta
    spec: S
    status: T | None = None


class PoolingService(Resource[PoolingServiceSpec, PoolingServiceStatus]):
    kind: Literal["PoolingService"] = "PoolingService"


class ScoringService(Resource[ScoringServiceSpec, ScoringServiceStatus]):
    kind: Literal["ScoringService"] = "ScoringService"


class HiddenStateJob(Resource[HiddenStateJobSpec, HiddenStateJobStatus]):
    kind: Literal["HiddenStateJob"] = "HiddenStateJob"


class PoolingJob(Resource[PoolingJobSpec, PoolingJobStatus]):
    kind: Literal["PoolingJob"] = "PoolingJob"


class AutoscalingPolicy(Resource[AutoscalingPolicySpec, AutoscalingPolicyStatus]):
    kind: Literal["AutoscalingPolicy"] = "AutoscalingPolicy"


class ModelCache(Resource[ModelCacheSpec, ModelCacheStatus]):
    kind: Literal["ModelCache"] = "ModelCache"


# The kinds by family, as types: KINDS' family column once more, for the type checker and isinstance
# (tests/test_kind_families.py holds each to the table).
Service = PoolingService | ScoringService  # family "service": a vLLM Deployment behind a Service
Job = HiddenStateJob | PoolingJob  # family "job": an Indexed Job with vLLM as a sidecar
VllmResource = Service | Job  # the kinds that run vLLM: validated against its contract, built, given a Workload
AnyResource = VllmResource | AutoscalingPolicy | ModelCache
SpaceClaimant = PoolingService | PoolingJob  # column claims_space: spec.embeddingSpace claims a vector space
GpuSharer = Service | PoolingJob  # column gpu_share: the kinds whose pods may share a GPU (SHARE_KINDS)

READY = '.status.conditions[?(@.type=="Ready")].status'


# What the operator does with a kind of ours; every per-kind list elsewhere is derived from it (the reconcile's
# flow, the builders' plan, the component label, the Argo CD health script, Kueue and embedding-space claims).
#   service: a vLLM Deployment behind a Service, autoscaled
#   job:     an Indexed Job with vLLM as a native sidecar, optionally admitted by Kueue (spec.queue)
#   cache:   a ModelCache: a claim filled once by a Job, mounted by services and jobs
#   policy:  guardrails the services follow; reconciled with them, owns no children
Family = Literal["service", "job", "cache", "policy"]


@dataclass(frozen=True)
class KindInfo:
    """How a kind appears in the API (names, scope, subresources, columns) and what the operator does with it."""

    kind: str
    plural: str
    short_name: str
    namespaced: bool
    model: type[Resource[Any, Any]]
    description: str
    columns: tuple[dict[str, Any], ...]
    scale: bool
    family: Family
    component: str | None = None  # the app.kubernetes.io/component label of its children (None: it has none)
    claims_space: bool = False  # spec.embeddingSpace claims a label for one vector space in its namespace
    gpu_share: bool = False  # spec.resources.gpu.share may put several of its pods on one GPU (docs/gpu-sharing.md)

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def spec_model(self) -> type[Spec]:
        return self.model.model_fields["spec"].annotation  # type: ignore[return-value]

    @property
    def status_model(self) -> type[StatusBase]:
        annotation = self.model.model_fields["status"].annotation
        return next(a for a in annotation.__args__ if a is not type(None))  # type: ignore[union-attr]


def _col(name: str, path: str, type_: str = "string", description: str = "", priority: int = 0) -> dict[str, Any]:
    col: dict[str, Any] = {"name": name, "type": type_, "jsonPath": path, "description": description}
    if priority:
        col["priority"] = priority
    return col


AGE = _col("Age", ".metadata.creationTimestamp", "date", "Time since creation.")
MODEL = _col("Model", ".spec.model.name", description="Model served.")
SERVICE_COLUMNS = (
    _col("Ready", READY, description="Ready condition."),
    _col("Reason", '.status.conditions[?(@.type=="Ready")].reason', description="Why Ready is what it is."),
    _col("Replicas", ".status.replicas", "integer", "Pods of the Deployment."),
    _col("Available", ".status.readyReplicas", "integer", "Ready pods."),
    _col("Desired", ".status.autoscaling.desiredReplicas", "integer", "Replicas the autoscaler wants.", priority=1),
    _col("Scaling", '.status.conditions[?(@.type=="ScalingLimited")].reason', description="What bounds the autoscaler.", priority=1),
    _col("Startup", ".status.startup.typicalSeconds", "number", "Typical seconds from pod created to Ready.", priority=1),
    _col("Endpoint", ".status.endpoint", description="Where clients send: the Service, or the front's interceptor.", priority=1),
    AGE,
)

KINDS: dict[str, KindInfo] = {
    info.kind: info
    for info in (
        KindInfo(
            kind="PoolingService",
            plural="poolingservices",
            short_name="pls",
            namespaced=True,
            model=PoolingService,
            description="A vLLM server with runner pooling: embeddings, classification, token embeddings or "
            "token classification, validated against vLLM's rules before any pod exists.",
            columns=(MODEL, _col("Task", ".spec.task", description="Pooling task."), *SERVICE_COLUMNS),
            scale=True,
            family="service",
            component="pooling-service",
            claims_space=True,
            gpu_share=True,
        ),
        KindInfo(
            kind="ScoringService",
            plural="scoringservices",
            short_name="scs",
            namespaced=True,
            model=ScoringService,
            description="A vLLM server that scores pairs: cross-encoder, bi-encoder, late-interaction (MaxSim) or "
            "generative scoring.",
            columns=(MODEL, _col("Mode", ".spec.mode", description="Scoring mode."), *SERVICE_COLUMNS),
            scale=True,
            family="service",
            component="scoring-service",
            gpu_share=True,
        ),
        KindInfo(
            kind="HiddenStateJob",
            plural="hiddenstatejobs",
            short_name="hsj",
            namespaced=True,
            model=HiddenStateJob,
            description="An Indexed Job extracting a model's hidden states for a prompt dataset into a volume, "
            "with a manifest, resume after failure and a storage budget. The spec is immutable.",
            columns=(
                MODEL,
                _col("Ready", READY, description="Ready condition."),
                _col("Shards", ".spec.shards", "integer", "Shards in the job."),
                _col("Done", ".status.shards.succeeded", "integer", "Shards finished."),
                _col("Samples", ".status.samples.done", "integer", "Samples written."),
                _col("Storage", ".status.storage.estimate", description="Projected size of the output.", priority=1),
                _col("Budget", ".status.storage.budget", description="output.storageBudget.", priority=1),
                _col("Succeeded", '.status.conditions[?(@.type=="Succeeded")].status', description="Finished."),
                _col("Queued", '.status.conditions[?(@.type=="Queued")].reason',
                     description="Kueue admission: why the job waits (WaitingForQuota, Preempted, KueueNotInstalled) or Admitted."),
                _col("Queue", ".spec.queue.name", description="Kueue LocalQueue.", priority=1),
                AGE,
            ),
            scale=False,
            family="job",
            component="hidden-state-job",
        ),
        KindInfo(
            kind="PoolingJob",
            plural="poolingjobs",
            short_name="plj",
            namespaced=True,
            model=PoolingJob,
            description="An Indexed Job embedding (classifying, or pooling per token) a whole corpus once into a "
            "volume, or scoring (query, documents) groups with a ScoringService's mode: safetensors part files with "
            "a manifest, resume after failure, a storage budget and the embedding space's fingerprint. The spec is "
            "immutable.",
            columns=(
                MODEL,
                _col("Task", ".spec.task", description="Pooling task (empty for a scoring job)."),
                _col("Mode", ".spec.mode", description="Scoring mode (empty for a pooling task)."),
                _col("Ready", READY, description="Ready condition."),
                _col("Shards", ".spec.shards", "integer", "Shards in the job."),
                _col("Done", ".status.shards.succeeded", "integer", "Shards finished."),
                _col("Inputs", ".status.samples.done", "integer", "Inputs (scoring: groups) written."),
                _col("Failed", ".status.samples.failed", "integer", "Inputs recorded as failed.", priority=1),
                _col("Lines", ".status.dataset.lines", "integer", "Non-blank lines in the corpus.", priority=1),
                _col("Storage", ".status.storage.estimate", description="Projected size of the output.", priority=1),
                _col("Space", ".spec.embeddingSpace", description="Embedding space label.", priority=1),
                _col("Succeeded", '.status.conditions[?(@.type=="Succeeded")].status', description="Finished."),
                _col("Queued", '.status.conditions[?(@.type=="Queued")].reason',
                     description="Kueue admission: why the job waits (WaitingForQuota, Preempted, KueueNotInstalled) or Admitted."),
                _col("Queue", ".spec.queue.name", description="Kueue LocalQueue.", priority=1),
                _col("Format", ".spec.dataset.format", description="The dataset: jsonl or openaiBatch (an OpenAI "
                     "Batch input file).", priority=1),
                _col("Outputs", ".spec.output.formats", description="What the job publishes: safetensors and/or "
                     "openaiBatch.", priority=1),
                AGE,
            ),
            scale=False,
            family="job",
            component="pooling-job",
            claims_space=True,
            gpu_share=True,
        ),
        KindInfo(
            kind="ModelCache",
            plural="modelcaches",
            short_name="mc",
            namespaced=True,
            model=ModelCache,
            description="One model revision filled once into a volume in the Hugging Face hub-cache layout, "
            "verified against the Hub's listing; services and jobs mount it read-only (model.source.cache).",
            columns=(
                MODEL,
                _col("Ready", READY, description="Ready condition."),
                _col("Reason", '.status.conditions[?(@.type=="Ready")].reason', description="Why Ready is what it is."),
                _col("Revision", ".status.revision", description="The commit filled."),
                _col("Bytes", ".status.bytes", "integer", "Bytes of the snapshot."),
                _col("Files", ".status.files", "integer", "Files of the snapshot.", priority=1),
                _col("Claim", ".status.claimName", description="The claim services mount.", priority=1),
                AGE,
            ),
            scale=False,
            family="cache",
            component="model-cache",
        ),
        KindInfo(
            kind="AutoscalingPolicy",
            plural="autoscalingpolicies",
            short_name="asp",
            namespaced=False,
            model=AutoscalingPolicy,
            description="Cluster-wide guardrails and defaults for autoscaled PoolingServices and ScoringServices.",
            columns=(
                _col("Default", ".spec.default", "boolean", "Applies to services naming no policy."),
                _col("Prometheus", ".spec.prometheus.url", description="Metrics source."),
                _col("Services", ".status.services", "integer", "Services following it."),
                AGE,
            ),
            scale=False,
            family="policy",
        ),
    )
}

def family(kind: str) -> Family:
    """What the operator does with `kind` (KINDS): the question every per-kind branch asks instead of isinstance."""
    return KINDS[kind].family


def claims_space(kind: str) -> bool:
    """Whether `kind`'s spec.embeddingSpace claims a vector space in its namespace."""
    return KINDS[kind].claims_space


def in_space(resource: AnyResource) -> TypeIs[SpaceClaimant]:
    """claims_space(resource.kind), for the type checker too: true narrows to the claimant kinds (their spec has
    embeddingSpace), false to the others (a ScoringService among services: its scores are its own)."""
    return claims_space(resource.kind)


SHARE_KINDS = tuple(k for k, i in KINDS.items() if i.gpu_share)  # the kinds whose pods may share a GPU

FAMILY_KINDS: dict[str, tuple[str, ...]] = {f: tuple(k for k, i in KINDS.items() if i.family == f)
                                            for f in ("service", "job", "cache", "policy")}
