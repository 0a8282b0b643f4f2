"""Is an observed object already what we would apply? Pure, so a steady resync sends no request at all."""

from __future__ import annotations

from typing import Any

from pooling_operator.api.quantity import parse_quantity


def _same_leaf(want: Any, have: Any) -> bool:
    if want == have:
        return True
    # The API server normalises quantities ("0.5" -> "500m", 1 -> "1"): compare their values.
    if isinstance(want, int | str) and isinstance(have, int | str) and not isinstance(want, bool):
        try:
            return parse_quantity(want) == parse_quantity(have)
        except ValueError:
            return False
    return False


def covers(have: Any, want: Any) -> bool:
    """True when every field of ``want`` is present in ``have`` with the same value (lists by position, same
    length). Fields the server or other managers add are ignored, as server-side apply leaves them alone."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and covers(have[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(covers(h, w) for h, w in zip(have, want, strict=True))
    return _same_leaf(want, have)


def needs_apply(desired: dict[str, Any], observed: dict[str, Any] | None) -> bool:
    if observed is None:
        return True
    meta_want = {k: v for k, v in desired["metadata"].items() if k in ("labels", "annotations", "ownerReferences")}
    body_want = {k: v for k, v in desired.items() if k not in ("apiVersion", "kind", "metadata")}
    return not (covers(observed.get("metadata", {}), meta_want) and covers(observed, body_want))
