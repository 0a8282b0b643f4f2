"""A status the API server refuses for what it holds still leaves a condition saying why (issue 42.5): before, the
resource showed no condition at all and its reconcile failed every minute for ever."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from pooling_operator.k8s.api import ApiError
from pooling_operator.reconcile.context import Context
from pooling_operator.reconcile.writes import write_status
from tests.factories import pooling


class RefusingKube:
    """Refuses the first status write as the API server refuses one that makes the object too large."""

    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []

    async def apply(self, obj: dict[str, Any], *, manager: str = "", subresource: str | None = None, create: bool = False) -> dict[str, Any]:
        self.applied.append(copy.deepcopy(obj))
        if len(self.applied) == 1:
            raise ApiError(413, "Request Entity Too Large", '{"message": "etcdserver: request is too large"}')
        out = copy.deepcopy(obj)
        out["metadata"].update(uid="u1", resourceVersion="2")
        return out

    async def event(self, owner: dict[str, Any], type_: str, reason: str, message: str, at: str | None = None) -> None:
        self.events.append((type_, reason))

    async def close(self) -> None:
        pass


def test_a_refused_status_is_replaced_by_a_condition_saying_why() -> None:
    async def main() -> None:
        kube = RefusingKube()
        ctx = Context(kube=kube)  # type: ignore[arg-type]
        body = pooling(name="big", namespace="ns")
        body["metadata"].update(uid="u1", generation=3)
        new = {"observedGeneration": 3, "effective": {"args": ["vllm", "serve", "x" * 100]},
               "conditions": [{"type": "Ready", "status": "False", "reason": "Creating", "message": "", "observedGeneration": 3}]}
        await write_status(ctx, body, {}, new)
        await ctx.events.drain()
        assert len(kube.applied) == 2
        status = kube.applied[1]["status"]
        assert "effective" not in status and status["observedGeneration"] == 3
        [ready] = status["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "StatusRefused")
        assert "HTTP 413" in ready["message"] and "etcdserver: request is too large" in ready["message"]
        assert ("Warning", "StatusRefused") in kube.events

    asyncio.run(main())
