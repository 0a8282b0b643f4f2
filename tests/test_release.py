"""One version (issue 66): pyproject.toml's is the package's, the chart's `version` and `appVersion`, and the image's
tag (`v<version>`); `make release` (tools/release.py) refuses to run otherwise and packages the chart with the
image it pushed. The push itself runs against a real registry in e2e/tests/operator/test_release.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

import pooling_operator
from tools import release

ROOT = Path(__file__).resolve().parents[1]


def test_one_version_everywhere() -> None:
    v = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((ROOT / "charts" / "vllm-pooling-operator" / "Chart.yaml").read_text())
    assert pooling_operator.__version__ == v == chart["version"] == chart["appVersion"] == release.version()
    assert pooling_operator.OPERATOR_IMAGE == f"ghcr.io/vllm-pooling-operator/vllm-pooling-operator:v{v}"
    values = yaml.safe_load((ROOT / "charts" / "vllm-pooling-operator" / "values.yaml").read_text())
    assert f"{values['image']['repository']}:v{chart['appVersion']}" == pooling_operator.OPERATOR_IMAGE


def test_a_chart_that_disagrees_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("version: 9.9.9\nappVersion: '9.9.9'\n")
    monkeypatch.setattr(release, "CHART", chart)
    with pytest.raises(SystemExit, match="make them equal first"):
        release.version()


@pytest.mark.parametrize(("registry", "plain"), [("127.0.0.1:5000/vpo", True), ("localhost:5000/vpo", True), ("[::1]:5000/x", True),
                                                 ("ghcr.io/vllm-pooling-operator", False), ("10.0.0.1:5000/x", False)])
def test_only_a_loopback_registry_is_spoken_to_over_plain_http(registry: str, plain: bool) -> None:
    assert release.plain_http(registry) is plain


def test_the_packaged_chart_names_the_pushed_image_by_digest() -> None:
    values = (ROOT / "charts" / "vllm-pooling-operator" / "values.yaml").read_text()
    digest = "sha256:" + "b" * 64
    out = yaml.safe_load(release.with_image(values, "registry.example/team/vllm-pooling-operator", digest))
    assert out["image"]["repository"] == "registry.example/team/vllm-pooling-operator" and out["image"]["digest"] == digest
    assert release.with_image(values, "r/x", digest).count("\n") == values.count("\n")  # comments kept, nothing else moved
