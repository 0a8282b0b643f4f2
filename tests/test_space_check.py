"""The embedding space guarded by numbers (issue 68): the canaries and the verdict (vllm/space_check.py), the pods'
readiness gate and the rollout that holds the old pods (builders), the condition SpaceVerified from the pods'
verdicts (status/space.py), the API's rules, and a PoolingJob shard that sends the canaries before any input
(pods/vectors/space.py) against the driver's fake vLLM."""

from __future__ import annotations

import asyncio
import base64
import json
import math
from pathlib import Path
from typing import Any

import pytest

from pooling_operator.api import messages as M
from pooling_operator.api.shard_contract import EXIT_OK, EXIT_SPACE_DRIFT
from pooling_operator.builders import BuildContext, build
from pooling_operator.pods.vectors.driver import PoolingConfig, PoolingDriver
from pooling_operator.pods.vectors.space import SpaceCheckConfig
from pooling_operator.status import conditions as C
from pooling_operator.status.space import space_condition
from pooling_operator.vllm import space_check as sc
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.validate import validate
from tests.factories import pooling, pooling_job, scoring, scoring_job
from tests.pooling_support import POOLING_MODEL, FakePooling, fake_pooling, fake_rows, write_pooling_dataset

# ---- the canaries and the verdict -------------------------------------------------------------------------------


def test_the_builtin_set_spans_scripts_lengths_and_a_chunk() -> None:
    texts = sc.builtin(scoring=False)
    assert len(texts) >= 16 and len({c.name for c in texts}) == len(texts)
    scripts = {"Latin": "a", "Cyrillic": "в", "Han": "向", "Arabic": "ف", "Devanagari": "क", "Hiragana": "の"}
    for name, char in scripts.items():
        assert any(char in (c.text or "") for c in texts), name
    assert min(len(c.text or "") for c in texts) <= 5 and max(len((c.text or "").split()) for c in texts) > 512
    pairs = sc.builtin(scoring=True)
    assert all(c.query and c.document for c in pairs) and len(pairs) >= 8
    assert sc.digest(texts) != sc.digest(texts[:-1]) and sc.digest(texts) == sc.digest(list(texts))


