"""One shard of a HiddenStateJob, start to finish: resume, feed vLLM, collect files, account, report.

Every step is safe to interrupt (SIGKILL, eviction, node loss): a sample counts as finished only when its
manifest line is on disk, and the next run's resume repairs whatever a crash left half done (see
manifest.resume). Exit codes (api/hidden_state_contract): 0 done (failed samples are listed in failed.jsonl
and do not fail the shard), 1 vLLM unavailable or an unexpected error (the Job retries the shard), 3 the
storage budget would be exceeded, 4 the dataset cannot be read (3 and 4 end the whole Job: a retry cannot help).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import random
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pooling_operator.api.hidden_state_contract import (
    BUDGET_EXCEEDED,
    DATASET_UNREADABLE,
    EXIT_BUDGET_EXCEEDED,
    EXIT_DATASET_UNREADABLE,
    EXIT_FAILED,
    EXIT_OK,
    FAILED,
    SUCCEEDED,
)
from pooling_operator.hidden_states.budget import Budget, estimate_file_bytes, human_bytes, tokens_upper_bound
from pooling_operator.hidden_states.client import Completion, Permanent, Transient, VllmClient
from pooling_operator.hidden_states.dataset import DatasetUnreadable, Sample, Shard, read_shard
from pooling_operator.hidden_states.files import Expectation, FileFacts, InvalidFile, discard, inspect_file
from pooling_operator.hidden_states.manifest import (
    TMP_SUFFIX,
    Entry,
    FailedLog,
    ManifestWriter,
    ShardPaths,
    file_name,
    resume,
    write_json_atomically,
)
from pooling_operator.hidden_states.progress import Counts, Reporter, Sink

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
    dtype_bytes: int
    hidden_size: int | None = None
    budget_bytes: int | None = None
    concurrency: int = 32
    max_attempts: int = 4
    retry_base_seconds: float = 0.5
    retry_max_seconds: float = 30.0
    health_timeout: float = 1800.0
    request_timeout: float = 600.0
    lock_timeout: float = 600.0
    progress_interval: float = 5.0


class ServerUnavailable(Exception):
    """vLLM stayed unhealthy past the health timeout."""


class Driver:
    def __init__(self, config: Config, sink: Sink | None = None) -> None:
        self.config = config
        self.paths = ShardPaths(config.output, config.shard)
        self.counts = Counts()
        self.reporter = Reporter(config.shard, sink, self.counts, interval=config.progress_interval)
        self._executor = ThreadPoolExecutor(max_workers=config.concurrency + 2, thread_name_prefix="hidden-states-io")
        self._up = asyncio.Event()
        self._lost = False
        self._health: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return f"shard {self.config.shard}"

    async def _io(self, fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def run(self) -> int:
        try:
            return await self._run()
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> int:
        c = self.config
        try:
            shard = await self._io(read_shard, c.dataset, c.shard, c.shards)
        except DatasetUnreadable as exc:
            log.error("Could not read the dataset of %s: %s", self.name, exc)
            await self.reporter.final(DATASET_UNREADABLE)
            return EXIT_DATASET_UNREADABLE
        self.counts.total = shard.total
        ticker = asyncio.get_running_loop().create_task(self._tick())
        state, code = FAILED, EXIT_FAILED
        try:
            state, code = await self._shard(shard)
        except* ServerUnavailable as group:
            log.error("Gave up on %s: %s", self.name, group.exceptions[0])
        finally:
            # Also after an unexpected error (which then propagates): the operator should see "failed" at once.
            ticker.cancel()
            if self._health is not None:
                self._health.cancel()
            await self.reporter.final(state)
        return code

    async def _shard(self, shard: Shard) -> tuple[str, int]:
        c = self.config
        resumed = await self._io(resume, self.paths)
        mine = {s.id for s in shard.samples}
        resumed_count = len(mine & resumed.entries.keys())
        todo = [s for s in shard.samples if s.id not in resumed.entries]
        self.counts.done = resumed_count
        self.counts.bytes = resumed.bytes
        log.info(
            "Resumed %s: %d of %d samples already in the manifest (%s), %d malformed lines; dropped %d torn and %d "
            "stale manifest lines, %d orphan files and %d staged files", self.name, resumed_count, shard.total,
            human_bytes(resumed.bytes), len(shard.bad), resumed.torn, resumed.missing, resumed.orphans, resumed.staged,
        )
        budget = Budget(c.budget_bytes, resumed.bytes)
        async with contextlib.AsyncExitStack() as stack:
            failed = FailedLog(self.paths.failed)
            stack.callback(failed.close)
            for bad in shard.bad:
                failed.add(bad.id, bad.line, bad.reason)
                log.warning("Skipped line %d of the dataset (%s): %s", bad.line, self.name, bad.reason)
            self.counts.failed = failed.count
            manifest = ManifestWriter(self.paths.manifest, self._executor)
            stack.callback(manifest.close)
            client = VllmClient(c.endpoint, c.model, concurrency=c.concurrency, request_timeout=c.request_timeout)
            stack.push_async_callback(client.close)
            if todo:
                log.info("Waiting for vLLM at %s to be healthy", c.endpoint)
                if not await client.wait_healthy(c.health_timeout):
                    raise ServerUnavailable(f"vLLM at {c.endpoint} was not healthy within {c.health_timeout:.0f} s")
                self._up.set()
                await self._process(todo, client, manifest, failed, budget)
        await self._io(self._clean_staging)
        if budget.exhausted:
            log.error(
                "Stopped %s before exceeding its storage budget: %s of %s used, %d of %d samples done", self.name,
                human_bytes(budget.used), human_bytes(budget.limit or 0), self.counts.done, shard.total,
            )
            return BUDGET_EXCEEDED, EXIT_BUDGET_EXCEEDED
        await self._io(self._write_success, resumed_count)
        log.info(
            "Finished %s: %d done (%d from earlier runs), %d failed, %s", self.name, self.counts.done, resumed_count,
            self.counts.failed, human_bytes(self.counts.bytes),
        )
        return SUCCEEDED, EXIT_OK

    async def _tick(self) -> None:
        while True:
            self.reporter.tick()
            await asyncio.sleep(min(1.0, self.config.progress_interval))

    async def _process(self, todo: list[Sample], client: VllmClient, manifest: ManifestWriter, failed: FailedLog,
                       budget: Budget) -> None:
        samples: Iterator[Sample] = iter(todo)

        async def worker() -> None:
            # One shared iterator: each worker takes the next sample when it is free (bounded concurrency).
            for sample in samples:
                if budget.exhausted:
                    return
                await self._sample(sample, client, manifest, failed, budget)

        async with asyncio.TaskGroup() as group:
            for _ in range(min(self.config.concurrency, len(todo))):
                group.create_task(worker())

    async def _gate(self) -> None:
        await self._up.wait()
        if self._lost:
            raise ServerUnavailable(f"vLLM at {self.config.endpoint} did not recover within {self.config.health_timeout:.0f} s")

    def _server_down(self, client: VllmClient) -> None:
        """Hold every worker until /health answers again (vLLM restarts as a sidecar) or the timeout passes."""
        if not self._up.is_set():
            return
        self._up.clear()
        log.warning("vLLM looks down; pausing %s until /health answers", self.name)

        async def watch() -> None:
            if await client.wait_healthy(self.config.health_timeout):
                log.info("vLLM is healthy again; resuming %s", self.name)
            else:
                self._lost = True
            self._up.set()

        self._health = asyncio.get_running_loop().create_task(watch())

    def _backoff(self, attempt: int) -> float:
        c = self.config
        return min(c.retry_max_seconds, c.retry_base_seconds * 2 ** (attempt - 2)) * random.uniform(0.5, 1.0)

    async def _estimate(self, sample: Sample, client: VllmClient) -> int:
        c = self.config
        if sample.token_ids is not None:
            tokens = len(sample.token_ids)
        else:
            assert sample.prompt is not None
            ids = await client.count_tokens(sample.prompt)
            tokens = len(ids) if ids is not None else tokens_upper_bound(sample.prompt)
        assert c.hidden_size is not None  # the CLI requires it with a budget
        return estimate_file_bytes(tokens, len(c.layers), c.hidden_size, c.dtype_bytes)

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
                    last = f"invalid file: {exc.reason}"
                    log.warning("Attempt %d of %d at sample %s of %s gave an invalid file: %s", attempt, c.max_attempts,
                                sample.id, self.name, exc.reason)
                    continue
                await self._commit(sample, completion.hidden_states_path, facts, manifest)
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
        expect = Expectation(layers=len(c.layers), dtype_bytes=c.dtype_bytes, hidden_size=c.hidden_size, tokens=tokens,
                             token_ids=sample.token_ids)
        return inspect_file(completion.hidden_states_path, expect, lock_timeout=c.lock_timeout)

    async def _commit(self, sample: Sample, staged: str, facts: FileFacts, manifest: ManifestWriter) -> None:
        name = file_name(sample.id)
        await self._io(move_into_place, staged, self.paths.folder / name)
        await manifest.append(Entry(sample.id, name, facts.tokens, facts.bytes, facts.sha256))
        await self._io(discard, staged)  # the lock file (the data file has moved)
        self.counts.done += 1
        self.counts.bytes += facts.bytes
        log.info("Wrote sample %s of %s (%d of %d, %d tokens, %s)", sample.id, self.name, self.counts.done,
                 self.counts.total, facts.tokens, human_bytes(facts.bytes))

    def _fail(self, failed: FailedLog, sample: Sample, reason: str) -> None:
        failed.add(sample.id, sample.line, reason)
        self.counts.failed += 1
        log.warning("Failed sample %s (line %d) of %s: %s", sample.id, sample.line, self.name, reason)

    def _write_success(self, resumed: int) -> None:
        c = self.config
        doc = {"shard": c.shard, "shards": c.shards, "total": self.counts.total, "done": self.counts.done,
               "failed": self.counts.failed, "resumed": resumed, "bytes": self.counts.bytes,
               "finished": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        write_json_atomically(self.paths.success, doc)

    def _clean_staging(self) -> None:
        """Files no request of this run will collect (timed out, abandoned): garbage that counts against the volume."""
        if not self.paths.staging.is_dir():
            return
        for child in self.paths.staging.iterdir():
            if child.is_file():
                with contextlib.suppress(FileNotFoundError):
                    child.unlink()


def move_into_place(source: str, target: Path) -> None:
    """Atomic within one filesystem (rename). Should vLLM's staging folder sit on another filesystem, copy
    to a temporary name beside the target, flush, then rename: the target is still never partial."""
    try:
        os.rename(source, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    tmp = target.with_name(target.name + TMP_SUFFIX)
    with open(source, "rb") as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())
    os.rename(tmp, target)
    os.unlink(source)
