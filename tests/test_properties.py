"""Property tests of `validate` and the builders on bad input (issue 13): 1,000 generated resources per kind.

The resources are mutated examples, random specs and random documents (tests/properties_support.py). For
every one:

- ``validate`` returns (never raises), leaves its input unchanged and answers the same twice;
- every problem is an error or a warning with a message, and its path names a real field of the input or of
  the kind's schema (``properties_support.path_problem`` says exactly what is accepted);
- every resource validate accepts renders with ``build()`` (its policy resolved as ``render`` does), each
  child a JSON-serialisable dict with apiVersion, kind, metadata.name, the resource's namespace and the
  operator's labels, child (kind, name) pairs unique, and the same children twice.

Hypothesis runs derandomized (the same draws on every run, in CI too) with no example database.
The same strategies feed the API-server tier (e2e/tests/test_properties_apiserver.py).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings

from pooling_operator.api import AutoscalingPolicy
from pooling_operator.api.identity import labels
from pooling_operator.api.policy import policy_for
from pooling_operator.builders import BuildContext, build, names
from pooling_operator.builders.router import router_pod_labels
from pooling_operator.vllm.contract import contract, resolve_version
from pooling_operator.vllm.validate import validate
from pooling_operator.vllm.workload import workload
from tests.factories import pooling
from tests.properties_paths import path_problem
from tests.properties_support import (
    EXAMPLES_PER_KIND,
    KINDS,
    PROPERTY_SETTINGS,
    examples,
    for_each_resource,
    unit_only_values,
)

# What `render` would resolve policies from: the example AutoscalingPolicy "default" (services that name it
# or none are checked against it and built with it).
POLICIES = {doc["metadata"]["name"]: validate(doc).resource.spec for doc in examples("AutoscalingPolicy")}  # type: ignore[union-attr]


def check_validate(obj: Any, kind: str, policies: Any = None) -> Any:
    before = copy.deepcopy(obj)
    result = validate(obj, policies=policies)
    assert obj == before, "validate changed its input"
    again = validate(obj, policies=policies)
    assert (again.ok, again.problems) == (result.ok, result.problems), "validate is not deterministic"
    for p in result.problems:
        assert p.severity in ("error", "warning"), p
        assert isinstance(p.message, str) and p.message.strip(), p
        why = path_problem(obj, kind, p.path, p.message)
        assert why is None, why
    if not result.ok:
        assert result.resource is None or result.errors
    return result


def check_render(result: Any) -> None:
    resource = result.resource
    if resource is None or isinstance(resource, AutoscalingPolicy):
        return
    version, error = resolve_version(resource.spec.engine.version, resource.spec.engine.image)
    assert error is None and version is not None, f"validate accepted an unsupported version: {error}"
    policy = policy_for(getattr(resource.spec, "autoscaling", None), POLICIES)
    ctx = BuildContext(policy=policy)
    children = build(resource, contract(version), ctx)
    assert children, "no children"
    namespace = resource.metadata.namespace
    want_labels = labels(resource.metadata.name, resource.kind)
    seen = set()
    for child in children:
        assert isinstance(child, dict), child
        json.dumps(child, allow_nan=False)  # what is sent to the API server
        assert isinstance(child.get("apiVersion"), str) and child["apiVersion"], child
        assert isinstance(child.get("kind"), str) and child["kind"], child
        meta = child.get("metadata")
        assert isinstance(meta, dict) and isinstance(meta.get("name"), str) and meta["name"], child
        if namespace:
            assert meta.get("namespace") == namespace, (child["kind"], meta)
        else:
            assert "namespace" not in meta, (child["kind"], meta)
        # the router's children are the service's, labelled as the router's (builders/router.py): no selector of
        # the service's takes them
        routers = getattr(resource.spec, "routing", None) is not None and meta["name"] == names.router(resource.metadata.name)
        for key, value in (router_pod_labels(workload(resource)) if routers else want_labels).items():
            assert (meta.get("labels") or {}).get(key) == value, (child["kind"], meta.get("labels"))
        assert (child["kind"], meta["name"]) not in seen, f"two {child['kind']} named {meta['name']}"
        seen.add((child["kind"], meta["name"]))
    assert build(resource, contract(version), ctx) == children, "build is not deterministic"
    assert validate(json.loads(json.dumps(resource.model_dump(by_alias=True, exclude_none=True, mode="json")))).ok, (
        "the parsed resource, dumped again, is refused"
    )


@pytest.mark.thorough
@pytest.mark.parametrize("kind", KINDS)
def test_validate_and_render_generated_resources(kind: str) -> None:
    seen = {"inputs": 0, "accepted": 0, "refused": 0, "rendered": 0}
    policies = POLICIES if kind != "AutoscalingPolicy" else None

    def check(obj: Any) -> None:
        seen["inputs"] += 1
        result = check_validate(obj, kind, policies)
        seen["accepted" if result.ok else "refused"] += 1
        if result.ok and not isinstance(result.resource, AutoscalingPolicy):
            check_render(result)
            seen["rendered"] += 1

    for_each_resource(kind, check)
    print(kind, seen)
    # The strategies are not degenerate: both verdicts occur, and accepted resources are rendered. The floor
    # leaves room: hypothesis mixes string constants of every loaded module into its draws, so the corpus moves
    # with any code change (HiddenStateJob, the kind with the most rules, has drawn 40 to 64 accepted).
    assert seen["inputs"] >= EXAMPLES_PER_KIND and seen["accepted"] >= 25 and seen["refused"] >= 500, seen


@settings(PROPERTY_SETTINGS, max_examples=300)
@given(obj=unit_only_values())
def test_validate_never_raises_on_non_json_documents(obj: Any) -> None:
    """What YAML can hold and JSON cannot (non-string keys, NaN, bytes, tuples): refused, never a crash."""
    result = validate(obj)
    assert not result.ok
    if not isinstance(obj, dict):
        assert [p.path for p in result.problems] == ["(document)"], result.problems


BRANCH_KEYS = [
    ("top-level 'str'", {"str": 1}, None),
    ("top-level 'x[0]'", {"x[0]": 1}, None),
    ("spec.engine 'int'", {"spec": {"engine": {"int": 1}}}, "spec.engine.int"),
    ("spec.pooling 'a[1]'", {"spec": {"pooling": {"a[1]": 1}}}, "spec.pooling.a[1]"),
]


@pytest.mark.parametrize(("over", "path"), [c[1:] for c in BRANCH_KEYS], ids=[c[0] for c in BRANCH_KEYS])
def test_unknown_field_named_like_a_pydantic_branch(over: dict[str, Any], path: str | None) -> None:
    from tests.factories import merge, pooling

    obj = merge(pooling(), over)
    result = validate(obj)  # raised IndexError for a top-level key before the fix
    key = next(iter(over)) if path is None else path
    assert [p.path for p in result.errors] == [key], result.problems
    assert result.errors[0].message.startswith("unknown field")


# Bugs the API-server tier found (e2e/tests/test_properties_apiserver.py), fixed: validate accepted what the API
# server or Kubernetes refuses.
ACCEPTED_BUT_REFUSED_BY_KUBERNETES = [
    ("int field given a string", {"spec": {"replicas": "3"}}, "spec.replicas"),
    ("int field given a bool", {"spec": {"resources": {"gpu": {"count": True}}}}, "spec.resources.gpu.count"),
    ("bool field given an int", {"spec": {"model": {"trustRemoteCode": 0}}}, "spec.model.trustRemoteCode"),
    ("bool field given a string", {"spec": {"monitoring": {"serviceMonitor": "false"}}}, "spec.monitoring.serviceMonitor"),
    ("quantity with a trailing newline", {"spec": {"resources": {"memory": "64Gi\n"}}}, "spec.resources.memory"),
    (
        "tolerationSeconds past int64",
        {"spec": {"template": {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2**63}]}}},
        "spec.template.tolerations[0].tolerationSeconds",
    ),
]


@pytest.mark.parametrize(("over", "path"), [c[1:] for c in ACCEPTED_BUT_REFUSED_BY_KUBERNETES], ids=[c[0] for c in ACCEPTED_BUT_REFUSED_BY_KUBERNETES])
def test_validate_refuses_what_kubernetes_refuses(over: dict[str, Any], path: str) -> None:
    from tests.factories import merge, pooling

    result = validate(merge(pooling(), over))
    assert path in [p.path for p in result.errors], result.problems


def test_hidden_state_job_name_leaves_room_for_the_index() -> None:
    from tests.factories import hidden_states

    result = validate(hidden_states(name="a" * 63))  # 4 shards: pods need "a" * 63 + "-3"
    assert "metadata.name" in [p.path for p in result.errors], result.problems


@pytest.mark.parametrize(("value", "admitted", "said"), [
    # (resources.memory as JSON reads it, kube-apiserver 1.35 admits it, what validate says otherwise)
    (2**63 - 1, True, None),
    (2**63, False, "past int64"),  # a JSON integer past int64 is a float to the API server
    (2**64, False, "past int64"),
    (2.0, True, None),
    (float(2**53 - 1), True, None),
    (float(2**53), False, "not an integer"),  # a float from 2**53 up is a "number" to its schema check
    (1e20, False, "not an integer"),
    (0.5, False, "not an integer"),
])  # fmt: skip
def test_a_quantity_is_what_the_api_server_reads_as_an_integer_or_a_string(value: Any, admitted: bool, said: str | None) -> None:
    """Found by the API-server tier (CI: three generated PoolingServices with resources.memory 2**63 or 2**64
    admitted here, refused there). Each row was checked against kube-apiserver 1.35 with our CRDs."""
    result = validate(pooling({"resources": {"memory": value, "gpu": {"count": 1}}}))
    assert result.ok is admitted, [str(p) for p in result.errors]
    if said is not None:
        [p] = result.errors
        assert p.path == "spec.resources.memory" and said in p.message and "string" in p.message


@pytest.mark.parametrize(("over", "path", "want"), [
    ({"replicas": 2.0}, ("replicas",), 2),
    ({"template": {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -0.0}]}},
     ("template", "tolerations", 0, "toleration_seconds"), 0),
    ({"resources": {"cpu": 4.0}}, ("resources", "cpu"), 4),
])
def test_a_whole_float_is_an_integer_as_the_api_server_reads_it(over: dict[str, Any], path: tuple[Any, ...], want: int) -> None:
    """Found by the API-server tier (a generated toleration with tolerationSeconds -0.0 was admitted there and
    refused here): the API server admits a whole float where the schema says integer; validate does too."""
    result = validate(pooling(over))
    assert result.ok, [str(p) for p in result.errors]
    node: Any = result.resource.spec  # type: ignore[union-attr]
    for step in path:
        node = node[step] if isinstance(step, int) else getattr(node, step)
    assert node == want and isinstance(node, int)
    assert not validate(pooling({"replicas": 2.5})).ok
    kept = validate(pooling({"model": {"hfOverrides": {"head_dtype": "model", "x": 1.0}}})).resource
    assert kept.spec.model.hf_overrides["x"] == 1.0 and isinstance(kept.spec.model.hf_overrides["x"], float)  # type: ignore[union-attr]
