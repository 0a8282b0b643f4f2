"""Resources that contradict each other in one input (issue 42.3): validate judges them together, and the line
names the field and the other resource."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pooling_operator.cli import main
from tests.factories import MINILM_SHA, model_cache, pooling, pooling_job


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *docs: dict[str, Any]) -> tuple[int, list[str]]:
    p = tmp_path / "in.yaml"
    p.write_text(yaml.safe_dump_all(docs))
    code = main(["validate", str(p)])
    out, err = capsys.readouterr()
    return code, [line.split(": ", 1)[1] for line in (out + err).splitlines() if line.startswith(str(p))]


CACHED = {"model": {"source": {"cache": {"name": "minilm"}}, "revision": None}}


@pytest.mark.parametrize(
    ("service", "words"),
    [
        (pooling({**CACHED, "model": {**CACHED["model"], "name": "BAAI/bge-small-en-v1.5"}}, name="svc", namespace="search"),
         "spec.model.name: 'BAAI/bge-small-en-v1.5' is not the model ModelCache 'minilm' holds"),
        (pooling({"model": {"source": {"cache": {"name": "minilm"}}, "revision": "0" * 40}}, name="svc", namespace="search"),
         "spec.model.revision: '0000000000000000000000000000000000000000' is not the revision ModelCache 'minilm' holds"),
        (pooling_job({"model": {"source": {"cache": {"name": "minilm"}}, "revision": "1" * 40}}, name="job", namespace="search"),
         "is not the revision ModelCache 'minilm' holds"),
    ],
)
def test_a_service_or_job_and_the_cache_it_names_in_the_same_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  service: dict[str, Any], words: str) -> None:
    cache = model_cache(namespace="search")
    code, lines = run(tmp_path, capsys, cache, service)
    assert code == 1 and any(words in line for line in lines), lines
    # the same cache in another namespace is another cache: nothing to compare
    other = model_cache(namespace="elsewhere")
    code, lines = run(tmp_path, capsys, other, service)
    assert not any("ModelCache 'minilm' holds" in line for line in lines), lines


def test_a_service_that_agrees_with_its_cache_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    service = pooling({"model": {"source": {"cache": {"name": "minilm"}}, "revision": MINILM_SHA}}, name="svc", namespace="search")
    code, lines = run(tmp_path, capsys, model_cache(namespace="search"), service)
    assert code == 0, lines


def test_one_embedding_space_label_for_two_spaces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = {"embeddingSpace": "minilm-v1", "pooling": {"type": "MEAN", "normalize": True}}
    job = pooling_job(space, name="corpus", namespace="search")
    same = pooling({**space, "model": {"revision": MINILM_SHA}}, name="svc", namespace="search")
    code, lines = run(tmp_path, capsys, job, same)
    assert code == 0, lines
    other = pooling({**space, "pooling": {"type": "CLS", "normalize": True}, "model": {"revision": MINILM_SHA}},
                    name="svc", namespace="search")
    code, lines = run(tmp_path, capsys, job, other)
    [line] = [x for x in lines if "claims embedding space" in x]
    assert line.startswith("PoolingService/svc: spec.embeddingSpace: PoolingJob/corpus claims embedding space 'minilm-v1' too")
    assert "pooling MEAN" in line and "pooling CLS" in line and code == 1


@pytest.mark.parametrize("revision", ["main", "v1.0", "c9745ed", "C9745ED1D9F207416BE6D2E6F8DE32D1F16199BF"])
def test_a_branch_tag_or_short_sha_warns_for_a_cache_as_for_a_service(revision: str) -> None:
    """A ModelCache pinned to a branch name passed silently while a service without a pin warned: both warn now."""
    from pooling_operator.vllm.validate import validate

    for doc in (model_cache({"model": {"revision": revision}}), pooling({"model": {"revision": revision}})):
        result = validate(doc)
        [w] = [p for p in result.warnings if p.path == "spec.model.revision"]
        assert "not a commit" in w.message and result.ok, (doc["kind"], w)
    assert not [p for p in validate(model_cache({"model": {"revision": MINILM_SHA}})).problems if p.path == "spec.model.revision"]
