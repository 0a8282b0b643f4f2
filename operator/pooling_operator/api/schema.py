"""The wire's building blocks, before any resource: the pydantic base every spec block derives from (camelCase on
the wire, unknown fields refused, strict JSON types, frozen), the field types shared across kinds (quantities,
names, durations, free-form objects) and the OpenAPI markers api/crd.py reads when it emits the CRDs."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)
from pydantic.alias_generators import to_camel

from pooling_operator.api.quantity import QUANTITY_PATTERN

# Markers read by api/crd.py when the OpenAPI schema is emitted.
PRESERVE_UNKNOWN = {"x-kubernetes-preserve-unknown-fields": True}
INT_OR_STRING = {"x-kubernetes-int-or-string": True}


DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """A duration string as the API writes it (250ms, 1m30s, 2h) in seconds."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a duration such as 250ms, 30s, 5m or 1h")
    return sum(float(n) * _DURATION_UNITS[unit] for n, unit in _DURATION_PART.findall(text))



def _quantity(value: int | str) -> int | str:
    if isinstance(value, bool) or (isinstance(value, int) and value < 0):
        raise ValueError("must be a non-negative Kubernetes quantity such as 8, 500m, 64Gi or 2Ti")
    if isinstance(value, int) and value >= 2**63:
        # the API server reads a JSON integer past int64 as a float, and a float is no integer-or-string
        raise ValueError(f"{value} is past int64, which the API server refuses here; write it as a string, e.g. '8Ei'")
    if isinstance(value, str) and not re.fullmatch(QUANTITY_PATTERN, value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity; write e.g. 8, 500m, 64Gi or 2Ti")
    return value


def _not_a_float(value: Any) -> Any:
    # int | str in lax mode would take 1e20 as an int: the API server refuses a JSON number that is not an integer
    # here (x-kubernetes-int-or-string; validate.integral_numbers has already made 2.0 an int, as the API server
    # does), so validate must too, and say how to write it
    if isinstance(value, float):
        raise ValueError(f"{value!r} is a number that is not an integer, which the API server refuses here; "
                         "write a quantity as an integer or a string, e.g. 2, '0.5', 500m or 64Gi")
    return value


Quantity = Annotated[
    int | str,
    Field(union_mode="left_to_right", json_schema_extra=INT_OR_STRING),
    BeforeValidator(_not_a_float),
    AfterValidator(_quantity),
]
Name = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
Duration = Annotated[str, StringConstraints(pattern=DURATION_PATTERN)]
# A host a front routes by: a DNS-1123 subdomain, or one with a leading "*." (its subdomains)
HostName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^(\*\.)?" + DNS1123_SUBDOMAIN[1:])]
ObjectDict = Annotated[dict[str, Any], Field(json_schema_extra=PRESERVE_UNKNOWN)]


class Spec(BaseModel):
    """Base of every spec block: camelCase aliases, unknown fields rejected, frozen once validated."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,  # parsed specs are values: nothing changes them after validation
        strict=True,  # JSON types as the API server checks them: "3" is not an integer, 0 is not false
    )

    def wire(self) -> dict[str, Any]:
        """The block as it appears in YAML: camelCase, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
