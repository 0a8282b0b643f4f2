"""spec.vectors (issue 71): what a server returns and takes, checked against vLLM before any pod exists.

The accepted cases are vLLM's own examples and test plugins (0.33 sdist, cited per row), held out from the rules:
the rules were written from the registry and the contract, then run on these. The refused ones each name the
field and what would be accepted.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from pooling_operator.api import messages as M
from pooling_operator.reconcile.services import _embedding_space_problems
from pooling_operator.status.services import effective
from pooling_operator.vllm.args import vllm_command
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import validate
from pooling_operator.vllm.vectors import served_task, vectors_status
from pooling_operator.vllm.workload import workload
from tests.factories import ABC_SHA, pooling, pooling_job, scoring

CODE = Settings(allow_trust_remote_code=True)
BGE_M3 = {"name": "BAAI/bge-m3", "revision": ABC_SHA, "hfOverrides": {"architectures": ["BgeM3EmbeddingModel"]},
          "hints": {"architectures": ["XLMRobertaModel"], "numHiddenLayers": 24, "hiddenSize": 1024}}
CLIP = {"name": "openai/clip-vit-base-patch32", "revision": ABC_SHA, "hints": {"architectures": ["CLIPModel"]}}
SIGLIP = {"name": "google/siglip-base-patch16-224", "revision": ABC_SHA, "hints": {"architectures": ["SiglipModel"]}}
COLQWEN3 = {"name": "TomoroAI/tomoro-colqwen3-embed-4b", "revision": ABC_SHA, "trustRemoteCode": True,
            "hints": {"architectures": ["ColQwen3"]}}  # its config class is the repository's (vLLM's test case)
NER = {"name": "boltuix/NeuroBERT-NER", "revision": ABC_SHA,
       "hints": {"architectures": ["BertForTokenClassification"], "numLabels": 9}}
ONE_LABEL_HEAD = {"name": "org/minilm-sparse", "revision": ABC_SHA,
                  "hints": {"architectures": ["BertForTokenClassification"], "numLabels": 1}}


def errors(obj: dict[str, Any], settings: Settings | None = None) -> list[str]:
    return [str(p) for p in validate(obj, settings).problems if p.severity == "error"]


def warnings(obj: dict[str, Any], settings: Settings | None = None) -> list[str]:
    return [str(p) for p in validate(obj, settings).problems if p.severity == "warning"]


# --- accepted: vLLM's own examples -------------------------------------------------------------------------------

ACCEPTED = {
    # examples/pooling/embed/vision_embedding_offline.py:30 (CLIP) and :149 (SigLIP): images and texts, task embed
    "clip image and text": pooling({"model": CLIP, "vectors": {"outputs": ["dense"], "inputs": ["image", "text"]}}),
    "siglip image": pooling({"model": SIGLIP, "vectors": {"inputs": ["image"]}}),
    # examples/pooling/token_embed/multi_vector_retrieval_offline.py: BGE-M3, task token_embed
    "bge-m3 colbert vectors": pooling({"model": BGE_M3, "task": "token_embed", "vectors": {"outputs": ["multiVector"]}}),
    # tests/plugins/bge_m3_sparse_plugin: the sparse weights (token_classify, roberta.py's sparse_linear)
    "bge-m3 sparse weights": pooling({"model": BGE_M3, "task": "token_classify", "vectors": {"outputs": ["sparse"]}}),
    # examples/pooling/score/colqwen3_rerank_online.py: late interaction over images
    "colqwen3 rerank images": scoring({"mode": "lateInteraction", "model": COLQWEN3, "vectors": {"inputs": ["image", "text"]}}),
    # e5's documented instructions ("query: ", "passage: ")
    "e5 instructions": pooling({"vectors": {"queryInstruction": "query: ", "documentInstruction": "passage: "}}),
    "a one-label token head is sparse": pooling({"model": ONE_LABEL_HEAD, "task": "token_classify",
                                                 "vectors": {"outputs": ["sparse"]}}),
    "a corpus job with its document side": pooling_job({"vectors": {"documentInstruction": "passage: "}}),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_vllms_own_examples_are_accepted(name: str) -> None:
    assert errors(ACCEPTED[name], CODE) == []


def test_dense_and_sparse_from_one_bge_m3_server_through_its_plugin() -> None:
    """tests/plugins/bge_m3_sparse_plugin's entry point: the server runs the combined task (no --pooler-config task:
    vLLM's default for BgeM3EmbeddingModel) and loads the plugin."""
    obj = pooling({"model": BGE_M3, "vectors": {"outputs": ["sparse", "dense"], "ioProcessorPlugin": "bge_m3_sparse_plugin"}})
    result = validate(obj, CODE)
    assert [p for p in result.problems if p.severity == "error"] == []
    w = workload(result.resource)  # type: ignore[arg-type]
    argv = vllm_command(result.resource, contract("0.33"), w=w)  # type: ignore[arg-type]
    assert argv[argv.index("--pooler-config") + 1] == "{}"
    assert argv[argv.index("--io-processor-plugin") + 1] == "bge_m3_sparse_plugin"
    assert served_task(w) == "embed&token_classify"
    assert effective(result.resource, contract("0.33"), argv, w)["task"] == "embed&token_classify"  # type: ignore[arg-type]
    assert vectors_status(w) == {"outputs": ["dense", "sparse"], "inputs": ["text"], "ioProcessorPlugin": "bge_m3_sparse_plugin"}


