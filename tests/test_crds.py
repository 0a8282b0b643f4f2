"""The CRDs: generated from the models, structural, with CEL for the cross-field rules; one pinned whole."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from pooling_operator.api import KINDS
from pooling_operator.api.crd import all_crds
from pooling_operator.manifests import dump_all

ROOT = Path(__file__).resolve().parents[1]
PINNED = Path(__file__).parent / "golden" / "crd-poolingservices.yaml"


def walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node (not the `properties` maps themselves), with its field path."""
    out = [(path, node)]
    for name, prop in node.get("properties", {}).items():
        out += walk(prop, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        out += walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += walk(node["additionalProperties"], f"{path}{{}}")
    return out


def schemas() -> list[tuple[str, dict[str, Any]]]:
    return [(c["spec"]["names"]["kind"], c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]) for c in all_crds()]


def test_committed_crds_match_the_models() -> None:
    for crd in all_crds():
        plural = crd["spec"]["names"]["plural"]
        committed = (ROOT / "crds" / f"vllm-pooling.io_{plural}.yaml").read_text()
        assert committed == dump_all([crd]), f"crds/ is stale for {plural}: run `make crds`"


def test_one_whole_crd_is_pinned() -> None:
    """A deliberate second copy: a change to the PoolingService schema must be looked at, not just regenerated."""
    crd = next(c for c in all_crds() if c["spec"]["names"]["kind"] == "PoolingService")
    if os.environ.get("UPDATE_GOLDEN"):
        PINNED.parent.mkdir(parents=True, exist_ok=True)
        PINNED.write_text(dump_all([crd]))
    assert yaml.safe_load(PINNED.read_text()) == crd


@pytest.mark.parametrize(("kind", "schema"), schemas(), ids=[k for k, _ in schemas()])
def test_schema_is_structural(kind: str, schema: dict[str, Any]) -> None:
    for path, node in walk(schema):
        assert "$ref" not in node and "title" not in node and "default" not in node, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        elif path not in ("", ".metadata"):
            assert "type" in node, f"{kind}{path} has no type"
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            if key in node:
                assert isinstance(node[key], bool), path


@pytest.mark.parametrize(("kind", "schema"), schemas(), ids=[k for k, _ in schemas()])
def test_every_field_is_described(kind: str, schema: dict[str, Any]) -> None:
    """`kubectl explain` reads these."""
    for path, node in walk(schema):
        if path and path != ".metadata" and not path.endswith(("[]", "{}")):
            assert node.get("description"), f"{kind}{path} has no description"


def cel_rules() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for kind, schema in schemas():
        out[kind] = [n["rule"] for _, node in walk(schema) for n in node.get("x-kubernetes-validations", [])]
    return out


def test_cel_rules_cover_the_cross_field_rules() -> None:
    rules = cel_rules()
    assert any("self.minReplicas : 1) <= self.maxReplicas" in r for r in rules["PoolingService"])
    assert any("in self.model.matryoshkaDimensions" in r for r in rules["PoolingService"])
    assert any("oldSelf" in r and "embeddingSpace" in r for r in rules["PoolingService"])
    assert "self == oldSelf" in rules["HiddenStateJob"]
    assert any("isSorted" in r for r in rules["HiddenStateJob"])
    assert any("mode == 'generative'" in r for r in rules["ScoringService"])
    for kind in KINDS:
        assert any("metadata.name" in r for r in rules[kind]), kind


def test_names_columns_and_subresources() -> None:
    for crd in all_crds():
        names = crd["spec"]["names"]
        info = KINDS[names["kind"]]
        assert names["categories"] == ["pooling"] and names["shortNames"] == [info.short_name]
        version = crd["spec"]["versions"][0]
        columns = [c["name"] for c in version["additionalPrinterColumns"]]
        assert "Age" in columns
        assert ("scale" in version["subresources"]) == info.scale
        assert "status" in version["subresources"]
    assert {c["spec"]["scope"] for c in all_crds() if c["spec"]["names"]["kind"] == "AutoscalingPolicy"} == {"Cluster"}
    pls = next(c for c in all_crds() if c["spec"]["names"]["kind"] == "PoolingService")
    assert [c["name"] for c in pls["spec"]["versions"][0]["additionalPrinterColumns"]][:6] == [
        "Model", "Task", "Ready", "Reason", "Replicas", "Available"
    ]
