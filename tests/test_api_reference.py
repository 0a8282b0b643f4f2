"""docs/api.md is the API reference users read (issue 44): generated from the models, never stale, every kind and
field in it, and nothing in the repository sends a reader outside it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pooling_operator.api.crd import all_crds
from pooling_operator.api.reference import SINCE_FILE, generate, since

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "api.md"


def test_docs_api_md_is_what_the_models_generate() -> None:
    text, record = generate()
    assert DOC.read_text() == text, "docs/api.md is stale: run `make api-docs`"
    assert json.loads(SINCE_FILE.read_text()) == record, "api/since.json lacks a new field: run `make api-docs`"


def test_a_field_is_recorded_under_the_release_it_appeared_in_and_a_gone_one_is_dropped() -> None:
    recorded = {"0.1.0": ["K.spec.a", "K.spec.gone"], "0.2.0": ["K.spec.b"]}
    assert since(["K.spec.b", "K.spec.a", "K.spec.new"], recorded, "0.10.0") == {
        "0.1.0": ["K.spec.a"], "0.2.0": ["K.spec.b"], "0.10.0": ["K.spec.new"]}
    text = DOC.read_text()
    assert "| `spec.model.name` | string | ✓ |  | " in text and "| 0.1.0 |" in text and "| 0.2.0 |" in text


def test_every_kind_and_every_field_of_every_crd_is_in_it() -> None:
    text = DOC.read_text()
    missing = []

    def walk(schema: dict, path: str) -> None:
        for name, sub in (schema.get("properties") or {}).items():
            if f"| `{path}.{name}` |" not in text:
                missing.append(f"{path}.{name}")
            walk(sub, f"{path}.{name}")
        if isinstance(schema.get("items"), dict):
            walk(schema["items"], f"{path}[]")

    for crd in all_crds():
        kind = crd["spec"]["names"]["kind"]
        assert f"## {kind}\n" in text, kind
        root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for part in ("spec", "status"):
            walk(root["properties"][part], part)
    assert not missing, missing[:20]


def test_the_repository_points_readers_at_it_and_nowhere_outside() -> None:
    assert "docs/api.md" in (REPO / "README.md").read_text()
    unlinked = [p.name for p in REPO.glob("docs/*.md") if p.name != "api.md" and "(api.md)" not in p.read_text()]
    assert not unlinked, f"these docs do not link the API reference: {unlinked}"
    outside = []
    for path in [REPO / "README.md", *REPO.glob("docs/*.md"), *REPO.glob("examples/**/*"), *REPO.glob("charts/**/*.md")]:
        if path.is_file() and re.search(r"\.\./shared|shared/API\.md", path.read_text(errors="replace")):
            outside.append(str(path.relative_to(REPO)))
    assert not outside, f"these send readers outside the repository: {outside}"
