"""Flags that vLLM implements per architecture: each needs an interface of the model class, in the declared version.

vLLM gates some features on interfaces a model class implements (model_executor/models/interfaces.py), and a
class gains them release by release (BertForSequenceClassification has SupportsLoRA in 0.33, not in 0.32). A flag
whose interface the class lacks is accepted by the argument parser and then stops the server: the pods
crash-loop with nothing said at admission. Which classes implement which interface, per version, is read from
vLLM itself into the registry tables (vllm/registry/, the `lora` and `pp` of each entry). Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pooling_operator.api.problems import Problem
from pooling_operator.vllm.contract import SUPPORTED_VERSIONS
from pooling_operator.vllm.extra_args import ExtraArgs, Token
from pooling_operator.vllm.registry import Entry, registry
from pooling_operator.vllm.workload import Workload


@dataclass(frozen=True)
class Gate:
    flag: str
    interface: str
    field: str  # the registry entry's field: lora | pp
    stops: str  # what vLLM does without the interface, in its own words and where

    def wants(self, t: Token) -> bool:
        """The token turns the feature on (a switch given, or a size above 1)."""
        if t.flag != self.flag:
            return False
        if self.field == "pp":
            try:
                return int(t.value or "1") > 1
            except ValueError:
                return False
        return True

    def has(self, e: Entry) -> bool | None:
        return e.lora if self.field == "lora" else e.pp


GATES = (
    # v1/worker/lora_model_runner_mixin.py load_lora_model (0.32 :47-48): only --enable-lora makes a LoRA config
    # (engine/arg_utils.py create_engine_config); the other LoRA flags do nothing without it.
    Gate("--enable-lora", "SupportsLoRA", "lora",
         "stops at model load (\"... does not support LoRA yet\", v1/worker/lora_model_runner_mixin.py)"),
    # config/model.py verify_with_parallel_config (0.32 :1557-1562)
    Gate("--pipeline-parallel-size", "SupportsPP", "pp",
         "refuses to start (\"Pipeline parallelism is not supported for this model\", config/model.py)"),
)


def interface_problems(w: Workload, xa: ExtraArgs) -> Iterator[Problem]:
    """An error for a flag whose interface the model's class lacks in the declared version; a warning when the
    architecture is not known (no hints.architectures or hfOverrides.architectures), so it cannot be checked."""
    for gate in GATES:
        token = next((t for t in reversed(xa.tokens) if gate.wants(t)), None)  # the last occurrence wins, as in vLLM
        if token is None:
            continue
        path = f"spec.engine.extraArgs[{token.index}]"
        facts = w.facts
        if facts is None:
            yield Problem(path, f"{gate.flag} needs the model class to implement {gate.interface}, which vLLM "
                                f"implements per architecture; set spec.model.hints.architectures so that it can be "
                                f"checked before the pods start (vLLM {gate.stops} otherwise)", "warning")
            continue
        e = facts.entry
        if gate.has(e) is not False:
            continue  # implemented, or a name this version's registry does not know (its Transformers backend)
        arch = facts.architecture + (f" (as {e.via})" if e.via else "")
        elsewhere = [v for v in SUPPORTED_VERSIONS if v != facts.version and gate.has(registry(v).entry(facts.architecture))]
        later = f"; vLLM {', '.join(elsewhere)} implements it for this architecture" if elsewhere else ""
        yield Problem(path, f"{gate.flag}: {arch}, class {e.cls}, does not implement {gate.interface} in vLLM "
                            f"{facts.version}: vLLM {gate.stops}; remove {gate.flag}{later}")
