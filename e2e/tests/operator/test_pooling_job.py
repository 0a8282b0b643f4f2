"""PoolingJob on the real control plane (kwok runs its pods): the API server's own answer to a bad spec, the Job
it becomes, the shards' reports aggregated into status and `kubectl get` columns, Succeeded once kwok completes
the pods, and the output claim left alone on deletion. The driver and real vLLM: real_vllm/test_pooling_job_real.py."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from e2e.harness.config import GPU_PRODUCT
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.tests.operator.test_hidden_states import claims, cond, get
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.validate import validate
from pooling_operator.vllm.workload import workload
from tests.factories import pooling_job

API = "/apis/vllm-pooling.io/v1alpha1"


def test_the_api_server_refuses_a_bad_pooling_job_naming_the_field(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    bad = pooling_job({"pooling": {"type": "ALL"}, "shards": 2, "parallelism": 3}, name="bad", namespace=namespace)
    res = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert res.returncode != 0
    assert "spec.pooling.type" in res.stderr and "spec.parallelism" in res.stderr, res.stderr
    ok = pooling_job(name="immutable", namespace=namespace)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(ok))
    changed = pooling_job({"batchSize": 8}, name="immutable", namespace=namespace)
    res = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(changed), check=False)
    assert res.returncode != 0 and "create a new PoolingJob instead" in res.stderr, res.stderr


def test_pooling_job_runs_to_success(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    claims(cluster, namespace)  # "datasets" and "hidden-states": any two bound claims do
    spec = {"dataset": {"volume": {"claimName": "datasets", "path": "/corpus.jsonl"}},
            "output": {"volume": {"claimName": "hidden-states", "path": "/runs/v1"}, "storageBudget": "1Gi"},
            "shards": 2, "parallelism": 2, "resources": {"gpu": {"count": 1, "product": GPU_PRODUCT}}}  # fmt: skip
    doc = pooling_job(spec, name="corpus", namespace=namespace)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(doc))
    job = wait_for(lambda: get(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs/corpus"), timeout=60, what="Job")
    pod = job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["preflight", "vllm"]
    assert pod["containers"][0]["args"][:2] == ["pooling-job", "run"]
    assert (job["spec"]["completionMode"], job["spec"]["completions"]) == ("Indexed", 2)

    # What the preflight and the drivers would report (their writes are tested in tests/test_pooling_driver*).
    report = {f"shard-{i}": json.dumps({"state": "succeeded", "done": 10 + i, "failed": i, "bytes": 15360 + 1536 * i,
                                        "total": 10 + 2 * i, "lines": 33, "hiddenSize": 384, "valueBytes": 4})
              for i in range(2)}  # fmt: skip
    cluster.kubectl("patch", "configmap/corpus-progress", "-n", namespace, "--type=merge", "-p", json.dumps({"data": report}))

    def succeeded() -> dict[str, Any] | None:
        obj = get(cluster, f"{API}/namespaces/{namespace}/poolingjobs/corpus")
        return obj if cond(obj, "Succeeded").get("status") == "True" and obj["status"]["samples"]["done"] == 21 else None

    obj = wait_for(succeeded, timeout=120, what="Succeeded with the reported inputs")
    status = obj["status"]
    assert status["samples"] == {"done": 21, "failed": 1} and status["bytesWritten"] == 15360 * 2 + 1536
    assert status["dataset"] == {"lines": 33, "checkedShards": 2}
    assert status["vectors"] == {"dtype": "float32", "dimension": 384}
    resource = validate(doc).resource
    assert status["embeddingSpace"] == {"label": "minilm-v1", "fingerprint": embedding_fingerprint(workload(resource))}  # type: ignore[arg-type]
    assert status["output"]["manifests"] == ["shard-0/manifest.jsonl", "shard-1/manifest.jsonl"]

    table = cluster.kubectl("get", "poolingjobs", "-n", namespace, "-o", "wide").stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    assert header[:9] == ["NAME", "MODEL", "TASK", "MODE", "READY", "SHARDS", "DONE", "INPUTS", "FAILED"], header
    # MODE is blank for a pooling task (a scoring job's column): the split row has no word for it
    assert row[:8] == ["corpus", "sentence-transformers/all-MiniLM-L6-v2", "embed", "True", "2", "2", "21", "1"], row
    starts = [m.start() for m in re.finditer(r"\S+", table[0])]  # each header word's column, whole words only

    def cell(name: str) -> str:  # by the header's offsets: empty cells leave no word to split on
        i = header.index(name)
        return table[1][starts[i] : starts[i + 1] if i + 1 < len(starts) else None].strip()

    # the Batch-file columns of -o wide, blank for a job that leaves the defaults (jsonl, [safetensors]) unset:
    # the CRD writes no default into what the user applied
    assert header[-3:-1] == ["FORMAT", "OUTPUTS"] and (cell("FORMAT"), cell("OUTPUTS")) == ("", ""), table
    assert cell("MODE") == "", table
    assert "plj" in cluster.kubectl("api-resources", "--categories=pooling").stdout

    cluster.kubectl("delete", "plj/corpus", "-n", namespace, "--wait=true")
    assert get(cluster, f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/hidden-states") is not None
