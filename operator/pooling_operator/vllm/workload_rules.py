"""The rules every vLLM server obeys, whatever its kind: model source, revision and trust, hf overrides, env and its
confinement, batching (the "model and engine" rule of every chain in vllm/rules.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from pooling_operator.api.problems import Problem
from pooling_operator.vllm.confinement import CODE_ADVICE, CODE_ENV, OWNED_ENV, outside, paths_message, roots
from pooling_operator.vllm.flag_classes import code_keys
from pooling_operator.vllm.model_rules import matryoshka_bound
from pooling_operator.vllm.settings import SECRET_ENV, Settings
from pooling_operator.vllm.workload import Workload


def common_problems(w: Workload, settings: Settings) -> Iterator[Problem]:
    model, engine = w.model, w.engine
    if model.trust_remote_code and not settings.allow_trust_remote_code:
        yield Problem(
            "spec.model.trustRemoteCode",
            "running a model repository's own code is not allowed by this operator's settings "
            "(--allow-trust-remote-code); use a model vLLM supports natively or ask the platform team",
        )
    if model.matryoshka_dimensions and len(set(model.matryoshka_dimensions)) != len(model.matryoshka_dimensions):
        yield Problem("spec.model.matryoshkaDimensions", "sizes must be distinct")
    for key, field in (("matryoshka_dimensions", "spec.model.matryoshkaDimensions"), ("is_matryoshka", "spec.model.matryoshkaDimensions")):
        if model.hf_overrides and key in model.hf_overrides:
            yield Problem(
                f"spec.model.hfOverrides.{key}",
                f"{key} is owned by the typed field {field}; declare the Matryoshka sizes there",
            )
    yield from matryoshka_bound(model)
    if model.hf_overrides and not settings.allow_trust_remote_code:
        for key, why in code_keys("--hf-overrides", "--hf-overrides", json.dumps(model.hf_overrides)):
            yield Problem(f"spec.model.hfOverrides.{key}", f"{key} {why}: {CODE_ADVICE}")
    archs = (model.hf_overrides or {}).get("architectures")
    if archs is not None and not (isinstance(archs, list) and archs and all(isinstance(a, str) and a for a in archs)):
        yield Problem("spec.model.hfOverrides.architectures", "must be a non-empty list of architecture names")
    hints = model.hints
    if hints and hints.max_model_len and engine.max_model_len and engine.max_model_len > hints.max_model_len:
        yield Problem(
            "spec.engine.maxModelLen",
            f"{engine.max_model_len} is longer than the model allows (model.hints.maxModelLen "
            f"{hints.max_model_len}); vLLM refuses it at startup; use at most {hints.max_model_len}",
        )
    if hints and hints.num_attention_heads and engine.tensor_parallel_size:
        if hints.num_attention_heads % engine.tensor_parallel_size:
            divisors = [d for d in range(1, hints.num_attention_heads + 1) if hints.num_attention_heads % d == 0 and d <= 64]
            yield Problem(
                "spec.engine.tensorParallelSize",
                f"{engine.tensor_parallel_size} does not divide the model's {hints.num_attention_heads} attention "
                f"heads; use one of {divisors}",
            )
    if engine.max_num_batched_tokens and engine.max_num_seqs and engine.max_num_batched_tokens < engine.max_num_seqs:
        yield Problem(
            "spec.engine.maxNumBatchedTokens",
            f"{engine.max_num_batched_tokens} is below maxNumSeqs {engine.max_num_seqs}; vLLM requires "
            "maxNumBatchedTokens >= maxNumSeqs",
        )
    for i, env in enumerate(engine.env):
        if env.name in SECRET_ENV and env.value is not None:
            yield Problem(
                f"spec.engine.env[{i}].value",
                f"{env.name} is a secret: take it from a Secret (valueFrom.secretKeyRef, or the typed "
                "apiKeySecretRef / tokenSecretRef fields), never a literal value",
            )
        if env.name == "VLLM_PORT" and env.value is not None and not env.value.isdigit():
            yield Problem(
                f"spec.engine.env[{i}].value",
                f"VLLM_PORT must be a port number; vLLM refuses {env.value!r} at startup ('appears to be a URI')",
            )
        if env.value is not None and env.value_from is not None:
            yield Problem(f"spec.engine.env[{i}]", "set value or valueFrom, not both")
        yield from _env_confinement(i, env.name, env.value, w, settings)


def _env_confinement(i: int, name: str, value: str | None, w: Workload, settings: Settings) -> Iterator[Problem]:
    if name in OWNED_ENV:
        yield Problem(f"spec.engine.env[{i}].name", f"{name} is not set through env: {OWNED_ENV[name]}")
    elif name in CODE_ENV and not settings.allow_trust_remote_code:
        yield Problem(f"spec.engine.env[{i}].name", f"{name} {CODE_ENV[name]}: {CODE_ADVICE}")
    if value is not None:
        allowed = roots(w)
        found = outside(value, allowed)
        if found is not None:
            yield Problem(f"spec.engine.env[{i}].value", f"{name}: {paths_message(found, allowed)}")
