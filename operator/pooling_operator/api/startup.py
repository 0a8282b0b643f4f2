"""A service's start-up as its status shows it (status.startup): measured from its pods, per phase
(status/startup.py computes it)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from pooling_operator.api.schema import Spec


class PhaseStartup(Spec):
    """One start-up phase, seconds from the pod's creation."""

    model_config = ConfigDict(extra="ignore")

    last_seconds: float | None = Field(default=None, description="The phase in the pod measured last, seconds.")
    typical_seconds: float | None = Field(default=None, description="A running mean over about the last 10 pods, seconds.")
    samples: int | None = Field(default=None, description="Pods that recorded this phase.")


class StartupPhases(Spec):
    """Where a replica's start-up goes, each phase read from the pod's status, never inferred; seconds from its
    creation: scheduled (PodScheduled), initialized (Initialized: init containers done, volumes mounted),
    started (the vLLM container's startedAt: image pulled, process started), ready (Ready: model loaded,
    compiled, /health answered). vLLM's own phases inside started -> ready are only in its log."""

    model_config = ConfigDict(extra="ignore")

    scheduled: PhaseStartup | None = Field(default=None, description="Pod created -> bound to a node.")
    initialized: PhaseStartup | None = Field(default=None, description="Pod created -> init containers done, volumes mounted.")
    started: PhaseStartup | None = Field(default=None, description="Pod created -> the vLLM container started.")
    ready: PhaseStartup | None = Field(default=None, description="Pod created -> Ready (the whole start-up).")


class StartupStatus(Spec):
    """How long a new replica takes to serve, measured from the service's pods (created -> Ready): what the
    autoscaler plans ahead by."""

    model_config = ConfigDict(extra="ignore")

    last_seconds: float | None = Field(default=None, description="Start-up of the pod that became Ready last, seconds.")
    typical_seconds: float | None = Field(
        default=None, description="The typical start-up over the recent pods (a running mean of about the last 10), seconds."
    )
    samples: int | None = Field(default=None, description="Pods measured.")
    phases: StartupPhases | None = Field(default=None, description=(StartupPhases.__doc__ or "").split(";")[0] + ".")
