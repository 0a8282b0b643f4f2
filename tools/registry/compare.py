"""``--compare``: the differences of two tables, path by path."""

from __future__ import annotations

import json
from typing import Any

IGNORED = {"read", "source"}


def differences(a: Any, b: Any, path: str = "", ignore: frozenset[str] = frozenset()) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k in ignore:
                continue
            p = f"{path}.{k}" if path else k
            if k not in a:
                out.append(f"{p}: only in the second: {json.dumps(b[k])[:300]}")
            elif k not in b:
                out.append(f"{p}: only in the first: {json.dumps(a[k])[:300]}")
            else:
                out += differences(a[k], b[k], p, ignore)
        return out
    return [] if a == b else [f"{path}: {json.dumps(a)[:300]} != {json.dumps(b)[:300]}"]