# --- refused: each names the field and what would be accepted ---------------------------------------------------

REFUSED = [
    ("sparse from an embed server", pooling({"vectors": {"outputs": ["sparse"]}}),
     "spec.vectors.outputs: sparse (one weight a token) is the answer of task token_classify; this server's task is "
     "embed, which answers dense: set task token_classify, or declare [dense]"),
    ("dense and sparse with no plugin", pooling({"model": BGE_M3, "vectors": {"outputs": ["dense", "sparse"]}}),
     "spec.vectors.ioProcessorPlugin: dense and sparse from one server is vLLM's task embed&token_classify, which "
     "answers only through an IO-processor plugin (entrypoints/pooling/pooling/io_processor.py:24-33"),
    ("dense and sparse from MiniLM", pooling({"vectors": {"outputs": ["dense", "sparse"], "ioProcessorPlugin": "p"}}),
     "spec.vectors.outputs: BertModel in vLLM 0.33 serves one task at a time (its default is embed;"),
    ("dense and multiVector", pooling({"model": BGE_M3, "vectors": {"outputs": ["dense", "multiVector"]}}),
     "spec.vectors.outputs: no vLLM task answers dense and multiVector together"),
    ("image into MiniLM", pooling({"vectors": {"inputs": ["image"]}}),
     "spec.vectors.inputs: BertModel takes text only in vLLM 0.33: its class bert.BertEmbeddingModel does not "
     "implement SupportsMultiModal (model_executor/models/registry.py:900); image needs a multimodal architecture, "
     "e.g. CLIPModel,"),
    ("sparse from a NER head", pooling({"model": NER, "task": "token_classify", "vectors": {"outputs": ["sparse"]}}),
     "spec.vectors.outputs: sparse is one weight a token; a token_classify head of 9 labels answers 9 class scores"),
    ("vectors of a classifier", pooling({"task": "classify", "vectors": {"outputs": ["dense"]}}),
     "spec.vectors.outputs: task classify answers class probabilities, not vectors"),
    ("outputs of a ScoringService", scoring({"vectors": {"outputs": ["dense"]}}),
     f"spec.vectors: {M.SCORING_VECTORS_INPUTS_ONLY}"),
]


@pytest.mark.parametrize(("obj", "said"), [(o, s) for _, o, s in REFUSED], ids=[n for n, _, _ in REFUSED])
def test_what_vllm_would_refuse_is_refused_naming_the_field(obj: dict[str, Any], said: str) -> None:
    found = errors(obj, CODE)
    assert any(e.startswith(said) for e in found), found


def test_the_plugin_is_code_and_needs_the_operators_leave() -> None:
    obj = pooling({"model": BGE_M3, "vectors": {"outputs": ["dense", "sparse"], "ioProcessorPlugin": "bge_m3_sparse_plugin"}})
    [refusal] = errors(obj)
    assert refusal.startswith("spec.vectors.ioProcessorPlugin: 'bge_m3_sparse_plugin' is Python code installed in the "
                              "image, loaded at start-up (plugins/io_processors/__init__.py:59")
    assert "allowTrustRemoteCode" in refusal


def test_a_plugin_for_one_output_is_a_warning_and_a_missing_label_count_says_what_could_not_be_checked() -> None:
    plugin = pooling({"vectors": {"outputs": ["dense"], "ioProcessorPlugin": "p"}})
    assert errors(plugin, CODE) == [] and any("one output needs no plugin" in w for w in warnings(plugin, CODE))
    unknown = pooling({"model": {**ONE_LABEL_HEAD, "hints": {"architectures": ["BertForTokenClassification"]}},
                       "task": "token_classify", "vectors": {"outputs": ["sparse"]}})
    assert errors(unknown) == []
    assert any(w.startswith("spec.model.hints.numLabels: not given") for w in warnings(unknown))


