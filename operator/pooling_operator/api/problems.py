"""A validation finding: the field path, what is wrong and what would be accepted."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError


@dataclass(frozen=True, order=True)
class Problem:
    """One finding. ``path`` is a dotted field path from the object root, e.g. ``spec.pooling.type``."""

    path: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


SHOWN_CHARACTERS = 200


def nesting_problem(obj: Any, limit: int) -> Problem | None:
    """A Problem when lists and mappings nest more than ``limit`` deep, at the field (its first three path
    segments) that holds the nesting; found without recursion, however deep the object."""
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(obj, 0, ())]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, dict):
            children: list[tuple[Any, Any]] = list(value.items())
        elif isinstance(value, list):
            children = list(enumerate(value))
        else:
            continue
        if depth + 1 > limit:
            return Problem(join_path(path[:3]) or "(document)", f"nested more than {limit} levels deep; flatten it")
        stack.extend((child, depth + 1, (*path, key) if len(path) < 3 else path) for key, child in children)
    return None


def shown(text: str, limit: int = SHOWN_CHARACTERS) -> str:
    """User text as a message quotes it: whole when short, else its start and how much was left out (a name,
    key or value may be megabytes long; an answer stays one readable line)."""
    text = text.replace("\n", "\\n")
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def join_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


_BRANCH_NAMES = {"int", "str", "float", "bool", "list", "dict", "none"}


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The wire names of the fields of the model found at ``loc`` (for 'did you mean' hints)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        match = next(
            (f for n, f in current.model_fields.items() if (f.alias or n) == part or n == part),
            None,
        )
        if match is None:
            return []
        current = _unwrap(match.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _unwrap(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    if not args:
        return annotation
    for arg in args:
        inner = _unwrap(arg)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner
    return annotation


def _wire_loc(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """pydantic's error location with its union-branch tags ('int', 'list[...]', ...) dropped. A part that is a
    key or index of the input where it stands is the user's, whatever it is called (a key named 'str' too)."""
    out: list[Any] = []
    cursor: Any = data
    for part in loc:
        if isinstance(cursor, dict) and part in cursor:
            out.append(part)
            cursor = cursor[part]
        elif isinstance(cursor, list) and isinstance(part, int) and 0 <= part < len(cursor):
            out.append(part)
            cursor = cursor[part]
        elif isinstance(part, str) and (part in _BRANCH_NAMES or "[" in part):
            continue  # a branch tag: the same value, tried as one member of a union
        else:
            out.append(part)  # a field the input lacks (missing, or past what it holds)
            cursor = None
    return tuple(out)


def from_validation_error(
    error: ValidationError, model: type[BaseModel], prefix: tuple[Any, ...] = (), data: Any = None
) -> list[Problem]:
    """Turn pydantic's errors into Problems with wire field paths and messages that say what is accepted.
    ``data`` is the input that was validated: it tells the user's keys from pydantic's union-branch tags."""
    problems: list[Problem] = []
    for err in error.errors(include_url=False):
        loc = _wire_loc(tuple(err["loc"]), data)
        kind = err["type"]
        message = err["msg"]
        if kind == "extra_forbidden" and loc:
            known = _fields_at(model, loc[:-1])
            guess = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            hint = f"did you mean '{guess[0]}'? " if guess else ""
            message = f"unknown field; {hint}known fields here: {', '.join(known)}" if known else "unknown field"
        elif kind == "missing":
            message = "required field is missing"
        elif kind == "string_pattern_mismatch":
            message = f"{err['input']!r} does not match the pattern {err['ctx']['pattern']}"
        elif kind == "value_error":
            message = message.removeprefix("Value error, ")
        elif kind.endswith("_type") and "input" in err:
            message = f"{message} (got {err['input']!r})"
        problems.append(Problem(join_path(prefix + loc) if prefix + loc else "(document)", message))
    # A value of the wrong type in an int|str union reports once per branch; keep one line per path.
    unique: dict[str, Problem] = {}
    for p in problems:
        unique.setdefault(p.path, p)
    return list(unique.values())
