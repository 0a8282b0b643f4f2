"""api/clock.py: the one place times are written and read as the API server writes them; and the one "is gone"
test of an API answer (k8s.api.ApiError.gone)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pooling_operator.api.clock import micro_time, parse_time, rfc3339
from pooling_operator.k8s.api import ApiError, status_patch

T = datetime(2026, 12, 4, 15, 30, 1, 123456, tzinfo=UTC)


def test_times_are_written_as_the_api_server_writes_them() -> None:
    assert rfc3339(T) == "2026-12-04T15:30:01Z"
    assert micro_time(T) == "2026-12-04T15:30:01.123456Z"
    assert parse_time(rfc3339(T)) == T.replace(microsecond=0)
    assert parse_time(micro_time(T)) == T
    assert rfc3339().endswith("Z") and parse_time(rfc3339()) is not None


@pytest.mark.parametrize("text", [None, 5, "", "yesterday", "2026-13-01T00:00:00Z"])
def test_anything_else_reads_as_no_time(text: object) -> None:
    assert parse_time(text) is None


@pytest.mark.parametrize(("status", "body", "gone"), [
    (404, "", True), (403, 'namespaces "x" is forbidden: NamespaceTerminating', True), (403, "forbidden", False),
    (409, "", False), (500, "", False),
])
def test_gone_is_a_404_or_a_terminating_namespace(status: int, body: str, gone: bool) -> None:
    assert ApiError(status, "r", body).gone is gone


def test_a_status_patch_names_the_object_and_only_what_is_given() -> None:
    body = {"apiVersion": "v", "kind": "K", "metadata": {"name": "n", "namespace": "ns", "uid": "u"}, "spec": {}}
    assert status_patch(body, {"a": 1}) == {"apiVersion": "v", "kind": "K", "metadata": {"name": "n", "namespace": "ns"},
                                            "status": {"a": 1}}
    cluster = {"apiVersion": "v", "kind": "P", "metadata": {"name": "p"}}
    assert status_patch(cluster) == {"apiVersion": "v", "kind": "P", "metadata": {"name": "p"}}
