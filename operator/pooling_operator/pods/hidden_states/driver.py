"""One shard of a HiddenStateJob, start to finish: resume, feed vLLM, collect files, account, report.

Every step is safe to interrupt (SIGKILL, eviction, node loss): a sample counts as finished only when its
manifest line is on disk, and the next run's resume repairs whatever a crash left half done (see
manifest.resume). Exit codes (api/shard_contract): 0 done (failed samples are listed in failed.jsonl
and do not fail the shard), 1 vLLM unavailable or an unexpected error (the Job retries the shard), 3 the
storage budget would be exceeded, 4 the dataset cannot be read, 5 the output volume is full (3, 4 and 5 end
the whole Job: a retry cannot help).

A full volume (ENOSPC or EDQUOT from any write, or vLLM's file coming back partial while the volume has
less room than the file needs) stops the shard as the budget does: no new sample starts, samples in
flight finish or are dropped, a sample whose file or line could not be written is not counted and leaves
neither (its moved file is removed at once), and the manifest keeps only whole lines. Once space is
freed, the next run resumes from the manifest like after any stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooling_operator.pods.hidden_states.files import (
    FLOAT_DTYPES,
    Expectation,
    FileFacts,
    discard,
    inspect_file,
)
from pooling_operator.pods.shard.budget import Budget, estimate_file_bytes, human_bytes, tokens_upper_bound
from pooling_operator.pods.shard.client import Completion, Permanent, Transient, VllmClient
from pooling_operator.pods.shard.dataset import Sample, Shard
from pooling_operator.pods.shard.files import TMP_SUFFIX, free_bytes, move_into_place, out_of_space, remove
from pooling_operator.pods.shard.manifest import Entry, FailedLog, ManifestWriter, file_name, resume
from pooling_operator.pods.shard.progress import Sink
from pooling_operator.pods.shard.record import RunRecord
from pooling_operator.pods.shard.run import ServerUnavailable, ShardRun
from pooling_operator.pods.shard.tensors import DTYPE_BYTES, InvalidFile

__all__ = ["Config", "Driver", "ServerUnavailable"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Config:
    shard: int
    shards: int
    dataset: Path
    output: Path
    endpoint: str
    model: str
    layers: tuple[int, ...]
    dtype_bytes: int | None  # None: ``--dtype-bytes auto``, learned from the first good file
    hidden_size: int | None = None
    run_info: dict[str, Any] | None = None  # the operator's --run-info: model, revision, image, vLLM's command
    budget_bytes: int | None = None
    concurrency: int = 32
    max_attempts: int = 4
    retry_base_seconds: float = 0.5
    retry_max_seconds: float = 30.0
    health_timeout: float = 1800.0
    request_timeout: float = 600.0
    lock_timeout: float = 600.0
    progress_interval: float = 5.0


class Driver(ShardRun):
    config: Config

    def __init__(self, config: Config, sink: Sink | None = None) -> None:
        record = RunRecord(config.shard, config.shards, config.layers, dict(config.run_info or {}),
                           hidden_size=config.hidden_size)  # fmt: skip
        super().__init__(config, sink, record, threads="hidden-states-io")
        self.width: int | None = config.dtype_bytes  # bytes a hidden-state value; None until the first file says
        self._recorded_file = False

    @property
    def width_bound(self) -> int:
        """The width estimates use: the known one, else the widest float vLLM writes (a budget is never
        undershot before the first file has said)."""
        return self.width if self.width is not None else max(DTYPE_BYTES[d] for d in FLOAT_DTYPES)

    async def _shard(self, shard: Shard) -> tuple[str, int]:
        c = self.config
        resumed = await self._io(resume, self.paths)
        mine = {s.id for s in shard.samples}
        resumed_count = len(mine & resumed.entries.keys())
        todo = [s for s in shard.samples if s.id not in resumed.entries]
        self.counts.done = resumed_count
        self.counts.bytes = resumed.bytes
        self.counts.tokens = sum(e.tokens for i, e in resumed.entries.items() if i in mine)
        self.counts.hidden_size = c.hidden_size or 0
        self.counts.value_bytes = self.width or 0
        log.info(
            "Resumed %s: %d of %d samples already in the manifest (%s), %d malformed lines; dropped %d torn and %d "
            "stale manifest lines, %d orphan files and %d staged files", self.name, resumed_count, shard.total,
            human_bytes(resumed.bytes), len(shard.bad), resumed.torn, resumed.missing, resumed.orphans, resumed.staged,
        )
        budget = Budget(c.budget_bytes, resumed.bytes)
        await self._serve(shard, todo, budget, lambda: VllmClient(c.endpoint, c.model, concurrency=c.concurrency,
                                                                  request_timeout=c.request_timeout), self._process)  # fmt: skip
        await self._io(self._clean_staging)
        return await self._finished(shard, budget, resumed_count)

    async def _process(self, todo: list[Sample], client: VllmClient, manifest: ManifestWriter, failed: FailedLog,
                       budget: Budget) -> None:
        samples: Iterator[Sample] = iter(todo)

        async def worker() -> None:
            # One shared iterator: each worker takes the next sample when it is free (bounded concurrency).
            for sample in samples:
                if budget.exhausted or self.full is not None:
                    return
                await self._sample(sample, client, manifest, failed, budget)

        async with asyncio.TaskGroup() as group:
            for _ in range(min(self.config.concurrency, len(todo))):
                group.create_task(worker())

    async def _estimate(self, sample: Sample, client: VllmClient) -> int:
        c = self.config
        if sample.token_ids is not None:
            tokens = len(sample.token_ids)
        else:
            assert sample.prompt is not None
            ids = await client.count_tokens(sample.prompt)
            tokens = len(ids) if ids is not None else tokens_upper_bound(sample.prompt)
        assert c.hidden_size is not None  # the CLI requires it with a budget
        return estimate_file_bytes(tokens, len(c.layers), c.hidden_size, self.width_bound)

    async def _sample(self, sample: Sample, client: VllmClient, manifest: ManifestWriter, failed: FailedLog,
                      budget: Budget) -> None:
        c = self.config
        reserved = 0
        last = ""
        try:
            for attempt in range(1, c.max_attempts + 1):
                if attempt > 1:
                    await asyncio.sleep(self._backoff(attempt))
                await self._gate()
                if self.full is not None:
                    return
                completion: Completion | None = None
                try:
                    if budget.limit is not None and not reserved:
                        estimate = await self._estimate(sample, client)
                        if not await budget.reserve(estimate):
                            log.info("Did not start sample %s of %s: its estimated %s would exceed the budget",
                                     sample.id, self.name, human_bytes(estimate))
                            return
                        reserved = estimate
                    completion = await client.complete(sample.prompt if sample.prompt is not None else sample.token_ids or ())
                    facts = await self._io(self._inspect, completion, sample)
                except Transient as exc:
                    last = exc.reason
                    log.warning("Attempt %d of %d at sample %s of %s failed: %s", attempt, c.max_attempts, sample.id,
                                self.name, exc.reason)
                    if exc.server_down:
                        self._server_down(client)
                    continue
                except Permanent as exc:
                    self._fail(failed, sample, exc.reason)
                    return
                except InvalidFile as exc:
                    assert completion is not None
                    await self._io(discard, completion.hidden_states_path)
                    if not exc.retryable:
                        self._fail(failed, sample, f"invalid file: {exc.reason}")
                        return
                    short = await self._io(self._short_of_space, completion, sample)
                    if short is not None:
                        self._out_of_space(f"vLLM's file for sample {sample.id} is missing or partial ({exc.reason}) and {short}")
                        return
                    last = f"invalid file: {exc.reason}"
                    log.warning("Attempt %d of %d at sample %s of %s gave an invalid file: %s", attempt, c.max_attempts,
                                sample.id, self.name, exc.reason)
                    continue
                except OSError as exc:
                    # Flushing vLLM's file (inspect_file's fsync) found the volume full.
                    if completion is None or not out_of_space(exc):
                        raise
                    await self._io(discard, completion.hidden_states_path)
                    self._out_of_space(f"flushing vLLM's file for sample {sample.id}: {exc}")
                    return
                if not await self._commit(sample, completion.hidden_states_path, facts, manifest):
                    return
                if reserved and facts.bytes > reserved:
                    log.warning("Sample %s of %s took %d bytes, %d more than estimated", sample.id, self.name,
                                facts.bytes, facts.bytes - reserved)
                await budget.settle(reserved, facts.bytes)
                reserved = 0
                return
            self._fail(failed, sample, f"gave up after {c.max_attempts} attempts: {last}")
        finally:
            if reserved:
                await budget.settle(reserved, 0)

    def _inspect(self, completion: Completion, sample: Sample) -> FileFacts:
        c = self.config
        tokens = completion.prompt_tokens
        if sample.token_ids is not None:
            if tokens is not None and tokens != len(sample.token_ids):
                raise InvalidFile(f"vLLM counted {tokens} prompt tokens, the sample has {len(sample.token_ids)}",
                                  retryable=False)
            tokens = len(sample.token_ids)
        expect = Expectation(layers=len(c.layers), dtype_bytes=self.width, hidden_size=c.hidden_size, tokens=tokens,
                             token_ids=sample.token_ids)
        facts = inspect_file(completion.hidden_states_path, expect, lock_timeout=c.lock_timeout)
        if not self._recorded_file:  # the first good file of this run says what the files hold
            self._recorded_file = True
            self.record.dtype, self.record.hidden_size = facts.dtype, facts.hidden_size
            self.counts.hidden_size, self.counts.value_bytes = facts.hidden_size, DTYPE_BYTES[facts.dtype]
            with contextlib.suppress(OSError):
                self._write_record()
        if self.width is None:  # --dtype-bytes auto: the first good file says what vLLM's auto dtype is
            self.width = DTYPE_BYTES[facts.dtype]
            log.info("%s: vLLM writes %s hidden states (%d bytes a value), learned from sample %s; every later file "
                     "must match", self.name, facts.dtype, self.width, sample.id)
        return facts

    async def _commit(self, sample: Sample, staged: str, facts: FileFacts, manifest: ManifestWriter) -> bool:
        """Move the file into place, then append its line; False when the volume is full. When the line
        cannot be written the writer has cut it back, so the moved file is an orphan: removed here at once
        rather than by the next resume (it is this sample's alone: names are distinct and resume removed any
        earlier file of the name). A failed move leaves no partial target (see move_into_place)."""
        name = file_name(sample.id)
        target = self.paths.folder / name
        step = f"moving the file of sample {sample.id} into place"
        try:
            await self._io(move_into_place, staged, target, TMP_SUFFIX)
            step = f"appending the manifest line of sample {sample.id}"
            try:
                await manifest.append(Entry(sample.id, name, facts.tokens, facts.bytes, facts.sha256))
            except OSError:
                await self._io(remove, target)
                raise
        except OSError as exc:
            if not out_of_space(exc):
                raise
            await self._io(discard, staged)
            self._out_of_space(f"{step}: {exc}")
            return False
        await self._io(discard, staged)  # the lock file (the data file has moved)
        self.counts.done += 1
        self.counts.bytes += facts.bytes
        self.counts.tokens += facts.tokens
        log.info("Wrote sample %s of %s (%d of %d, %d tokens, %s)", sample.id, self.name, self.counts.done,
                 self.counts.total, facts.tokens, human_bytes(facts.bytes))
        return True

    def _short_of_space(self, completion: Completion, sample: Sample) -> str | None:
        """After a partial file: does the output volume lack the room this sample's file needs? (vLLM writes
        it there; a connector that hits ENOSPC leaves a partial file or none, and says nothing.) Needs the
        hidden size to size the file; without it, only a volume with no byte left counts as full."""
        c = self.config
        tokens = len(sample.token_ids) if sample.token_ids is not None else completion.prompt_tokens
        needed = 1
        if c.hidden_size is not None and tokens:
            needed = estimate_file_bytes(tokens, len(c.layers), c.hidden_size, self.width_bound)
        try:
            free = free_bytes(self.paths.folder)
        except OSError:
            return None
        if free >= needed:
            return None
        return f"the output volume has {human_bytes(free)} free, the file needs about {human_bytes(needed)}"

    def _clean_staging(self) -> None:
        """Files no request of this run will collect (timed out, abandoned): garbage that counts against the volume."""
        if not self.paths.staging.is_dir():
            return
        for child in self.paths.staging.iterdir():
            if child.is_file():
                with contextlib.suppress(FileNotFoundError):
                    child.unlink()

