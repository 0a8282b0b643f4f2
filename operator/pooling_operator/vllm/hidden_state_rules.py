"""vLLM's rules for hidden-state extraction (HiddenStateJob): layer ids, the EAGLE-3 hidden-state path, the
connector and its keys, and where files go; and the rules every Indexed Job of ours shares (PoolingJob too).
Pure: values in, Problems out."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from pooling_operator.api import HiddenStateJob
from pooling_operator.api import messages as M
from pooling_operator.api.problems import Problem
from pooling_operator.api.resources import Job
from pooling_operator.vllm.contract import CONNECTOR_EXTRA_KEYS, HIDDEN_STATE_CONNECTORS
from pooling_operator.vllm.models import MLA
from pooling_operator.vllm.workload import Workload


def hidden_state_problems(resource: HiddenStateJob, w: Workload) -> Iterator[Problem]:
    """Layers, model, connector and volumes of a HiddenStateJob (its batching rules are the common ones)."""
    spec = resource.spec
    hints = spec.model.hints
    layers = spec.layers
    yield from job_problems(resource)
    if len(set(layers)) != len(layers):
        dupes = sorted({x for x in layers if layers.count(x) > 1})
        yield Problem(
            "spec.layers",
            f"layer ids must be unique; {dupes} repeat (vLLM accepts duplicates, then crashes on the first request)",
        )
    elif layers != sorted(layers):
        yield Problem("spec.layers", f"{M.LAYERS_ASCENDING}: {sorted(layers)}")
    if hints and hints.num_hidden_layers is not None:
        for i, layer in enumerate(layers):
            if layer > hints.num_hidden_layers:
                yield Problem(
                    f"spec.layers[{i}]",
                    f"layer {layer} does not exist: valid ids are 0 (the embeddings) to {hints.num_hidden_layers} "
                    "(model.hints.numHiddenLayers, the last layer); vLLM would silently write another layer",
                )
    f = w.facts
    if f is not None and not f.generates:
        yield Problem(
            "spec.model.hints.architectures",
            f"hidden-state extraction runs a generate model with vLLM's EAGLE-3 interface; {f.architecture} is a "
            f"pooling model in vLLM {f.version} ({f.entry.where})",
        )
    if f is not None and f.architecture in MLA:
        yield Problem(
            "spec.model.hints.architectures",
            f"{f.architecture} uses multi-head latent attention, which the hidden-state connector does not support",
        )
    if spec.connector.name not in HIDDEN_STATE_CONNECTORS:
        yield Problem(
            "spec.connector.name",
            f"{spec.connector.name} is not a hidden-state connector; use one of {', '.join(HIDDEN_STATE_CONNECTORS)}",
        )
    extra = spec.connector.extra_config or {}
    for key, value in sorted(extra.items()):
        path = f"spec.connector.extraConfig.{key}"
        if key not in CONNECTOR_EXTRA_KEYS:
            yield Problem(path, f"unknown connector key; known keys: {', '.join(CONNECTOR_EXTRA_KEYS)}")
        elif key == "shared_storage_path":
            yield Problem(
                path,
                "set by the operator to a staging folder inside spec.output.volume so finished files move "
                "atomically; remove it",
            )
        elif key == "use_synchronization_lock" and value is not True:
            yield Problem(path, "must stay true: the driver waits on the connector's lock before reading a file")
        elif key == "allow_custom_save_path" and value is not False:
            yield Problem(path, "must stay false: the operator owns where files are written")
        elif key == "num_writer_threads" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            yield Problem(path, "must be a positive integer")
    if spec.output.storage_budget is not None and not (hints and hints.hidden_size):
        yield Problem("spec.output.storageBudget", M.BUDGET_NEEDS_HIDDEN_SIZE)


def job_problems(resource: Job) -> Iterator[Problem]:
    """What every Indexed Job of ours must satisfy: pod names that fit, parallelism within shards, and the
    dataset outside the output folder."""
    spec = resource.spec
    longest = 62 - len(str(spec.shards - 1))  # an Indexed Job's pods are <name>-<index>, a DNS label
    if len(resource.metadata.name) > longest:
        yield Problem(
            "metadata.name",
            f"{len(resource.metadata.name)} characters leave no room for the shard index: the Job's pods are named "
            f"<name>-<index>, a DNS label of at most 63 characters, and the API server refuses the Job; with "
            f"{spec.shards} shards use at most {longest} characters",
        )
    if spec.parallelism is not None and spec.parallelism > spec.shards:
        yield Problem("spec.parallelism", M.PARALLELISM_LE_SHARDS)
    out = posixpath.normpath(spec.output.volume.path)
    data = posixpath.normpath(spec.dataset.volume.path)
    if spec.output.volume.claim_name == spec.dataset.volume.claim_name and (data == out or data.startswith(out.rstrip("/") + "/")):
        yield Problem("spec.output.volume.path", f"the dataset {data} lies inside the output folder {out}; keep them apart")
