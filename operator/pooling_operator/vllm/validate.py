"""One entry point for validation: a raw object (dict) in, the parsed resource and every Problem out.

Used alike by the `validate` CLI, `render`, and the reconcile's parse step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from pooling_operator import API_VERSION
from pooling_operator.api import KINDS, AnyResource
from pooling_operator.api import messages as M
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.api.problems import Problem, from_validation_error
from pooling_operator.vllm.rules import Settings, check

NAME_MESSAGE = M.NAME_DNS1035


@dataclass
class Result:
    kind: str
    name: str
    resource: AnyResource | None
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors


def identify(obj: Mapping[str, Any]) -> tuple[str, str]:
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "?"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else "?"
    return str(kind), str(name)


def parse(obj: Any) -> Result:
    """Structural validation only (the schema): the resource, or the problems that stop parsing."""
    if not isinstance(obj, Mapping):
        return Result("?", "?", None, [Problem("(document)", f"expected a mapping (an object), got {type(obj).__name__}")])
    kind, name = identify(obj)
    if obj.get("apiVersion") != API_VERSION:
        return Result(kind, name, None, [Problem("apiVersion", f"must be {API_VERSION}, got {obj.get('apiVersion')!r}")])
    info = KINDS.get(kind)
    if info is None:
        return Result(kind, name, None, [Problem("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")])
    try:
        resource = info.model.model_validate(dict(obj))
    except ValidationError as exc:
        problems = from_validation_error(exc, info.model)
        problems = [Problem(p.path, NAME_MESSAGE, p.severity) if p.path == "metadata.name" else p for p in problems]
        return Result(kind, name, None, problems)
    return Result(kind, name, resource)  # type: ignore[arg-type]


def validate(
    obj: Any,
    settings: Settings | None = None,
    policies: Mapping[str, AutoscalingPolicySpec] | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> Result:
    """Schema and every vLLM rule."""
    result = parse(obj)
    if result.resource is not None:
        result.problems = check(result.resource, settings or Settings(), policies, namespace_labels)
    return result
