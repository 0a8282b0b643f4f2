"""PoolingJob, the operator's pure side: its rules (the PoolingService's, with the same messages, and a job's), the
Indexed Job it becomes (preflight before vLLM, vLLM as a sidecar, the driver with exactly the flags its CLI
takes), and its status from the shards' reports. The driver itself: tests/test_pooling_driver*.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pooling_operator.api import kueue
from pooling_operator.api import messages as M
from pooling_operator.api.crd import all_crds
from pooling_operator.builders import BuildContext, plan
from pooling_operator.status import conditions as C
from pooling_operator.status.pooling_jobs import pooling_job_status
from pooling_operator.status.queue import QueueObserved
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.validate import validate
from pooling_operator.vllm.workload import workload
from tests.factories import pooling, pooling_job

MATRYOSHKA = {"model": {"matryoshkaDimensions": [256, 128]}}


def parsed(spec: dict[str, Any] | None = None, **meta: Any) -> Any:
    result = validate(pooling_job(spec, **{"name": "corpus", "namespace": "search", **meta}))
    assert result.ok, [str(p) for p in result.errors]
    result.resource.metadata.generation = 1  # type: ignore[union-attr]
    result.resource.metadata.uid = "plj-uid"  # type: ignore[union-attr]
    return result.resource


def objects(spec: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    p = plan(parsed(spec), contract("0.33"), BuildContext())
    return {o["kind"]: o for o in p.objects}


def errors(doc: dict[str, Any]) -> list[str]:
    return [str(p) for p in validate(doc).problems if p.severity == "error"]


# ---- rules -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"pooling": {"type": "ALL"}}, M.POOLING_TYPE_FOR_TASK),
        ({**MATRYOSHKA, "pooling": {"dimensions": 64}}, M.MATRYOSHKA_DIMENSIONS),
        ({**MATRYOSHKA, "task": "classify", "pooling": {"type": "CLS", "dimensions": 128}}, M.DIMENSIONS_EMBEDDING_ONLY),
        ({"shards": 2, "parallelism": 3}, M.PARALLELISM_LE_SHARDS),
    ],
)
def test_the_pooling_rules_say_what_they_say_for_a_pooling_service(spec: dict[str, Any], message: str) -> None:
    job, service = errors(pooling_job(spec)), errors(pooling(spec if "shards" not in spec else {}))
    assert any(message in e for e in job), job
    if "shards" not in spec:  # the same problem, path and words as the PoolingService's
        assert [e for e in job if message in e] == [e for e in service if message in e]


def test_every_cel_rule_of_the_crd_is_said_by_validate_too() -> None:
    [crd] = [c for c in all_crds() if c["spec"]["names"]["kind"] == "PoolingJob"]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    said = {v["message"] for v in spec.get("x-kubernetes-validations") or []}
    assert said == {M.POOLING_JOB_IMMUTABLE, M.PARALLELISM_LE_SHARDS, M.POOLING_TYPE_FOR_TASK,
                    M.MATRYOSHKA_DIMENSIONS, M.DIMENSIONS_EMBEDDING_ONLY, M.BATCH_FILE_EMBED_ONLY,
                    M.BATCH_OUTPUT_NEEDS_BATCH_INPUT, M.JOB_TASK_OR_MODE, M.GENERATIVE_IFF_MODE, M.POOLING_BIENCODER_ONLY,
                    M.BIENCODER_SEQUENCE_POOLING, M.SCORING_JOB_NO_SPACE, M.SCORING_JOB_CONVERT,
                    M.GENERATIVE_BATCH_FILE, M.SPACE_CHECK_NEEDS_SPACE, M.SCORING_VECTORS_INPUTS_ONLY}  # fmt: skip


BATCH = {"dataset": {"volume": {"claimName": "corpus", "path": "/requests.jsonl"}, "format": "openaiBatch"},
         "output": {"volume": {"claimName": "vectors", "path": "/runs/v1"}, "formats": ["openaiBatch"]}}  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({**BATCH, "task": "classify", "pooling": {"type": "CLS"}}, f"spec.task: {M.BATCH_FILE_EMBED_ONLY}"),
        ({"output": {**BATCH["output"]}}, f"spec.output.formats: {M.BATCH_OUTPUT_NEEDS_BATCH_INPUT}"),
        ({**BATCH, "output": {**BATCH["output"], "formats": ["openaiBatch", "openaiBatch"]}},
         "spec.output.formats: each format once: safetensors and/or openaiBatch"),
        ({**BATCH, "output": {**BATCH["output"], "formats": ["parquet"]}}, "spec.output.formats[0]: Input should be 'safetensors' or 'openaiBatch'"),
        ({**BATCH, "output": {**BATCH["output"], "formats": []}}, "spec.output.formats: List should have at least 1 item"),
        ({**BATCH, "dataset": {**BATCH["dataset"], "format": "csv"}}, "spec.dataset.format: Input should be 'jsonl' or 'openaiBatch'"),
    ],
)
def test_batch_files_are_for_embeddings_and_an_output_file_answers_an_input_file(spec: dict[str, Any], problem: str) -> None:
    assert any(e.startswith(problem) for e in errors(pooling_job(spec))), errors(pooling_job(spec))


def test_a_batch_file_job_tells_the_driver_its_format_the_names_its_lines_may_give_and_its_outputs() -> None:
    pod = objects({**BATCH, "output": {**BATCH["output"], "formats": ["safetensors", "openaiBatch"]}})["Job"]["spec"]["template"]["spec"]
    preflight, driver = pod["initContainers"][0]["args"], pod["containers"][0]["args"]
    for args in (preflight, driver):
        assert flag(args, "--format") == "openaiBatch"
        assert [args[i + 1] for i, a in enumerate(args) if a == "--model-name"] == ["corpus", "sentence-transformers/all-MiniLM-L6-v2"]
    assert flag(driver, "--outputs") == "safetensors,openaiBatch" and "--outputs" not in preflight
    plain = objects()["Job"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--format" not in plain and "--outputs" not in plain and "--model-name" not in plain  # renders as before


def test_a_job_name_leaves_room_for_the_shard_index_and_the_dataset_stays_outside_the_output() -> None:
    assert any(e.startswith("metadata.name: 63 characters") for e in errors(pooling_job(name="a" * 63)))
    inside = {"dataset": {"volume": {"claimName": "v", "path": "/runs/v1/corpus.jsonl"}},
              "output": {"volume": {"claimName": "v", "path": "/runs/v1"}}}  # fmt: skip
    assert any(e.startswith("spec.output.volume.path: the dataset") for e in errors(pooling_job(inside)))


def test_a_model_that_cannot_serve_the_task_is_refused_as_for_a_service() -> None:
    job = errors(pooling_job({"task": "token_classify", "pooling": None}))
    assert any(e.startswith("spec.task: BertModel") for e in job), job


def test_a_compile_cache_is_for_services_only() -> None:
    job = errors(pooling_job({"engine": {"compileCache": {"claimName": "cc"}}}))
    assert any(e.startswith("spec.engine.compileCache: applies to services only: a PoolingJob's pods") for e in job), job


def test_bad_input_names_the_field() -> None:
    assert any(e.startswith("spec.batchSize") for e in errors(pooling_job({"batchSize": 0})))
    assert any(e.startswith("spec.dataset.volume.path") for e in errors(pooling_job({"dataset": {"volume": {"path": "corpus"}}})))


# ---- the Job ------------------------------------------------------------------------------------------------


def test_preflight_runs_before_vllm_and_the_driver_after_it() -> None:
    pod = objects()["Job"]["spec"]["template"]["spec"]
    init, [driver] = pod["initContainers"], pod["containers"]
    assert [c["name"] for c in init] == ["preflight", "vllm"]
    assert "restartPolicy" not in init[0] and init[1]["restartPolicy"] == "Always"  # a sidecar after a plain init
    assert init[0]["args"][:2] == ["pooling-job", "preflight"] and driver["args"][:2] == ["pooling-job", "run"]
    assert [m["name"] for m in init[0]["volumeMounts"]] == ["dataset"]  # the preflight writes nothing
    assert "output" not in [m["name"] for m in init[1]["volumeMounts"]]  # vLLM never writes the output
    rules = objects()["Job"]["spec"]["podFailurePolicy"]["rules"]
    assert [r["onExitCodes"]["containerName"] for r in rules if "onExitCodes" in r] == ["preflight", "driver"]


def test_vllm_runs_the_pooling_runner_with_the_services_pooler_config_and_no_service_flags() -> None:
    job_argv = plan(parsed(), contract("0.33"), BuildContext()).argv
    service = validate(pooling({"pooling": {"type": "MEAN", "normalize": True}}, name="corpus")).resource
    service_argv = plan(service, contract("0.33"), BuildContext()).argv  # type: ignore[arg-type]
    at = job_argv.index("--pooler-config")
    assert job_argv[at + 1] == service_argv[service_argv.index("--pooler-config") + 1]
    assert "--runner" in job_argv and job_argv[job_argv.index("--runner") + 1] == "pooling"
    assert "--custom-histogram-buckets" not in job_argv  # a service's metrics buckets: no Service scrapes a job


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_the_driver_gets_the_task_batch_dtype_budget_and_the_embedding_space() -> None:
    resource = parsed({"batchSize": 128, "engine": {"dtype": "bfloat16"}, "output": {"storageBudget": "10Gi"}, "shards": 4})
    driver = objects({"batchSize": 128, "engine": {"dtype": "bfloat16"}, "output": {"storageBudget": "10Gi"}, "shards": 4})["Job"]
    args = driver["spec"]["template"]["spec"]["containers"][0]["args"]
    assert (flag(args, "--task"), flag(args, "--batch-size"), flag(args, "--dtype")) == ("embed", "128", "bfloat16")
    assert flag(args, "--budget-bytes") == str(10 * 2**30 // 4)
    assert flag(args, "--output") == "/output/runs/v1" and flag(args, "--dataset") == "/dataset/corpus.jsonl"
    info = json.loads(flag(args, "--run-info"))
    same = {"model": {"revision": "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"}, "pooling": {"type": "MEAN", "normalize": True}}
    service = validate(pooling(same)).resource
    assert info["embeddingSpace"] == {"label": "minilm-v1", "fingerprint": embedding_fingerprint(workload(service))}  # type: ignore[arg-type]
    assert info["embeddingSpace"]["fingerprint"] == embedding_fingerprint(workload(resource))
    assert info["command"][:2] == ["vllm", "serve"] and info["task"] == "embed"


@pytest.mark.parametrize(("dtype", "vectors"), [(None, "float32"), ("auto", "float32"), ("float32", "float32"),
                                                 ("float16", "float16"), ("bfloat16", "bfloat16")])  # fmt: skip
def test_the_vector_dtype_follows_an_explicit_engine_dtype_and_auto_keeps_float32(dtype: str | None, vectors: str) -> None:
    job = objects({"engine": {"dtype": dtype}} if dtype else None)["Job"]
    assert flag(job["spec"]["template"]["spec"]["containers"][0]["args"], "--dtype") == vectors


def test_the_rendered_flags_are_exactly_what_the_driver_cli_parses() -> None:
    from pooling_operator.pods.vectors import cli

    plain = objects({"output": {"storageBudget": "1Gi"}})["Job"]["spec"]["template"]["spec"]
    batch = objects(BATCH)["Job"]["spec"]["template"]["spec"]
    for container in (plain["initContainers"][0], plain["containers"][0], batch["initContainers"][0], batch["containers"][0]):
        args = [a.replace("$(JOB_COMPLETION_INDEX)", "1") for a in container["args"]]
        import argparse

        parser = argparse.ArgumentParser(prog="pooling-operator")
        cli.add_parser(parser.add_subparsers(dest="command", required=True))
        parsed_args = parser.parse_args(args)
        assert parsed_args.shard == 1 and parsed_args.shards == 2


def test_a_queued_pooling_job_is_suspended_in_its_queue() -> None:
    job = objects({"queue": {"name": "team-a"}, "shards": 4, "parallelism": 2})["Job"]
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"][kueue.QUEUE_LABEL] == "team-a"


def test_the_driver_may_patch_only_its_progress_configmap() -> None:
    role = objects()["Role"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["corpus-progress"],
                              "verbs": ["get", "patch", "update"]}]  # fmt: skip


# ---- status ------------------------------------------------------------------------------------------------


def configmap(**shards: dict[str, Any]) -> dict[str, Any]:
    return {"data": {k.replace("_", "-"): json.dumps(v) for k, v in shards.items()}}


def test_status_after_the_preflight_shows_the_corpus_before_any_vector() -> None:
    cm = configmap(shard_0={"state": "checked", "done": 0, "failed": 2, "total": 50, "lines": 100},
                   shard_1={"state": "checked", "done": 0, "failed": 0, "total": 50, "lines": 100})  # fmt: skip
    status = pooling_job_status(parsed(), {"status": {"active": 2}}, cm, w=workload(parsed()))
    assert status["dataset"] == {"lines": 100, "checkedShards": 2}
    assert status["samples"] == {"done": 0, "failed": 2}
    assert status["vectors"] == {"dtype": "float32"} and "storage" not in status
    assert status["embeddingSpace"] == {"label": "minilm-v1", "fingerprint": embedding_fingerprint(workload(parsed()))}


def test_status_projects_the_output_from_what_was_written() -> None:
    cm = configmap(shard_0={"state": "running", "done": 40, "failed": 0, "total": 50, "bytes": 61440, "hiddenSize": 384})
    status = pooling_job_status(parsed({"output": {"storageBudget": "1Mi"}}), {"status": {"active": 2}}, cm, w=workload(parsed()))
    assert status["vectors"] == {"dtype": "float32", "dimension": 384}
    # 1536 bytes an input; 50 inputs on the one reporting shard, 2 shards: 153,600 bytes
    assert status["storage"]["estimatedBytes"] == 153600 and status["storage"]["budget"] == "1Mi"


def test_a_finished_job_succeeds_and_a_full_volume_names_the_kind_to_recreate() -> None:
    done = pooling_job_status(parsed(), {"status": {"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}},
                              configmap(shard_0={"state": "succeeded", "done": 50}, shard_1={"state": "succeeded", "done": 50}),
                              w=workload(parsed()))  # fmt: skip
    conds = {c["type"]: c for c in done["conditions"]}
    assert conds[C.SUCCEEDED]["status"] == "True" and done["samples"]["done"] == 100
    full = pooling_job_status(parsed(), {"status": {"conditions": [{"type": "Failed", "status": "True"}]}},
                              configmap(shard_0={"state": "output_full", "done": 7}), w=workload(parsed()))  # fmt: skip
    failed = {c["type"]: c for c in full["conditions"]}[C.FAILED]
    assert failed["reason"] == C.OUTPUT_VOLUME_FULL and "re-create the PoolingJob" in failed["message"]


def test_a_held_job_is_queued_not_failed() -> None:
    resource = parsed({"queue": {"name": "team-a"}})
    status = pooling_job_status(resource, {"spec": {"suspend": True}, "status": {}}, None, queue=QueueObserved(None, None, False), w=workload(resource))
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Queued"]["status"] == "True" and conds["Queued"]["reason"] == "KueueNotInstalled"
    assert conds[C.FAILED]["status"] == "False"
