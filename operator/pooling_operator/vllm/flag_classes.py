"""What `engine.extraArgs` may do with each `vllm serve` flag: one class per flag (flags/classes.json, the one
source; its `about` says how it was made) and the keys of JSON values that load code. Pure; read by the
extraArgs rules of vllm/engine_rules.py.

- owned: set by the operator from a typed field (`field`); secret flags point to their Secret reference;
- refused: refused whatever the settings;
- code: loads code that is not part of vLLM; allowed only where the settings allow a model's own code;
- path: names a file or folder on the pod (confined like every value, vllm/confinement.py);
- plain: everything else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

ClassName = Literal["owned", "refused", "code", "path", "plain"]
CLASSES: tuple[ClassName, ...] = ("owned", "refused", "code", "path", "plain")


@dataclass(frozen=True)
class FlagClass:
    name: ClassName
    why: str = ""
    field: str | None = None  # owned: the typed field to set instead
    secret: bool = False  # owned: the flag carries a secret
    plain_values: frozenset[str] = frozenset()  # code: values that load nothing


def _entry(raw: dict[str, Any]) -> FlagClass:
    return FlagClass(
        name=raw["class"], why=raw.get("why", ""), field=raw.get("field"), secret=bool(raw.get("secret")),
        plain_values=frozenset(raw.get("plain_values") or ()),
    )


@cache
def _table() -> dict[str, Any]:
    return json.loads(resources.files("pooling_operator.vllm").joinpath("flags/classes.json").read_text())


@cache
def _classes() -> dict[tuple[str, bool], FlagClass]:
    out: dict[tuple[str, bool], FlagClass] = {}
    for flag, raw in _table()["flags"].items():
        mine = _entry(raw)
        other = _entry(raw["otherwise"]) if raw.get("owned_when") == "hidden_states" else mine
        out[(flag, True)], out[(flag, False)] = mine, other
    return out


def classify(flag: str, *, hidden_states: bool) -> FlagClass | None:
    """The class of a canonical positive flag (Contract.owner_of resolved), for a hidden-state workload or
    another; None when the table has no entry (tests/test_flag_classes.py keeps that from happening)."""
    return _classes().get((flag, hidden_states))


def flags_of(name: ClassName, *, hidden_states: bool = False) -> dict[str, FlagClass]:
    """Every flag of a class (for the docs and the tests)."""
    return {f: c for (f, hs), c in _classes().items() if hs == hidden_states and c.name == name}


def _segments(path: str) -> list[str]:
    return [s for s in path.split(".") if s]


def _paths(value: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key path in a JSON value: a mapping's key is a segment, a list's items are under `<key>[]`."""
    if isinstance(value, dict):
        for key, item in value.items():
            here = (*prefix, str(key))
            yield here
            yield from _paths(item, here)
    elif isinstance(value, list) and prefix:
        listed = (*prefix[:-1], prefix[-1] + "[]")
        for item in value:
            yield from _paths(item, listed)


def _matches(pattern: list[str], path: tuple[str, ...]) -> bool:
    return len(pattern) == len(path) and all(p in ("*", s) for p, s in zip(pattern, path, strict=True))


def code_keys(flag: str, option: str, value: str | None) -> list[tuple[str, str]]:
    """(key, why) of every key in the flag's JSON value, or named by a dotted option (`--flag.key value`), that
    loads code."""
    keys = {k: v for k, v in (_table()["json_keys"].get(flag) or {}).items() if v.get("class") == "code"}
    if not keys:
        return []
    name = option.split("=", 1)[0]
    dotted = name.split(".", 1)[1].rstrip("+") if "." in name else ""
    prefix = tuple(_segments(dotted))
    parsed: Any = None
    if value is not None and value[:1] in "{[":
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
    present: list[tuple[str, ...]] = []
    for i in range(1, len(prefix) + 1):
        present.append(prefix[:i])
    if isinstance(parsed, dict | list):
        present += list(_paths(parsed, prefix))
    found: list[tuple[str, str]] = []
    for key, info in sorted(keys.items()):
        pattern = _segments(key)
        if any(_matches(pattern, p) for p in present):
            found.append((key, info.get("why", "")))
    return found


def json_key_class(flag: str, key: str) -> str | None:
    """The class of one documented key of a JSON flag (None: plain)."""
    info = (_table()["json_keys"].get(flag) or {}).get(key)
    return info.get("class") if info else None
