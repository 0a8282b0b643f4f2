"""ModelCache: one model revision filled once into a claim in the Hugging Face hub-cache layout, for services
and jobs to mount read-only (`model.source.cache`). The fill's contract is api/cache_fill_contract.py."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from pooling_operator.api import messages as M
from pooling_operator.api.base import HfRepo, SecretKeyRef, StatusBase, TemplateSpec
from pooling_operator.api.cel import cel, validations
from pooling_operator.api.schema import Name, Quantity, Spec


class CachedModel(Spec):
    """The repository and revision to fill."""

    name: HfRepo = Field(description="Hugging Face repo id, e.g. BAAI/bge-m3.")
    revision: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        pattern=r"^[^\s/][^\s]*$",
        description="Commit sha, branch or tag. Pin a commit: a branch is resolved once, when filled (status."
        "revision is the commit), and a change here fills a new snapshot beside the old one. Default main.",
    )
    token_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding a Hugging Face token for a private or gated repository: the fill Job "
        "reads it as HF_TOKEN; the services that mount the cache never see it.",
    )


class CacheStorage(Spec):
    """Where the cache lives: an existing claim, or one the operator creates."""

    model_config = ConfigDict(json_schema_extra=validations(cel("has(self.claimName) != has(self.size)", M.CACHE_STORAGE_EXACTLY_ONE)))

    claim_name: Name | None = Field(
        default=None,
        description="An existing PersistentVolumeClaim. ReadWriteMany for services on several nodes (or "
        "ReadOnlyMany after the fill). The operator never deletes it.",
    )
    size: Quantity | None = Field(
        default=None,
        description="Create a ReadWriteMany claim of this size (named after the ModelCache, deleted with it once "
        "no pod mounts it: Kubernetes' pvc-protection).",
    )
    storage_class_name: Name | None = Field(
        default=None, description="The created claim's StorageClass. Default: the cluster's default class."
    )


class ModelCacheSpec(Spec):
    """One model revision filled once into a volume, in the Hugging Face hub-cache layout."""

    model: CachedModel = Field(description=CachedModel.__doc__)
    storage: CacheStorage = Field(description=CacheStorage.__doc__)
    template: TemplateSpec | None = Field(
        default=None,
        description="Where the fill Job's pod runs (nodeSelector, tolerations, affinity, priorityClassName) and "
        "its extra labels and annotations: near the storage, on CPU nodes.",
    )


class ModelCacheStatus(StatusBase):
    """What the cache holds."""

    revision: str | None = Field(default=None, description="The commit of the snapshot filled (40 hex).")
    bytes: int | None = Field(default=None, description="Bytes of the snapshot.")
    files: int | None = Field(default=None, description="Files of the snapshot.")
    path: str | None = Field(default=None, description="The snapshot's folder inside the claim.")
    claim_name: str | None = Field(default=None, description="The claim the services mount.")
