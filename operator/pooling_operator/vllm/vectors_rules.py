"""spec.vectors against vLLM: what a server can return and take, for this version, task, architecture and plugin.

Every refusal names the field, the flag or table entry that decides and what would be accepted, so a spec that
would start a server which then refuses every request never gets a pod:

- each output is one task's answer (api/vectors.OUTPUT_TASK): dense = embed, sparse = token_classify with a
  one-weight head, multiVector = token_embed; classify answers class probabilities, no vectors;
- two outputs from one server exist only where the architecture's default task pools them together
  (BGE-M3's ``embed&token_classify``, the registry's ``task``), and vLLM answers that task only through an
  IO-processor plugin (entrypoints/pooling/pooling/io_processor.py:24-33): the spec names it
  (vectors.ioProcessorPlugin), which is code and so gated as trustRemoteCode is;
- image inputs need a class that implements SupportsMultiModal (the registry's ``mm``, registry.py:900).

Pure: the workload view and the version's registry in, problems out.
"""

from __future__ import annotations

from collections.abc import Iterator

from pooling_operator.api import messages as M
from pooling_operator.api.problems import Problem
from pooling_operator.api.vectors import OUTPUT_TASK, TASK_OUTPUT, Output
from pooling_operator.vllm.models import BGE_M3
from pooling_operator.vllm.registry import registry
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.vectors import COMBINED, declared_inputs, declared_outputs
from pooling_operator.vllm.workload import Workload

BASE = "spec.vectors"
IO_PROCESSOR_ONLY = "entrypoints/pooling/pooling/io_processor.py:24-33"  # the combined task without a plugin
PLUGIN_LOADER = "plugins/io_processors/__init__.py:59"  # --io-processor-plugin loads the entry point
MULTIMODAL = "model_executor/models/registry.py:900"  # _ModelInfo.supports_multimodal
# Token heads whose one weight a token is a lexical weight (sparse): BGE-M3's sparse_linear, ReLU over it.
SPARSE_HEADS = frozenset({BGE_M3})
WHAT = {"dense": "one vector an input", "sparse": "one weight a token", "multiVector": "one vector a token"}


def vectors_problems(w: Workload, settings: Settings) -> Iterator[Problem]:
    v = w.vectors
    if v is None:
        return
    if w.mode is not None:  # the CEL rule's twin (a ScoringService, a scoring PoolingJob)
        if v.outputs or v.query_instruction or v.document_instruction or v.io_processor_plugin:
            yield Problem(BASE, M.SCORING_VECTORS_INPUTS_ONLY)
    else:
        yield from _output_problems(w)
    if v.io_processor_plugin is not None and not settings.allow_trust_remote_code:
        yield Problem(f"{BASE}.ioProcessorPlugin", f"{v.io_processor_plugin!r} is Python code installed in the image, "
                      f"loaded at start-up ({PLUGIN_LOADER}, as --io-processor-plugin): allowed only where the "
                      "operator's settings allow trustRemoteCode (allowTrustRemoteCode)")  # fmt: skip
    yield from _input_problems(w)


def _output_problems(w: Workload) -> Iterator[Problem]:
    v = w.vectors
    assert v is not None
    task = w.task or ""
    if v.outputs and task == "classify":
        yield Problem(f"{BASE}.outputs", "task classify answers class probabilities, not vectors: outputs apply to "
                      "the tasks embed (dense), token_embed (multiVector) and token_classify (sparse)")  # fmt: skip
        return
    outputs = declared_outputs(w)
    f = w.facts
    if len(outputs) == 1:
        (output,) = outputs
        if OUTPUT_TASK[output] != task:
            mine = TASK_OUTPUT.get(task)
            yield Problem(f"{BASE}.outputs", f"{output} ({WHAT[output]}) is the answer of task {OUTPUT_TASK[output]}; this "
                          f"server's task is {task}" + (f", which answers {mine}" if mine else "") +
                          f": set task {OUTPUT_TASK[output]}" + (f", or declare [{mine}]" if mine else ""))  # fmt: skip
        elif v.io_processor_plugin is not None:
            yield Problem(f"{BASE}.ioProcessorPlugin", f"one output needs no plugin: the server's task is {task} "
                          f"(--pooler-config task); a plugin answers the combined task {COMBINED} of two outputs",
                          "warning")  # fmt: skip
    elif len(outputs) > 1:
        yield from _combined_problems(w, outputs)
    if "sparse" in outputs:
        yield from _sparse_problems(w)
    if f is None and len(outputs) > 1:
        yield Problem("spec.model.hints.architectures", "not given, so whether the architecture pools "
                      f"{' and '.join(outputs)} together could not be checked", "warning")  # fmt: skip


