"""spec.spaceCheck: the embedding space guarded by numbers (PoolingService, ScoringService, PoolingJob), and what the
operator reports of it in status.spaceCheck.

The fingerprint of an embedding space covers its configuration (model, revision, pooling type, normalize,
dimensions). What it cannot see is the engine: a new vLLM image, a dtype, chunked processing, a changed default.
With spaceCheck, a fixed set of canary inputs is sent to every new pod before it turns Ready; their answers are
compared with the space's reference, recorded from the first pod of the space (vllm/space_check.py decides,
runtime/space_gate.py asks). Field names are fixed by the team's API list.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from pooling_operator.api.schema import Name, Spec

OnDrift = Literal["hold", "warn"]
# The default least cosine between a canary's vector and its reference, and the largest difference of a canary
# pair's score: chosen from the float noise measured on vLLM 0.32's CPU build (docs/embedding-space.md).
DEFAULT_MIN_COSINE = "0.9995"
SCORE_TOLERANCE = 0.002


class ConfigMapKeyRef(Spec):
    """A key of a ConfigMap in the resource's namespace."""

    name: Name = Field(description="Name of the ConfigMap, in the resource's namespace.")
    key: str = Field(min_length=1, max_length=253, description="Key inside the ConfigMap.")


class CanariesSpec(Spec):
    """Canary inputs of your own, in a ConfigMap of the resource's namespace: one JSON object a line,
    {"name": "...", "text": "..."} (a ScoringService's: {"name": "...", "query": "...", "document": "..."})."""

    config_map_ref: ConfigMapKeyRef = Field(description="The ConfigMap and key holding the canaries (JSON lines).")


class SpaceCheckSpec(Spec):
    """Guard the space by numbers: canary inputs sent to every new pod after vLLM's own readiness and compared with
    the space's reference (recorded from the space's first pod) before the pod may turn Ready."""

    canaries: CanariesSpec | None = Field(
        default=None, description=(CanariesSpec.__doc__ or "") + " Default: the built-in set (short and long inputs in several "
        "scripts, one past a typical chunk size; docs/embedding-space.md).",
    )
    min_cosine: str | None = Field(
        default=None, max_length=16,
        description=f"The least cosine between a canary's answer and its reference, a decimal in (0, 1]. Default "
        f"{DEFAULT_MIN_COSINE}, from the float noise measured on the CPU build (docs/embedding-space.md). Scores of a "
        f"ScoringService may differ by at most {SCORE_TOLERANCE}.",
    )
    on_drift: OnDrift = Field(
        default="hold",
        description="hold: a pod that drifts never turns Ready, so a rollout stalls with the old pods serving (the "
        "Deployment surges one pod at a time instead of taking one down first); warn: the pod is admitted and the "
        "condition SpaceVerified says it drifted. Default hold.",
    )

    @field_validator("min_cosine")
    @classmethod
    def _decimal(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a decimal; write one in (0, 1], e.g. \"{DEFAULT_MIN_COSINE}\"") from None
        if not 0 < number <= 1 or value.strip() != value or "e" in value.lower():
            raise ValueError(f"{value} must be a plain decimal above 0 and at most 1, e.g. \"{DEFAULT_MIN_COSINE}\"")
        return value

    @property
    def threshold(self) -> float:
        return float(self.min_cosine or DEFAULT_MIN_COSINE)


class SpaceReferenceStatus(Spec):
    """The space's reference: where it is kept and what it was recorded from."""

    model_config = ConfigDict(extra="ignore")

    config_map: str | None = Field(default=None, description="The ConfigMap holding the reference (this namespace).")
    fingerprint: str | None = Field(default=None, description="The space's fingerprint when it was recorded.")
    recorded_at: str | None = Field(default=None, description="When it was recorded.")
    recorded_from: str | None = Field(default=None, description="The pod whose answers it holds.")
    canaries: int | None = Field(default=None, description="How many canaries it holds.")


class SpaceLastCheck(Spec):
    """The last pod checked against the reference."""

    model_config = ConfigDict(extra="ignore")

    pod: str | None = Field(default=None, description="The pod.")
    worst_cosine: float | None = Field(default=None, description="Its least cosine to the reference (scores: 1 - the largest difference).")
    canary: str | None = Field(default=None, description="The canary of that value.")
    at: str | None = Field(default=None, description="When.")
    result: str | None = Field(default=None, description="Verified, Recorded, Drift or Unreachable.")


class SpaceCheckStatus(Spec):
    """spec.spaceCheck as observed: the reference and the last check (condition SpaceVerified says the verdict)."""

    model_config = ConfigDict(extra="ignore")

    reference: SpaceReferenceStatus | None = Field(default=None, description=SpaceReferenceStatus.__doc__)
    last_check: SpaceLastCheck | None = Field(default=None, description=SpaceLastCheck.__doc__)
