"""The pod runner's plan (e2e/podrunner/podspec.py): what it maps, and that it changes nothing else."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.podrunner import podspec
from tests.unavailable import unavailable

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


def _template(tmp_path: Path, spec: str, kind: str) -> dict[str, Any]:
    """The pod template ``pooling-operator render`` gives the ``kind`` child of ``spec``."""
    f = tmp_path / f"{kind.lower()}.yaml"
    f.write_text(spec)
    out = subprocess.run(
        [sys.executable, "-m", "pooling_operator", "render", str(f)], check=True, capture_output=True, text=True, cwd=REPO
    ).stdout
    return next(d for d in yaml.safe_load_all(out) if d["kind"] == kind)["spec"]["template"]


def _pod(tmp_path: Path, spec: str = SPEC) -> dict[str, Any]:
    tmpl = _template(tmp_path, spec, "Deployment")
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


JOB = """
apiVersion: vllm-pooling.io/v1alpha1
kind: HiddenStateJob
metadata: {name: hs, namespace: real}
spec:
  model:
    name: /smollm2
    source: {volume: {claimName: models, path: /smollm2, readOnly: true}}
  layers: [3, 30]
  dataset: {volume: {claimName: data, path: /prompts.jsonl}}
  output: {volume: {claimName: data, path: /out}}
  shards: 2
  parallelism: 1
  engine: {image: "vllm/vllm-openai:v0.32.0", dtype: float32, maxModelLen: 256}
  resources: {gpu: {count: 0}, cpu: "1", memory: 4Gi}
