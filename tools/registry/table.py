"""The table: what ``--runner auto --convert auto`` gives a registered name, one entry per name, and the
document both modes write."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from .common import PROG

if TYPE_CHECKING:
    from .reader import Reader


SCHEMA = 1


def default_runner(facts: dict[str, Any], arch: str, suffixes: list[tuple[str, str, str]]) -> tuple[str, str]:
    """config/model.py _get_default_runner_type and _get_default_convert_type for a registered name, with
    ``--runner auto --convert auto`` and no sentence-transformers files."""
    match = next(((r, c) for s, r, c in suffixes if arch.endswith(s)), None)
    if facts["pooling"]:
        runner = "pooling"
    elif facts["generate"]:
        runner = "generate"
    else:
        runner = match[0] if match else "generate"
    if (runner == "generate" and facts["generate"]) or (runner == "pooling" and facts["pooling"]):
        return runner, "none"
    conv = next((c for s, r, c in suffixes if arch.endswith(s) and r == runner), None)
    if conv is not None:
        return runner, conv
    return runner, "embed" if runner == "pooling" else "none"


def default_task(tasks: list[str], arch: str, prio: list[str], token: str) -> str | None:
    if "token_classify" in tasks and token in arch:
        return "token_classify"
    return next((t for t in prio if t in tasks), None)


class Table:
    def __init__(self, reader: Reader, version: str, transformers: str, source: str):
        self.r, self.version, self.transformers, self.source = reader, version, transformers, source
        self.suffixes = reader.suffix_defaults()
        self.prio, self.token, self.prio_where = reader.task_priority()

    def entry(self, arch: str, reg: dict[str, Any], facts: dict[str, Any], pooler: tuple[list[str] | None, str | None],
              read: str) -> dict[str, Any]:  # fmt: skip
        runner, convert = default_runner(facts, arch, self.suffixes)
        e: dict[str, Any] = {
            "class": f"{reg['module']}.{reg['cls']}",
            "where": f"model_executor/models/registry.py:{reg['line']}",
            "generate": facts["generate"],
            "pooling": facts["pooling"],
            "runner": runner,
            "convert": convert,
            "attn": facts["attn"],
            "lora": facts["lora"],
            "pp": facts["pp"],
            "mm": facts["mm"],
            "read": read,
        }
        if runner == "pooling":
            tasks, where = pooler
            e.update(seq_pooling=facts["seq_pooling"], tok_pooling=facts["tok_pooling"], score=facts["score"])
            e["tasks"] = tasks if tasks is not None else []
            if tasks is None:
                e["read"] += "; tasks unresolved"
            e["task"] = default_task(e["tasks"], arch, self.prio, self.token)
            e["pooler"] = where
        return e

    def document(self, archs: dict[str, Any], remote: dict[str, list[dict[str, str]]],
                 convert: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        r = self.r
        backend = r.tree.rel("model_executor/models/registry.py").names["_ModelRegistry"]
        fn = next(s for s in backend.body if isinstance(s, ast.FunctionDef) and s.name == "_try_resolve_transformers")
        return {
            "schema": SCHEMA,
            "version": self.version,
            "transformers": self.transformers,
            "source": self.source,
            "generated_by": PROG,
            "pooling_tasks": {"tasks": list(r.tasks_order), "where": r.where_def("tasks.py", "PoolingTask")},
            "default_task": {"priority": self.prio, "token_classify_for": self.token, "where": self.prio_where},
            "suffixes": {"where": r.where_def("config/model.py", "_SUFFIX_TO_DEFAULTS"),
                         "defaults": [list(s) for s in self.suffixes]},
            "convert": convert,
            "transformers_backend": {
                "where": f"model_executor/models/registry.py:{fn.lineno}-{fn.end_lineno}",
                "needs": [
                    "the architecture is not registered here (or --model-impl transformers)",
                    "transformers exports a class of that name (getattr(transformers, arch)), or the config's "
                    "auto_map names an AutoModel class in the repository (then --trust-remote-code)",
                    "the class is backend-compatible: is_backend_compatible() or _can_set_attn_implementation() "
                    "(the 'compatible' list of transformers-<version>.json)",
                    "the backend class is Transformers[MultiModal][MoE]{ForCausalLM|EmbeddingModel|"
                    "ForSequenceClassification} by the name's suffix default (config/model.py "
                    "_get_transformers_backend_cls)",
                ],
            },
            "architectures": archs,
            "remote_code": remote,
        }
