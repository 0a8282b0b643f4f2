"""One shard of a PoolingJob, start to finish: resume, send batches to vLLM, write part files, account, report.

The HiddenStateJob driver's machinery (shard.ShardRun: dataset, run record, progress, the pause while vLLM
is down, a full volume, ``_SUCCESS``) with batches instead of single prompts: consecutive inputs of the
shard in file order, ``--batch-size`` at a time (a batch never mixes texts and token-id lists), at most
``--concurrency`` batches in flight. Each batch's answer becomes one part file, then one append of its
manifest lines (vectors.py); an input counts as done only once its line is on disk, so a SIGKILL at any
instant loses nothing and duplicates nothing after the next run's resume.

- A batch vLLM refuses for its inputs (400/422: one text longer than the context, a token id out of the
  vocabulary) is split in halves, recursively, until each input at fault is alone: those go to failed.jsonl
  with vLLM's message, the rest succeed.
- Transient errors retry with backoff (``--max-attempts`` per batch; then its inputs fail), and every worker
  waits while /health is down. An answer that does not match its request is transient too.
- An answer that no input could change (an unknown model, a task the server does not pool) stops the shard:
  state failed, exit 1.
- Budget: each part file's exact size is reserved before it is written; one that does not fit stops new
  batches (those in flight still write if they fit) and the shard ends budget_exceeded, exit 3.
- A full volume (ENOSPC, EDQUOT) ends it output_full, exit 5, the folder as consistent as after a crash.

An OpenAI Batch file (``--format openaiBatch``, openai_batch.py): each line is one request to vLLM, as the
Batch API and vLLM's run_batch send it, with its own answer and usage; a batch is consecutive lines with at
most ``--batch-size`` inputs together (a longer line alone), its lines in flight at once and written to one part
file. A line vLLM refuses, or that runs out of attempts, fails alone (no halving: the line is the user's
request). With ``--outputs`` naming openaiBatch, the shard writes its lines of the Batch output file once it
succeeded, and whichever shard finds every shard done writes the whole file in input order (batch_output.py).

Prompt tokens per input: exact where the answer or the input says so (a token-id input: its length; the
token tasks: its rows; a batch of one text: vLLM's usage), else 0, since vLLM reports only the batch's total
(a share of it would be invented precision). Progress reports count inputs; ``hiddenSize`` is the vector
dimension and ``valueBytes`` the dtype's width.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooling_operator.api.clock import rfc3339
from pooling_operator.api.pooling_job_contract import (
    CHECKED,
    OPENAI_BATCH,
    TEXT_KEY,
    TOKEN_TASKS,
    VECTOR_BYTES,
    VECTOR_DTYPES,
    part_name,
)
from pooling_operator.api.shard_contract import (
    DATASET_UNREADABLE,
    EXIT_DATASET_UNREADABLE,
    EXIT_OK,
    EXIT_SPACE_DRIFT,
    SPACE_DRIFT,
)
from pooling_operator.pods.shard.budget import Budget, human_bytes
from pooling_operator.pods.shard.client import Transient
from pooling_operator.pods.shard.dataset import DatasetUnreadable, Parser, Sample, Shard, read_shard
from pooling_operator.pods.shard.files import out_of_space, remove
from pooling_operator.pods.shard.manifest import FailedLog, ManifestWriter
from pooling_operator.pods.shard.progress import Counts, Reporter, Sink
from pooling_operator.pods.shard.record import RunRecord
from pooling_operator.pods.shard.run import ShardFailed, ShardRun
from pooling_operator.pods.vectors import space
from pooling_operator.pods.vectors.batch_output import merge_if_done, write_shard_output
from pooling_operator.pods.vectors.client import Misconfigured, PoolingClient, Refused, ScoringClient, Vectors
from pooling_operator.pods.vectors.parts import (
    PartLines,
    VectorEntry,
    part_header,
    resume_vectors,
    write_part,
)
from pooling_operator.pods.vectors.scoring import line_parser
from pooling_operator.pods.vectors.space import SpaceCheckConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolingConfig:
    shard: int
    shards: int
    dataset: Path
    output: Path
    endpoint: str
    model: str
    task: str | None  # embed, classify, token_embed or token_classify; None for a scoring job
    batch_size: int
    dtype: str  # the vector dtype: float32, float16 or bfloat16
    run_info: dict[str, Any] | None = None  # the operator's --run-info: model, revision, image, command, embeddingSpace
    budget_bytes: int | None = None
    concurrency: int = 4
    max_attempts: int = 4
    retry_base_seconds: float = 0.5
    retry_max_seconds: float = 30.0
    health_timeout: float = 1800.0
    request_timeout: float = 600.0
    progress_interval: float = 5.0
    format: str = "jsonl"  # the dataset: jsonl or openaiBatch
    outputs: tuple[str, ...] = ("safetensors",)  # safetensors and/or openaiBatch
    models: tuple[str, ...] = ()  # the names an OpenAI Batch line's body.model may give (besides `model`)
    mode: str | None = None  # a scoring job's (crossEncoder, biEncoder, lateInteraction, generative), instead of task
    labels: tuple[int, ...] = ()  # mode generative: label_token_ids
    apply_softmax: bool = True  # mode generative
    item_first: bool = False  # mode generative
    space_check: SpaceCheckConfig | None = None  # spec.spaceCheck: the canaries before any input (space.py)
    document_instruction: str = ""  # spec.vectors.documentInstruction: before every text input


def batches(samples: Sequence[Sample], size: int) -> Iterator[list[Sample]]:
    """Consecutive samples, ``size`` at most, a new batch wherever texts and token-id lists alternate."""
    batch: list[Sample] = []
    for sample in samples:
        if batch and (len(batch) >= size or (sample.prompt is None) != (batch[0].prompt is None)):
            yield batch
            batch = []
        batch.append(sample)
    if batch:
        yield batch


def line_batches(samples: Sequence[Sample], size: int) -> Iterator[list[Sample]]:
    """Consecutive OpenAI Batch lines with at most ``size`` inputs together (a line with more goes alone)."""
    batch: list[Sample] = []
    inputs = 0
    for sample in samples:
        n = len(sample.inputs or ())
        if batch and inputs + n > size:
            yield batch
            batch, inputs = [], 0
        batch.append(sample)
        inputs += n
    if batch:
        yield batch


def _inputs(batch: Sequence[Sample], instruction: str = "") -> list[str] | list[tuple[int, ...]]:
    """What one request sends: the texts with the document instruction before each, or the token ids."""
    if batch[0].prompt is not None:
        return [instruction + s.prompt for s in batch if s.prompt is not None]
    return [s.token_ids for s in batch if s.token_ids is not None]


def instructed(inputs: tuple[str, ...] | tuple[tuple[int, ...], ...], instruction: str) -> tuple[str, ...] | tuple[tuple[int, ...], ...]:
    """An OpenAI Batch line's inputs with the document instruction before each text (token ids are refused before)."""
    if not instruction or not inputs or not isinstance(inputs[0], str):
        return inputs
    return tuple(instruction + str(text) for text in inputs)


