"""vLLM's model registry per version, as generated from vLLM itself (registry/README.md says how: the 0.32
table from the real runtime, the 0.33 one from its source). Pure: package data in, facts out.

What an architecture name gives with `--runner auto --convert auto` (no sentence-transformers files), the
tasks its pooler serves, which names need the repository's own code, and whether transformers has a class of
that name for vLLM's Transformers backend. Names the registry lacks are read the way vLLM reads them: a
suffix maps them onto a registered name (`_normalize_arch`), or the suffix's defaults apply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from pooling_operator.vllm.contract import SUPPORTED_VERSIONS

USER_TASKS = ("embed", "classify", "token_embed", "token_classify")  # what a spec can ask for (api/services.py)


@dataclass(frozen=True)
class Entry:
    """One architecture name as vLLM resolves it."""

    name: str
    registered: bool  # in this version's registry (after _normalize_arch: `via` names the registered one)
    runner: str  # generate | pooling, under --runner auto
    convert: str  # none for a native class; embed | classify when vLLM adapts it
    tasks: tuple[str, ...]  # the pooler's tasks with convert auto (pooling runner), in vLLM's order
    where: str  # the registry line, or the suffix rule that decided
    score: str | None = None  # bi-encoder | cross-encoder | late-interaction (pooling)
    via: str | None = None  # the registered name an unregistered one was normalised onto
    cls: str | None = None  # the class vLLM loads for it (module.Class), when registered
    # The interfaces vLLM gates flags on, as the class implements them in this version (None: not registered,
    # so not known here): SupportsLoRA (--enable-lora), SupportsPP (--pipeline-parallel-size above 1).
    lora: bool | None = None
    pp: bool | None = None
    mm: bool | None = None  # SupportsMultiModal: inputs beyond text (the modalities are the processor's)
    task: str | None = None  # the one task a server exposes without --pooler-config task (registered pooling names)
    pooler: str | None = None  # the line of the pooler factory the tasks come from


@dataclass(frozen=True, eq=False)
class Registry:
    version: str
    data: dict[str, Any]
    transformers: dict[str, Any]

    @property
    def transformers_version(self) -> str:
        return str(self.transformers["version"])

    def convert_tasks(self, convert: str) -> tuple[str, ...]:
        return tuple(self.data["convert"][convert]["tasks"])

    def _suffix(self, name: str) -> tuple[str, str, str] | None:
        for suffix, runner, convert in self.data["suffixes"]["defaults"]:
            if name.endswith(suffix):
                return suffix, runner, convert
        return None

    def entry(self, name: str) -> Entry:
        """What vLLM makes of the name: the registry's entry, the registered name it normalises onto (with the
        suffix's conversion), or the suffix's defaults."""
        known = self.data["architectures"]
        raw = known.get(name)
        if raw is not None:
            return Entry(name, True, raw["runner"], raw.get("convert", "none"), tuple(raw.get("tasks") or ()),
                         raw["where"], raw.get("score"), **_interfaces(raw))
        match = self._suffix(name)
        where = self.data["suffixes"]["where"]
        if match is None:
            return Entry(name, False, "generate", "none", (), f"no suffix of {where} matches: runner generate")
        suffix, runner, convert = match
        for other, _, _ in self.data["suffixes"]["defaults"]:
            base = name.replace(suffix, other)
            if base in known and base != name:
                # _normalize_arch: the registered class, converted by the name's suffix when it is a pooling one.
                inner = known[base]
                if runner == "pooling" and inner["runner"] == "generate":
                    return Entry(name, True, "pooling", convert, self.convert_tasks(convert), inner["where"], via=base,
                                 **_interfaces(inner))  # the adapter subclasses the registered class
                return Entry(name, True, inner["runner"], inner.get("convert", "none"), tuple(inner.get("tasks") or ()),
                             inner["where"], inner.get("score"), via=base, **_interfaces(inner))
        tasks = self.convert_tasks(convert) if runner == "pooling" else ()
        return Entry(name, False, runner, convert if runner == "pooling" else "none", tasks, f"the {suffix} suffix ({where})")

    def remote_code(self, name: str) -> list[dict[str, Any]]:
        """Why the name needs the repository's own code: vLLM's config check or model class (`config-check`,
        `model-code`), or vLLM's own test case of it marked trust_remote_code (`test-case`)."""
        return list(self.data["remote_code"].get(name) or ())

    def in_transformers(self, name: str) -> bool:
        """transformers exports a backend-compatible class of that name (vLLM's Transformers backend serves it)."""
        return name in self._compatible()

    def in_transformers_incompatible(self, name: str) -> bool:
        """transformers exports a class of that name that the Transformers backend cannot run."""
        return name in frozenset(self.transformers["architectures"]["incompatible"])

    def config_in_transformers(self, config_class: str) -> bool:
        return config_class in self._configs()

    @cache  # noqa: B019 (one Registry per version, cached for the process)
    def _compatible(self) -> frozenset[str]:
        return frozenset(self.transformers["architectures"]["compatible"])

    @cache  # noqa: B019
    def _configs(self) -> frozenset[str]:
        return frozenset(self.transformers["configs"])


def _interfaces(raw: dict[str, Any]) -> dict[str, Any]:
    return {"cls": raw.get("class"), "lora": raw.get("lora"), "pp": raw.get("pp"), "mm": raw.get("mm"),
            "task": raw.get("task"), "pooler": raw.get("pooler")}


def _read(name: str) -> dict[str, Any]:
    return json.loads(resources.files("pooling_operator.vllm").joinpath(f"registry/{name}").read_text())


@cache
def registry(version: str) -> Registry:
    """The table of a supported version (KeyError for others)."""
    if version not in SUPPORTED_VERSIONS:
        raise KeyError(version)
    data = _read(f"vllm-{version}.json")
    return Registry(version, data, _read(f"transformers-{data['transformers']}.json"))
