"""One shard of a JSONL dataset: which lines it owns, and which of them are malformed.

A line is ``{"id": ..., "<text key>": "..."}`` or ``{"id": ..., "token_ids": [...]}``; the text key is
``prompt`` for a HiddenStateJob and ``text`` for a PoolingJob (api/pooling_job_contract.TEXT_KEY).

A line belongs to shard ``I`` of ``N`` when its 0-based index mod N == I, so the assignment is stable
across restarts and needs no coordination. Lines are numbered from 1 in everything a person reads
(failed.jsonl, logs). Blank lines keep their index but are not samples. An id that appears twice in
the file belongs to its first line, even a malformed one; later lines with it are failed samples on whichever shard owns them,
so every id lands in exactly one manifest however the dataset repeats itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class DatasetUnreadable(Exception):
    """The dataset cannot be opened or read at all (not: a bad line, which is a failed sample)."""


@dataclass(frozen=True, slots=True)  # one per prompt of the shard, held for the whole run
class Sample:
    id: str
    line: int
    prompt: str | None = None  # the line's text, whatever its key
    token_ids: tuple[int, ...] | None = None
    inputs: tuple[str, ...] | tuple[tuple[int, ...], ...] | None = None  # an OpenAI Batch line's, a scoring line's documents
    route: str | None = None  # a scoring line's: rerank, score or generative (pods/vectors/scoring.py)


@dataclass(frozen=True)
class BadLine:
    line: int
    id: str | None
    reason: str


@dataclass(frozen=True)
class Shard:
    samples: list[Sample]
    bad: list[BadLine]
    lines: int = 0  # the whole file's non-blank lines, every shard's

    @property
    def total(self) -> int:
        return len(self.samples) + len(self.bad)


def owns(index: int, shard: int, shards: int) -> bool:
    """Whether the line at 0-based ``index`` belongs to ``shard`` of ``shards``."""
    return index % shards == shard


def json_object(raw: bytes, line: int) -> dict[str, Any] | BadLine | None:
    """A line as a JSON object, a bad line saying why it is not one, or None for a blank line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BadLine(line, None, f"not UTF-8: {exc.reason} at byte {exc.start}")
    if not text.strip():
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return BadLine(line, None, f"not JSON: {exc.msg} at column {exc.colno}")
    if not isinstance(doc, dict):
        return BadLine(line, None, f"not a JSON object but {type(doc).__name__}")
    return doc


def parse_line(raw: bytes, line: int, text_key: str = "prompt") -> Sample | BadLine | None:
    """One dataset line -> a sample, a bad line with the reason, or None for a blank line."""
    doc = json_object(raw, line)
    if not isinstance(doc, dict):
        return doc
    raw_id = doc.get("id")
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
        return BadLine(line, None, "id must be a non-empty string")
    sample_id = str(raw_id)
    if not sample_id:
        return BadLine(line, None, "id must be a non-empty string")
    has_prompt, has_tokens = text_key in doc, "token_ids" in doc
    if has_prompt == has_tokens:
        return BadLine(line, sample_id, f"needs exactly one of {text_key} or token_ids")
    if has_prompt:
        prompt = doc[text_key]
        if not isinstance(prompt, str) or not prompt:
            return BadLine(line, sample_id, f"{text_key} must be a non-empty string")
        return Sample(sample_id, line, prompt=prompt)
    tokens = doc["token_ids"]
    if (
        not isinstance(tokens, list)
        or not tokens
        or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens)
    ):
        return BadLine(line, sample_id, "token_ids must be a non-empty list of non-negative integers")
    return Sample(sample_id, line, token_ids=tuple(tokens))


Parser = Callable[[bytes, int], "Sample | BadLine | None"]


def read_shard(path: Path, shard: int, shards: int, text_key: str = "prompt", parse: Parser | None = None,
               id_field: str = "id") -> Shard:
    """The samples and bad lines of one shard, in file order; ``parse`` reads a line instead of ``parse_line``
    (an OpenAI Batch file's, pods/vectors/openai_batch.py).

    Every line is parsed (not only this shard's) because duplicate ids are resolved across the whole
    file. Raises DatasetUnreadable when the file cannot be opened or read.
    """
    first_line: dict[str, int] = {}
    samples: list[Sample] = []
    bad: list[BadLine] = []
    lines = 0
    try:
        with path.open("rb") as f:
            for index, raw in enumerate(f):
                mine = owns(index, shard, shards)
                parsed = (parse(raw.rstrip(b"\r\n"), index + 1) if parse is not None
                          else parse_line(raw.rstrip(b"\r\n"), index + 1, text_key))
                lines += parsed is not None
                if isinstance(parsed, BadLine) and parsed.id:
                    first_line.setdefault(parsed.id, parsed.line)  # an id is its first line's, bad or not
                if isinstance(parsed, Sample):
                    first = first_line.setdefault(parsed.id, parsed.line)
                    if first != parsed.line:
                        parsed = BadLine(parsed.line, parsed.id, f"duplicate {id_field}, first at line {first}")
                if not mine or parsed is None:
                    continue
                (samples if isinstance(parsed, Sample) else bad).append(parsed)  # type: ignore[arg-type]
    except OSError as exc:
        raise DatasetUnreadable(f"{path}: {exc.strerror or exc}") from exc
    return Shard(samples, bad, lines)
