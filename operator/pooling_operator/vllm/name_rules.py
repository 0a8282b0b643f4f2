"""What the names a user writes may hold (issue 42.5). Pure; read by the chains of vllm/rules.py.

- A Hugging Face repository id (the model of a huggingFace or cache source, a ModelCache's model) has the Hub's
  alphabet: ASCII letters, digits, ``-``, ``_`` and ``.``, one optional ``OWNER/`` part, neither part starting or
  ending with ``-`` or ``.``, no ``--`` or ``..``, at most 96 characters a part (huggingface_hub's
  ``validate_repo_id``, whose ``\\w`` also lets Unicode letters through, which the Hub itself refuses). A Cyrillic
  look-alike passes a schema pattern and fails in vLLM at start-up.
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
HUB_PART_MAX = 96
HIDDEN_CATEGORIES = {"Cc", "Cf", "Co", "Cn", "Zl", "Zp"}


def character(c: str) -> str:
    return f"U+{ord(c):04X} {unicodedata.name(c, 'UNNAMED')}"


def repo_id_problems(path: str, name: str) -> Iterator[Problem]:
    """The first way ``name`` is not a Hugging Face repository id, if any."""
    for i, c in enumerate(name, 1):
        if c not in HUB_ALPHABET and c != "/":
            yield Problem(path, f"character {i} of {shown(name)} is {character(c)}, which a Hugging Face repository "
                                "id cannot hold: ASCII letters, digits, '-', '_' and '.', and one '/' between "
                                "owner and name")
            return
    parts = name.split("/")
    if len(parts) > 2:
        yield Problem(path, f"{shown(name)} has {len(parts) - 1} '/': a Hugging Face repository id is NAME or OWNER/NAME")
        return
    for part in parts:
        if not part:
            yield Problem(path, f"{shown(name)} has an empty part: a Hugging Face repository id is NAME or OWNER/NAME")
        elif part[0] in "-." or part[-1] in "-.":
            yield Problem(path, f"{part!r} in {shown(name)} starts or ends with '-' or '.', which the Hub refuses")
        elif "--" in part or ".." in part:
            yield Problem(path, f"{part!r} in {shown(name)} holds '--' or '..', which the Hub refuses")
        elif len(part) > HUB_PART_MAX:
            yield Problem(path, f"{shown(part)} is {len(part)} characters; the Hub allows at most {HUB_PART_MAX} a part")
        else:
            continue
        return


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
