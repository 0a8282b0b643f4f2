"""What both drivers share (the HiddenStateJob's, pods/hidden_states/driver.py, and the PoolingJob's,
pods/vectors/driver.py): one shard's run from the dataset to the final state, the progress ticks, the pause while vLLM is down, retry
backoff, failed samples, a full output volume and the ``_SUCCESS`` marker.

A subclass reads its shard's work in ``_shard`` and returns the final (state, exit code); everything around
it (the dataset, the run record, the reporter, the exit codes of the api contracts) is here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pooling_operator import __version__
from pooling_operator.api.clock import rfc3339
from pooling_operator.api.shard_contract import (
    BUDGET_EXCEEDED,
    DATASET_UNREADABLE,
    EXIT_BUDGET_EXCEEDED,
    EXIT_DATASET_UNREADABLE,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_OUTPUT_FULL,
    FAILED,
    OUTPUT_FULL,
    RUN_RECORD,
    SUCCEEDED,
)
from pooling_operator.pods.shard.budget import Budget, human_bytes
from pooling_operator.pods.shard.client import VllmClient
from pooling_operator.pods.shard.dataset import DatasetUnreadable, Parser, Sample, Shard, read_shard
from pooling_operator.pods.shard.files import out_of_space, write_json_atomically
from pooling_operator.pods.shard.manifest import FailedLog, ManifestWriter, ShardPaths
from pooling_operator.pods.shard.progress import Counts, Reporter, Sink
from pooling_operator.pods.shard.record import RunRecord, finish, write_record

T = TypeVar("T")

log = logging.getLogger(__name__)


class CommonConfig(Protocol):
    """The settings both drivers' Config carry."""

    @property
    def shard(self) -> int: ...
    @property
    def shards(self) -> int: ...
    @property
    def dataset(self) -> Path: ...
    @property
    def output(self) -> Path: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def retry_base_seconds(self) -> float: ...
    @property
    def retry_max_seconds(self) -> float: ...
    @property
    def health_timeout(self) -> float: ...
    @property
    def progress_interval(self) -> float: ...


class ShardFailed(Exception):
    """The shard cannot go on (state failed, exit 1: the Job retries it); the message says why."""


class ServerUnavailable(ShardFailed):
    """vLLM stayed unhealthy past the health timeout."""


def leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