def _combined_problems(w: Workload, outputs: tuple[Output, ...]) -> Iterator[Problem]:
    v = w.vectors
    assert v is not None
    f = w.facts
    listed = " and ".join(outputs)
    if set(outputs) != {"dense", "sparse"}:
        yield Problem(f"{BASE}.outputs", f"no vLLM task answers {listed} together: the one combined task is {COMBINED} "
                      "(dense and sparse, BGE-M3's); run one server per output (task embed for dense, token_embed for "
                      "multiVector, token_classify for sparse)")  # fmt: skip
        return
    if f is not None and f.entry.task != COMBINED:
        yield Problem(f"{BASE}.outputs", f"{f.architecture} in vLLM {f.version} serves one task at a time (its default "
                      f"is {f.entry.task or 'not a pooling task'}; {f.entry.pooler or f.entry.where}): only "
                      f"{BGE_M3} pools {COMBINED}; run one server per output")  # fmt: skip
    if v.io_processor_plugin is None:
        yield Problem(f"{BASE}.ioProcessorPlugin", f"{listed} from one server is vLLM's task {COMBINED}, which answers "
                      f"only through an IO-processor plugin ({IO_PROCESSOR_ONLY}: 'select a concrete task with "
                      "--pooler-config.task' otherwise): name the plugin the image carries, or declare one output "
                      "and run a server per output")  # fmt: skip
    if w.task not in {OUTPUT_TASK[o] for o in outputs}:
        yield Problem("spec.task", f"with outputs {listed} the task is {OUTPUT_TASK['dense']} or "
                      f"{OUTPUT_TASK['sparse']} (the server runs {COMBINED}); got {w.task}")  # fmt: skip


def _sparse_problems(w: Workload) -> Iterator[Problem]:
    """sparse is one weight a token: a token_classify head with one label (BGE-M3's sparse_linear)."""
    f = w.facts
    if f is not None and f.architecture in SPARSE_HEADS:
        return
    hints = w.model.hints
    labels = hints.num_labels if hints is not None else None
    if labels is None:
        yield Problem("spec.model.hints.numLabels", "not given, so whether the token_classify head answers one weight "
                      "a token (sparse) could not be checked: give the head's label count (1 for a sparse head)",
                      "warning")  # fmt: skip
    elif labels != 1:
        yield Problem(f"{BASE}.outputs", f"sparse is one weight a token; a token_classify head of {labels} labels "
                      f"answers {labels} class scores a token: declare no output (per-token classes), or serve a "
                      f"one-label head ({BGE_M3}'s sparse_linear, or model.hints.numLabels 1)")  # fmt: skip


def _input_problems(w: Workload) -> Iterator[Problem]:
    if "image" not in declared_inputs(w):
        return
    f = w.facts
    if f is None:
        yield Problem("spec.model.hints.architectures", "not given, so whether vLLM serves this model with image "
                      "inputs could not be checked", "warning")  # fmt: skip
        return
    if f.entry.mm is False:
        yield Problem(f"{BASE}.inputs", f"{f.architecture} takes text only in vLLM {f.version}: its class "
                      f"{f.entry.cls or f.architecture} does not implement SupportsMultiModal ({MULTIMODAL}); image "
                      f"needs a multimodal architecture, e.g. {', '.join(multimodal_examples(f.version, w))}")  # fmt: skip


def multimodal_examples(version: str, w: Workload, most: int = 4) -> list[str]:
    """Registered multimodal pooling architectures of `version` whose pooler serves the workload's task."""
    task = w.task or ""
    reg = registry(version)
    names = [n for n, raw in sorted(reg.data["architectures"].items())
             if raw.get("mm") and raw.get("runner") == "pooling" and (not task or task in (raw.get("tasks") or ()))]  # fmt: skip
    return names[:most] or ["CLIPModel", "SiglipModel"]