def _token_ids_only(sample: Sample) -> bool:
    """An input of token ids (a line's token_ids, or an OpenAI Batch line's ids), which no instruction can precede.
    A scoring line (route) takes no instruction: admission refuses one for a mode."""
    if sample.route is not None or sample.prompt is not None:
        return False
    return sample.token_ids is not None or any(not isinstance(x, str) for x in sample.inputs or ())


NOT_INSTRUCTABLE = ("token ids cannot take spec.vectors.documentInstruction (it is text, prepended before "
                    "tokenization): give this input as text")


class PoolingDriver(ShardRun):
    config: PoolingConfig
    text_key = TEXT_KEY
    unit = "inputs"

    def __init__(self, config: PoolingConfig, sink: Sink | None = None) -> None:
        record = RunRecord(config.shard, config.shards, (), dict(config.run_info or {}), dtype=config.dtype,
                           task=config.task, mode=config.mode)  # fmt: skip
        super().__init__(config, sink, record, threads="pooling-io")
        self.st_dtype = VECTOR_DTYPES[config.dtype]
        self.dim: int | None = None  # the vectors' dimension: from the kept parts or the first answer
        self.next_part = 0

    @property
    def batch_file(self) -> bool:
        return self.config.format == OPENAI_BATCH

    @property
    def scoring(self) -> bool:
        return self.config.mode is not None

    @property
    def one_request_a_line(self) -> bool:
        """Each line is one request to vLLM (an OpenAI Batch line, a scoring line), not an input of a batch."""
        return self.batch_file or self.scoring

    @property
    def parser(self) -> tuple[Parser | None, str]:
        c = self.config
        return line_parser(c.format, c.mode, (c.model, *c.models))

    def _loaded(self, shard: Shard) -> None:
        super()._loaded(shard)
        self.counts.lines = shard.lines
        self.counts.value_bytes = VECTOR_BYTES[self.config.dtype]

    def _learn_dim(self, dim: int) -> bool:
        """The first dimension known; True when it is new."""
        if self.dim is not None:
            return False
        self.dim = self.record.dimension = self.counts.hidden_size = dim
        return True

    async def _shard(self, shard: Shard) -> tuple[str, int]:
        c = self.config
        resumed = await self._io(resume_vectors, self.paths, self.st_dtype)
        mine = {s.id for s in shard.samples}
        resumed_count = len(mine & resumed.entries.keys())
        todo = [s for s in shard.samples if s.id not in resumed.entries]
        self.next_part = resumed.next_part
        if resumed.dim is not None:
            self._learn_dim(resumed.dim)
        self.counts.done = resumed_count
        self.counts.bytes = resumed.bytes
        self.counts.tokens = sum(e.tokens for i, e in resumed.entries.items() if i in mine)
        log.info(
            "Resumed %s: %d of %d inputs already in the manifest (%d part files, %s), %d malformed lines; dropped %d "
            "torn and %d stale manifest lines, %d orphan part files and %d temporary files; next part %s", self.name,
            resumed_count, shard.total, len(resumed.sizes), human_bytes(resumed.bytes), len(shard.bad), resumed.torn,
            resumed.missing, resumed.orphans, resumed.leftovers, part_name(self.next_part),
        )
        budget = Budget(c.budget_bytes, resumed.bytes)

        def connect() -> PoolingClient | ScoringClient:
            # a batch of lines (OpenAI Batch, scoring) is up to batch_size requests in flight at once
            in_flight = c.concurrency * (c.batch_size if self.one_request_a_line else 1)
            if self.scoring:
                return ScoringClient(c.endpoint, c.model, concurrency=in_flight, request_timeout=c.request_timeout,
                                     labels=c.labels, apply_softmax=c.apply_softmax, item_first=c.item_first)  # fmt: skip
            assert c.task is not None
            return PoolingClient(c.endpoint, c.model, task=c.task, dtype=c.dtype, batch_size=c.batch_size,
                                 concurrency=in_flight, request_timeout=c.request_timeout)  # fmt: skip

        def started(client: PoolingClient | ScoringClient) -> None:
            log.info("Sending %d %s of %s to %s%s (%s, %s), %d a batch, %d batches in flight", len(todo),
                     "lines" if self.one_request_a_line else "inputs", self.name, c.endpoint, client.route,
                     c.mode or c.task, c.dtype, c.batch_size, c.concurrency)  # fmt: skip

        try:
            await self._serve(shard, todo, budget, connect, self._checked_process, started)
        except space.SpaceDrifted as exc:
            log.error("Stopped %s before writing a vector: %s", self.name, exc)
            return SPACE_DRIFT, EXIT_SPACE_DRIFT
        state = await self._finished(shard, budget, resumed_count)
        if state[1] == EXIT_OK and OPENAI_BATCH in c.outputs:
            await self._io(self._write_batch_output)
        return state

    async def _checked_process(self, todo: list[Sample], client: PoolingClient | ScoringClient, manifest: ManifestWriter,
                               failed: FailedLog, budget: Budget) -> None:
        """spec.spaceCheck: the canaries, compared with the space's reference, before any input (space.py)."""
        c = self.config
        if c.space_check is not None and c.task is not None:
            mine, compared = await space.check(client, c.model, c.task, c.space_check, c.output, c.shard, rfc3339())
            self.record.space_check = {**space.record_doc(mine), "comparedWith": compared}
            await self._io(self._write_record)
        await self._process(todo, client, manifest, failed, budget)

    def _write_batch_output(self) -> None:
        """This shard's lines of the OpenAI Batch output file; then the whole file if every shard is done."""
        c = self.config
        models = (c.model, *c.models)
        lines = write_shard_output(c.dataset, c.output, c.shard, c.shards, models, c.model, c.mode)
        log.info("Wrote %s's %d lines of the OpenAI Batch output file", self.name, lines)
        try:
            merged = merge_if_done(c.dataset, c.output, c.shards, keep_parts="safetensors" in c.outputs,
                                   writer=f"shard-{c.shard}")
        except ValueError as exc:  # another shard's file is from an earlier run: it merges once it is done
            log.warning("Did not write the whole OpenAI Batch output file yet: %s", exc)
            return
        if merged is not None:
            log.info("Every shard is done: wrote %s (%d lines, input order)", merged[0], merged[1])

    async def _process(self, todo: list[Sample], client: PoolingClient | ScoringClient, manifest: ManifestWriter, failed: FailedLog,
                       budget: Budget) -> None:
        lines = self.one_request_a_line
        if self.config.document_instruction:  # text only: an input of token ids fails, the others go on
            texts = []
            for sample in todo:
                if _token_ids_only(sample):
                    self._fail(failed, sample, NOT_INSTRUCTABLE)
                else:
                    texts.append(sample)
            todo = texts
        work = (line_batches if lines else batches)(todo, self.config.batch_size)
        # a line with more inputs than batchSize is a batch of its own: up to one batch per line
        count = len(todo) if lines else -(-len(todo) // self.config.batch_size)

        async def worker() -> None:
            # One shared iterator: each worker takes the next batch when it is free (bounded concurrency).
            for batch in work:
                if budget.exhausted or self.full is not None:
                    return
                if lines:
                    await self._lines(batch, client, manifest, failed, budget)
                else:
                    # connect() makes a ScoringClient only for a scoring job, whose lines are each one request
                    assert isinstance(client, PoolingClient)
                    await self._batch(batch, client, manifest, failed, budget)

        async with asyncio.TaskGroup() as group:
            for _ in range(min(self.config.concurrency, count)):
                group.create_task(worker())

    async def _batch(self, batch: list[Sample], client: PoolingClient, manifest: ManifestWriter, failed: FailedLog,
                     budget: Budget) -> None:
        c = self.config
        last = ""
        for attempt in range(1, c.max_attempts + 1):
            if not await self._ready_for(attempt):
                return
            try:
                vectors = await client.encode(_inputs(batch, c.document_instruction), self.dim)
                if self.dim is not None and vectors.dim != self.dim:  # an answer that raced the first one
                    raise Transient(f"the vectors have {vectors.dim} dimensions, earlier ones {self.dim}")
            except Transient as exc:
                last = exc.reason
                log.warning("Attempt %d of %d at the batch of %d inputs from %s (line %d) of %s failed: %s", attempt,
                            c.max_attempts, len(batch), batch[0].id, batch[0].line, self.name, exc.reason)  # fmt: skip
                if exc.server_down:
                    self._server_down(client)
                continue
            except Refused as exc:
                if len(batch) == 1:
                    self._fail(failed, batch[0], exc.reason)
                    return
                half = len(batch) // 2
                log.info("vLLM refused the batch of %d inputs from %s of %s (%s); splitting it", len(batch),
                         batch[0].id, self.name, exc.reason)  # fmt: skip
                for part in (batch[:half], batch[half:]):
                    if budget.exhausted or self.full is not None:
                        return
                    await self._batch(part, client, manifest, failed, budget)
                return
            except Misconfigured as exc:
                raise ShardFailed(f"vLLM refused a request no input could change: {exc.reason}") from exc
            await self._commit(batch, vectors, manifest, budget)
            return
        for sample in batch:
            self._fail(failed, sample, f"gave up after {c.max_attempts} attempts: {last}")

    async def _lines(self, batch: list[Sample], client: PoolingClient | ScoringClient, manifest: ManifestWriter, failed: FailedLog,
                     budget: Budget) -> None:  # fmt: skip
        """OpenAI Batch lines: each one request, all in flight at once; the answered ones into one part file."""
        answers: list[Vectors | str | None] = list(await asyncio.gather(*(self._line(s, client) for s in batch)))
        dims = [a.dim for a in answers if isinstance(a, Vectors)]
        for i, a in enumerate(answers):  # the first answers of a run, in flight together, must agree too
            if isinstance(a, Vectors) and a.dim != (self.dim or dims[0]):
                answers[i] = f"the vectors have {a.dim} dimensions, the job's others {self.dim or dims[0]}"
        done = [(s, v) for s, v in zip(batch, answers, strict=True) if isinstance(v, Vectors)]
        for sample, answer in zip(batch, answers, strict=True):
            if isinstance(answer, str):  # None: the volume is full, the line is sent again next run
                self._fail(failed, sample, answer)
        if not done or self.full is not None:
            return
        joined = Vectors(b"".join(v.data for _, v in done), tuple(sum(v.rows) for _, v in done), done[0][1].dim, None)
        tokens = [v.prompt_tokens or 0 for _, v in done]
        await self._commit([s for s, _ in done], joined, manifest, budget, tokens)

    async def _ready_for(self, attempt: int) -> bool:
        """Before an attempt: the backoff after a failed one, vLLM up; False once the volume is full."""
        if attempt > 1:
            await asyncio.sleep(self._backoff(attempt))
        await self._gate()
        return self.full is None

    async def _line(self, sample: Sample, client: PoolingClient | ScoringClient) -> Vectors | str | None:
        """One line's answer, why it has none (vLLM refused it, or every attempt failed), or None once the volume
        is full (not a failure of the line: the next run sends it again, as it does a batch's)."""
        c = self.config
        last = ""
        for attempt in range(1, c.max_attempts + 1):
            if not await self._ready_for(attempt):
                return None
            try:
                if isinstance(client, ScoringClient):
                    return await client.score(sample)
                vectors = await client.encode(instructed(sample.inputs or (), c.document_instruction), self.dim)
                if self.dim is not None and vectors.dim != self.dim:
                    raise Transient(f"the vectors have {vectors.dim} dimensions, earlier ones {self.dim}")
                return vectors
            except Transient as exc:
                last = exc.reason
                log.warning("Attempt %d of %d at %s (line %d) of %s failed: %s", attempt, c.max_attempts, sample.id,
                            sample.line, self.name, exc.reason)  # fmt: skip
                if exc.server_down:
                    self._server_down(client)
            except Refused as exc:
                return f"vLLM refused the request: {exc.reason}"
            except Misconfigured as exc:
                raise ShardFailed(f"vLLM refused a request no input could change: {exc.reason}") from exc
        return f"gave up after {c.max_attempts} attempts: {last}"

    def _tokens(self, batch: Sequence[Sample], vectors: Vectors) -> list[int]:
        if self.config.task in TOKEN_TASKS:
            return list(vectors.rows)
        if batch[0].token_ids is not None:
            return [len(s.token_ids or ()) for s in batch]
        if len(batch) == 1 and vectors.prompt_tokens is not None:
            return [vectors.prompt_tokens]
        return [0] * len(batch)

    async def _commit(self, batch: list[Sample], vectors: Vectors, manifest: ManifestWriter, budget: Budget,
                      tokens: list[int] | None = None) -> None:
        """Reserve, write the part file, append its lines; on ENOSPC neither stays (the part is removed once its
        lines could not be written: the writer has cut them back) and the volume counts as full."""
        if self._learn_dim(vectors.dim):
            log.info("%s: the vectors have %d dimensions (%s)", self.name, vectors.dim, self.config.dtype)
            with contextlib.suppress(OSError):
                await self._io(self._write_record)
        what = {"mode": self.config.mode} if self.config.mode else {"task": str(self.config.task)}
        header = part_header(self.st_dtype, sum(vectors.rows), vectors.dim, what)
        size = len(header) + len(vectors.data)
        if not budget.try_reserve(size):
            log.info("Did not write the batch of %d inputs from %s of %s: its %s would exceed the budget", len(batch),
                     batch[0].id, self.name, human_bytes(size))  # fmt: skip
            return
        index = self.next_part
        self.next_part += 1
        name = part_name(index)
        tokens = tokens if tokens is not None else self._tokens(batch, vectors)
        entries: list[VectorEntry] = []
        row = 0
        for sample, rows, n in zip(batch, vectors.rows, tokens, strict=True):
            entries.append(VectorEntry(sample.id, name, row, rows, n, size))
            row += rows
        written = 0
        step = f"writing {name}"
        try:
            await self._io(write_part, self.paths.folder, index, header, vectors.data)
            step = f"appending the manifest lines of {name}"
            try:
                await manifest.append(PartLines(tuple(entries)))
            except OSError:
                await self._io(remove, self.paths.folder / name)
                raise
            written = size
        except OSError as exc:
            if not out_of_space(exc):
                raise
            self._out_of_space(f"{step}: {exc}")
            return
        finally:
            await budget.settle(size, written)
        self.counts.done += len(batch)
        self.counts.bytes += size
        self.counts.tokens += sum(tokens)
        log.info("Wrote %s of %s: %d inputs, %d rows, %s (%d of %d done)", name, self.name, len(batch), row,
                 human_bytes(size), self.counts.done, self.counts.total)  # fmt: skip


async def preflight(dataset: Path, shard: int, shards: int, sink: Sink | None, parse: Parser | None = None,
                    id_field: str = "id") -> int:
    """The init container's check, before vLLM starts: read the whole dataset, log this shard's bad lines and
    report state checked with the shard's samples (bad ones included), its bad lines and the dataset's
    non-blank lines. 0 even with bad lines (they become failed.jsonl lines of the run); 4 when unreadable."""
    counts = Counts()
    reporter = Reporter(shard, sink, counts)
    try:
        found = await asyncio.to_thread(read_shard, dataset, shard, shards, TEXT_KEY, parse, id_field)
    except DatasetUnreadable as exc:
        log.error("Could not read the dataset of shard %d: %s", shard, exc)
        await reporter.final(DATASET_UNREADABLE)
        return EXIT_DATASET_UNREADABLE
    for bad in found.bad:
        log.warning("Line %d of the dataset (shard %d) will be skipped: %s", bad.line, shard, bad.reason)
    counts.total, counts.failed, counts.lines = found.total, len(found.bad), found.lines
    log.info("Checked shard %d of %d: %d inputs, %d of them bad; the dataset has %d lines", shard, shards,
             found.total, len(found.bad), found.lines)  # fmt: skip
    await reporter.final(CHECKED)
    return EXIT_OK
