"""Emit CustomResourceDefinitions from the pydantic models.

Kubernetes wants a structural OpenAPI v3 schema: no ``$ref``, no ``title``, ``nullable`` instead of
``anyOf: [X, null]``, booleans for ``exclusiveMinimum``/``exclusiveMaximum``, int-or-string and
preserve-unknown markers, and no defaults (the operator applies them, so nothing a user wrote is changed on
admission; ``kubectl explain`` still reads the default in each description).
"""

from __future__ import annotations

import copy
from typing import Any

from pooling_operator import GROUP, VERSION
from pooling_operator.api import messages as M
from pooling_operator.api.cel import cel, validations
from pooling_operator.api.resources import DNS1035_LABEL, KINDS, KindInfo

_DROP = {"title", "default", "examples", "additionalProperties"}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].split("/")[-1]])
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    return {k: _resolve(v, defs) for k, v in node.items()}


def _structural(node: Any) -> Any:
    if isinstance(node, list):
        return [_structural(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    any_of = node.get("anyOf")
    if any_of is not None and not node.get("x-kubernetes-int-or-string"):
        branches = [b for b in any_of if b.get("type") != "null"]
        nullable = len(branches) < len(any_of)
        del node["anyOf"]
        if len(branches) == 1:
            node = {**branches[0], **node}
        else:  # pragma: no cover - every union in the API is X | None or int | str
            raise ValueError(f"cannot express a union of {branches} structurally")
        if nullable and "enum" not in node:
            # (Not an enum: the API server checks a nullable field's null against its enum, "Unsupported value:
            # null", even with null among the values. A non-nullable field's null is pruned, i.e. unset, which
            # is what validate (pydantic) makes of it.)
            node["nullable"] = True
    if node.get("x-kubernetes-int-or-string"):
        node.pop("anyOf", None)
        node.pop("type", None)
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("x-kubernetes-preserve-unknown-fields"):
        node.pop("additionalProperties", None)
        node["type"] = "object"
    if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _structural(node["additionalProperties"])
        keep_additional = True
    else:
        keep_additional = False
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in node and not isinstance(node[key], bool):
            node["minimum" if key == "exclusiveMinimum" else "maximum"] = node[key]
            node[key] = True
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP and not (key == "additionalProperties" and keep_additional):
            continue
        if key in ("properties",):
            out[key] = {k: _structural(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value)
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" in out:
        out.pop("additionalProperties", None)
    return out


def openapi_schema(model: type, *, mode: str = "validation") -> dict[str, Any]:
    """A structural schema for one pydantic model."""
    raw = model.model_json_schema(by_alias=True, mode=mode)  # type: ignore[attr-defined]
    defs = raw.pop("$defs", {})
    return _structural(_resolve(raw, defs))


def crd(info: KindInfo) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind."""
    spec_schema = openapi_schema(info.spec_model)
    spec_schema["description"] = info.spec_model.__doc__.strip().splitlines()[0]  # type: ignore[union-attr]
    status_schema = openapi_schema(info.status_model, mode="serialization")
    status_schema["description"] = info.status_model.__doc__.strip().splitlines()[0]  # type: ignore[union-attr]
    root: dict[str, Any] = {
        "type": "object",
        "description": info.description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "vllm-pooling.io/v1alpha1"},
            "kind": {"type": "string", "description": info.kind},
            "metadata": {"type": "object"},  # the API server allows nothing else here
            "spec": spec_schema,
            "status": status_schema,
        },
        **validations(
            cel(f"self.metadata.name.size() <= 63 && self.metadata.name.matches('{DNS1035_LABEL}')", f"metadata.name {M.NAME_DNS1035}")
        ),
    }
    subresources: dict[str, Any] = {"status": {}}
    if info.scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{info.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "vllm-pooling-operator", "app.kubernetes.io/part-of": "vllm-pooling-operator"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.singular,
                "shortNames": [info.short_name],
                "categories": ["pooling"],
            },
            "scope": "Namespaced" if info.namespaced else "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": subresources,
                    "additionalPrinterColumns": list(info.columns),
                }
            ],
        },
    }


def all_crds() -> list[dict[str, Any]]:
    """Every CRD, in a fixed order."""
    return [crd(info) for info in KINDS.values()]
