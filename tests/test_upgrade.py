"""Upgrading the operator must not roll GPU pods whose pod template did not change.

`tests/golden/pod-templates.json` records, per release, the sha256 of every pod template the operator
renders for examples/ (the Deployment's or Job's ``spec.template``; the operator re-applies it on upgrade and
any difference starts a rollout). For this release the record must equal what the code renders now. A
change of any template needs a new release (``pooling_operator.__version__``) with its own record
(``UPDATE_TEMPLATES=1``) and an upgrade note ``- v<version>: ...`` in CHANGELOG.md that says which pods roll and why.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from pathlib import Path

import yaml
from packaging.version import Version

import pooling_operator
from pooling_operator.cli import main

ROOT = Path(__file__).resolve().parents[1]
RECORD = Path(__file__).parent / "golden" / "pod-templates.json"


def template_hashes(capsys) -> dict[str, str]:
    assert main(["render", str(ROOT / "examples")]) == 0
    out: dict[str, str] = {}
    for obj in yaml.safe_load_all(capsys.readouterr().out):
        if obj and obj["kind"] in ("Deployment", "Job"):
            key = f"{obj['kind']}/{obj['metadata']['namespace']}/{obj['metadata']['name']}"
            canon = json.dumps(obj["spec"]["template"], sort_keys=True, separators=(",", ":"))
            out[key] = "sha256:" + hashlib.sha256(canon.encode()).hexdigest()
    return out


def test_this_release_renders_the_recorded_pod_templates(capsys) -> None:
    now = template_hashes(capsys)
    record = json.loads(RECORD.read_text())
    version = pooling_operator.__version__
    if os.environ.get("UPDATE_TEMPLATES"):
        record[version] = now
        RECORD.write_text(json.dumps(dict(sorted(record.items(), key=lambda kv: Version(kv[0]))), indent=2) + "\n")
    assert version in record, f"no pod-template record for release {version}: UPDATE_TEMPLATES=1 after review"
    changed = sorted(k for k in now if record[version].get(k) != now[k])
    assert not changed, (
        f"release {version} was recorded with other pod templates for {changed}: upgrading would roll their "
        "pods. Bump pooling_operator.__version__, record it (UPDATE_TEMPLATES=1) and add an upgrade note."
    )


def unannounced_rolls(record: dict[str, dict[str, str]], notes: str) -> dict[str, list[str]]:
    """Releases whose pod templates differ from the release before and whose upgrade note (`- vX:` ...)
    does not say that pods roll: {release: the templates that changed}."""
    releases = sorted(record, key=Version)
    out = {}
    for before, after in itertools.pairwise(releases):
        rolled = sorted(k for k in record[after] if k in record[before] and record[before][k] != record[after][k])
        note = re.search(rf"^- v{re.escape(after)}:(.*(?:\n  .*)*)", notes, re.M)
        if rolled and not (note and "roll" in note.group(1)):
            out[after] = rolled
    return out


def test_a_release_that_rolls_pods_says_so_in_the_changelog() -> None:
    notes = ROOT.joinpath("CHANGELOG.md").read_text()
    assert unannounced_rolls(json.loads(RECORD.read_text()), notes) == {}


def test_the_upgrade_note_check_catches_a_silent_roll() -> None:
    record = {"0.1.0": {"Deployment/a/b": "sha256:1", "Deployment/a/c": "sha256:2"},
              "0.2.0": {"Deployment/a/b": "sha256:9", "Deployment/a/c": "sha256:2"}}  # fmt: skip
    assert unannounced_rolls(record, "- v0.1.0: first\n") == {"0.2.0": ["Deployment/a/b"]}
    assert unannounced_rolls(record, "- v0.2.0: b's pods roll once:\n  the new flag\n") == {}
    assert unannounced_rolls({**record, "0.2.0": record["0.1.0"]}, "") == {}
