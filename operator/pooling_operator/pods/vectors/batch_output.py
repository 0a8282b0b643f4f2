"""The OpenAI Batch output file of a PoolingJob, written from what the shards kept (openai_batch.py's lines).

A shard that succeeded writes its lines, in its input order, to ``shard-<I>/batch-output.jsonl``: for each of
its request lines, the answer from its manifest line and part file, or the error from failed.jsonl (a line that
is not a request: ``invalid_request``; one vLLM refused or that ran out of attempts: ``request_failed``). The
file is built from the manifest, not from the answers as they came, so a shard resumed after a crash writes
every custom_id exactly once. Whichever shard then finds every shard's ``_SUCCESS`` and lines writes the whole
file, ``batch-output.jsonl`` beside the shard folders, in input order: line ``i`` of the input belongs to shard
``i mod N`` (dataset.owns), so the merge takes the next line of that shard's file for each request line. Two
shards finishing together both write the same bytes, each by an atomic rename. Without safetensors among the
job's outputs the part files are removed after the merge.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pooling_operator.api.pooling_job_contract import BATCH_OUTPUT, OPENAI_BATCH
from pooling_operator.api.shard_contract import FAILED_LOG, MANIFEST, SUCCESS_MARKER, shard_folder
from pooling_operator.pods.shard.dataset import json_object, owns, read_shard
from pooling_operator.pods.shard.files import TMP_SUFFIX, fsync_dir, move_into_place, remove, write_new
from pooling_operator.pods.shard.tensors import header_length, parse_header
from pooling_operator.pods.vectors.openai_batch import (
    FAILED,
    INVALID,
    dimension_mismatch,
    dumps,
    envelope,
    error_line,
    request_of,
    success_line,
)
from pooling_operator.pods.vectors.parts import VectorEntry, parse_vector_entry
from pooling_operator.pods.vectors.scoring import (
    ScoringRequest,
    check_scoring_request,
    line_parser,
    scoring_body,
)


def _floats(dtype: str, data: bytes) -> list[float]:
    """Little-endian F32, F16 or BF16 bytes as floats (no numpy in the image)."""
    if dtype == "F32":
        return list(struct.unpack(f"<{len(data) // 4}f", data))
    if dtype == "F16":
        return list(struct.unpack(f"<{len(data) // 2}e", data))
    if dtype == "BF16":  # the high half of a float32
        n = len(data) // 2
        widened = b"".join(b"\x00\x00" + data[2 * i : 2 * i + 2] for i in range(n))
        return list(struct.unpack(f"<{n}f", widened))
    raise ValueError(f"not a vector dtype: {dtype}")


class Parts:
    """Rows of a shard's part files, one file held at a time (a shard's lines come in part order)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._name: str | None = None
        self._rows: list[list[float]] = []

    def rows(self, entry: VectorEntry) -> list[list[float]]:
        if entry.file != self._name:
            raw = (self.folder / entry.file).read_bytes()
            n = header_length(raw[:8], len(raw))
            [tensor] = parse_header(raw[8 : 8 + n], len(raw) - 8 - n).values()
            values = _floats(tensor.dtype, raw[8 + n + tensor.begin : 8 + n + tensor.end])
            dim = tensor.shape[1]
            self._rows = [values[i : i + dim] for i in range(0, len(values), dim)]
            self._name = entry.file
        return self._rows[entry.row : entry.row + entry.rows]


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    for raw in path.read_bytes().splitlines():
        if raw.strip():
            yield json.loads(raw)


def _write(path: Path, chunks: Iterator[bytes], writer: str = "") -> None:
    """``path`` by an atomic rename; ``writer`` names the temporary file, so two shards merging at once never
    share one (each renames its own; the last wins, with the same bytes)."""
    tmp = path.with_name(f"{path.name}{'.' + writer if writer else ''}{TMP_SUFFIX}")
    try:
        write_new(tmp, chunks)
        move_into_place(str(tmp), path, TMP_SUFFIX)
        fsync_dir(path.parent)
    except BaseException:
        remove(tmp)
        raise