"""

SA_VOLUME = {  # what ServiceAccount admission adds to every pod (and mounts into every container)
    "name": "kube-api-access-x",
    "projected": {"sources": [{"serviceAccountToken": {"path": "token"}},
                              {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                              {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]},
}  # fmt: skip
SA_MOUNT = {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}


def _job_pod(tmp_path: Path) -> dict[str, Any]:
    tmpl = _template(tmp_path, JOB, "Job")
    spec = tmpl["spec"]
    spec["volumes"].append(SA_VOLUME)
    for c in [*spec["initContainers"], *spec["containers"]]:
        c["volumeMounts"].append(SA_MOUNT)
    meta = {**tmpl["metadata"], "name": "hs-0-abc", "namespace": "real", "uid": "u-2",
            "annotations": {"batch.kubernetes.io/job-completion-index": "0"}}  # fmt: skip
    return {"metadata": meta, "spec": spec}


def test_a_job_pod_is_planned_as_one_pod(tmp_path: Path) -> None:
    """The Job's pod: vLLM as a native sidecar, the driver as the main container, one port map for both, the
    operator's image mapped to a local bin folder, in-cluster env, and the ServiceAccount mount as a fixed mount."""
    from pooling_operator import OPERATOR_IMAGE

    pod = _job_pod(tmp_path)
    ports = iter(range(41000, 41100))
    bin_dir = tmp_path / "venv-bin"
    plan = podspec.plan_pod(
        pod, pod_dir=tmp_path / "pod", claims={"models": tmp_path / "models", "data": tmp_path / "data"},
        hub_models={}, base_env={"PATH": "/rt/bin"}, lookup=lambda *_: None, free_port=lambda: next(ports),
        pod_ip="10.0.0.9", images={podspec.image_repository(OPERATOR_IMAGE): bin_dir},
        cluster_env={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"},
    )  # fmt: skip
    assert [(c.name, c.kind) for c in plan.containers] == [("vllm", "sidecar"), ("driver", "main")]
    assert plan.ports == {8000: 41000}
    vllm, driver = plan.containers
    assert vllm.ports == {"http": (8000, 41000)} and vllm.probes["startup"].port == 41000
    # the driver reaches the sidecar through the pod's one port map; its program is the mapped image's
    assert driver.argv[0] == str(bin_dir / "pooling-operator")
    assert driver.argv[driver.argv.index("--endpoint") + 1] == "http://127.0.0.1:41000"
    assert f"command[0]: pooling-operator -> {bin_dir}/pooling-operator (image {OPERATOR_IMAGE})" in driver.rewrites
    assert any(r.endswith("http://127.0.0.1:8000 -> http://127.0.0.1:41000") for r in driver.rewrites)
    assert driver.argv[driver.argv.index("--shard") + 1] == "0"  # $(JOB_COMPLETION_INDEX) from the annotation
    assert vllm.argv[0] == "vllm" and "vllm" not in [r.split(":")[0] for r in vllm.rewrites]  # PATH finds vllm
    for c in plan.containers:
        assert c.env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1" and c.env["KUBERNETES_SERVICE_PORT"] == "6443"
        assert "KUBERNETES_SERVICE_HOST" in c.env_added
        assert c.fixed_mounts == [(tmp_path / "pod" / "volumes" / "kube-api-access-x",
                                   "/var/run/secrets/kubernetes.io/serviceaccount")]  # fmt: skip
    # the dataset and the output map to the claim's folder in the driver's argv
    assert driver.argv[driver.argv.index("--dataset") + 1] == str(tmp_path / "data" / "prompts.jsonl")
    # and vLLM's staging folder inside the connector's JSON follows the same output volume
    kv = json.loads(vllm.argv[vllm.argv.index("--kv-transfer-config") + 1])
    assert kv["kv_connector_extra_config"]["shared_storage_path"] == str(tmp_path / "data" / "out" / ".staging" / "shard-0")
    assert kv["kv_connector"] == "ExampleHiddenStatesConnector" and kv["kv_role"] == "kv_producer"
    assert json.loads(vllm.argv[vllm.argv.index("--speculative-config") + 1])["method"] == "extract_hidden_states"


def test_a_container_that_sets_the_service_host_keeps_it(tmp_path: Path) -> None:
    pod = _pod(tmp_path)
    pod["spec"]["containers"][0]["env"].append({"name": "KUBERNETES_SERVICE_HOST", "value": "example"})
    p = _plan(pod, tmp_path, cluster_env={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"})
    assert p.env["KUBERNETES_SERVICE_HOST"] == "example" and p.env["KUBERNETES_SERVICE_PORT"] == "1"
    assert p.fixed_mounts == []


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:41000"),
        ("localhost:8000/x", "localhost:41000/x"),
        ("http://127.0.0.1:80001", "http://127.0.0.1:80001"),  # not a declared port
        ("http://10.127.0.0.1:8000", "http://10.127.0.0.1:8000"),  # not loopback
        ("http://example.com:8000", "http://example.com:8000"),
        ("127.0.0.1:9", "127.0.0.1:9"),
    ],
)
def test_only_loopback_addresses_of_declared_ports_are_rewritten(value: str, want: str) -> None:
    assert podspec._loopback(value, {8000: 41000}) == want


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("ghcr.io/o/op:v0.2.0", "ghcr.io/o/op"),
        ("localhost:5000/op:v1", "localhost:5000/op"),
        ("op", "op"),
        ("op@sha256:abc", "op"),
        ("ghcr.io/o/op:v1@sha256:abc", "ghcr.io/o/op"),
    ],
)
def test_image_repository(image: str, repository: str) -> None:
    assert podspec.image_repository(image) == repository


