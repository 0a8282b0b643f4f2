"""What scale to zero carries between periods and says of one (autoscaling/zero.py decides; decide.Decision
holds the outcome; scale.py writes it). Pure data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ZeroState:
    """Carried between periods, per service."""

    idle_since: float | None = None  # clock time the current idle stretch began
    since: str | None = None  # RFC 3339 time the service went to zero (while at zero, and after, for status)
    woke_at: float | None = None  # clock time of the last wake, until its first replica is Ready
    last_wake: dict[str, Any] | None = None  # {at, by, firstReadySeconds} of the last wake
    capacity_rps: float | None = None  # requests/s one replica serves, as the decision last measured it: sizes a wake
    capacity_saturated: bool = False  # capacity_rps was measured at saturation (else it is a lower bound)


@dataclass(frozen=True)
class ZeroOutcome:
    desired: int | None  # the replica count to set instead of the decision's; None: the decision stands
    reason: str
    state: ZeroState
    at_zero: bool  # the condition ScaledToZero: True while the service has (or is sent to) zero replicas
    condition_reason: str

    @property
    def status(self) -> dict[str, Any]:
        """status.autoscaling.scaledToZero, from the state: when it went to zero, and the last wake."""
        out: dict[str, Any] = {}
        if self.state.since is not None:
            out["since"] = self.state.since
        if self.state.last_wake is not None:
            out["lastWake"] = dict(self.state.last_wake)
        return out
