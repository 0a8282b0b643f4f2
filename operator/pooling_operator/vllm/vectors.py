"""What a pooling server returns and takes, as its spec declares it (spec.vectors, else the task's default): the
one view the argv, the status and the rules read. Pure.
"""

from __future__ import annotations

from typing import Any

from pooling_operator.api.vectors import OUTPUTS, TASK_OUTPUT, Output
from pooling_operator.vllm.workload import Workload

COMBINED = "embed&token_classify"  # the one task that answers two outputs (BGE-M3: dense and sparse)


def declared_outputs(w: Workload) -> tuple[Output, ...]:
    """What the server returns, in OUTPUTS' order: spec.vectors.outputs, else the task's one output (none for
    classify, none for a scoring mode)."""
    if w.vectors is not None and w.vectors.outputs:
        return tuple(o for o in OUTPUTS if o in w.vectors.outputs)
    output = TASK_OUTPUT.get(w.task or "") if w.mode is None else None
    return (output,) if output is not None else ()


def declared_inputs(w: Workload) -> tuple[str, ...]:
    return tuple(w.vectors.inputs) if w.vectors is not None and w.vectors.inputs else ("text",)


def served_task(w: Workload) -> str | None:
    """The task the server exposes: the combined one where two outputs are declared, else the spec's."""
    return COMBINED if len(declared_outputs(w)) > 1 else w.task


def vectors_status(w: Workload) -> dict[str, Any] | None:
    """status.vectors: the declared contract, for clients (None for a server with no vectors: classify, scoring
    without declared inputs)."""
    outputs, inputs = declared_outputs(w), declared_inputs(w)
    v = w.vectors
    if not outputs and v is None:
        return None
    out: dict[str, Any] = {"outputs": list(outputs)} if outputs else {}  # scoring: inputs only
    out["inputs"] = list(inputs)
    if v is not None:
        if v.query_instruction is not None:
            out["queryInstruction"] = v.query_instruction
        if v.document_instruction is not None:
            out["documentInstruction"] = v.document_instruction
        if v.io_processor_plugin is not None:
            out["ioProcessorPlugin"] = v.io_processor_plugin
    return out
