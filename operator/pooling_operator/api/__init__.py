"""The API: pydantic models of every resource, the single source of truth for CRDs and validation."""

from pooling_operator.api.resources import (
    KINDS,
    AnyResource,
    AutoscalingPolicy,
    HiddenStateJob,
    Job,
    KindInfo,
    ModelCache,
    PoolingJob,
    PoolingService,
    Resource,
    ScoringService,
    Service,
    VllmResource,
)

__all__ = [
    "KINDS",
    "AnyResource",
    "AutoscalingPolicy",
    "HiddenStateJob",
    "Job",
    "KindInfo",
    "ModelCache",
    "PoolingJob",
    "PoolingService",
    "Resource",
    "ScoringService",
    "Service",
    "VllmResource",
]
