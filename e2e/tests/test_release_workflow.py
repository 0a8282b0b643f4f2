"""The release workflow (.github/workflows/release.yaml) runs only on the forge; here it is linted with actionlint,
built from its Go module like the control plane's binaries, and held to what a release is: on a tag, every test
first (the README's test command), then `make release` to ghcr.io."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from e2e.kube import build

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "release.yaml"


def actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(build.tool("actionlint")), "-no-color", str(path)], capture_output=True, text=True, timeout=120)


def test_actionlint_passes_and_would_catch_a_broken_workflow(tmp_path: Path) -> None:
    res = actionlint(WORKFLOW)
    assert res.returncode == 0, res.stdout + res.stderr
    bad = tmp_path / ".github" / "workflows" / "bad.yaml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ github.nosuchcontext }}\n")
    assert actionlint(bad).returncode != 0  # the control: the linter really ran


def test_a_tag_runs_every_test_then_the_release() -> None:
    flow = yaml.safe_load(WORKFLOW.read_text())
    assert flow[True]["push"] == {"tags": ["v*"]}  # YAML 1.1 reads the key `on` as true
    [job] = flow["jobs"].values()
    runs = [s.get("run", "") for s in job["steps"]]
    test = next(i for i, r in enumerate(runs) if "make test" in r)
    release = next(i for i, r in enumerate(runs) if "make release" in r)
    assert test < release and "REGISTRY=ghcr.io/" in runs[release]
    readme = (REPO / "README.md").read_text()
    assert "make test" in readme and (REPO / ".ci" / "run").read_text().strip().endswith("make test")
    assert flow["permissions"] == {"contents": "read", "packages": "write"}
