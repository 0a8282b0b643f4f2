"""What vLLM makes of a model architecture (contract §2, §5, §7): from the version's model registry
(vllm/registry.py, generated from vLLM itself), and by vLLM's own suffix rules only for names the registry
lacks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pooling_operator.vllm.registry import USER_TASKS, Entry, registry

Native = Literal["generate", "pooling"]

BGE_M3 = "BgeM3EmbeddingModel"
# Multi-head latent attention models: the hidden-state connector refuses them (contract §5).
MLA = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK2ForCausalLM", "MiniCPM3ForCausalLM"})

# Base classes of causal families that vLLM serves as pooling models under a bare *Model name (e5-mistral's
# MistralModel, LlamaModel, Qwen2Model...): still causal decoders, so vLLM chunks their prompts.
_CAUSAL_BASES = ("Llama", "Mistral", "Mixtral", "Qwen2", "Qwen3", "Gemma", "Gemma2", "Gemma3", "Phi3", "Granite", "InternLM2", "GPTNeoX", "Olmo", "Olmo2")
_ENCODER_BASES = ("Bert", "XLMRoberta", "Roberta", "ModernBert", "DistilBert", "MPNet", "Electra", "DebertaV2", "Deberta", "NomicBert", "GteNew", "Camembert")


@dataclass(frozen=True)
class ModelFacts:
    """Facts derived from the effective architecture (hfOverrides.architectures over hints.architectures) and
    the version's registry."""

    architecture: str
    entry: Entry
    version: str  # the contract version whose registry `entry` comes from

    @property
    def native(self) -> Native:
        """`pooling` for a class vLLM pools natively; `generate` for one it generates with (and adapts with a
        conversion to pool)."""
        return "pooling" if self.entry.runner == "pooling" and self.entry.convert == "none" else "generate"

    @property
    def generates(self) -> bool:
        """`--runner auto` gives the generate runner: a text-generation class (what hidden states and generative
        scoring need)."""
        return self.entry.runner == "generate"

    @property
    def native_tasks(self) -> tuple[str, ...]:
        """The pooler's tasks of a native pooling class, those a spec can ask for."""
        return tuple(t for t in self.entry.tasks if t in USER_TASKS) if self.native == "pooling" else ()

    @property
    def is_decoder(self) -> bool | None:
        """Causal decoders can chunk prompts; encoders cannot (config/model.py:2175-2256). None when the
        name alone does not tell."""
        if self.native == "generate":
            return True
        base = self.architecture.removesuffix("ForSequenceClassification").removesuffix("ForTokenClassification")
        base = base.removesuffix("EmbeddingModel").removesuffix("Model")
        if base in _CAUSAL_BASES:
            return True
        if base in _ENCODER_BASES or self.entry.score == "late-interaction" or self.architecture == BGE_M3:
            return False
        return None

    def supported_tasks(self, convert: str) -> tuple[str, ...]:
        """Pooling tasks the model can serve after ``convert`` (gpu_model_runner.py:3151-3165; the adapters of
        model_executor/models/adapters.py for a conversion)."""
        r = registry(self.version)
        if self.native == "pooling":
            return self.native_tasks
        if convert in ("embed", "classify"):
            return r.convert_tasks(convert)
        return r.convert_tasks(self.entry.convert if self.entry.convert != "none" else "embed")

    @property
    def late_interaction(self) -> bool:
        return self.entry.score == "late-interaction"


def facts(architectures: list[str] | None, version: str) -> ModelFacts | None:
    """The facts of the first architecture vLLM would load, by `version`'s registry (None without one)."""
    if not architectures:
        return None
    arch = architectures[0]
    return ModelFacts(arch, registry(version).entry(arch), version)
