"""The commit that was served, recorded everywhere (issue 50, item 1).

A service or job that reads its model from a ModelCache and names no model.revision is served at the commit the
cache holds (`--revision <commit>`). Its run record, status.effective, status.embeddingSpace and the fingerprint
must say that commit, not the empty spec.model.revision: builders.common.served resolves it once, and everything
reads the plan's workload. Checked for every kind that records a revision, offline (`render`, the reconcile's own
plan) and in the status the reconcile writes; on the API server in e2e/tests/operator/test_model_cache.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pooling_operator.api import PoolingJob, PoolingService, ScoringService
from pooling_operator.builders import BuildContext, CacheMount, plan
from pooling_operator.cli import main
from pooling_operator.status.pooling_jobs import pooling_job_status
from pooling_operator.status.services import service_status
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.validate import parse, validate
from pooling_operator.vllm.workload import workload
from tests.factories import MINILM_SHA, hidden_states, model_cache, pooling, pooling_job, scoring

QWEN_SHA = "0123456789abcdef0123456789abcdef01234567"
FROM_CACHE = {"revision": None, "source": {"cache": {"name": "minilm"}}}
MINILM_MEAN = {"type": "MEAN", "normalize": True}

CASES = {
    "PoolingService": pooling({"model": FROM_CACHE, "pooling": MINILM_MEAN}, name="svc"),
    "ScoringService": scoring({"model": {"name": "sentence-transformers/all-MiniLM-L6-v2", **FROM_CACHE}}, name="scorer"),
    "HiddenStateJob": hidden_states({"model": {"revision": None, "source": {"cache": {"name": "qwen"}}}}, name="states"),
    "PoolingJob": pooling_job({"model": FROM_CACHE, "embeddingSpace": None}, name="corpus"),
}
CACHES = [model_cache(), model_cache({"model": {"name": "Qwen/Qwen3-8B", "revision": QWEN_SHA}}, name="qwen")]
COMMIT = {"PoolingService": MINILM_SHA, "ScoringService": MINILM_SHA, "HiddenStateJob": QWEN_SHA, "PoolingJob": MINILM_SHA}


def pinned_service_fingerprint() -> str:
    """The fingerprint a PoolingService pinned to the cache's commit (no cache) publishes: the same files."""
    r = parse(pooling({"model": {"revision": MINILM_SHA}, "pooling": MINILM_MEAN})).resource
    assert r is not None
    return embedding_fingerprint(workload(r))


def rendered(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> list[dict[str, Any]]:
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump_all([*CACHES, CASES[kind]]))
    assert main(["render", str(f)]) == 0
    return [o for o in yaml.safe_load_all(capsys.readouterr().out) if o]


def arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("kind", list(CASES))
def test_render_serves_and_records_the_caches_commit(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = rendered(tmp_path, capsys, kind)
    workload_kind = "Deployment" if kind.endswith("Service") else "Job"
    [owned] = [o for o in objects if o["kind"] == workload_kind and o["metadata"]["name"] == CASES[kind]["metadata"]["name"]]
    pod = owned["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}
    vllm = containers["vllm"]
    assert arg([*vllm.get("command", []), *vllm.get("args", [])], "--revision") == COMMIT[kind]
    if kind.endswith("Job"):
        driver = next(c for c in containers.values() if "--run-info" in c.get("args", []))
        info = json.loads(arg(driver["args"], "--run-info"))
        assert info["revision"] == COMMIT[kind], info
        if kind == "PoolingJob":
            assert info["embeddingSpace"]["fingerprint"] == pinned_service_fingerprint()


def served_plan(kind: str) -> Any:
    result = validate(CASES[kind])
    assert result.resource is not None and result.contract is not None and not result.errors, result.problems
    return plan(result.resource, result.contract, BuildContext(model_cache=CacheMount("model-cache-minilm", MINILM_SHA)))


@pytest.mark.parametrize("kind", ["PoolingService", "ScoringService"])
def test_a_services_status_says_the_commit_it_serves(kind: str) -> None:
    p = served_plan(kind)
    assert isinstance(p.resource, PoolingService | ScoringService)
    status = service_status(p.resource, p.contract, p.argv, None, [], p.workload)
    assert arg(status["effective"]["args"], "--revision") == MINILM_SHA
    if kind == "PoolingService":
        assert status["embeddingSpace"]["fingerprint"] == pinned_service_fingerprint()


def test_a_pooling_jobs_status_carries_the_fingerprint_of_the_service_that_serves_the_same_files() -> None:
    p = served_plan("PoolingJob")
    assert isinstance(p.resource, PoolingJob)
    status = pooling_job_status(p.resource, None, None, w=p.workload)
    assert status["embeddingSpace"]["fingerprint"] == pinned_service_fingerprint()


def test_a_service_read_from_a_cache_without_a_pin_is_not_refused_when_the_published_fingerprint_moves() -> None:
    """The reconcile's twin of the embeddingSpace CEL rule compares what the spec states. A service read from a cache
    without a pin states no revision: the fingerprint an older operator published (revision unresolved) or one from
    before a refill differs from today's without any change to the spec, and the running service is not refused."""
    from pooling_operator.reconcile.services import _embedding_space_problems

    p = served_plan("PoolingService")
    assert isinstance(p.resource, PoolingService)
    older = {"embeddingSpace": {"fingerprint": embedding_fingerprint(workload(p.resource))}}  # published unresolved
    assert older["embeddingSpace"]["fingerprint"] != embedding_fingerprint(p.workload)
    assert _embedding_space_problems(p.resource, older) == []
    moved = {"embeddingSpace": {"fingerprint": embedding_fingerprint(p.workload)}}  # a refill: another commit
    assert _embedding_space_problems(p.resource, moved) == []
    # a pinned one is judged as before: another pooling under the same (absent) label is refused
    pinned = validate(pooling({"model": {"revision": MINILM_SHA}, "pooling": {"type": "CLS"}})).resource
    assert isinstance(pinned, PoolingService)
    stored = {"embeddingSpace": {"fingerprint": pinned_service_fingerprint()}}
    assert [x.path for x in _embedding_space_problems(pinned, stored)] == ["spec.embeddingSpace"]
