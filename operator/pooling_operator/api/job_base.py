"""What the two job kinds share (docs/design.md, "Kinds and families"): the fields that close every job's spec,
the claim paths, Kueue admission, the shard and sample counts and the output status.

A job kind's spec is ``class XSpec(JobSpec, _XFields)``: pydantic orders a model's fields by its reversed MRO,
so the kind's own fields (``_XFields``) come first and ``JobSpec``'s close the spec. That is the order the CRDs,
``kubectl explain`` and docs/api.md have always listed, and a third job kind gets the same tail by naming the base.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from pooling_operator.api import messages as M
from pooling_operator.api.base import EngineSpec, TemplateSpec
from pooling_operator.api.cel import cel
from pooling_operator.api.gpu import ResourcesSpec
from pooling_operator.api.schema import Name, Spec

PARALLELISM_RULE = cel(
    "!has(self.parallelism) || self.parallelism <= (has(self.shards) ? self.shards : 1)", M.PARALLELISM_LE_SHARDS, ".parallelism"
)  # every job kind's: at most `shards` shards at once

AbsPath = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"^/")]

class ClaimPath(Spec):
    """A path on a PersistentVolumeClaim."""

    claim_name: Name = Field(description="PersistentVolumeClaim name.")
    path: AbsPath = Field(description="Absolute path inside the claim.")


QueueName = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
]  # a Kueue object's name that also goes into a label value: a DNS-1123 subdomain of at most 63 characters


class QueueSpec(Spec):
    """Admission through Kueue: the Job is created suspended in this LocalQueue and runs once Kueue admits it."""

    name: QueueName = Field(
        description="The LocalQueue (kueue.x-k8s.io) in the job's namespace; becomes the Job's kueue.x-k8s.io/queue-name "
        "label. Kueue admits the Job when its ClusterQueue has quota for the pods' requests, possibly fewer shards "
        "at once than spec.parallelism (partial admission; completions never change), and may suspend it again to "
        "preempt it: each shard resumes from its manifest when re-admitted."
    )
    priority_class_name: QueueName | None = Field(
        default=None,
        description="A WorkloadPriorityClass (kueue.x-k8s.io); becomes the Job's kueue.x-k8s.io/priority-class "
        "label. Default: the ClusterQueue's default priority.",
    )


class ShardCounts(Spec):
    """Shard counts."""

    model_config = ConfigDict(extra="ignore")

    total: int | None = Field(default=None, description="Shards in the job.")
    succeeded: int | None = Field(default=None, description="Shards finished.")
    failed: int | None = Field(default=None, description="Shards that exhausted their retries.")
    active: int | None = Field(default=None, description="Shards running.")


class SampleCounts(Spec):
    """Sample counts."""

    model_config = ConfigDict(extra="ignore")

    done: int | None = Field(default=None, description="Samples written and in a manifest.")
    failed: int | None = Field(default=None, description="Samples recorded as failed.")


class OutputStatus(Spec):
    """Where the results are."""

    model_config = ConfigDict(extra="ignore")

    path: str | None = Field(default=None, description="Output folder on the claim.")
    manifests: list[str] | None = Field(default=None, description="Manifest files, one per shard.")


class JobSpec(Spec):
    """The fields that close every job kind's spec: the engine, the pods' resources, retries, Kueue and the pod
    template. Not a kind's spec by itself (see the module's docstring for the order)."""

    engine: EngineSpec = Field(default_factory=EngineSpec, description=EngineSpec.__doc__)
    resources: ResourcesSpec | None = Field(default=None, description=ResourcesSpec.__doc__)
    backoff_limit_per_shard: int = Field(
        default=3, ge=0, le=100, description="Retries of one shard before it counts as failed. Default 3."
    )
    queue: QueueSpec | None = Field(default=None, description=QueueSpec.__doc__)
    template: TemplateSpec | None = Field(default=None, description=TemplateSpec.__doc__)
