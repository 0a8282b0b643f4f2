"""What a Problem's field path must be, for the property tests: ``path_problem`` (see its docstring), read
against the kinds' CRD schemas (tests/properties_support.py draws the resources)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tests.properties_support import KINDS, METADATA_FIELDS, _child_schema, crd_schema

# ---- what a problem's path must be ------------------------------------------------------------------------

def _known_fields(kind: str, schema_path: tuple[Any, ...]) -> set[str]:
    if schema_path == ("metadata",):
        return set(METADATA_FIELDS)
    node: Mapping[str, Any] | None = crd_schema(kind)
    for seg in schema_path:
        node = _child_schema(node, seg)
    return set((node or {}).get("properties") or {})


def _free_form(kind: str, schema_path: tuple[Any, ...]) -> bool:
    """Below a free-form object (x-kubernetes-preserve-unknown-fields: hfOverrides, extraConfig, affinity
    terms, namespaceSelector) any key is a field."""
    node: Mapping[str, Any] | None = crd_schema(kind)
    for seg in schema_path:
        if node is not None and node.get("x-kubernetes-preserve-unknown-fields"):
            return True
        node = _child_schema(node, seg)
    return bool(node and node.get("x-kubernetes-preserve-unknown-fields"))


def path_problem(obj: Any, kind: str, path: str, message: str) -> str | None:
    """Why ``path`` is not an acceptable field path for a Problem about ``obj`` (None when it is).

    Accepted: "(document)" exactly when the input is not a mapping; otherwise the path is read from the root
    one segment at a time (``.name`` for an object field, ``[i]`` for a list element) and each segment must
    be a key or index present in the input at that place, or, once the input has nothing there, a field the
    kind's CRD schema declares at that place (a required field that is missing, a field to add). The first
    segment is therefore one of the input's own top-level keys or apiVersion/kind/metadata/spec/status; below
    a free-form object (hfOverrides, connector.extraConfig, affinity, namespaceSelector) any key. Keys
    of the input that contain "." or "[" are matched whole. A problem saying "unknown field" must name a key
    present in the input that the schema does not declare there; one saying "required field is missing" a
    field absent from the input.
    """
    if not isinstance(obj, Mapping):
        return None if path == "(document)" else f"non-mapping input, path {path!r} is not (document)"
    if obj.get("kind") in KINDS:  # the rules of the kind the document claims (a mutation may change it)
        kind = obj["kind"]
    unknown = message.startswith("unknown field")
    missing = message == "required field is missing"

    def walk(node: Any, rest: str, schema_path: tuple[Any, ...], present: bool) -> str | None:
        if rest == "":
            if unknown and not present:
                return "an unknown field that is not in the input"
            if missing and present:
                return "a missing field that is in the input"
            if unknown and schema_path and schema_path[-1] in _known_fields(kind, schema_path[:-1]):
                return "an unknown field the schema declares"
            return None
        if rest.startswith("[") and not (present and isinstance(node, Mapping)):  # a mapping's key may start with "["
            m = re.match(r"\[(\d+)\]", rest)
            if not m:
                return f"malformed segment at {rest!r}"
            i = int(m.group(1))
            if present and isinstance(node, list) and i < len(node):
                return walk(node[i], rest[m.end():], (*schema_path, 0), True)
            return f"index [{i}] is not in the input"
        body = rest[1:] if schema_path else rest
        if schema_path and not rest.startswith("."):
            return f"malformed segment at {rest!r}"
        if present and isinstance(node, Mapping):  # keys of the input first, whole (they may hold . or [)
            keys = [k for k in node if isinstance(k, str) and (body == k or (body.startswith(k) and body[len(k)] in ".["))]
            reason = None
            for key in sorted(keys, key=len, reverse=True):
                reason = walk(node[key], body[len(key):], (*schema_path, key), True)
                if reason is None:
                    return None
            if reason is not None:
                return reason
        m = re.match(r"[^.\[\]]+", body)
        if not m:
            return f"malformed segment at {rest!r}"
        name = m.group(0)
        top = schema_path == () and name in ("apiVersion", "kind", "metadata", "spec", "status")
        if not top and not _free_form(kind, schema_path) and name not in _known_fields(kind, schema_path):
            return f"{'.'.join(map(str, (*schema_path, name)))} is neither in the input nor declared by the schema"
        return walk(None, body[m.end():], (*schema_path, name), False)

    if path == "":  # only the name of a key "" of the input
        return None if "" in obj else f"empty path ({message})"
    reason = walk(obj, path, (), True)
    return None if reason is None else f"{path}: {reason} ({message})"
