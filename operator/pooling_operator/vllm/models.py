"""What vLLM makes of a model architecture (contract §2, §5, §7), from config.json names alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Native = Literal["generate", "embed", "classify", "token_classify", "late_interaction", "bge_m3"]

# vLLM's registry (model_executor/models/registry.py:266-280): late-interaction models serve token_embed only.
LATE_INTERACTION = frozenset(
    {
        "HF_ColBERT",
        "ColBERTModernBertModel",
        "ColBERTJinaRobertaModel",
        "ColBERTLfm2Model",
        "JinaForRanking",
        "ColPali",
        "ColQwen3",
        "ColQwen3_5",
        "ColModernVBert",
        "Qwen3VLNemotronEmbedModel",
    }
)
BGE_M3 = "BgeM3EmbeddingModel"
# Multi-head latent attention models: the hidden-state connector refuses them (contract §5).
MLA = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK2ForCausalLM", "MiniCPM3ForCausalLM"})

_GENERATE_SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "ChatModel", "LMHeadModel")
# Base classes of causal families that vLLM serves as pooling models under a bare *Model name (e5-mistral's
# MistralModel, LlamaModel, Qwen2Model...): still causal decoders, so vLLM chunks their prompts.
_CAUSAL_BASES = ("Llama", "Mistral", "Mixtral", "Qwen2", "Qwen3", "Gemma", "Gemma2", "Gemma3", "Phi3", "Granite", "InternLM2", "GPTNeoX", "Olmo", "Olmo2")
_ENCODER_BASES = ("Bert", "XLMRoberta", "Roberta", "ModernBert", "DistilBert", "MPNet", "Electra", "DebertaV2", "Deberta", "NomicBert", "GteNew", "Camembert")
_CLASSIFY_SUFFIXES = ("ForSequenceClassification", "ClassificationModel")
_EMBED_SUFFIXES = ("EmbeddingModel", "ForTextEncoding", "RewardModel", "ForRewardModeling", "Model")


def native_kind(architecture: str) -> Native:
    """The kind vLLM's runner 'auto' gives an architecture, by its name (config/model.py:2322-2341)."""
    if architecture == BGE_M3:
        return "bge_m3"
    if architecture in LATE_INTERACTION:
        return "late_interaction"
    if architecture.endswith("ForTokenClassification"):
        return "token_classify"
    if architecture.endswith(_GENERATE_SUFFIXES):
        return "generate"
    if architecture.endswith(_CLASSIFY_SUFFIXES) or ("For" in architecture and architecture.endswith("Classification")):
        return "classify"
    if architecture.endswith(_EMBED_SUFFIXES):
        return "embed"
    return "generate"


@dataclass(frozen=True)
class ModelFacts:
    """Facts derived from the effective architecture (hfOverrides.architectures over hints.architectures)."""

    architecture: str
    native: Native

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
        if base in _ENCODER_BASES or self.native in ("late_interaction", "bge_m3"):
            return False
        return None

    def supported_tasks(self, convert: str) -> tuple[str, ...]:
        """Pooling tasks the model can serve after ``convert`` (gpu_model_runner.py:3151-3165)."""
        if self.native == "generate":
            return ("classify", "token_classify") if convert == "classify" else ("embed", "token_embed")
        if self.native == "bge_m3":
            return ("embed", "token_embed", "token_classify")
        if self.native == "late_interaction":
            return ("token_embed",)
        if self.native in ("classify", "token_classify"):
            return ("classify", "token_classify")
        return ("embed", "token_embed")


def facts(architectures: list[str] | None) -> ModelFacts | None:
    if not architectures:
        return None
    arch = architectures[0]
    return ModelFacts(arch, native_kind(arch))
