"""vLLM's ``interfaces_base`` rules on the class model: whether a class is a vLLM model, and the vLLM
helpers the interpreter computes from the class model instead of running them."""

from __future__ import annotations

import ast
from collections.abc import Callable

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
