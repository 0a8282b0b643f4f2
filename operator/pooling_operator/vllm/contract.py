"""vLLM's contract per version: flags, routes, limits (reference: shared/reference/vllm-contract.md).

The flag tables come from real `vllm serve --help=all` output (0.32) and the 0.33.0 distribution; see
flags/README.md for how they were produced.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

SUPPORTED_VERSIONS = ("0.32", "0.33")

ALWAYS_ROUTES = ("/health", "/ping", "/metrics", "/v1/models", "/version", "/load", "/tokenize", "/detokenize", "/invocations")
# The API-key middleware guards only these prefixes (serve/middleware/authenticate.py:11-62).
PROTECTED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
SCORE_ROUTES = ("/score", "/rerank", "/v2/rerank")
# Served beside SCORE_ROUTES, each request logging a deprecation warning (entrypoints/pooling/scoring/
# api_router.py:52-66, 84-99): never published in status.routes.
DEPRECATED_SCORE_ROUTES = ("/v1/score", "/v1/rerank")
HIDDEN_STATE_CONNECTORS = ("ExampleHiddenStatesConnector",)
# --load-format: the formats vLLM's loader registry knows, the same in 0.32 and 0.33
# (model_executor/model_loader/__init__.py:33-65; a plugin may register more, :101-112; any other value fails at
# start-up with "Load format `x` is not supported", :126-127). vLLM lowercases the value (config/load.py:136-138).
LOAD_FORMATS = (
    "auto", "hf", "dummy", "fastsafetensors", "instanttensor", "ipc_cache", "mistral", "modelexpress", "npcache",
    "pt", "runai_streamer", "runai_streamer_sharded", "safetensors", "sharded_state", "tensorizer",
)
# Formats whose loader imports a package vLLM does not require, and the package (a PlaceholderModule until used):
# weight_utils.py:51-53 (runai_model_streamer), :57-59 (fastsafetensors), :1360-1363 (instanttensor);
# tensorizer.py:35-45; modelexpress_loader.py:26-29.
LOAD_FORMAT_PACKAGES = {
    "fastsafetensors": "fastsafetensors",
    "instanttensor": "instanttensor",
    "modelexpress": "modelexpress",
    "runai_streamer": "runai-model-streamer",
    "runai_streamer_sharded": "runai-model-streamer",
    "tensorizer": "tensorizer",
}
# Formats that need something beside the weights: a daemon holding them (weight_cache/ipc_loader.py:62,
# weight_cache/daemon.py:3-10, `vllm preload`), random weights (dummy_loader.py), a numpy cache written next to
# the weights (npcache: weight_utils.py), pre-sharded checkpoints (sharded_state_loader.py).
LOAD_FORMAT_NOTES = {
    "dummy": "initialises the weights with random values (for profiling): every answer is meaningless",
    "ipc_cache": "maps weights from a weight-cache daemon on the node (started with `vllm preload`); nothing the "
                 "operator renders starts one",
    "npcache": "writes a numpy cache beside the weights at first load, which fails on a read-only model volume "
               "or model cache",
    "sharded_state": "needs a checkpoint saved pre-sharded for this tensorParallelSize",
    "runai_streamer_sharded": "needs a checkpoint saved pre-sharded for this tensorParallelSize",
}
CONNECTOR_EXTRA_KEYS = ("shared_storage_path", "num_writer_threads", "allow_custom_save_path", "use_synchronization_lock")


@dataclass(frozen=True)
class Flag:
    name: str
    takes_value: bool
    choices: tuple[str, ...] | None = None
    negation_of: str | None = None


@dataclass(frozen=True)
class Contract:
    """What one vLLM minor version accepts and exposes."""

    version: str
    flags: dict[str, Flag] = field(repr=False)
    aliases: dict[str, str] = field(repr=False)
    json_flags: frozenset[str] = field(repr=False)
    max_logprobs_default: int = 20
    max_logprob_token_ids: int = 128
    # 0.33 serves token embeddings on /v1/embeddings when the task is token_embed.
    embeddings_route_for_token_embed: bool = False
    # Whether a HiddenStateJob's vLLM gets --no-enable-chunked-prefill. 0.33: its docs say chunked prefill must
    # be off (docs/features/speculative_decoding/extract_hidden_states.md; no code checks it). 0.32: not needed,
    # measured: with chunked prefill on in 32-token chunks, 21 of 48 prompts chunked, vLLM's own connector wrote
    # the same hidden states (cosine 1.0000000, max abs difference 1.8e-4 on activations up to 2.7e4;
    # bench/hidden_states_chunked_prefill.py, SmolLM2 float32), and nothing in vllm/v1/spec_decode/
    # extract_hidden_states.py or config/speculative.py asks for it (hybrid models even need chunked prefill).
    hidden_states_without_chunked_prefill: bool = True

    def canonical(self, option: str) -> str | None:
        """The flag an option string means: aliases resolved, `_` read as `-`, dotted JSON keys folded to their
        flag, `=value` dropped. None when this version has no such flag."""
        name = option.split("=", 1)[0]
        if name in self.aliases:
            return self.aliases[name]
        if not name.startswith("--") and name[:2] in self.aliases and len(name) > 2:
            return self.aliases[name[:2]]  # an attached value, as in -O3
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
            if name in self.flags:
                return name
            base = name.split(".", 1)[0]
            if "." in name and base in self.json_flags:
                return base
        return None

    def owner_of(self, flag: str) -> str:
        """The positive flag of a --no-x / --disable-x form (or the flag itself)."""
        info = self.flags.get(flag)
        return info.negation_of if info and info.negation_of else flag

    def routes(self, task: str | None, *, score: bool, generate: bool = False) -> list[str]:
        """Routes that answer (not 501) for a server of this task (contract §4)."""
        if generate:
            return ["/generative_scoring", "/v1/completions", "/v1/chat/completions"]
        out: list[str] = []
        if task == "embed":
            out += ["/v1/embeddings", "/v2/embed"]
        if task == "token_embed" and self.embeddings_route_for_token_embed:
            out += ["/v1/embeddings"]
        if task == "classify":
            out += ["/classify"]
        out += ["/pooling"]
        if score:
            out += list(SCORE_ROUTES)
        return out

    @staticmethod
    def unprotected(routes: list[str]) -> list[str]:
        """Routes the API key leaves open, including the always-mounted ones."""
        every = list(dict.fromkeys([*routes, *ALWAYS_ROUTES]))
        return [r for r in every if not r.startswith(PROTECTED_PREFIXES)]


def _load_flags(version: str) -> dict[str, Any]:
    text = resources.files("pooling_operator.vllm").joinpath(f"flags/vllm-{version}.json").read_text()
    return json.loads(text)


@cache
def contract(version: str) -> Contract:
    """The contract of a supported version (raises KeyError for others; see resolve_version)."""
    if version not in SUPPORTED_VERSIONS:
        raise KeyError(version)
    data = _load_flags(version)
    flags = {
        name: Flag(
            name=name,
            takes_value=bool(info.get("value")),
            choices=tuple(info["choices"]) if info.get("choices") else None,
            negation_of=info.get("negation_of"),
        )
        for name, info in data["flags"].items()
    }
    return Contract(
        version=version,
        flags=flags,
        aliases=dict(data.get("aliases", {})),
        json_flags=frozenset(data.get("json_flags", [])),
        embeddings_route_for_token_embed=version != "0.32",
        hidden_states_without_chunked_prefill=version != "0.32",
    )


_VERSION_TAG = re.compile(r"^v?(\d+)\.(\d+)")


def image_tag(image: str) -> str | None:
    """The tag of an image reference (digest dropped), or None when it has none."""
    ref = image.split("@", 1)[0]
    name, sep, tag = ref.rpartition(":")
    if not sep or not name or "/" in tag:
        return None
    return tag


def resolve_version(explicit: str | None, image: str) -> tuple[str | None, str | None]:
    """(version, error). An explicit engine.version wins; otherwise the image tag (v0.33.0 -> 0.33)."""
    supported = ", ".join(SUPPORTED_VERSIONS)
    if explicit:
        if explicit in SUPPORTED_VERSIONS:
            return explicit, None
        return None, f"no rules for vLLM {explicit}; supported versions: {supported}"
    version = tag_version(image)
    if version is None:
        return None, (
            f"cannot read a vLLM version from the tag of image {image!r}; set spec.engine.version to one of "
            f"{supported}"
        )
    if version not in SUPPORTED_VERSIONS:
        return None, (
            f"image {image!r} is vLLM {version}, which has no rules here; supported versions: {supported} "
            "(or set spec.engine.version)"
        )
    return version, None


def tag_version(image: str) -> str | None:
    """The vLLM minor version an image's tag names (vllm/vllm-openai:v0.33.0 -> 0.33), or None when the tag
    does not read as one (latest, nightly, a digest only)."""
    match = _VERSION_TAG.match(image_tag(image) or "")
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else None


def version_drift(explicit: str | None, image: str) -> str | None:
    """A warning when spec.engine.version names another vLLM than the image's tag: the rules of one version
    would judge the other's binary."""
    tagged = tag_version(image)
    if not explicit or tagged is None or tagged == explicit:
        return None
    return (
        f"{explicit!r} contradicts the image {image!r}, which is vLLM {tagged}: the vLLM {explicit} rules would "
        f"judge a vLLM {tagged} binary; set spec.engine.version to {tagged!r} or remove it (it defaults to the tag)"
    )
