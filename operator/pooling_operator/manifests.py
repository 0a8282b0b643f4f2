"""Reading and writing YAML manifests: files and folders in, documents out; deterministic dumps."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class ManifestError(Exception):
    """A file that cannot be read or parsed."""


# libyaml's C parser and emitter when PyYAML was built with them (its wheels are): the same documents and the
# same bytes as the pure-Python ones, several times faster (`bench/validate`).
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _StrictLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    """SafeLoader that refuses duplicate keys: a silently dropped duplicate is a lost user setting."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


@dataclass(frozen=True)
class Document:
    file: str
    index: int
    body: Any


def expand(paths: list[str]) -> list[Path]:
    """Files named, and every *.yaml / *.yml below folders named, sorted within each folder."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
        elif path.is_file() or raw == "-":
            out.append(path)
        else:
            raise ManifestError(f"{raw}: no such file or folder")
    return out


def load(paths: list[str]) -> Iterator[Document]:
    """Every non-empty document of every file; ManifestError on unreadable or malformed input."""
    for path in expand(paths):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{path}: cannot read: {exc}") from exc
        try:
            docs = list(yaml.load_all(text, Loader=_StrictLoader))
        except yaml.YAMLError as exc:
            raise ManifestError(f"{path}: malformed YAML: {exc}".replace("\n", " ")) from exc
        for index, body in enumerate(docs):
            if body is not None:
                yield Document(str(path), index, body)


def dump_all(objects: list[dict[str, Any]]) -> str:
    """Multi-document YAML, stable: same objects, same bytes."""
    return yaml.dump_all(objects, Dumper=_SafeDumper, sort_keys=False, default_flow_style=False, width=1 << 16,
                         explicit_start=True, allow_unicode=False)
