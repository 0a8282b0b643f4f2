"""Times as the Kubernetes API writes them (RFC 3339 in UTC with a ``Z``), made and read in one place.

``rfc3339`` is a ``metav1.Time`` (seconds: conditions' lastTransitionTime, lastScaleTime, the drivers'
records), ``micro_time`` a ``metav1.MicroTime`` (a Lease's renewTime, an Event's eventTime), ``parse_time``
reads either back (None for anything else).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def rfc3339(t: datetime | None = None) -> str:
    """``t`` (default: now) to the second, as ``2026-12-04T15:30:00Z``."""
    return (t or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: datetime | None = None) -> str:
    """``t`` (default: now) to the microsecond, as ``2026-12-04T15:30:00.123456Z``."""
    return (t or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: Any) -> datetime | None:
    """An RFC 3339 time as the API server writes it, aware; None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
