"""Reading and writing YAML manifests: files and folders in, documents out; deterministic dumps.

Whatever the input, reading it is bounded in time and memory and ends either in documents or in one
ManifestError line: every document is composed into YAML nodes first and measured (nesting, aliases, size)
before any Python value is built from it, the way the API server's decoder refuses alias bombs before it
expands them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pooling_operator import MAX_NESTING


class ManifestError(Exception):
    """A file that cannot be read or parsed, or that no API server would take."""


# The bounds of what we read. An object the API server stores is at most 1.5 MiB (etcd's request limit), and
# the deepest of ours (a Deployment's pod template) is nested about 15 levels deep.
MAX_FILE_BYTES = 64 << 20  # one file
MAX_DOCUMENTS = 10_000  # documents in one invocation, every file together
MAX_DOCUMENT_BYTES = 3 << 19  # 1.5 MiB of scalars in one document, aliases expanded
MAX_VALUES = 100_000  # scalars, lists and mappings in one document, aliases expanded

# libyaml's C parser and emitter when PyYAML was built with them (its wheels are): the same documents and the
# same bytes as the pure-Python ones, several times faster (`bench/validate`).
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _StrictLoader(_SafeLoader):
    """SafeLoader that refuses duplicate keys: a silently dropped duplicate is a lost user setting."""


MERGE_TAG = "tag:yaml.org,2002:merge"


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    """A mapping whose keys, as written, are unique; YAML merge keys (``<<: *base``, ``<<: [*a, *b]``) are merged
    as kubectl and the API server's decoder merge them: the keys written beside ``<<`` win over merged ones."""
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)  # SafeConstructor's: flattens the merge keys first


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def measure(node: yaml.Node) -> str | None:
    """Why a composed document is refused (nesting, an alias cycle, too many values or bytes once its aliases
    are expanded), or None. Iterative and linear in the nodes as written, however far the aliases expand."""
    # per node as written: (values, scalar bytes, depth) of its expansion; an alias is the node it names
    sizes: dict[int, tuple[int, int, int]] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:
        current, done = stack.pop()
        key = id(current)
        if done:
            open_.discard(key)
            values, size, depth = 1, len(current.value) if isinstance(current, yaml.ScalarNode) else 0, 0
            for child in _children(current):
                v, s, d = sizes[id(child)]
                values, size, depth = values + v, size + s, max(depth, d)
            depth += 0 if isinstance(current, yaml.ScalarNode) else 1
            if depth > MAX_NESTING:
                return f"{_at(current)}nested more than {MAX_NESTING} levels deep"
            if values > MAX_VALUES:
                return f"{_at(current)}expands to more than {MAX_VALUES:,} values{_aliased(node)}"
            if size > MAX_DOCUMENT_BYTES:
                return f"{_at(current)}holds more than 1.5 MiB, the most the API server stores in one object{_aliased(node)}"
            sizes[key] = (values, size, depth)
            continue
        if key in sizes:
            continue
        if key in open_:
            return f"{_at(current)}an alias refers to a value that contains it"
        open_.add(key)
        stack.append((current, True))
        stack.extend((child, False) for child in reversed(_children(current)) if id(child) not in sizes)
    return None


def _at(node: yaml.Node) -> str:
    mark = node.start_mark
    return f"line {mark.line + 1}: " if mark is not None else ""


def _aliased(node: yaml.Node) -> str:
    return " (YAML aliases count once per use)" if _uses_aliases(node) else ""


def _uses_aliases(node: yaml.Node) -> bool:
    seen: set[int] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            return True
        seen.add(id(current))
        stack.extend(_children(current))
    return False


@dataclass(frozen=True)
class Document:
    file: str
    index: int
    body: Any
    item: str = ""  # "items[2]" (or "items[2].items[0]") for an item of a List document, which kubectl unwraps

    @property
    def where(self) -> str:
        """The file, and the item of a List document: what each problem line starts with."""
        return f"{self.file}: {self.item}" if self.item else self.file


def is_list(body: dict[str, Any]) -> bool:
    """A List document, as kubectl apply -f reads one (``kind: List`` or ``<Kind>List``, with ``items``)."""
    kind = body.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and "items" in body and "spec" not in body


def _unwrap(body: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The resources of a document: itself, or each item of a List (and of a List among its items), in order."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        item, current = stack.pop()
        if not isinstance(current, dict):
            shape = "a list" if isinstance(current, list) else f"a single {type(current).__name__} value"
            raise ManifestError(f"{where}{item}: {shape}, not an object: each item of a List must be a resource")
        if not is_list(current):
            yield item, current
            continue
        items, prefix = current["items"], f"{item}." if item else ""
        if items is None:
            continue
        if not isinstance(items, list):
            raise ManifestError(f"{where}{prefix}items: not a list: a {current['kind']}'s items are resources")
        stack.extend((f"{prefix}items[{i}]", x) for i, x in reversed(list(enumerate(items))))


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


def _read(path: Path) -> str:
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            with path.open("rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise ManifestError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB; split it into several files")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ManifestError(f"{path}: line {line}: not UTF-8 (byte 0x{data[exc.start]:02x}); YAML files are UTF-8") from exc


def load(paths: list[str]) -> Iterator[Document]:
    """Every non-empty document of every file, each item of a List document as its own; ManifestError, one line,
    on unreadable, malformed or unbounded input: a top-level value (or List item) that is not a mapping, nesting,
    aliases or sizes beyond the bounds above."""
    count = 0
    for path in expand(paths):
        loader = _StrictLoader(_read(path))
        try:
            index = 0
            while True:
                try:
                    if not loader.check_node():
                        break
                    node = loader.get_node()
                except yaml.YAMLError as exc:
                    raise ManifestError(f"{path}: malformed YAML: {_one_line(exc)}") from exc
                except RecursionError as exc:  # the pure-Python composer, where libyaml is missing
                    raise ManifestError(f"{path}: document {index + 1}: nested more than {MAX_NESTING} levels deep") from exc
                where = f"{path}: document {index + 1}: "
                if node is None:
                    index += 1
                    continue
                count += 1
                if count > MAX_DOCUMENTS:
                    raise ManifestError(f"{where}more than {MAX_DOCUMENTS:,} documents in one input; split it")
                refused = measure(node)
                if refused:
                    raise ManifestError(where + refused)
                try:
                    body = loader.construct_document(node)
                except yaml.YAMLError as exc:
                    raise ManifestError(f"{path}: malformed YAML: {_one_line(exc)}") from exc
                if body is not None and not isinstance(body, dict):
                    shape = "a list" if isinstance(body, list) else f"a single {type(body).__name__} value"
                    raise ManifestError(f"{where}{shape}, not an object: each document must be a mapping with "
                                        "apiVersion, kind, metadata and spec")
                if body is not None:
                    for n, (item, resource) in enumerate(_unwrap(body, where)):
                        count += n > 0  # each item of a List counts as a document
                        if count > MAX_DOCUMENTS:
                            raise ManifestError(f"{where}more than {MAX_DOCUMENTS:,} documents in one input; split it")
                        yield Document(str(path), index, resource, item)
                index += 1
        finally:
            loader.dispose()


def _one_line(exc: yaml.YAMLError) -> str:
    return " ".join(str(exc).replace('in "<unicode string>", ', "").split())


def dump_all(objects: list[dict[str, Any]]) -> str:
    """Multi-document YAML, stable: same objects, same bytes."""
    return yaml.dump_all(objects, Dumper=_SafeDumper, sort_keys=False, default_flow_style=False, width=1 << 16,
                         explicit_start=True, allow_unicode=False)
