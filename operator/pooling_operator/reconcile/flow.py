"""The flow every kind's reconcile follows, in one place: observe -> desired -> diff and apply -> status.

Level-based and blind to which event fired. Each kind (reconcile/services.py, reconcile/jobs.py) says what it
wants (`desired`), what its status is (`status`), and what follows a refusal or a write; this module does
the rest the same way for all: children read from the watch-fed cache, one refusal path (`refuse`: SpecValid
False naming the fields, the running children kept and said so, not retried), what differs applied and what
is no longer wanted deleted (reconcile/writes.py), status written only when it changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from pooling_operator.api.problems import Problem
from pooling_operator.k8s.cache import owner_key
from pooling_operator.reconcile.context import Context, InvalidSpec
from pooling_operator.reconcile.policyset import PolicySet
from pooling_operator.reconcile.state import Built, Memory
from pooling_operator.reconcile.writes import ChildRefused, ChildTaken, converge, write_status
from pooling_operator.status import conditions as C
from pooling_operator.status.caches import waiting_status
from pooling_operator.status.services import invalid_status, kept_children, taken_status

Children = dict[tuple[str, str], dict[str, Any]]


@dataclass(frozen=True)
class Desired:
    """What a kind wants for one resource: its Built (validated and planned), or the problems that refuse it."""

    built: Built
    problems: list[Problem] = field(default_factory=list)
    reason: str = C.INVALID_SPEC
    waiting: str | None = None  # why no child can be built yet (a ModelCache not Ready): what runs is kept
    # Child kinds left out of what is written (and deleted where they exist), and why; the spec is not refused for
    # them (a front host another service holds: reconcile/fronts.py).
    left_out: tuple[str, ...] = ()
    why_left_out: str | None = None

    @property
    def objects(self) -> list[dict[str, Any]]:
        if not self.left_out:
            return self.built.desired
        return [o for o in self.built.desired if o["kind"] not in self.left_out]


class Kind(Protocol):
    """One kind's part of the flow."""

    @property
    def children(self) -> tuple[str, ...]:
        """The child kinds it owns (what is observed and pruned)."""

    async def desired(self, ctx: Context, memory: Memory, policies: PolicySet, body: dict[str, Any]) -> Desired: ...

    async def refused(self, ctx: Context, body: dict[str, Any]) -> None:
        """After the spec was refused (not after a refused child)."""

    async def status(self, ctx: Context, memory: Memory, body: dict[str, Any], desired: Desired, current: Children,
                     old_status: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The status from what is now observed, and whether to write it now (when not, `after` waits too)."""

    async def after(self, ctx: Context, memory: Memory, body: dict[str, Any], desired: Desired, status: dict[str, Any],
                    old_status: dict[str, Any]) -> None:
        """What follows a status written (the autoscaler told, what was measured remembered, warnings posted)."""


async def run(kind: Kind, ctx: Context, memory: Memory, policies: PolicySet, body: dict[str, Any]) -> dict[str, Any]:
    """One reconcile of `body` (as the cache holds it); returns its status. Raises InvalidSpec when refused."""
    meta = body["metadata"]
    old_status = body.get("status") or {}
    observed = ctx.cache.children_of(owner_key(body), kind.children, meta["uid"])
    desired = await kind.desired(ctx, memory, policies, body)
    if desired.problems:
        await refuse(ctx, body, old_status, desired.problems, desired.reason, observed)
        await kind.refused(ctx, body)
        raise InvalidSpec(desired.problems)
    if desired.waiting is not None and not any(kind == "Job" for kind, _ in observed):
        # (A job whose Job exists already runs on what it mounted, or is done: its status stays its own.)
        status = waiting_status(meta.get("generation"), desired.waiting, observed, old_status)
        await write_status(ctx, body, old_status, status)
        return status  # queued again when the cache changes (runtime/core.py)
    try:
        current = await converge(ctx, memory, body, desired.objects, observed)
    except ChildRefused as exc:
        await refuse(ctx, body, old_status, exc.problems, C.CHILD_REJECTED, observed)
        raise InvalidSpec(exc.problems) from exc
    except ChildTaken as exc:
        for child, name, who in exc.taken:  # one Warning per object and resource, not one per retry
            if (meta["uid"], f"taken {child}/{name}") not in memory.warned:
                memory.warned.add((meta["uid"], f"taken {child}/{name}"))
                ctx.event(body, "Warning", C.CHILD_NAME_TAKEN, f"{child} {name} exists {who}: not changed, adopted or "
                          f"deleted; nothing that would name it is created until the name is free.")
        status = taken_status(meta.get("generation"), str(body["kind"]), exc.taken)
        await write_status(ctx, body, old_status, status)
        return status  # not settled: reconciled again after the recheck period, when the name may be free
    status, write = await kind.status(ctx, memory, body, desired, current, old_status)
    if not write:
        return status  # held back for a moment (the kind says why); the next reconcile writes it
    await write_status(ctx, body, old_status, status)
    await kind.after(ctx, memory, body, desired, status, old_status)
    return status


async def refuse(ctx: Context, body: dict[str, Any], old_status: dict[str, Any], problems: list[Problem], reason: str,
                 observed: Children) -> None:
    """The one refusal path: SpecValid=False (and Ready=False) naming the fields, what still runs said to be
    kept as last applied, the embedding space's fingerprint kept protecting the index."""
    status = invalid_status(body["metadata"].get("generation"), problems, reason, kept_children(observed))
    if old_status.get("embeddingSpace"):
        status["embeddingSpace"] = old_status["embeddingSpace"]
    await write_status(ctx, body, old_status, status)
