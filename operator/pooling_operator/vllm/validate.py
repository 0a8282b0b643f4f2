"""One entry point for validation: a raw object (dict) in, the parsed resource and every Problem out.

Used alike by the `validate` CLI, `render`, and the reconcile's parse step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import ValidationError

from pooling_operator import API_VERSION, MAX_NESTING
from pooling_operator.api import KINDS, AnyResource
from pooling_operator.api import messages as M
from pooling_operator.api.crd import crd
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.api.problems import Problem, from_validation_error, nesting_problem, shown
from pooling_operator.vllm.contract import Contract
from pooling_operator.vllm.rules import judge
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.workload import Workload

NAME_MESSAGE = M.NAME_DNS1035


@dataclass
class Result:
    kind: str
    name: str
    resource: AnyResource | None
    problems: list[Problem] = field(default_factory=list)
    workload: Workload | None = None  # what judging the rules resolved (None for a policy or when parsing failed)
    contract: Contract | None = None

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
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else "?"
    return str(kind), str(name)


def parse(obj: Any) -> Result:
    """Structural validation only (the schema): the resource, or the problems that stop parsing."""
    if not isinstance(obj, Mapping):
        return Result("?", "?", None, [Problem("(document)", f"expected a mapping (an object), got {type(obj).__name__}")])
    kind, name = identify(obj)
    if obj.get("apiVersion") != API_VERSION:
        return Result(kind, name, None, [Problem("apiVersion", f"must be {API_VERSION}, got {shown(repr(obj.get('apiVersion')))}")])
    info = KINDS.get(kind)
    if info is None:
        return Result(kind, name, None, [Problem("kind", f"must be one of {', '.join(KINDS)}, got {shown(repr(kind))}")])
    deep = nesting_problem(obj, MAX_NESTING)  # before pydantic, the builders and json.dumps recurse into it
    if deep is not None:
        return Result(kind, name, None, [deep])
    try:
        resource = info.model.model_validate(integral_numbers(dict(obj), _schema(kind)))
    except ValidationError as exc:
        problems = from_validation_error(exc, info.model, data=obj)
        problems = [Problem(p.path, NAME_MESSAGE, p.severity) if p.path == "metadata.name" else p for p in problems]
        return Result(kind, name, None, problems)
    return Result(kind, name, resource)  # type: ignore[arg-type]


@cache
def _schema(kind: str) -> dict[str, Any]:
    return crd(KINDS[kind])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


JSON_EXACT = 2**53 - 1  # a float is an integer to the API server's schema check only up to here (go-openapi swag; checked on 1.35)


def integral_numbers(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """The value with every float that is a whole number (2.0, -0.0) made an int where the CRD's schema says
    integer (or int-or-string), as the API server reads JSON numbers: it admits 2.0 as an integer, so validate
    does too, but not 1e20 (a float from 2**53 up is a "number" to it). Elsewhere (free-form objects such as
    hfOverrides) nothing is touched."""
    if schema is None:
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) <= JSON_EXACT and (
        schema.get("type") == "integer" or schema.get("x-kubernetes-int-or-string")
    ):
        return int(value)
    if isinstance(value, dict) and isinstance(schema.get("properties"), Mapping):
        props = schema["properties"]
        return {k: integral_numbers(v, props.get(k)) for k, v in value.items()}
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), Mapping):
        return {k: integral_numbers(v, schema["additionalProperties"]) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [integral_numbers(v, schema["items"]) for v in value]
    return value


def validate(
    obj: Any,
    settings: Settings | None = None,
    policies: Mapping[str, AutoscalingPolicySpec] | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> Result:
    """Schema and every vLLM rule."""
    result = parse(obj)
    if result.resource is not None:
        j = judge(result.resource, settings or Settings(), policies, namespace_labels)
        result.problems, result.workload, result.contract = j.problems, j.workload, j.contract
    return result


def problem_line(result: Result, problem: Problem) -> str:
    """One problem as `pooling-operator validate` prints it (after the file name) and admission answers it."""
    prefix = "warning: " if problem.severity == "warning" else ""
    return f"{shown(result.kind)}/{shown(result.name)}: {shown(problem.path)}: {prefix}{shown(problem.message, 1000)}"


def identity(obj: Any) -> tuple[str, str, str] | None:
    """(kind, namespace, name) as the API server keys the object (a namespaced kind without a namespace lands
    in `default`, as render places it), or None for what is not one of our kinds."""
    if not isinstance(obj, Mapping) or obj.get("apiVersion") != API_VERSION:
        return None
    kind, name = identify(obj)
    info = KINDS.get(kind)
    if info is None or name == "?":
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        meta = {}
    namespace = (meta.get("namespace") or "default") if info.namespaced else ""
    return kind, str(namespace), name


def duplicate_problems(places: list[tuple[str, Any]]) -> dict[int, Problem]:
    """{index: problem} for every object whose kind, namespace and name an earlier one of the same input has
    ((where, body) pairs in input order): applied together, the later would silently replace the earlier."""
    first: dict[tuple[str, str, str], str] = {}
    out: dict[int, Problem] = {}
    for i, (where, body) in enumerate(places):
        key = identity(body)
        if key is None:
            continue
        if key in first:
            kind, namespace, name = key
            what = f"{kind} {namespace + '/' if namespace else ''}{name}"
            out[i] = Problem("metadata.name", f"{what} is also defined in {first[key]}; one would silently replace "
                                              "the other: rename one or remove it")
        else:
            first[key] = where
    return out


@dataclass(frozen=True)
class Verdict:
    """An admission answer: refused with `message` (every error line), or allowed with `warnings`."""

    allowed: bool
    message: str = ""
    warnings: tuple[str, ...] = ()


def admission_verdict(obj: Any, settings: Settings | None = None, old: Any = None) -> Verdict:
    """What the validating webhook answers for a create or update: the same lines as `validate`.

    An update that leaves the spec as it was is allowed whatever it holds, so that metadata and status
    writes (by users, controllers or this operator) never fail on an object admitted while the webhook
    was off; the status conditions report its problems then."""
    if old is not None and isinstance(obj, Mapping) and isinstance(old, Mapping) and obj.get("spec") == old.get("spec"):
        return Verdict(True)
    result = validate(obj, settings)
    warnings = tuple(problem_line(result, p) for p in result.warnings)
    if result.errors:
        return Verdict(False, "\n".join(problem_line(result, p) for p in result.errors), warnings)
    return Verdict(True, "", warnings)
