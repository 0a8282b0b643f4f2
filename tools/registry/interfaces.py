"""vLLM's ``interfaces_base`` and ``interfaces`` rules on the class model: whether a class is a vLLM model, whether
it implements the interfaces vLLM gates flags on (``SupportsLoRA``: --enable-lora, ``SupportsPP``:
--pipeline-parallel-size above 1), and the vLLM helpers the interpreter computes from the class model instead of
running them."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from .classes import Cls, member
from .values import AnyOf, ClassV, Const, ExternalV, Inst, Unknown, V


# Helpers of vLLM whose bodies go through ``inspect`` (``supports_kw``): computed from the class model instead,
# on the values of the call's arguments.
def _hook_is_vllm_model(args: list[V]) -> V:
    c = args[0] if args else None
    cls = c.cls if isinstance(c, (ClassV, Inst, AnyOf)) else None
    return Const(static_is_vllm_model(cls.mro)) if cls else Unknown("is_vllm_model")


INTERCEPTS: dict[tuple[str, str], Callable[[list[V]], V]] = {
    ("model_executor/models/interfaces_base.py", "is_vllm_model"): _hook_is_vllm_model,
}


def _supports_kw(fn: ast.FunctionDef, kw: str) -> bool:
    a = fn.args
    if kw in [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]:
        return True
    return a.kwarg is not None and a.kwarg.arg != kw


def static_is_vllm_model(mro: list[Cls | ExternalV]) -> bool:
    """interfaces_base.is_vllm_model: __init__ takes vllm_config, embed_input_ids exists, forward takes
    input_ids and positions (``supports_kw`` accepts a trailing **kwargs)."""
    init = member(mro, "__init__")
    if init is None:
        return False
    if isinstance(init[0], Cls) and isinstance(init[1], ast.FunctionDef) and not _supports_kw(init[1], "vllm_config"):
        return False
    if member(mro, "embed_input_ids") is None:
        return False
    fwd = member(mro, "forward")
    if fwd is None or isinstance(fwd[0], ExternalV):
        return False
    if isinstance(fwd[1], ast.FunctionDef):
        return _supports_kw(fwd[1], "input_ids") and _supports_kw(fwd[1], "positions")
    return True


ClassAttr = Callable[[list[Cls | ExternalV], str, Any], Any]  # the interpreter's class_attr: a constant or the default


def static_supports_lora(class_attr: ClassAttr, mro: list[Cls | ExternalV]) -> bool:
    """interfaces.supports_lora on a class (0.32 :706-740): ``isinstance(cls, _SupportsLoRAType)``, i.e.
    ``supports_lora`` is True and ``packed_modules_mapping`` and ``embedding_modules`` exist (SupportsLoRA
    defines all three; the worker refuses a model without it at load, lora_model_runner_mixin.py:47-48)."""
    return class_attr(mro, "supports_lora", False) is True and all(
        member(mro, name) is not None for name in ("packed_modules_mapping", "embedding_modules"))


def static_supports_multimodal(class_attr: ClassAttr, mro: list[Cls | ExternalV]) -> bool:
    """interfaces.supports_multimodal on a class (0.32 :573-576): ``supports_multimodal`` is True (SupportsMultiModal
    sets it, :173). What `_ModelInfo.supports_multimodal` holds (registry.py:900): the class takes inputs beyond text
    (which modalities, its processor says)."""
    return class_attr(mro, "supports_multimodal", False) is True


def static_supports_pp(class_attr: ClassAttr, mro: list[Cls | ExternalV]) -> bool:
    """interfaces.supports_pp on a class (0.32 :810-866): SupportsPP in the MRO, or ``supports_pp`` True with
    ``make_empty_intermediate_tensors`` and a ``forward``; and ``forward`` takes ``intermediate_tensors``
    (``supports_kw``). ModelConfig refuses --pipeline-parallel-size above 1 without it (config/model.py:1557)."""
    attributes = any(isinstance(c, Cls) and c.qualname == "SupportsPP" and c.mod.rel.endswith("models/interfaces.py")
                     for c in mro) or (class_attr(mro, "supports_pp", False) is True
                                       and member(mro, "make_empty_intermediate_tensors") is not None
                                       and member(mro, "forward") is not None)  # fmt: skip
    fwd = member(mro, "forward")
    if fwd is None or isinstance(fwd[0], ExternalV):
        return False
    return attributes and (not isinstance(fwd[1], ast.FunctionDef) or _supports_kw(fwd[1], "intermediate_tensors"))
