"""What the names a user writes may hold (issue 42.5). Pure; read by the chains of vllm/rules.py.

- A Hugging Face repository id (the model of a huggingFace or cache source, a ModelCache's model) is what
  huggingface_hub's ``validate_repo_id`` accepts: ASCII letters, digits, ``-``, ``_`` and ``.``, one optional
  ``OWNER/`` part, neither part starting or ending with ``-`` or ``.``, no ``--`` or ``..``, at most 96
  characters a part. A Cyrillic look-alike passes a schema pattern and fails in vLLM at start-up; the refusal
  names the character and its position, which the library's message does not.
- Any other name or label (a volume source's model label, ``servedName``, ``revision``) holds no invisible or
  direction-changing character: controls, format characters (a zero-width space, a right-to-left override that
  shows the name reversed in ``kubectl get``), separators other than the space, private-use or unassigned ones.

Each problem names the field, the character's position (1-based) and the character by its Unicode name.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Iterator

from pooling_operator.api import ModelCache
from pooling_operator.api.base import ModelSpec
from pooling_operator.api.problems import Problem, shown

HUB_ALPHABET = frozenset(string.ascii_letters + string.digits + "-_.")
HIDDEN_CATEGORIES = {"Cc", "Cf", "Co", "Cn", "Zl", "Zp"}


def character(c: str) -> str:
    return f"U+{ord(c):04X} {unicodedata.name(c, 'UNNAMED')}"


def repo_id_problems(path: str, name: str) -> Iterator[Problem]:
    """Whether ``name`` is a Hugging Face repository id, by huggingface_hub's own check (the Hub client's; imported
    here, on first use: it brings httpx), with the first character outside the Hub's alphabet named."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError as exc:
        why = str(exc).split(": '")[0].rstrip(".")
        bad = next(((i, c) for i, c in enumerate(name, 1) if c not in HUB_ALPHABET and c != "/"), None)
        if bad is not None:
            yield Problem(path, f"character {bad[0]} of {shown(name)} is {character(bad[1])}, which a Hugging Face "
                                "repository id cannot hold: ASCII letters, digits, '-', '_' and '.', and one '/' "
                                "between owner and name")
        else:
            yield Problem(path, f"{shown(name)} is not a Hugging Face repository id: {why}")


def visible_problems(path: str, value: str) -> Iterator[Problem]:
    """The first invisible or direction-changing character of ``value``, if any."""
    for i, c in enumerate(value, 1):
        if unicodedata.category(c) in HIDDEN_CATEGORIES or (c.isspace() and c != " "):
            yield Problem(path, f"character {i} is {character(c)}, an invisible or direction-changing character: "
                                "remove it (names show and compare as written)")
            return


def model_name_problems(model: ModelSpec) -> Iterator[Problem]:
    """A served model's names: a repository id from the Hub or a cache, a visible label for a volume."""
    source = model.source
    from_hub = source is None or source.hugging_face is not None or source.cache is not None
    yield from (repo_id_problems if from_hub else visible_problems)("spec.model.name", model.name)
    for path, value in (("spec.model.servedName", model.served_name), ("spec.model.revision", model.revision)):
        if value:
            yield from visible_problems(path, value)


def cache_name_problems(cache: ModelCache) -> Iterator[Problem]:
    yield from repo_id_problems("spec.model.name", cache.spec.model.name)
    if cache.spec.model.revision:
        yield from visible_problems("spec.model.revision", cache.spec.model.revision)
