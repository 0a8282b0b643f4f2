"""The API: pydantic models of every resource, the single source of truth for CRDs and validation."""

from pooling_operator.api.resources import (
    KINDS,
    AnyResource,
    AutoscalingPolicy,
    HiddenStateJob,
    KindInfo,
    ModelCache,
    PoolingJob,
    PoolingService,
    Resource,
    ScoringService,
)

__all__ = [
    "KINDS",
    "AnyResource",
    "AutoscalingPolicy",
    "HiddenStateJob",
    "KindInfo",
    "ModelCache",
    "PoolingJob",
    "PoolingService",
    "Resource",
    "ScoringService",
]
