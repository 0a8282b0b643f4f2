"""The kind families as types (api/resources.py: Service, Job, VllmResource, AnyResource) say what KINDS' family
column says: a kind added to the table and not to its family's type (or the other way) fails here."""

from __future__ import annotations

from typing import get_args

import pytest

from pooling_operator.api.resources import (
    FAMILY_KINDS,
    KINDS,
    AnyResource,
    GpuSharer,
    Job,
    Service,
    SpaceClaimant,
    VllmResource,
    in_space,
)


def kinds_of(union: object) -> set[str]:
    return {model.model_fields["kind"].default for model in get_args(union)}


@pytest.mark.parametrize(("union", "families"), [
    (Service, ("service",)), (Job, ("job",)), (VllmResource, ("service", "job")),
    (AnyResource, ("service", "job", "cache", "policy")),
])  # fmt: skip
def test_each_family_type_holds_exactly_its_kinds(union: object, families: tuple[str, ...]) -> None:
    assert kinds_of(union) == {k for f in families for k in FAMILY_KINDS[f]}


def test_every_kind_of_the_table_is_some_resource() -> None:
    assert kinds_of(AnyResource) == set(KINDS)
    assert all(isinstance(KINDS[k].model.model_construct(), VllmResource) for k in kinds_of(VllmResource))


def test_the_gpu_sharers_are_the_gpu_share_column() -> None:
    assert kinds_of(GpuSharer) == {k for k, info in KINDS.items() if info.gpu_share}


def test_the_space_claimants_are_the_claims_space_column() -> None:
    assert kinds_of(SpaceClaimant) == {k for k, info in KINDS.items() if info.claims_space}
    assert {k for k in KINDS if in_space(KINDS[k].model.model_construct())} == kinds_of(SpaceClaimant)
