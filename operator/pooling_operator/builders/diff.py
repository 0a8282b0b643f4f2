"""Is an observed object already what we would apply? Pure, so a steady resync sends no request at all.

Two checks: every field we set still has our value (catches hand edits), and the object carries the hash
of what we last applied (catches fields we stopped setting, which a subset check cannot see; server-side
apply then removes them).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pooling_operator.api.quantity import parse_quantity

HASH_ANNOTATION = "vllm-pooling.io/applied-hash"
_EMPTY: tuple[Any, ...] = ("", [], {}, None)
_QUANTITIES = ("resources", "sizeLimit")  # fields whose values are quantities ("0.5" and "500m" are one value)


def with_hash(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with the hash of its own content in an annotation. A new object down to its annotations; below
    that it shares `obj`'s values (nothing writes into a built child; a deep copy was half of a restart's plan)."""
    annotations = {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k != HASH_ANNOTATION}
    out = {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}
    digest = hashlib.sha256(json.dumps(out, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    annotations[HASH_ANNOTATION] = digest
    return out


def _same_leaf(want: Any, have: Any, quantity: bool) -> bool:
    if want == have:
        return True
    # The API server normalises quantities ("0.5" -> "500m", 1 -> "1"): under resources, compare values.
    if quantity and isinstance(want, int | str) and isinstance(have, int | str) and not isinstance(want, bool):
        try:
            return parse_quantity(want) == parse_quantity(have)
        except ValueError:
            return False
    return False


# The associative lists we write, by field name, with their merge keys (as the Kubernetes API declares them):
# server-side apply merges these item by item, so an item another manager added (a sidecar injector's container,
# a hand-added env var) stays, and must not make us apply again. Every other list is atomic: our apply replaces
# it whole, so it is compared whole (a hand-added RoleBinding subject or ScaledObject trigger is taken back).
ASSOCIATIVE_LISTS = {
    "containers": ("name",),
    "initContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "ports": ("containerPort", "port"),  # a container's ports, a Service's ports
    "ownerReferences": ("uid",),
}


def _merge_key(field: str | None, items: list[Any]) -> str | None:
    keys = ASSOCIATIVE_LISTS.get(field or "")
    if not keys or not items or not all(isinstance(i, dict) for i in items):
        return None
    return next((k for k in keys if all(k in i for i in items)), None)


def covers(have: Any, want: Any, quantity: bool = False, field: str | None = None) -> bool:
    """True when every field of ``want`` is present in ``have`` with the same value. Fields the server or other
    managers add are ignored, as server-side apply leaves them alone: extra keys of a map, and extra items of
    an associative list (matched by its merge key, ASSOCIATIVE_LISTS); atomic lists compare whole. An empty
    value we set counts as present when the server dropped it (e.g. an env var's value: "")."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return False
        for k, v in want.items():  # a loop, and equal values not walked: a restart compares every child once
            if k not in have:
                if v not in _EMPTY:
                    return False
            elif (h := have[k]) != v and not covers(h, v, quantity or k in _QUANTITIES, k):
                return False
        return True
    if isinstance(want, list):
        if not isinstance(have, list):
            return False
        key = _merge_key(field, want)
        if key is not None:
            by_key = {h.get(key): h for h in have if isinstance(h, dict)}
            return all(w[key] in by_key and covers(by_key[w[key]], w, quantity) for w in want) and _same_order(have, want, key)
        return len(have) == len(want) and all(covers(h, w, quantity) for h, w in zip(have, want, strict=True))
    return _same_leaf(want, have, quantity)


def _same_order(have: list[Any], want: list[Any], key: str) -> bool:
    """Our items keep our relative order (order matters for env: a later variable may refer to an earlier)."""
    ours = {w[key] for w in want}
    return [h.get(key) for h in have if isinstance(h, dict) and h.get(key) in ours] == [w[key] for w in want]


def needs_apply(desired: dict[str, Any], observed: dict[str, Any] | None) -> bool:
    if observed is None:
        return True
    meta_want = {k: v for k, v in desired["metadata"].items() if k in ("labels", "annotations", "ownerReferences")}
    body_want = {k: v for k, v in desired.items() if k not in ("apiVersion", "kind", "metadata")}
    return not (covers(observed.get("metadata", {}), meta_want) and covers(observed, body_want))