def test_the_registry_knows_which_pooling_classes_take_images_in_both_versions() -> None:
    from pooling_operator.vllm.registry import registry

    for version in ("0.32", "0.33"):
        entries = {n: registry(version).entry(n) for n in ("CLIPModel", "SiglipModel", "ColPaliForRetrieval", "BertModel",
                                                           "BgeM3EmbeddingModel")}
        assert {n: e.mm for n, e in entries.items()} == {"CLIPModel": True, "SiglipModel": True, "ColPaliForRetrieval": True,
                                                         "BertModel": False, "BgeM3EmbeddingModel": False}
        assert entries["BgeM3EmbeddingModel"].task == "embed&token_classify"


# --- the query/document contract: status, the job's driver, the fingerprint -------------------------------------

E5 = {"queryInstruction": "query: ", "documentInstruction": "passage: "}


def test_status_publishes_the_contract_and_a_service_without_vectors_its_tasks_output() -> None:
    w = workload(validate(pooling({"vectors": E5})).resource)  # type: ignore[arg-type]
    assert vectors_status(w) == {"outputs": ["dense"], "inputs": ["text"], **E5}
    assert vectors_status(workload(validate(pooling()).resource)) == {"outputs": ["dense"], "inputs": ["text"]}  # type: ignore[arg-type]
    assert vectors_status(workload(validate(pooling({"task": "classify"})).resource)) is None  # type: ignore[arg-type]
    colqwen = validate(ACCEPTED["colqwen3 rerank images"], CODE).resource
    assert vectors_status(workload(colqwen)) == {"inputs": ["image", "text"]}  # type: ignore[arg-type]
    assert vectors_status(workload(validate(scoring()).resource)) is None  # type: ignore[arg-type]


def test_instructions_join_the_fingerprint_only_when_set() -> None:
    def fingerprint(spec: dict[str, Any]) -> str:
        return embedding_fingerprint(workload(validate(pooling(spec)).resource))  # type: ignore[arg-type]

    plain = fingerprint({})
    assert fingerprint({"vectors": {"inputs": ["text"]}}) == plain  # a space without instructions keeps its fingerprint
    assert plain == "sha256:" + hashlib.sha256(
        b'{"dimensions":null,"model":"sentence-transformers/all-MiniLM-L6-v2","normalize":null,"revision":"'
        + ABC_SHA.encode() + b'","type":null}').hexdigest()
    with_e5 = fingerprint({"vectors": E5})
    assert len({plain, with_e5, fingerprint({"vectors": {**E5, "queryInstruction": "search_query: "}})}) == 3
    job = validate(pooling_job({"pooling": None, "vectors": E5}, name="demo")).resource
    service = validate(pooling({"vectors": E5, "model": {"revision": "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"}})).resource
    assert embedding_fingerprint(workload(job)) == embedding_fingerprint(workload(service))  # type: ignore[arg-type]


def test_a_changed_instruction_under_the_same_label_is_a_changed_space() -> None:
    before = validate(pooling({"embeddingSpace": "v1", "vectors": E5})).resource
    after = validate(pooling({"embeddingSpace": "v1", "vectors": {**E5, "documentInstruction": "doc: "}})).resource
    stored = {"embeddingSpace": {"label": "v1", "fingerprint": embedding_fingerprint(workload(before))}}  # type: ignore[arg-type]
    [problem] = _embedding_space_problems(after, stored)  # type: ignore[arg-type]
    assert problem.path == "spec.embeddingSpace" and problem.message == M.EMBEDDING_SPACE


def test_the_job_driver_is_told_the_document_side_and_run_json_keeps_the_contract() -> None:
    from pooling_operator.builders import plan
    from pooling_operator.builders.common import BuildContext

    result = validate(pooling_job({"vectors": E5}))
    p = plan(result.resource, result.contract, BuildContext(), result.workload)  # type: ignore[arg-type]
    [job] = [o for o in p.objects if o["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    driver = next(c for c in [*pod["containers"], *pod.get("initContainers", [])] if "--run-info" in (c.get("args") or []))
    args = driver["args"]
    assert args[args.index("--document-instruction") + 1] == "passage: "
    info = json.loads(args[args.index("--run-info") + 1])
    assert info["vectors"] == {"outputs": ["dense"], "inputs": ["text"], **E5}
