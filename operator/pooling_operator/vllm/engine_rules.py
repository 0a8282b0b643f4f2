"""The engine rules: `engine.extraArgs` (on the tokens of vllm/extra_args.py, each flag judged by its class in
vllm/flag_classes.py: owned, refused, code, path or plain), GPUs for the parallel sizes, and whether vLLM can
chunk a workload's prompts. Pure; read by the chains of vllm/rules.py."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from pooling_operator.api.problems import Problem
from pooling_operator.vllm.confinement import CODE_ADVICE, ROUTE_FLAGS, outside, paths_message, roots
from pooling_operator.vllm.contract import Contract, contract
from pooling_operator.vllm.extra_args import ExtraArgs, option_names
from pooling_operator.vllm.flag_classes import FlagClass, classify, code_keys
from pooling_operator.vllm.interface_rules import interface_problems
from pooling_operator.vllm.workload import Workload

# Flags that vLLM accepts only together with another (serve arg checks).
REQUIRES = {"--enable-log-outputs": "--enable-log-requests"}
# Batching features vLLM turns off for encoders and for MEAN/CLS/STEP pooling; forcing them on makes vLLM warn
# that it "may cause the engine to crash or produce incorrect outputs" (config/model.py:2175-2256).
UNSAFE_FOR_NON_CHUNKING_POOLERS = ("--enable-chunked-prefill", "--enable-prefix-caching")
def gpu_problems(w: Workload, xa: ExtraArgs, resources: object) -> Iterator[Problem]:
    """Every vLLM worker needs its own GPU: tensor x pipeline x data parallel <= GPUs per pod."""
    gpu = getattr(resources, "gpu", None)
    count = gpu.whole if gpu is not None else 1
    if count == 0 or getattr(gpu, "share", None) is not None:  # a share: vllm/share_rules.py
        return
    given = xa.given
    sizes = {"tensor": w.engine.tensor_parallel_size or 1}
    for flag, label in (("--pipeline-parallel-size", "pipeline"), ("--data-parallel-size", "data")):
        try:
            sizes[label] = int(given.get(flag) or 1)
        except ValueError:
            sizes[label] = 1
    need = sizes["tensor"] * sizes["pipeline"] * sizes["data"]
    if need > count:
        yield Problem(
            "spec.resources.gpu.count",
            f"{count} GPU(s) per pod, but vLLM needs {need} (tensor {sizes['tensor']} x pipeline {sizes['pipeline']} "
            f"x data {sizes['data']} parallel); raise gpu.count to {need} or lower the parallel sizes",
        )


def extra_args_problems(w: Workload, c: Contract, xa: ExtraArgs, needs_metrics: bool, allow_code: bool = False) -> Iterator[Problem]:
    yield from _extra_args_each(w, c, xa, needs_metrics, allow_code)
    yield from interface_problems(w, xa)
    given = xa.given
    for flag, needed in REQUIRES.items():
        if flag in given and needed not in given:
            yield Problem("spec.engine.extraArgs", f"{flag} requires {needed} (vLLM refuses it alone)")
    if w.runner == "pooling" and not can_chunk(w):
        for flag in UNSAFE_FOR_NON_CHUNKING_POOLERS:
            if flag in given:
                yield Problem(
                    "spec.engine.extraArgs",
                    f"{flag} on a model vLLM cannot chunk ({chunk_reason(w)}): vLLM warns it may crash the engine "
                    "or produce incorrect outputs; remove it",
                )
    if w.generative is not None and "--max-logprobs" in given:
        raw = given["--max-logprobs"]
        count = len(w.generative.labels)
        try:
            value = int(raw or "")
        except ValueError:
            yield Problem("spec.engine.extraArgs", f"--max-logprobs takes an integer, got {raw!r}")
        else:
            if value != -1 and value < count:
                yield Problem(
                    "spec.engine.extraArgs",
                    f"--max-logprobs {value} is below the {count} label tokens scored; remove it (the operator "
                    f"raises it when needed) or use at least {count}",
                )


def _extra_args_each(w: Workload, c: Contract, xa: ExtraArgs, needs_metrics: bool, allow_code: bool) -> Iterator[Problem]:
    allowed = roots(w)
    seen: dict[str, int] = {}
    for t in xa.tokens:
        path, name = f"spec.engine.extraArgs[{t.index}]", t.name
        if not t.is_flag:
            yield Problem(
                path,
                f"{t.text!r} is not a flag: extraArgs holds `vllm serve` flags, each followed by its value when it "
                "takes one (the model goes in spec.model.name)",
            )
            continue
        if t.flag is None:
            yield Problem(path, _unknown_flag_message(name, w, c))
            continue
        info = c.flags[t.flag]
        positive = c.owner_of(t.flag)
        if positive in seen:
            yield Problem(path, f"{name} repeats extraArgs[{seen[positive]}]; vLLM would silently keep only the last")
        seen.setdefault(positive, t.index)
        cls = classify(positive, hidden_states=w.hidden_states) or FlagClass("plain")
        if cls.name == "owned" and cls.secret:
            yield Problem(path, f"secrets never go in arguments: set {cls.field} instead of {name}")
        elif cls.name == "owned":
            yield Problem(path, f"{name} is set by the operator from {cls.field}; set that instead")
        elif cls.name == "refused":
            yield Problem(path, f"{name} {cls.why}")
        elif cls.name == "code" and not allow_code and (t.value is None or t.value not in cls.plain_values):
            yield Problem(path, f"{name} {cls.why}: {CODE_ADVICE}")
        elif positive == "--disable-log-stats" and needs_metrics:
            yield Problem(path, "--disable-log-stats removes every vllm:* metric, which autoscaling and monitoring read")
        if cls.name != "owned" and not allow_code:
            for key, why in code_keys(positive, t.text, t.value):
                yield Problem(path, f"{name}: the key {key} {why}: {CODE_ADVICE}")
        found = outside(t.value, allowed) if t.value is not None and positive not in ROUTE_FLAGS else None
        if found is not None:
            yield Problem(path, f"{name}: {paths_message(found, allowed)}")
        if t.missing_value:
            yield Problem(path, f"{name} takes a value: put it in the next element or write {name}=VALUE")
            continue
        if not info.takes_value and t.value is not None:
            yield Problem(path, f"{name} is a switch and takes no value")
            continue
        if info.choices and t.value is not None and t.value not in info.choices:
            yield Problem(path, f"{name} accepts one of {', '.join(info.choices)}; got {t.value!r}")


def _unknown_flag_message(name: str, w: Workload, c: Contract) -> str:
    if name.replace("_", "-") == "--task":
        field = "spec.mode" if w.mode is not None else "spec.task"
        return f"vLLM has no --task flag (it became --runner/--convert and the pooler task); set {field} instead"
    if name == "--disable-log-requests":
        return (
            f"vLLM {c.version} has no --disable-log-requests: request logging is off by default "
            "(use --no-enable-log-requests to say so)"
        )
    close = difflib.get_close_matches(name, list(c.flags), n=2, cutoff=0.75)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"vLLM {c.version} has no flag {name}{hint}"



def _chunked_prefill_off_by_flag(w: Workload) -> bool:
    return bool(option_names(w.engine.extra_args) & {"--no-enable-chunked-prefill", "--disable-chunked-prefill"})


def chunk_reason(w: Workload) -> str | None:
    """Why vLLM cannot chunk this workload's prompts, or None when it can."""
    if w.hidden_states and contract(w.version).hidden_states_without_chunked_prefill:
        return f"chunked prefill is off for hidden-state extraction on vLLM {w.version}"
    if _chunked_prefill_off_by_flag(w):
        return "extraArgs turn chunked prefill off"
    if w.runner == "generate":
        return None
    pooling_type = w.pooling.type if w.pooling else None
    f = w.facts
    if pooling_type in ("MEAN", "CLS", "STEP"):
        return f"{pooling_type} pooling needs the whole prompt in one step, so vLLM turns chunked prefill off"
    if f is not None and f.is_decoder:
        return None  # a causal decoder with LAST/ALL pooling chunks its prompts
    if f is not None and f.is_decoder is False:
        return f"{f.architecture} is an encoder, which vLLM cannot chunk"
    return (
        "vLLM chunks prompts only for causal decoders with LAST or ALL pooling (declare "
        "model.hints.architectures and pooling.type if this is one)"
    )


def can_chunk(w: Workload) -> bool:
    return chunk_reason(w) is None
