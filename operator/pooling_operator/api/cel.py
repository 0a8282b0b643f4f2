"""CEL validation rules of the CRDs (`x-kubernetes-validations`), written one way: a rule, its message (shared
with the Python rule that enforces the same, api/messages.py) and the field the API server names."""

from __future__ import annotations

from typing import Any


def cel(rule: str, message: str, field: str | None = None) -> dict[str, str]:
    """One rule; `field` is a path relative to the object the rule sits on (`.pooling.type`)."""
    out = {"rule": rule, "message": message}
    if field:
        out["fieldPath"] = field
    return out


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    """The schema extra that carries the rules (pydantic `json_schema_extra`)."""
    return {"x-kubernetes-validations": list(rules)}