class ShardRun:
    """One shard, start to finish. ``text_key``: the dataset's text field (dataset.parse_line)."""

    text_key = "prompt"
    unit = "samples"  # what the logs count

    def __init__(self, config: CommonConfig, sink: Sink | None, record: RunRecord, *, threads: str) -> None:
        self.config = config
        self.paths = ShardPaths(config.output, config.shard)
        self.counts = Counts()
        self.reporter = Reporter(config.shard, sink, self.counts, interval=config.progress_interval)
        self._executor = ThreadPoolExecutor(max_workers=config.concurrency + 2, thread_name_prefix=threads)
        self._up = asyncio.Event()
        self._lost = False
        self._health: asyncio.Task[None] | None = None
        self.full: str | None = None  # why the output volume counts as full, once it does
        self.record = record

    @property
    def name(self) -> str:
        return f"shard {self.config.shard}"

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def run(self) -> int:
        try:
            return await self._run()
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def parser(self) -> tuple[Parser | None, str]:
        """How a dataset line is read, where not by dataset.parse_line with ``text_key``, and its id's name."""
        return None, "id"

    def _loaded(self, shard: Shard) -> None:
        """The dataset has been read: what the counts know before any work."""
        self.counts.total = shard.total

    async def _shard(self, shard: Shard) -> tuple[str, int]:
        raise NotImplementedError

    async def _run(self) -> int:
        c = self.config
        try:
            shard = await self._io(read_shard, c.dataset, c.shard, c.shards, self.text_key, *self.parser)
        except DatasetUnreadable as exc:
            log.error("Could not read the dataset of %s: %s", self.name, exc)
            await self.reporter.final(DATASET_UNREADABLE)
            return EXIT_DATASET_UNREADABLE
        self._loaded(shard)
        await self._io(self._write_record)
        ticker = asyncio.get_running_loop().create_task(self._tick())
        state, code = FAILED, EXIT_FAILED
        try:
            state, code = await self._shard(shard)
        except* ShardFailed as group:
            log.error("Gave up on %s: %s", self.name, group.exceptions[0])
        except* OSError as group:
            # Out of space outside a sample (resuming, failed.jsonl, _SUCCESS): each of those writes is atomic
            # or cut back, so the folder is as consistent as after a crash. Any other OSError goes on.
            errors = leaves(group)
            if not all(out_of_space(e) for e in errors):
                raise
            self._out_of_space(f"{errors[0]}")
            state, code = self._stop_full()
        finally:
            # Also after an unexpected error (which then propagates): the operator should see "failed" at once.
            ticker.cancel()
            if self._health is not None:
                self._health.cancel()
            finish(self.record, state)
            with contextlib.suppress(OSError):  # the record is provenance; a full volume must not hide the state
                await self._io(self._write_record)
            await self.reporter.final(state)
        return code

    async def _tick(self) -> None:
        while True:
            self.reporter.tick()
            await asyncio.sleep(min(1.0, self.config.progress_interval))

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

    def _write_record(self) -> None:
        write_record(self.paths.folder / RUN_RECORD, self.record, __version__)

    def _fail(self, failed: FailedLog, sample: Sample, reason: str) -> None:
        log.warning("Failed %s %s (line %d) of %s: %s", self.unit[:-1], sample.id, sample.line, self.name, reason)
        try:
            failed.add(sample.id, sample.line, reason)
        except OSError as exc:
            # Not recorded, so not counted: the next run tries the sample again, as it does every failed one.
            if not out_of_space(exc):
                raise
            self._out_of_space(f"recording failed sample {sample.id}: {exc}")
            return
        self.counts.failed += 1

    def _out_of_space(self, why: str) -> None:
        """Stop taking samples: the output volume is full. The first reason is the one reported."""
        if self.full is None:
            self.full = why
            log.error("The output volume of %s is full; stopping after the %s in flight: %s", self.name, self.unit, why)

    def _stop_full(self) -> tuple[str, int]:
        log.error(
            "Stopped %s: the output volume %s is full (%s); %d of %d %s done and kept. Free space and run the "
            "job again: it resumes from the manifest.", self.name, self.config.output, self.full, self.counts.done,
            self.counts.total, self.unit,
        )
        return OUTPUT_FULL, EXIT_OUTPUT_FULL

    async def _serve(
        self, shard: Shard, todo: list[Sample], budget: Budget, connect: Callable[[], Any],
        process: Callable[[list[Sample], Any, ManifestWriter, FailedLog, Budget], Awaitable[None]],
        started: Callable[[Any], None] = lambda client: None,
    ) -> None:  # fmt: skip
        """The shard's malformed lines into failed.jsonl; then, when there is work, wait for vLLM, record its
        version and `process` what is left. The failed log, the manifest and the client (`connect()`) are
        closed however it ends."""
        c = self.config
        async with contextlib.AsyncExitStack() as stack:
            failed = FailedLog(self.paths.failed)
            stack.callback(failed.close)
            for bad in shard.bad:
                failed.add(bad.id, bad.line, bad.reason)
                log.warning("Skipped line %d of the dataset (%s): %s", bad.line, self.name, bad.reason)
            self.counts.failed = failed.count
            manifest = ManifestWriter(self.paths.manifest, self._executor)
            stack.callback(manifest.close)
            client = connect()
            stack.push_async_callback(client.close)
            if not todo:
                return
            log.info("Waiting for vLLM at %s to be healthy", c.endpoint)
            if not await client.wait_healthy(c.health_timeout):
                raise ServerUnavailable(f"vLLM at {c.endpoint} was not healthy within {c.health_timeout:.0f} s")
            self._up.set()
            self.record.vllm_version = await client.version()
            await self._io(self._write_record)
            started(client)
            await process(todo, client, manifest, failed, budget)

    async def _finished(self, shard: Shard, budget: Budget, resumed: int) -> tuple[str, int]:
        """The shard's final state once its work is over: output full, budget spent, or succeeded (_SUCCESS)."""
        if self.full is not None:
            return self._stop_full()
        if budget.exhausted:
            log.error(
                "Stopped %s before exceeding its storage budget: %s of %s used, %d of %d %s done", self.name,
                human_bytes(budget.used), human_bytes(budget.limit or 0), self.counts.done, shard.total, self.unit,
            )
            return BUDGET_EXCEEDED, EXIT_BUDGET_EXCEEDED
        await self._io(self._write_success, resumed)
        log.info(
            "Finished %s: %d done (%d from earlier runs), %d failed, %s", self.name, self.counts.done, resumed,
            self.counts.failed, human_bytes(self.counts.bytes),
        )
        return SUCCEEDED, EXIT_OK

    def _write_success(self, resumed: int) -> None:
        c = self.config
        doc = {"shard": c.shard, "shards": c.shards, "total": self.counts.total, "done": self.counts.done,
               "failed": self.counts.failed, "resumed": resumed, "bytes": self.counts.bytes,
               "finished": rfc3339()}
        write_json_atomically(self.paths.success, doc)
