"""Rules about the model itself: whether vLLM can load its architecture without the repository's own code.

vLLM loads code from the model's repository (`--trust-remote-code`) when its config check or model class
asserts a config class that only the repository has (`GteNewModel` asserts `NewConfig`, 0.32
model_executor/models/config.py:487-492), and for an architecture it neither registers nor finds in transformers
(the config's `auto_map`). A name the registry lacks but transformers has is served by vLLM's Transformers
backend without remote code (0.32 model_executor/models/registry.py:1222-1282). Every line names
`spec.model.trustRemoteCode`. Pure; read by the chains of vllm/rules.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pooling_operator.api.base import ModelSpec
from pooling_operator.api.problems import Problem
from pooling_operator.vllm.registry import registry
from pooling_operator.vllm.workload import Workload

FIELD = "spec.model.trustRemoteCode"
_SET = f"set {FIELD}: true (allowed where the operator's settings allow a model's own code)"


def _config_class(name: str, suffixes: list[str]) -> str:
    """The config class an architecture's own family would have by transformers' naming (Qwen2ForCausalLM ->
    Qwen2Config): what vLLM's test marks are weighed against."""
    for suffix in sorted([*suffixes, "ForMaskedLM", "MTPModel"], key=len, reverse=True):
        if name.endswith(suffix) and name != suffix:
            return name[: -len(suffix)] + "Config"
    return name + "Config"


def _why(item: dict[str, Any]) -> str:
    return f"{item['why']} ({item['where']})"


def remote_code_problems(w: Workload) -> Iterator[Problem]:
    """Whether the architecture vLLM will load needs the repository's code, by the version's registry."""
    if w.model.trust_remote_code or not w.architectures:
        return
    arch = w.architectures[0]
    r = registry(w.version)
    entry = r.entry(arch)
    items = r.remote_code(entry.via or arch)
    # A check under a condition of the config (XLMRobertaModel's only for rotary position embeddings, i.e.
    # jina-embeddings-v3) is left to vLLM: the operator does not see the config, and warning on every XLM-R
    # model would bury the warnings that matter. vLLM names trust_remote_code when it stops.
    hard = [i for i in items if i["kind"] in ("config-check", "model-code") and not i.get("condition")]
    tests = [i for i in items if i["kind"] == "test-case"]
    suffixes = [s for s, _, _ in r.data["suffixes"]["defaults"]]
    config = _config_class(entry.via or arch, suffixes)
    if hard:
        yield Problem(FIELD, f"{arch} needs the model repository's own code in vLLM {r.version}: {_why(hard[0])}; {_SET}")
        return
    if tests and not r.config_in_transformers(config):
        yield Problem(
            FIELD,
            f"{arch} needs the model repository's own code in vLLM {r.version}: {_why(tests[0])}, and transformers "
            f"{r.transformers_version} has no {config}; {_SET}",
        )
        return
    if tests:
        yield Problem(
            FIELD,
            f"{arch} may need the model repository's own code: {_why(tests[0])} (transformers "
            f"{r.transformers_version} has {config}, so other checkpoints may not); if vLLM stops at start-up asking "
            f"to trust remote code, {_SET}",
            "warning",
        )
        return
    if entry.registered:
        return
    if r.in_transformers(arch):
        yield Problem(
            FIELD,
            f"vLLM {r.version} has no implementation of {arch}: it serves it through its Transformers backend "
            f"(transformers {r.transformers_version}, {r.data['transformers_backend']['where']}), without the "
            f"repository's code, so {FIELD} is not needed; check that the backend's "
            f"{'pooling' if entry.runner == 'pooling' else 'generation'} serves what you expect",
            "warning",
        )
        return
    if r.in_transformers_incompatible(arch):
        yield Problem(
            FIELD,
            f"vLLM {r.version} cannot serve {arch}: its registry has no implementation, and transformers "
            f"{r.transformers_version}'s class is not compatible with vLLM's Transformers backend "
            f"({r.data['transformers_backend']['where']}); {FIELD} would not help: choose a model vLLM supports",
        )
        return
    yield Problem(
        FIELD,
        f"{arch} is neither in vLLM {r.version}'s model registry nor a class of transformers "
        f"{r.transformers_version}: vLLM can load it only from the model repository's own code (its config's "
        f"auto_map); {_SET}, or correct the architecture name",
    )


def embedding_size(model: ModelSpec) -> tuple[int, str] | None:
    """The largest output size vLLM allows and where it comes from, as vLLM reads it: hfOverrides.embedding_size,
    else the last Dense layer's out_features (declared as hints.embeddingSize), else hiddenSize; None when
    nothing of it is known."""
    override = (model.hf_overrides or {}).get("embedding_size")
    if isinstance(override, int) and not isinstance(override, bool) and override > 0:
        return override, "model.hfOverrides.embedding_size"
    hints = model.hints
    if hints and hints.embedding_size:
        return hints.embedding_size, "model.hints.embeddingSize"
    if hints and hints.hidden_size:
        return hints.hidden_size, "model.hints.hiddenSize"
    return None


def matryoshka_bound(model: ModelSpec) -> Iterator[Problem]:
    bound = embedding_size(model)
    if bound is None or not model.matryoshka_dimensions:
        return
    size, source = bound
    for i, d in enumerate(model.matryoshka_dimensions):
        if d > size:
            hint = " (declare model.hints.embeddingSize if a projection layer outputs more)" if source.endswith("hiddenSize") else ""
            yield Problem(
                f"spec.model.matryoshkaDimensions[{i}]",
                f"{d} is larger than the model's embedding size {size} ({source}): vLLM answers every request for "
                f"it with 400 'only supports dimensions in range [1, {size}]'; use sizes of at most {size}{hint}",
            )