@pytest.mark.parametrize(("text", "says"), [
    ("not json\n", "line 1: not JSON"), ('{"name": "a"}\n', "line 1: needs the strings name, text"),
    ('{"name": "a", "text": "x"}\n{"name": "a", "text": "y"}\n', "distinct"), ("\n\n", "no canaries"),
])
def test_a_users_canaries_that_are_not_canaries_are_refused_naming_the_line(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        sc.parse_canaries(text, scoring=False)


def test_requests_answers_and_routes_per_task_and_mode() -> None:
    canaries = sc.builtin(scoring=False)[:2]
    [(route, body)] = sc.requests_for(canaries, "minilm", task="embed")
    assert route == "/v1/embeddings" and body["truncate_prompt_tokens"] == -1 and "task" not in body
    [(route, body)] = sc.requests_for(canaries, "tagger", task="token_classify")
    assert route == "/pooling" and body["task"] == "token_classify"
    pairs = sc.builtin(scoring=True)[:3]
    assert [r for r, _ in sc.requests_for(pairs, "rr", mode="crossEncoder")] == ["/score"] * 3
    gen = sc.requests_for(pairs, "judge", mode="generative", generative={"label_token_ids": [1, 2], "apply_softmax": True})
    assert gen[0][0] == "/generative_scoring" and gen[0][1]["items"] == [pairs[0].document] and gen[0][1]["label_token_ids"] == [1, 2]
    assert sc.answers_of("/v1/embeddings", {"data": [{"index": 1, "embedding": [3, 4]}, {"index": 0, "embedding": [1, 2]}]}) == \
        [[[1.0, 2.0]], [[3.0, 4.0]]]
    assert sc.answers_of("/pooling", {"data": [{"index": 0, "data": [[1, 0], [0, 1]]}]}) == [[[1.0, 0.0], [0.0, 1.0]]]
    assert sc.answers_of("/score", {"data": [{"index": 0, "score": 0.25}]}) == [[[0.25]]]
    with pytest.raises(ValueError):
        sc.answers_of("/v1/embeddings", {"data": [{"index": 0, "embedding": ["x"]}]})


def vectors(n: int, dim: int, turn: float = 0.0) -> list[list[list[float]]]:
    """n unit vectors; `turn` rotates each by that angle in its first two axes (cosine cos(turn) to the original)."""
    out = []
    for i in range(n):
        v = [math.sin(i + j) for j in range(dim)]
        norm = math.sqrt(sum(x * x for x in v))
        v = [x / norm for x in v]
        a, b = v[0], v[1]
        r = math.hypot(a, b)
        theta = math.atan2(b, a) + turn
        v[0], v[1] = r * math.cos(theta), r * math.sin(theta)
        out.append([v])
    return out


def reference(n: int = 4, dim: int = 16) -> sc.Reference:
    canaries = [sc.Canary(f"c{i}", text=f"t{i}") for i in range(n)]
    return sc.as_reference("sha256:f", canaries, vectors(n, dim), "2026-12-07T00:00:00Z", "ns/pod-a")


def test_the_same_answers_pass_and_a_turned_space_drifts_naming_its_worst_canary() -> None:
    ref = reference()
    ok = sc.verdict(ref, vectors(4, 16), min_cosine=0.9995, normalize=True)
    assert ok.ok and ok.worst > 0.99999
    turned = vectors(4, 16, turn=0.2)  # each canary turned in its first two axes: a cosine of 1 - 0.02 x their weight
    bad = sc.verdict(ref, turned, min_cosine=0.9995, normalize=True)
    assert not bad.ok and bad.canary in ref.names and bad.worst < 0.9995
    assert f"canary {bad.canary}" in bad.message and "at least 0.9995" in bad.message
    assert sc.verdict(ref, turned, min_cosine=0.99, normalize=True).ok  # a lower bar lets it through


def test_another_dimension_a_norm_off_and_scores_beyond_the_tolerance_are_drift() -> None:
    ref = reference()
    assert "another dimension" in sc.verdict(ref, vectors(4, 8), min_cosine=0.9).message
    doubled = [[[2 * x for x in rows[0]]] for rows in vectors(4, 16)]
    assert not sc.verdict(ref, doubled, min_cosine=0.9, normalize=True).ok  # same direction, not normalised
    assert sc.verdict(ref, doubled, min_cosine=0.9, normalize=False).ok
    canaries = [sc.Canary("p0", query="q", document="d"), sc.Canary("p1", query="q", document="e")]
    scores = sc.as_reference("sha256:s", canaries, [[[0.9]], [[0.1]]], "", "")
    assert sc.verdict(scores, [[[0.9005]], [[0.1]]], min_cosine=0.9995, scores=True).ok
    drift = sc.verdict(scores, [[[0.9]], [[0.11]]], min_cosine=0.9995, scores=True)
    assert not drift.ok and drift.canary == "p1" and "largest score difference 0.010000" in drift.message


def test_the_reference_round_trips_through_its_configmap_and_fits_at_32_by_4096() -> None:
    ref = reference()
    data, binary = ref.data()
    back = sc.reference_from(data, binary)
    assert back is not None and back.names == ref.names and back.fingerprint == ref.fingerprint
    assert all(math.isclose(a, b, rel_tol=1e-6) for r1, r2 in zip(back.rows, ref.rows, strict=True)
               for x, y in zip(r1, r2, strict=True) for a, b in zip(x, y, strict=True))
    assert sc.reference_from(data, {sc.VECTORS_KEY: "AAAA"}) is None  # vectors that do not fit the shapes
    big = sc.as_reference("sha256:f", [sc.Canary(f"c{i}", text="x") for i in range(32)], [[[0.5] * 4096]] * 32, "", "")
    data, binary = big.data()
    stored = len(json.dumps({"data": data, "binaryData": binary}))
    assert len(base64.b64decode(binary[sc.VECTORS_KEY])) == 32 * 4096 * 4 == 524288
    assert stored < 700_000 < 1_048_576  # a ConfigMap's limit is 1 MiB
    assert sc.reference_name("minilm-v1") != sc.reference_name("MiniLM_v1") and sc.reference_name("a").startswith("vpo-space-")
    assert sc.reference_name("rerank", scoring=True).startswith("vpo-scores-rerank-")


# ---- the API, the pods and the rollout ----------------------------------------------------------------------------


def test_space_check_needs_an_embedding_space_and_a_plain_decimal() -> None:
    errors = lambda doc: [str(p) for p in validate(doc).errors]  # noqa: E731
    assert f"spec.spaceCheck: {M.SPACE_CHECK_NEEDS_SPACE}" in errors(pooling({"spaceCheck": {}}))
    assert f"spec.spaceCheck: {M.SPACE_CHECK_NEEDS_SPACE}" in errors(scoring_job({"spaceCheck": {}}))  # scores have no space
    assert errors(pooling({"embeddingSpace": "v1", "spaceCheck": {"minCosine": "0.999", "onDrift": "warn"}})) == []
    for bad in ("1.5", "0", "abc", "1e-3"):
        assert any(e.startswith("spec.spaceCheck.minCosine") for e in errors(pooling({"embeddingSpace": "v1", "spaceCheck": {"minCosine": bad}}))), bad
    assert errors(scoring({"spaceCheck": {}})) == []  # a ScoringService's reference is its own scores


def deployment(doc: dict[str, Any]) -> dict[str, Any]:
    result = validate(doc)
    assert result.ok, [str(p) for p in result.errors]
    return next(o for o in build(result.resource, contract("0.33"), BuildContext()) if o["kind"] == "Deployment")  # type: ignore[arg-type]


def test_gated_pods_and_a_rollout_that_keeps_the_old_pods_serving() -> None:
    plain = deployment(pooling({"embeddingSpace": "v1"}))
    assert "readinessGates" not in plain["spec"]["template"]["spec"]
    assert plain["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}  # no spare GPU needed
    held = deployment(pooling({"embeddingSpace": "v1", "spaceCheck": {}}))
    assert held["spec"]["template"]["spec"]["readinessGates"] == [{"conditionType": sc.READINESS_GATE}]
    assert held["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    warned = deployment(pooling({"embeddingSpace": "v1", "spaceCheck": {"onDrift": "warn"}}))
    assert warned["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert warned["spec"]["template"]["spec"]["readinessGates"]
    assert deployment(scoring({"spaceCheck": {}}))["spec"]["template"]["spec"]["readinessGates"]


def test_a_pooling_job_mounts_the_spaces_reference_and_passes_its_check() -> None:
    doc = pooling_job({"embeddingSpace": "docs-v1", "spaceCheck": {"minCosine": "0.999",
                                                                   "canaries": {"configMapRef": {"name": "mine", "key": "c.jsonl"}}}})
    result = validate(doc)
    assert result.ok, [str(p) for p in result.errors]
    job = next(o for o in build(result.resource, contract("0.33"), BuildContext()) if o["kind"] == "Job")  # type: ignore[arg-type]
    pod = job["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["space-reference"]["configMap"] == {"name": sc.reference_name("docs-v1"), "optional": True}
    assert volumes["space-canaries"]["configMap"]["items"] == [{"key": "c.jsonl", "path": "canaries.jsonl"}]
    [driver] = pod["containers"]
    check = json.loads(driver["args"][driver["args"].index("--space-check") + 1])
    assert check["label"] == "docs-v1" and check["minCosine"] == 0.999 and check["canaries"].endswith("/canaries.jsonl")
    assert EXIT_SPACE_DRIFT in job["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"]


# ---- SpaceVerified from the pods ------------------------------------------------------------------------------------


def pod(name: str, status: str | None = None, reason: str = "", message: str = "m", phase: str = "Running") -> dict[str, Any]:
    conditions = [] if status is None else [{"type": sc.READINESS_GATE, "status": status, "reason": reason, "message": message}]
    return {"metadata": {"name": name}, "status": {"phase": phase, "conditions": conditions}}


@pytest.mark.parametrize(("pods", "want"), [
    ([pod("a", "True", sc.RECORDED), pod("b", "True", sc.VERIFIED)], ("True", C.SPACE_VERIFIED_OK)),
    ([pod("a", "True", sc.VERIFIED), pod("b", "False", sc.DRIFT, "drifted: least cosine 0.99")], ("False", C.SPACE_DRIFT)),
    ([pod("a", "True", sc.VERIFIED), pod("b", "True", sc.DRIFT_ALLOWED, "drifted; admitted")], ("False", C.SPACE_DRIFT)),
    ([pod("a", "True", sc.VERIFIED), pod("b", "False", sc.UNREACHABLE)], ("False", C.SPACE_UNREACHABLE)),
    ([pod("a", "True", sc.VERIFIED), pod("b")], ("Unknown", C.SPACE_CHECKING)),
    ([pod("a", "True", sc.VERIFIED), pod("b", "False", sc.DRIFT, phase="Failed")], ("True", C.SPACE_VERIFIED_OK)),
    ([], ("Unknown", C.SPACE_CHECKING)),
    ([pod("a", "True", sc.VERIFIED), pod("b", "True")], ("Unknown", C.SPACE_CHECKING)),
], ids=["verified", "drift-held", "drift-admitted", "unreachable", "checking", "a-gone-pod-counts-not", "no-pods",
        "a-gate-set-by-someone-else-is-no-verdict"])
def test_space_verified_says_what_the_pods_say_worst_first(pods: list[dict[str, Any]], want: tuple[str, str]) -> None:
    cond = space_condition(pods, 3)
    assert (cond["status"], cond["reason"]) == want and cond["observedGeneration"] == 3
    if want[1] == C.SPACE_DRIFT:
        assert cond["message"].startswith("Pod b ") and "drifted" in cond["message"]


# ---- a PoolingJob shard sends the canaries first ----------------------------------------------------------------------


def run_shard(tmp_path: Path, url: str, shard: int = 0, reference: Path | None = None) -> tuple[int, dict[str, Any]]:
    dataset = tmp_path / "docs.jsonl"
    if not dataset.exists():
        write_pooling_dataset(dataset, 12, every_tokens=0)
    check = SpaceCheckConfig("sha256:f", "docs-v1", 0.9995, False, None, reference)
    config = PoolingConfig(shard=shard, shards=2, dataset=dataset, output=tmp_path / "out", endpoint=url, model=POOLING_MODEL,
                           task="embed", batch_size=4, dtype="float32", retry_base_seconds=0.01, space_check=check)
    code = asyncio.run(PoolingDriver(config).run())
    record = json.loads((tmp_path / "out" / f"shard-{shard}" / "run.json").read_text())
    return code, record


def test_a_shard_records_its_canaries_and_the_next_shard_is_checked_against_them(tmp_path: Path) -> None:
    fake = FakePooling()
    with fake_pooling(fake) as url:
        code, record = run_shard(tmp_path, url, 0)
        assert code == EXIT_OK and record["spaceCheck"]["comparedWith"].startswith("none")
        assert fake.requests[0][0] == "/v1/embeddings" and fake.requests[0][1]["input"][0] == sc.builtin(False)[0].text
        code, record = run_shard(tmp_path, url, 1)
    assert code == EXIT_OK and record["spaceCheck"]["comparedWith"].startswith("shard-0's canaries: least cosine 1.0")
    assert len(json.loads(record["spaceCheck"]["names"])) == len(sc.builtin(False))


def test_a_shard_on_a_drifting_engine_fails_before_writing_a_vector(tmp_path: Path) -> None:
    with fake_pooling(FakePooling()) as url:
        assert run_shard(tmp_path, url, 0)[0] == EXIT_OK
    drifting = FakePooling(skew=0.1)
    with fake_pooling(drifting) as url:
        code, record = run_shard(tmp_path, url, 1)
    assert code == EXIT_SPACE_DRIFT and record["state"] == "space_drift"
    assert not list((tmp_path / "out" / "shard-1").glob("part-*")) and not (tmp_path / "out" / "shard-1" / "manifest.jsonl").read_text()
    assert [path for path, _ in drifting.requests] == ["/v1/embeddings"]  # the canaries, and nothing after them


def test_the_spaces_own_reference_comes_first(tmp_path: Path) -> None:
    """A PoolingService's reference of the space, as its ConfigMap is mounted: data keys as text, binaryData raw."""
    canaries = list(sc.builtin(False))
    answers = [fake_rows(c.text or "", False) for c in canaries]
    ref = sc.as_reference("sha256:f", canaries, answers, "2026-12-01T00:00:00Z", "search/minilm-abc")
    data, binary = ref.data()
    mounted = tmp_path / "reference"
    mounted.mkdir()
    for k, v in data.items():
        (mounted / k).write_text(v)
    (mounted / sc.VECTORS_KEY).write_bytes(base64.b64decode(binary[sc.VECTORS_KEY]))
    with fake_pooling(FakePooling()) as url:
        code, record = run_shard(tmp_path, url, 0, reference=mounted)
    assert code == EXIT_OK and "the space's reference (recorded from search/minilm-abc)" in record["spaceCheck"]["comparedWith"]
