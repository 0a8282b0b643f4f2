"""What clusters need of every pod the operator makes (issue 66): `template.imagePullSecrets` (a private mirror of
vLLM's image), `template.runtimeClassName` (GPU nodes behind the nvidia runtime class) and
`template.topologySpreadConstraints`, on every kind that runs pods and in every pod it makes (a service's vLLM
pods, a job's shards with their driver, a ModelCache's fill); and an operator upgrade that rolls no serving pod
(builders/upgrade.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pooling_operator.builders import BuildContext, build
from pooling_operator.builders.caches import build_cache
from pooling_operator.builders.diff import HASH_ANNOTATION, with_hash
from pooling_operator.builders.upgrade import steady
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.validate import validate
from tests.factories import generative, hidden_states, model_cache, pooling, pooling_job, scoring, scoring_job

TEMPLATE = {
    "imagePullSecrets": [{"name": "mirror-pull"}],
    "runtimeClassName": "nvidia",
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"},
        {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"team": "search"}}, "matchLabelKeys": ["pod-template-hash"]},
    ],
}


def pods(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    result = validate(doc)
    assert result.ok, [str(p) for p in result.errors]
    r = result.resource
    objects = build_cache(r, "op:1", None) if doc["kind"] == "ModelCache" else build(r, contract("0.33"), BuildContext())  # type: ignore[arg-type]
    return [(o["kind"], o["spec"]["template"]) for o in objects if o["kind"] in ("Deployment", "Job")]


@pytest.mark.parametrize(
    "doc",
    [pooling({"template": TEMPLATE}), scoring({"template": TEMPLATE}), generative({"template": TEMPLATE}),
     hidden_states({"template": TEMPLATE}), pooling_job({"template": TEMPLATE}), scoring_job({"template": TEMPLATE}),
     model_cache({"template": TEMPLATE})],
    ids=lambda d: d["kind"] + ("-generative" if d["spec"].get("mode") == "generative" else ""),
)
def test_every_pod_the_operator_makes_takes_what_the_cluster_needs(doc: dict[str, Any]) -> None:
    found = pods(doc)
    assert found, "no pod template rendered"
    for _, template in found:
        spec, labels = template["spec"], template["metadata"]["labels"]
        assert spec["imagePullSecrets"] == [{"name": "mirror-pull"}] and spec["runtimeClassName"] == "nvidia"
        zone, host = spec["topologySpreadConstraints"]
        own = zone["labelSelector"]["matchLabels"]  # without one: this resource's own pods
        assert own and own.items() <= labels.items() and set(own) == {"app.kubernetes.io/instance", "app.kubernetes.io/component"}
        assert host["labelSelector"] == {"matchLabels": {"team": "search"}} and host["matchLabelKeys"] == ["pod-template-hash"]


def test_without_them_nothing_is_rendered_so_no_pod_rolls() -> None:
    for _, template in pods(pooling()) + pods(model_cache()):
        assert not {"imagePullSecrets", "runtimeClassName", "topologySpreadConstraints"} & set(template["spec"])


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [("runtimeClassName", "NVIDIA_runtime", "spec.template.runtimeClassName"),
     ("imagePullSecrets", [{"name": "a"}, {"name": "a"}], "spec.template.imagePullSecrets"),
     ("topologySpreadConstraints", [{"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}],
      "spec.template.topologySpreadConstraints[0].maxSkew"),
     ("topologySpreadConstraints", [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Sometimes"}],
      "spec.template.topologySpreadConstraints[0].whenUnsatisfiable")],
)
def test_bad_values_are_refused_naming_the_field(field: str, value: Any, says: str) -> None:
    problems = [str(p) for p in validate(pooling({"template": {field: value}})).errors]
    assert any(p.startswith(says) for p in problems), problems


# ---- an operator upgrade rolls no serving pod -----------------------------------------------------------------

CACHED = {"engine": {"compileCache": {"claimName": "cc"}}}


def deployment(image: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    result = validate(pooling({**CACHED, **(spec or {})}))
    assert result.ok
    [dep] = [o for o in build(result.resource, contract("0.33"), BuildContext(operator_image=image)) if o["kind"] == "Deployment"]  # type: ignore[arg-type]
    return with_hash(dep)  # as the reconcile's plan holds it


def running(dep: dict[str, Any]) -> dict[str, Any]:
    """As the API server keeps it: defaults filled in beside what was applied."""
    out = copy.deepcopy(dep)
    for c in out["spec"]["template"]["spec"]["initContainers"] + out["spec"]["template"]["spec"]["containers"]:
        c.setdefault("imagePullPolicy", "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
    out["metadata"]["resourceVersion"] = "41"
    return out


def images(dep: dict[str, Any]) -> set[str]:
    return {c["image"] for c in dep["spec"]["template"]["spec"]["initContainers"]}


def test_a_new_operator_image_alone_keeps_the_running_helpers_image() -> None:
    old, new = "ghcr.io/x/op:v0.3.0", "ghcr.io/x/op:v0.3.1"
    live = running(deployment(old))
    kept = steady(deployment(new), live, new)
    assert images(kept) == {old} and kept["spec"]["template"] == deployment(old)["spec"]["template"]
    assert kept["metadata"]["annotations"][HASH_ANNOTATION] == deployment(old)["metadata"]["annotations"][HASH_ANNOTATION]


def test_a_spec_change_rolls_anyway_and_brings_the_new_image() -> None:
    old, new = "ghcr.io/x/op:v0.3.0", "ghcr.io/x/op:v0.3.1"
    live = running(deployment(old))
    changed = deployment(new, {"engine": {"compileCache": {"claimName": "cc"}, "maxNumSeqs": 64}})
    assert steady(changed, live, new) is changed and images(changed) == {new}
    assert steady(deployment(new), None, new)["metadata"]["annotations"] == deployment(new)["metadata"]["annotations"]  # a new one: as built
