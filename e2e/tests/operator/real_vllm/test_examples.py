"""Every example in examples/: started on real vLLM where its model is available here, and otherwise its
rendered command line accepted by vLLM's own ``vllm`` argument parser and serve validation (no model needed).

The runtime is vLLM 0.32 (the only one installable here); the examples target 0.33. A started example is
changed only where this machine forces it (``runner_process.MACHINE_OVERRIDES``: the 0.32 image, no GPU and
one CPU) and placed on the runner's node.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e import demo
from e2e.kube.controlplane import REPO_ROOT
from e2e.podrunner.runner_process import on_this_machine
from e2e.realvllm import runtime
from e2e.tests.operator.real_vllm.conftest import Served, ServerPool
from e2e.tests.operator.real_vllm.pool import pool_key
from e2e.tests.operator.real_vllm.routes import probe

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1500)]

EXAMPLES = REPO_ROOT / "examples"
PARSE = REPO_ROOT / "e2e" / "realvllm" / "vllm_parse.py"
AVAILABLE = {mdl.repo_id for mdl in runtime.MODELS}
SERVICE_KINDS = ("PoolingService", "ScoringService")


def example_docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for f in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and doc.get("kind") in SERVICE_KINDS:
                out.append((f.name, doc))
    return out


def startable() -> list[tuple[str, dict[str, Any]]]:
    """Examples whose model the runtime has, from the Hub or a volume (one from a ModelCache needs its fill
    first: test_model_cache_real.py serves that path)."""
    return [(f, d) for f, d in example_docs()
            if d["spec"]["model"]["name"] in AVAILABLE and "cache" not in (d["spec"]["model"].get("source") or {})]


def vllm_parse(rt: runtime.Runtime, argvs: list[list[str]]) -> list[dict[str, Any]]:
    res = subprocess.run(
        [str(rt.python), str(PARSE)], input=json.dumps({"argvs": argvs}), capture_output=True, text=True,
        env={**rt.env(), "HOME": str(Path.home())}, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)["results"]


def test_vllm_own_parser_accepts_every_rendered_example(vllm_runtime: runtime.Runtime) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pooling_operator", "render", "--vllm-args", str(EXAMPLES)],
        check=True, capture_output=True, text=True, cwd=REPO_ROOT,
    ).stdout.splitlines()  # fmt: skip
    names, argvs = out[0::2], [shlex.split(line) for line in out[1::2]]
    assert len(argvs) >= 8, out  # every service and job in examples/
    # controls: the harness must be able to say no
    bad = [
        ["vllm", "serve", "m", "--no-such-flag"],
        ["vllm", "serve", "m", "--runner", "pooling", "--pooler-config", '{"seq_pooling_type": "NOPE"}'],
    ]
    results = vllm_parse(vllm_runtime, argvs + bad)
    for name, argv, r in zip(names, argvs, results, strict=False):
        assert r["ok"], f"{name} {shlex.join(argv)}\n{r['error']}"
        assert r["args"]["model_tag"] == argv[2]
    assert [r["ok"] for r in results[len(argvs) :]] == [False, False], results[len(argvs) :]


def test_at_least_minilm_is_startable() -> None:
    assert any(d["spec"]["model"]["name"] == runtime.MINILM.repo_id for _, d in startable())


def demo_minilm() -> dict[str, Any]:
    """The document `make demo REAL_VLLM=1` applies for search/minilm (e2e/demo.py)."""
    [doc] = [d for d in demo.examples(real_vllm=True)[0] if demo.is_real_minilm(d)]
    return doc


# the session's server pool starts them ahead; the demo's MiniLM is one more use of the example's server
POOL = [on_this_machine(d) for _, d in startable()] + [demo_minilm()]


@pytest.mark.parametrize(("file", "doc"), startable(), ids=[f"{f}:{d['metadata']['name']}" for f, d in startable()])
def test_example_starts_and_answers(file: str, doc: dict[str, Any], server_pool: ServerPool) -> None:
    with server_pool.serving(on_this_machine(doc)) as s:
        answers(doc, s)


def answers(doc: dict[str, Any], s: Served) -> None:
    assert [r for r in s.plan["rewrites"] if r.startswith(("args", "command"))] == [
        f"args[6]: 8000 -> {s.plan['ports']['http']['local']}"
    ], s.plan["rewrites"]
    served_name = doc["spec"]["model"].get("servedName") or doc["metadata"]["name"]
    if doc["kind"] == "PoolingService" and doc["spec"].get("task", "embed") == "embed":
        r = httpx.post(f"{s.url}/v1/embeddings", json={"model": served_name, "input": "hello"}, timeout=120)
        assert r.status_code == 200, r.text
        assert len(r.json()["data"][0]["embedding"]) > 0
    for route in s.status["routes"]:
        resp = probe(s.url, route, served_name)
        assert resp.status_code == 200, (route, resp.status_code, resp.text[:300])


def test_the_demos_real_vllm_answer(server_pool: ServerPool) -> None:
    """`make demo REAL_VLLM=1` ends with search/minilm's /v1/embeddings answer (demo.real_answer): the same
    server as the example's above (the same model and argv: one pool key), asked by the demo's own code."""
    doc = demo_minilm()
    assert pool_key(doc) == pool_key(on_this_machine(next(d for _, d in startable() if demo.is_real_minilm(d))))
    with server_pool.serving(doc) as s:
        answer = demo.real_answer(s.url)
    [item] = answer["data"]
    assert answer["model"] == "minilm" and len(item["embedding"]) == 384
    assert abs(sum(x * x for x in item["embedding"]) - 1.0) < 1e-3  # pooling: MEAN, normalize: true
