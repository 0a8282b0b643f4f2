"""The kind families as types (api/resources.py: Service, Job, VllmResource, AnyResource) say what KINDS' family
column says: a kind added to the table and not to its family's type (or the other way) fails here."""

from __future__ import annotations

from typing import get_args

import pytest

from pooling_operator.api.resources import FAMILY_KINDS, KINDS, AnyResource, Job, Service, VllmResource


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
