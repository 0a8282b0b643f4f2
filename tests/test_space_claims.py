"""One embeddingSpace label, one space, as the reconcile sees the namespace (issue 42.3): the younger of two
resources that claim a label with different spaces is refused naming the older; the older goes on; two that agree
both go on. `validate` judges a file the same way (tests/test_cli.py)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from pooling_operator.k8s.cache import owner_key, project
from pooling_operator.reconcile import InvalidSpec
from pooling_operator.status import conditions as C
from tests.factories import pooling, pooling_job
from tests.test_reconcile import cond, world


def claimant(body: dict[str, Any], uid: str, created: str) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["metadata"].update(uid=uid, creationTimestamp=created, generation=1, resourceVersion="3")
    return body


def reconcile(body: dict[str, Any], created: str, others: list[dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """(the status written, whether the reconcile refused) with `others` in the cache beside `body`."""
    reconciles, kube, body = world(body)
    body["metadata"]["creationTimestamp"] = created
    cache = reconciles.ctx.cache
    cache.owners[owner_key(body)] = [project(body)]
    for other in others:
        cache.owners[owner_key(other)] = [project(other)]

    async def main() -> bool:
        try:
            await reconciles.reconcile(body)
        except InvalidSpec:
            return True
        return False

    refused = asyncio.run(main())
    return kube.statuses[-1], refused


OLDER = claimant(pooling({"embeddingSpace": "docs-v1"}, name="search"), "u-old", "2026-01-01T00:00:00Z")


@pytest.mark.parametrize(
    "younger",
    [
        pooling({"embeddingSpace": "docs-v1", "pooling": {"type": "CLS"}}, name="other-pooling"),
        pooling_job({"embeddingSpace": "docs-v1", "model": {"revision": "b" * 40}}, name="index"),
    ],
    ids=["service-with-other-pooling", "job-with-other-revision"],
)
def test_the_younger_claimant_of_a_label_with_another_space_is_refused_naming_the_older(younger: dict[str, Any]) -> None:
    status, refused = reconcile(younger, "2026-02-01T00:00:00Z", [OLDER])
    assert refused
    valid = cond(status, C.SPEC_VALID)
    assert (valid["status"], valid["reason"]) == ("False", C.EMBEDDING_SPACE_CLAIMED)
    assert "spec.embeddingSpace" in valid["message"] and "PoolingService/search claims embedding space 'docs-v1'" in valid["message"]


def test_the_older_claimant_goes_on_and_an_agreeing_one_too() -> None:
    younger = claimant(pooling({"embeddingSpace": "docs-v1", "pooling": {"type": "CLS"}}, name="other"), "u-new", "2026-02-01T00:00:00Z")
    status, refused = reconcile(copy.deepcopy(OLDER), "2026-01-01T00:00:00Z", [younger])
    assert not refused and cond(status, C.SPEC_VALID)["status"] == "True"
    same = pooling({"embeddingSpace": "docs-v1"}, name="replica-of-search")
    status, refused = reconcile(same, "2026-02-01T00:00:00Z", [OLDER])
    assert not refused and cond(status, C.SPEC_VALID)["status"] == "True"
