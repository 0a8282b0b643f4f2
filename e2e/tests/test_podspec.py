"""The pod runner's plan (e2e/realvllm/podspec.py): what it maps, and that it changes nothing else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.realvllm import podspec

REPO = Path(__file__).resolve().parents[2]

SPEC = """
apiVersion: vllm-pooling.io/v1alpha1
kind: PoolingService
metadata: {name: minilm, namespace: real}
spec:
  model:
    name: /all-MiniLM-L6-v2
    source: {volume: {claimName: models, path: /minilm, readOnly: true}}
  task: embed
  pooling: {type: MEAN, normalize: true}
  engine: {image: "vllm/vllm-openai:v0.32.0", dtype: float32, maxModelLen: 256}
  resources: {gpu: {count: 0}, cpu: "1", memory: 4Gi}
  service: {apiKeySecretRef: {name: key, key: k}}
"""


def _pod(tmp_path: Path, spec: str = SPEC) -> dict[str, Any]:
    f = tmp_path / "svc.yaml"
    f.write_text(spec)
    out = subprocess.run(
        [sys.executable, "-m", "pooling_operator", "render", str(f)], check=True, capture_output=True, text=True, cwd=REPO
    ).stdout
    dep = next(d for d in yaml.safe_load_all(out) if d["kind"] == "Deployment")
    tmpl = dep["spec"]["template"]
    return {"metadata": {**tmpl["metadata"], "name": "minilm-abc", "namespace": "real", "uid": "u-1"}, "spec": tmpl["spec"]}


def _plan(pod: dict[str, Any], tmp_path: Path, **kw: Any) -> podspec.LocalContainer:
    ports = iter(range(40000, 40100))
    args: dict[str, Any] = {
        "pod_dir": tmp_path / "pod",
        "claims": {"models": tmp_path / "models"},
        "hub_models": {},
        "base_env": {"PATH": "/rt/bin", "HF_HUB_OFFLINE": "1"},
        "lookup": lambda kind, name, key: {("secret", "key", "k"): "s3cret"}.get((kind, name, key)),
        "free_port": lambda: next(ports),
        "pod_ip": "10.0.0.9",
    }
    args.update(kw)
    return podspec.plan(pod, "vllm", **args)


def test_only_paths_and_ports_change(tmp_path: Path) -> None:
    pod = _pod(tmp_path)
    c = pod["spec"]["containers"][0]
    p = _plan(pod, tmp_path)
    original = [*c["command"], *c["args"]]
    changed = [i for i, (a, b) in enumerate(zip(original, p.argv, strict=True)) if a != b]
    assert [original[i] for i in changed] == ["/models/minilm", "8000"]
    assert p.argv[changed[0]] == str(tmp_path / "models" / "minilm")
    assert p.argv[changed[1]] == "40000" and original[changed[1] - 1] == "--port"
    assert [r for r in p.rewrites if not r.startswith("env ")] == [
        f"args[0]: /models/minilm -> {tmp_path}/models/minilm",
        "args[6]: 8000 -> 40000",
    ]
    cache = tmp_path / "pod" / "volumes" / "cache"
    assert [r for r in p.rewrites if r.startswith("env ")] == [
        f"env HOME: /cache -> {cache}",
        f"env XDG_CACHE_HOME: /cache -> {cache}",
        f"env HF_HOME: /cache/huggingface -> {cache}/huggingface",
        f"env VLLM_CACHE_ROOT: /cache/vllm -> {cache}/vllm",
    ]
    assert p.ports == {"http": (8000, 40000)}
    # the probes follow the named port to the local one
    assert {k: (pr.path, pr.port) for k, pr in p.probes.items()} == {
        "startup": ("/health", 40000), "readiness": ("/health", 40000), "liveness": ("/health", 40000),
    }  # fmt: skip
    assert p.env["VLLM_API_KEY"] == "s3cret"
    assert p.env["HOME"] == str(tmp_path / "pod" / "volumes" / "cache")  # /cache is the emptyDir
    assert p.env["HF_HUB_OFFLINE"] == "1" and "HF_HUB_OFFLINE" not in p.env_added  # the operator sets it
    assert p.env_added == ["PATH"]


def test_missing_claim_and_secret_say_what_is_missing(tmp_path: Path) -> None:
    pod = _pod(tmp_path)
    with pytest.raises(podspec.PlanError, match='claim "models" has no local folder'):
        _plan(pod, tmp_path, claims={})
    with pytest.raises(podspec.PlanError, match='secret "key" key "k" not found'):
        _plan(pod, tmp_path, lookup=lambda *_: None)


def test_hugging_face_name_is_laid_out_at_the_pinned_revision(tmp_path: Path) -> None:
    rev = "a" * 40
    spec = SPEC.replace(
        "name: /all-MiniLM-L6-v2\n    source: {volume: {claimName: models, path: /minilm, readOnly: true}}",
        f"name: sentence-transformers/all-MiniLM-L6-v2\n    revision: {rev}",
    )
    pod = _pod(tmp_path, spec)
    folder = tmp_path / "prepared"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "sub" / "w.bin").write_text("x")
    p = _plan(pod, tmp_path, hub_models={"sentence-transformers/all-MiniLM-L6-v2": (folder, "b" * 40)})
    [(hub, repo, src, revision)] = p.hub_layout
    assert revision == rev  # the spec's pin, not the prepared folder's
    assert hub == tmp_path / "pod" / "volumes" / "cache" / "huggingface" / "hub"
    entries = dict(podspec.hub_entries(hub, repo, src, revision))
    snap = hub / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / rev
    assert entries == {
        snap / "config.json": folder / "config.json",
        snap / "sub" / "w.bin": folder / "sub" / "w.bin",
        hub / "models--sentence-transformers--all-MiniLM-L6-v2" / "refs" / "main": rev,
    }
    assert [r for r in p.rewrites if r.startswith("args")] == ["args[6]: 8000 -> 40000"]


@pytest.mark.parametrize(
    ("value", "env", "want"),
    [("$(A)/x", {"A": "1"}, "1/x"), ("$$(A)", {"A": "1"}, "$(A)"), ("$(B)", {}, "$(B)"), ("plain", {}, "plain")],
)
def test_expand_follows_kubernetes(value: str, env: dict[str, str], want: str) -> None:
    assert podspec.expand(value, env) == want


def test_longest_mount_wins_and_flags_with_paths_map() -> None:
    mounts = {"/data": Path("/l/d"), "/data/models": Path("/l/m")}
    assert podspec.map_path("/data/models/x", mounts) == "/l/m/x"
    assert podspec.map_path("/data/y", mounts) == "/l/d/y"
    assert podspec.map_path("/datax", mounts) is None
    assert podspec._map_value("--download-dir=/data/z", mounts) == "--download-dir=/l/d/z"
    assert podspec._map_value("0.0.0.0", mounts) is None
