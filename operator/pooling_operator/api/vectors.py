"""spec.vectors: what a pooling server returns and takes, and how a query differs from a document (PoolingService,
PoolingJob; a ScoringService declares its inputs only: it returns scores).

The field names are fixed by the team's API list. What each output needs of vLLM (the task, the head, a plugin) is
judged per version in vllm/vectors_rules.py; this module holds the words and the shapes only.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints

from pooling_operator.api.schema import Spec

Output = Literal["dense", "sparse", "multiVector"]
Input = Literal["text", "image"]
OUTPUTS: tuple[Output, ...] = ("dense", "sparse", "multiVector")

# The task whose answer is each output (vLLM's pooling tasks, contract §3): one vector an input, one weight a token,
# one vector a token. classify has none: it answers class probabilities.
OUTPUT_TASK: dict[Output, str] = {"dense": "embed", "sparse": "token_classify", "multiVector": "token_embed"}
TASK_OUTPUT: dict[str, Output] = {task: output for output, task in OUTPUT_TASK.items()}

Instruction = Annotated[str, StringConstraints(min_length=1, max_length=4096)]
# A Python entry-point name, as vLLM looks the plugin up in the group vllm.io_processor_plugins.
PluginName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")]

_UNIQUE: dict[str, Any] = {"x-kubernetes-list-type": "set"}


class VectorsStatus(Spec):
    """What the server returns and takes, as declared and checked (spec.vectors, else the task's default):
    what a client sends and reads."""

    model_config = ConfigDict(extra="ignore")

    outputs: list[str] | None = Field(default=None, description="dense, sparse and/or multiVector.")
    inputs: list[str] | None = Field(default=None, description="text and/or image.")
    query_instruction: str | None = Field(default=None, description="What a client prepends to every query.")
    document_instruction: str | None = Field(default=None, description="What is prepended to every document.")
    io_processor_plugin: str | None = Field(default=None, description="The IO-processor plugin answering the outputs.")


class VectorsSpec(Spec):
    """What the server returns and takes, and how a query differs from a document: checked against the vLLM version,
    the task, the architecture and the plugin named, before any pod exists; published in status.vectors."""

    outputs: list[Output] | None = Field(
        default=None,
        min_length=1,
        max_length=3,
        json_schema_extra=_UNIQUE,
        description="What the server returns: dense (one vector an input: task embed), sparse (one weight a token: "
        "task token_classify with a one-label head, as BGE-M3's sparse_linear) or multiVector (one vector a token: "
        "task token_embed, as ColBERT's). Default: the task's one output (none for classify). More than one from "
        "one server only where the architecture pools them together (BGE-M3: dense and sparse) and "
        "ioProcessorPlugin names the plugin that answers them.",
    )
    inputs: list[Input] | None = Field(
        default=None,
        min_length=1,
        max_length=2,
        json_schema_extra=_UNIQUE,
        description="What the server takes: text, image. Default [text]. image needs an architecture vLLM serves "
        "with image inputs (a multimodal class in the version's registry: CLIP, SigLIP, ColPali, ...).",
    )
    query_instruction: Instruction | None = Field(
        default=None,
        description="Prepended to every query (e.g. 'query: ' for e5, 'Instruct: ...\\nQuery: ' for "
        "Qwen3-Embedding). Published in status.vectors; the operator renders no server-side prefix, so "
        "clients prepend it. Part of the embedding space's fingerprint.",
    )
    document_instruction: Instruction | None = Field(
        default=None,
        description="Prepended to every document (e.g. 'passage: ' for e5). A PoolingJob prepends it to each "
        "text input before vLLM sees it; a service publishes it in status.vectors. Part of the embedding "
        "space's fingerprint, so a job and a service agree only when their instructions do.",
    )
    io_processor_plugin: PluginName | None = Field(
        default=None,
        description="The IO-processor plugin the image carries (an entry point of the group "
        "vllm.io_processor_plugins), rendered as --io-processor-plugin. Needed for more than one output from one "
        "server: vLLM answers a combined task (embed&token_classify) only through one. It is code: allowed "
        "where the operator's settings allow trustRemoteCode.",
    )