def test_fixed_mounts_run_in_a_private_mount_namespace(tmp_path: Path) -> None:
    argv = podspec.in_mount_namespace(["prog", "a b"], [(Path("/l/sa"), "/var/run/secrets/k/sa")])
    assert argv[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    assert argv[-5:] == ["/l/sa", "/var/run/secrets/k/sa", "--", "prog", "a b"]
    assert podspec.in_mount_namespace(["prog"], []) == ["prog"]
    # the wrapper runs: the bound folder is what the process sees at the fixed path (where this user may)
    import shutil

    if shutil.which("unshare") is None or subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode:
        unavailable("no mount namespaces for this user")
    local, fixed = tmp_path / "local", tmp_path / "fixed" / "sa"
    local.mkdir()
    (local / "token").write_text("t0k")
    argv = podspec.in_mount_namespace(["cat", str(fixed / "token")], [(local, str(fixed))])
    assert subprocess.run(argv, capture_output=True, text=True, check=True).stdout == "t0k"
    assert fixed.is_dir() and not any(fixed.iterdir())  # the bind was private to that process


def test_program_env_and_overrides_reach_only_that_program(tmp_path: Path) -> None:
    """The connector shim goes beneath vllm's env, the shared compile cache over it (recorded); the driver of a
    Job's pod gets neither."""
    pod = _job_pod(tmp_path)
    ports = iter(range(42000, 42100))
    plan = podspec.plan_pod(
        pod, pod_dir=tmp_path / "pod", claims={"models": tmp_path / "models", "data": tmp_path / "data"},
        hub_models={}, base_env={"PATH": "/rt/bin"}, lookup=lambda *_: None, free_port=lambda: next(ports),
        pod_ip="10.0.0.9", program_env={"vllm": {"PYTHONPATH": "/shim"}},
        program_override={"vllm": {"VLLM_CACHE_ROOT": "/run/cache"}},
    )  # fmt: skip
    vllm, driver = plan.container("vllm"), plan.container("driver")
    assert vllm.env["PYTHONPATH"] == "/shim" and "PYTHONPATH" in vllm.env_added
    assert vllm.env["VLLM_CACHE_ROOT"] == "/run/cache"
    assert f"env VLLM_CACHE_ROOT: {tmp_path}/pod/volumes/cache/vllm -> /run/cache (machine override)" in vllm.rewrites
    assert "PYTHONPATH" not in driver.env and driver.env.get("VLLM_CACHE_ROOT") != "/run/cache"


CACHED = """\
apiVersion: vllm-pooling.io/v1alpha1
kind: ModelCache
metadata: {name: minilm, namespace: real}
spec:
  model: {name: sentence-transformers/all-MiniLM-L6-v2, revision: c9745ed1d9f207416be6d2e6f8de32d1f16199bf}
  storage: {claimName: data}
---
apiVersion: vllm-pooling.io/v1alpha1
kind: PoolingService
metadata: {name: minilm, namespace: real}
spec:
  model: {name: sentence-transformers/all-MiniLM-L6-v2, source: {cache: {name: minilm}}}
  task: embed
  engine: {image: "vllm/vllm-openai:v0.32.0", dtype: float32, maxModelLen: 256}
  resources: {gpu: {count: 0}, cpu: "1", memory: 4Gi}
"""


def test_a_hub_cache_on_a_claim_is_never_laid_out(tmp_path: Path) -> None:
    """A ModelCache's claim holds what its fill wrote: the runner adds nothing, even for a model it prepared."""
    pod = _pod(tmp_path, CACHED)
    folder = tmp_path / "prepared"
    folder.mkdir()
    p = _plan(pod, tmp_path, claims={"data": tmp_path / "data"},
              hub_models={"sentence-transformers/all-MiniLM-L6-v2": (folder, "b" * 40)})
    assert p.hub_layout == []
    assert p.env["HF_HUB_CACHE"] == str(tmp_path / "data" / "hub") and p.env["HF_HUB_OFFLINE"] == "1"
    assert any("on a claim, not laid out" in r for r in p.rewrites)


def test_the_termination_message_path_is_a_file_of_the_pod(tmp_path: Path) -> None:
    tmpl = _template(tmp_path, CACHED, "Job")
    pod = {"metadata": {**tmpl["metadata"], "name": "minilm-fill-x", "namespace": "real", "uid": "u-2"}, "spec": tmpl["spec"]}
    ports = iter(range(40000, 40100))
    p = podspec.plan(pod, "fill", pod_dir=tmp_path / "pod", claims={"data": tmp_path / "data"}, hub_models={},
                     base_env={"PATH": "/rt/bin"}, lookup=lambda *_: None, free_port=lambda: next(ports), pod_ip="10.0.0.9")
    assert p.termination_log == tmp_path / "pod" / "fill.termination-log"
    assert p.argv[p.argv.index("--result") + 1] == str(p.termination_log)
    assert p.argv[p.argv.index("--claim") + 1] == str(tmp_path / "data")


def test_a_configmap_volume_is_a_folder_of_the_pod_and_other_kinds_are_refused(tmp_path: Path) -> None:
    """The runner fills a configMap volume's folder (kubelet.project: keys as files, binaryData decoded)."""
    pod = {"spec": {"volumes": [{"name": "ref", "configMap": {"name": "vpo-space-x", "optional": True}},
                                {"name": "hp", "hostPath": {"path": "/etc"}}]}}  # fmt: skip
    with pytest.raises(podspec.PlanError, match=r"\['hostPath'\] volumes are not supported"):
        podspec.volume_folders(pod, tmp_path, {})
    pod["spec"]["volumes"].pop()
    assert podspec.volume_folders(pod, tmp_path, {}) == {"ref": tmp_path / "volumes" / "ref"}
