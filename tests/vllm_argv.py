"""Test support: read a rendered `vllm serve` command line the way vLLM 0.32's parser and config classes do.

It applies the real flag table (from `vllm serve --help=all`) and the PoolerConfig / speculative /
kv-transfer rules of shared/reference/vllm-contract.md §1 and §5, and returns the settings vLLM would
resolve from the flags, so tests can compare them with the oracle's `resolved` block.
"""

from __future__ import annotations

import json
from typing import Any

from pooling_operator.vllm.contract import Contract

POOLER_KEYS = {
    "task", "pooling_type", "seq_pooling_type", "tok_pooling_type", "use_activation",
    "enable_flash_late_interaction", "dimensions", "enable_chunked_processing", "max_embed_len",
    "logit_mean", "logit_sigma", "step_tag_id", "returned_token_ids",
}
POOLING_TASKS = {"embed", "classify", "token_embed", "token_classify", "plugin", "embed&token_classify"}
KV_ROLES = {"kv_producer", "kv_consumer", "kv_both"}
REGISTERED_CONNECTORS = {"ExampleConnector", "ExampleHiddenStatesConnector", "LMCacheConnectorV1", "NixlConnector", "MultiConnector", "OffloadingConnector"}


class Rejected(Exception):
    pass


def parse(argv: list[str], c: Contract) -> dict[str, Any]:
    """{canonical flag: value} after checking every flag, value and JSON payload; Rejected otherwise."""
    if argv[:2] != ["vllm", "serve"]:
        raise Rejected(f"not a vllm serve command: {argv[:2]}")
    rest = argv[2:]
    if not rest or rest[0].startswith("-"):
        raise Rejected("the model must be the first positional argument")
    out: dict[str, Any] = {"model": rest[0]}
    i = 1
    while i < len(rest):
        arg = rest[i]
        i += 1
        flag = c.canonical(arg)
        if flag is None:
            raise Rejected(f"unrecognized arguments: {arg}")
        info = c.flags[flag]
        value: Any = True
        if "=" in arg:
            value = arg.split("=", 1)[1]
        elif info.takes_value:
            if i >= len(rest):
                raise Rejected(f"{arg}: expected one argument")
            value = rest[i]
            i += 1
        if info.choices and value not in info.choices:
            raise Rejected(f"{arg}: invalid choice {value!r}")
        if flag in c.json_flags and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise Rejected(f"{arg}: invalid JSON: {exc}") from exc
        out[flag] = value
    _check_pooler(out.get("--pooler-config"))
    _check_speculative(out.get("--speculative-config"))
    _check_kv_transfer(out.get("--kv-transfer-config"))
    return out


def _check_pooler(config: Any) -> None:
    if config is None:
        return
    if not isinstance(config, dict):
        raise Rejected("--pooler-config must be a JSON object")
    unknown = set(config) - POOLER_KEYS
    if unknown:
        raise Rejected(f"PoolerConfig: unexpected keys {sorted(unknown)}")
    if "pooling_type" in config and ("seq_pooling_type" in config or "tok_pooling_type" in config):
        raise Rejected("Cannot set both `pooling_type` and `seq_pooling_type`")
    if config.get("task") is not None and config["task"] not in POOLING_TASKS:
        raise Rejected(f"PoolerConfig.task {config['task']!r}")
    if config.get("seq_pooling_type") not in (None, "CLS", "LAST", "MEAN"):
        raise Rejected("seq_pooling_type")
    if config.get("tok_pooling_type") not in (None, "ALL", "STEP"):
        raise Rejected("tok_pooling_type")
    if config.get("logit_sigma") == 0:
        raise Rejected("logit_sigma cannot be 0")


def _check_speculative(config: Any) -> None:
    if config is None:
        return
    if config.get("num_speculative_tokens") != 1:
        raise Rejected("extract_hidden_states needs num_speculative_tokens == 1")
    ids = config["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"]
    if not ids:
        raise Rejected("eagle_aux_hidden_state_layer_ids must be set")


def _check_kv_transfer(config: Any) -> None:
    if config is None:
        return
    if config.get("kv_role") not in KV_ROLES:
        raise Rejected("Please specify kv_role when kv_connector is set")
    if config.get("kv_connector") not in REGISTERED_CONNECTORS:
        raise Rejected(f"Unsupported connector type: {config.get('kv_connector')}")


def resolved(flags: dict[str, Any]) -> dict[str, Any]:
    """The oracle `resolved` fields these flags pin (only those the command line sets)."""
    out: dict[str, Any] = {}
    if "--runner" in flags:
        out["runner_type"] = flags["--runner"]
    if "--convert" in flags:
        out["convert_type"] = flags["--convert"]
    pooler = flags.get("--pooler-config") or {}
    if "task" in pooler:
        out["pooling_task"] = pooler["task"]
    if "seq_pooling_type" in pooler:
        out["seq_pooling_type"] = pooler["seq_pooling_type"]
    for flag, key in (("--max-model-len", "max_model_len"), ("--max-num-batched-tokens", "max_num_batched_tokens"),
                      ("--max-num-seqs", "max_num_seqs"), ("--tensor-parallel-size", "tensor_parallel_size")):
        if flag in flags:
            out[key] = int(flags[flag])
    if "--dtype" in flags:
        out["dtype"] = flags["--dtype"]
    if "--served-model-name" in flags:
        out["served_model_name"] = flags["--served-model-name"]
    return out
