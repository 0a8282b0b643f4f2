"""One embeddingSpace label, one vector space, across the namespace as the cache holds it: a PoolingService or
PoolingJob that claims a label an older one (creationTimestamp, then kind and name) claims with another space is
refused, naming the older one; the older one goes on. `validate` judges a file's resources the same way
(vllm/embedding_space.space_clashes, in input order); the runtime reconciles the others of a label again when one
of them changes or goes (runtime/core.py), so the younger one is let through once the older is gone or agrees."""

from __future__ import annotations

from typing import Any

from pooling_operator.api.problems import Problem
from pooling_operator.reconcile.context import Context
from pooling_operator.vllm.embedding_space import space_clashes
from pooling_operator.vllm.validate import parse


def space_problems(ctx: Context, body: dict[str, Any]) -> list[Problem]:
    meta = body["metadata"]
    label = (body.get("spec") or {}).get("embeddingSpace")
    if not label:
        return []
    claims = {str(b["metadata"].get("uid")): b for b in ctx.cache.claiming_space(str(meta.get("namespace") or ""), str(label))}
    claims[str(meta.get("uid"))] = body  # as this reconcile sees it
    ordered = sorted(claims.values(), key=lambda b: (str(b["metadata"].get("creationTimestamp") or ""), str(b.get("kind")),
                                                     str(b["metadata"].get("name"))))  # fmt: skip
    mine = next(i for i, b in enumerate(ordered) if b["metadata"].get("uid") == meta.get("uid"))
    older = [r for b in ordered[:mine] if (r := parse(b).resource) is not None]  # an invalid one claims nothing
    me = parse(body).resource
    clash = space_clashes([*older, me]).get(len(older)) if me is not None else None
    return [clash] if clash is not None else []
