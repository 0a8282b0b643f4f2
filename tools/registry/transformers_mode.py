"""``--transformers-out``: the model and config classes of the transformers installed in this interpreter."""

from __future__ import annotations

from typing import Any

from .common import PROG, say


def transformers_table() -> dict[str, Any]:
    """The model classes transformers exports (``getattr(transformers, name)`` is what vLLM's backend check
    does), each marked backend-compatible or not; and its config classes (for the remote-code check)."""
    import warnings

    warnings.filterwarnings("ignore")
    import transformers
    from transformers import PretrainedConfig, PreTrainedModel

    transformers.logging.set_verbosity_error()
    say(f"transformers {transformers.__version__}: importing its model classes")
    c2m: dict[str, str] = transformers._class_to_module  # type: ignore[attr-defined]
    compatible, incompatible, configs = [], [], []
    for name in sorted(c2m):
        mod = c2m[name]
        if ".modeling_" not in mod and ".configuration_" not in mod:
            continue
        try:
            obj = getattr(transformers, name)
        except Exception:
            continue
        if not isinstance(obj, type):
            continue
        if issubclass(obj, PretrainedConfig):
            configs.append(name)
        elif issubclass(obj, PreTrainedModel) and not name.endswith("PreTrainedModel"):
            ok = obj.is_backend_compatible() or obj._can_set_attn_implementation()
            (compatible if ok else incompatible).append(name)
    say(f"{len(compatible)} compatible and {len(incompatible)} incompatible model classes, {len(configs)} configs")
    return {
        "version": transformers.__version__,
        "source": f"transformers imported by {PROG} --transformers-out: every class its "
        "top level exports from a modeling_* module (PreTrainedModel subclasses, the *PreTrainedModel bases "
        "left out) and from a configuration_* module",
        "architectures": {"compatible": compatible, "incompatible": incompatible},
        "configs": configs,
    }
