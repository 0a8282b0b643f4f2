"""Every child's name comes from builders/names.py: in the render of every example, each object is named as its
owner or by one of that module's functions, and no other module spells a child's name suffix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pooling_operator.api.identity import COMPONENT_KINDS, COMPONENT_LABEL, INSTANCE_LABEL
from pooling_operator.builders import names
from pooling_operator.cli import main

ROOT = Path(__file__).resolve().parents[1]
OPERATOR = ROOT / "operator" / "pooling_operator"


def test_every_rendered_child_is_named_by_the_names_module(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(ROOT / "examples")]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    children = [d for d in docs if COMPONENT_LABEL in d["metadata"].get("labels", {})]
    assert len(children) >= 40
    for child in children:
        meta = child["metadata"]
        owner, kind = meta["labels"][INSTANCE_LABEL], COMPONENT_KINDS[meta["labels"][COMPONENT_LABEL]]
        allowed = {owner, names.progress_configmap(owner), names.model_cache_claim(owner, None)}
        fill = re.fullmatch(rf"{re.escape(owner[:48])}-fill-[0-9a-f]{{8}}", meta["name"])
        assert meta["name"] in allowed or (kind == "ModelCache" and fill), (child["kind"], meta["name"], owner)


def test_no_other_module_builds_a_child_name_suffix() -> None:
    # The suffixes names.py owns; an f-string that appends one elsewhere is a second owner of the fact.
    suffix = re.compile(r'f"\{[^}]*\}-(progress|fill-|gpu-)')
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in OPERATOR.rglob("*.py") if p.name != "names.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1) if suffix.search(line)]
    assert offenders == []
