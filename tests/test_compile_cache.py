"""engine.compileCache (builders/compile_cache.py): the key of a service's entry moves with what changes the
compiled graphs and with nothing else; the pod restores before vLLM and saves beside it; the rules."""

from __future__ import annotations

from typing import Any

from pooling_operator.builders.compile_cache import compile_key
from pooling_operator.cli import main
from pooling_operator.vllm.args import vllm_command
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.validate import validate
from pooling_operator.vllm.workload import workload
from tests.factories import hidden_states, pooling

CC = {"engine": {"compileCache": {"claimName": "cc"}}}


def key_of(spec: dict[str, Any], **meta: Any) -> str:
    r = validate(pooling({**CC, **spec} if "engine" not in spec else {**spec, "engine": {**spec["engine"], **CC["engine"]}}, **meta)).resource
    assert r is not None
    w = workload(r)
    return compile_key(w, vllm_command(r, contract("0.33"), port=r.spec.service.port, w=w), r.spec.resources)


def test_the_key_moves_with_what_changes_the_graphs_only() -> None:
    base = key_of({})
    assert key_of({}, name="other") == base  # --served-model-name: a name, not a graph
    assert key_of({"service": {"port": 9000}}) == base  # --port: where it listens
    for changed in ({"engine": {"maxModelLen": 128}}, {"engine": {"image": "vllm/vllm-openai:v0.33.1"}},
                    {"model": {"revision": "0" * 40}}, {"resources": {"gpu": {"count": 0}}},
                    {"resources": {"gpu": {"count": 1, "product": "NVIDIA-L4"}}},
                    {"engine": {"env": [{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "1"}]}}):
        assert key_of(changed) != base, changed


def test_the_pod_restores_before_vllm_and_saves_beside_it() -> None:
    r = validate(pooling(CC)).resource
    from pooling_operator.builders import BuildContext, plan

    dep = next(o for o in plan(r, contract("0.33"), BuildContext(operator_image="op:1")).objects if o["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    restore, save = pod["initContainers"]
    assert restore["args"][:2] == ["compile-cache", "restore"] and "restartPolicy" not in restore
    assert save["args"][:2] == ["compile-cache", "save"] and save["restartPolicy"] == "Always"  # a native sidecar
    assert restore["image"] == save["image"] == "op:1"
    key = restore["args"][restore["args"].index("--key") + 1]
    assert save["args"][save["args"].index("--key") + 1] == key and len(key) == 16
    assert save["args"][save["args"].index("--health") + 1] == "http://127.0.0.1:8000/health"
    assert {"name": "compile-cache", "persistentVolumeClaim": {"claimName": "cc"}} in pod["volumes"]
    [vllm] = pod["containers"]
    env = {e["name"]: e.get("value") for e in vllm["env"]}
    assert env["VLLM_CACHE_ROOT"] == "/cache/vllm" == restore["args"][restore["args"].index("--into") + 1].rstrip("/")
    assert not any(m["name"] == "compile-cache" for m in vllm["volumeMounts"])  # vLLM writes only its own emptyDir


def test_a_job_may_not_have_one() -> None:
    errors = [str(p) for p in validate(hidden_states(CC)).errors]
    assert any(e.startswith("spec.engine.compileCache: applies to services only") for e in errors), errors


def test_validate_warns_when_two_services_of_a_namespace_share_a_claim(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import yaml

    docs = [pooling(CC, name="a"), pooling(CC, name="b"), pooling(CC, name="c", namespace="elsewhere")]
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    assert main(["validate", str(f)]) == 0  # a warning, not an error
    err = capsys.readouterr().err
    assert "PoolingService/b: spec.engine.compileCache.claimName: warning: claim 'cc' is also the compile cache of PoolingService/a" in err
    *lines, summary = err.strip().splitlines()
    assert summary == "3 resources checked: 3 valid, 0 invalid (0 errors, 1 warning, 0 notices)"
    assert len(lines) == 1 and ": PoolingService/b: " in lines[0], lines  # not a, the first; not c, elsewhere