def shard_lines(dataset: Path, output: Path, shard: int, shards: int, models: Sequence[str], served: str,
                created: int, mode: str | None = None) -> Iterator[bytes]:  # fmt: skip
    """The shard's output lines, in its input order; ``mode``: a scoring job's (its lines are /v1/rerank and
    /v1/score requests, scoring.py)."""
    parse, id_field = line_parser(OPENAI_BATCH, mode, models)
    found = read_shard(dataset, shard, shards, parse=parse, id_field=id_field)
    invalid = {b.line: b for b in found.bad}
    requests = {s.line: s for s in found.samples}
    folder = output / shard_folder(shard)
    failed = {d["line"]: d for d in _jsonl(folder / FAILED_LOG)}
    entries: dict[str, VectorEntry] = {}
    if (folder / MANIFEST).exists():
        for raw in (folder / MANIFEST).read_bytes().splitlines():
            entry = parse_vector_entry(raw)
            if entry is not None:
                entries[entry.id] = entry
    parts = Parts(folder)
    with dataset.open("rb") as f:
        for index, raw in enumerate(f):
            if not owns(index, shard, shards):
                continue
            line = index + 1
            bad, sample = invalid.get(line), requests.get(line)
            if bad is not None:
                yield dumps(error_line(line, bad.id, INVALID, bad.reason))
                continue
            if sample is None:
                continue  # a blank line: no request
            entry = entries.get(sample.id)
            if line in failed or entry is None:
                reason = failed.get(line, {}).get("reason") or "not answered"
                yield dumps(error_line(line, sample.id, FAILED, reason))
                continue
            rows = parts.rows(entry)
            if mode is not None:
                scoring = check_scoring_request(json.loads(raw), models)
                assert isinstance(scoring, ScoringRequest), scoring
                if len(rows) != len(scoring.documents):  # the line changed since its scores were kept
                    yield dumps(error_line(line, sample.id, INVALID, f"the line has {len(scoring.documents)} documents, "
                                           f"its kept scores {len(rows)}: the file changed between runs"))  # fmt: skip
                    continue
                body = scoring_body(scoring, line, [r[0] for r in rows], entry.tokens, served, created)
                yield dumps(envelope(line, sample.id, body))
                continue
            request = request_of(raw.rstrip(b"\r\n"), models)
            mismatch = dimension_mismatch(request, len(rows[0]))
            if mismatch:
                yield dumps(error_line(line, sample.id, INVALID, mismatch))
                continue
            yield dumps(success_line(request, line, rows, entry.tokens, served, created))


def write_shard_output(dataset: Path, output: Path, shard: int, shards: int, models: Sequence[str],
                       served: str, mode: str | None = None) -> int:  # fmt: skip
    """Write ``shard-<I>/batch-output.jsonl``; its line count."""
    count = 0

    def counted() -> Iterator[bytes]:
        nonlocal count
        for line in shard_lines(dataset, output, shard, shards, models, served, int(time.time()), mode):
            count += 1
            yield line

    _write(output / shard_folder(shard) / BATCH_OUTPUT, counted())
    return count


def merge_if_done(dataset: Path, output: Path, shards: int, keep_parts: bool, writer: str = "") -> tuple[Path, int] | None:
    """The whole output file in input order, once every shard has succeeded and written its lines; None before."""
    folders = [output / shard_folder(k) for k in range(shards)]
    if not all((f / SUCCESS_MARKER).exists() and (f / BATCH_OUTPUT).exists() for f in folders):
        return None
    readers = [(f / BATCH_OUTPUT).open("rb") for f in folders]
    count = 0
    try:

        def merged() -> Iterator[bytes]:
            nonlocal count
            with dataset.open("rb") as f:
                for index, raw in enumerate(f):
                    raw = raw.rstrip(b"\r\n")
                    if json_object(raw, index + 1) is None:  # a blank line: no request, no output line
                        continue
                    line = readers[index % shards].readline()
                    if not line:
                        raise ValueError(f"{folders[index % shards] / BATCH_OUTPUT} ends before input line {index + 1}")
                    count += 1
                    yield line

        target = output / BATCH_OUTPUT
        _write(target, merged(), writer)
    finally:
        for r in readers:
            r.close()
    if not keep_parts:
        for folder in folders:
            for part in folder.glob("part-*.safetensors"):
                remove(part)
    return target, count
