"""The identity contract of every child: the labels the operator puts on what it creates, the component name
per kind, and the selector labels. The builders write these, and the I/O layer (the watches, the cache, the
re-list) reads them: one place for both (docs/design.md, "Names every child carries")."""

from __future__ import annotations

from pooling_operator.api.resources import KINDS

MANAGED_BY = "vllm-pooling-operator"
MANAGED_LABELS = {"app.kubernetes.io/managed-by": MANAGED_BY}  # on every child: what the operator watches and lists
INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENTS = {kind: info.component for kind, info in KINDS.items() if info.component}  # from the kinds table
COMPONENT_KINDS = {component: kind for kind, component in COMPONENTS.items()}


def selector_labels(name: str, kind: str) -> dict[str, str]:
    """The fixed, small set of labels selectors use (never user labels)."""
    return {INSTANCE_LABEL: name, COMPONENT_LABEL: COMPONENTS[kind]}


def labels(name: str, kind: str) -> dict[str, str]:
    """Every label of a child of the resource `kind`/`name`."""
    return {
        "app.kubernetes.io/name": "vllm",
        **selector_labels(name, kind),
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }
