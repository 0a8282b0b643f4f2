"""bench/pooling_job_throughput.py's two measured sides against the same vLLM: the direct aiohttp client
(``direct``) and the driver, ``pooling-operator pooling-job run`` as a subprocess (``run_driver``), with the
check of its output folder (``verify``) and the timeline read from its log; each run is one ``Row``.
Imported by that script, which puts the repository on sys.path first."""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from e2e.harness.processes import stop_process

REPO = Path(__file__).resolve().parents[2]
DIM = 384  # all-MiniLM-L6-v2


# ---------------------------------------------------------------------------------------------------------
# The direct client


@dataclass
class Row:
    side: str  # "direct" | "driver" | "warm-up"
    phase: str  # "matrix" | "repeat"
    batch: int
    concurrency: int
    encoding: str  # "float" | "bytes" (the driver: what it asks for, "bytes")
    texts: int  # answered (direct) or in the manifest (driver)
    corpus: int
    seconds: float
    texts_per_s: float
    complete: bool
    tokens: int = 0
    client_cpu_s: float = 0.0  # CPU of the client: this process's (direct) or the driver process's
    note: str = ""
    batch_ms_p50: float | None = None  # per request, send to parsed answer (direct)
    batch_ms_p99: float | None = None
    wire_bytes_per_vector: float | None = None  # response bodies / vectors (direct)
    extra: dict[str, Any] = field(default_factory=dict)


async def direct(url: str, model: str, corpus: list[dict[str, str]], batch: int, concurrency: int, encoding: str,
                 limit: float, keep: dict[str, np.ndarray] | None = None) -> Row:  # fmt: skip
    """Embed the corpus in batches of ``batch`` with ``concurrency`` requests in flight; stop sending at
    ``limit`` seconds. ``keep``: ids whose vectors to record (filled in place)."""
    batches = [corpus[i : i + batch] for i in range(0, len(corpus), batch)]
    todo = iter(batches)
    done = tokens = wire = 0
    latencies: list[float] = []
    body: dict[str, Any] = {"model": model, "encoding_format": encoding}
    if encoding == "bytes":
        body |= {"embed_dtype": "float32", "endianness": "little"}
    timeout = aiohttp.ClientTimeout(total=max(60.0, limit + 30))
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline = t0 + limit

    async def one(s: aiohttp.ClientSession, items: list[dict[str, str]]) -> None:
        nonlocal done, tokens, wire
        started = time.perf_counter()
        async with s.post(f"{url}/v1/embeddings", json={**body, "input": [x["text"] for x in items]}) as r:
            raw = await r.read()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {raw[:300]!r}")
            if encoding == "float":
                doc = json.loads(raw)
                vecs = np.asarray(
                    [d["embedding"] for d in sorted(doc["data"], key=lambda d: d["index"])], np.float32
                )
                usage = doc["usage"]
            else:
                meta = json.loads(r.headers["metadata"])
                vecs = np.frombuffer(raw, dtype="<f4").reshape(len(meta["data"]), -1)
                assert all(tuple(d["shape"]) == (DIM,) for d in meta["data"]), meta["data"][:2]
                usage = meta["usage"]
        if vecs.shape != (len(items), DIM):
            raise RuntimeError(f"expected {(len(items), DIM)} vectors, got {vecs.shape}")
        latencies.append(time.perf_counter() - started)
        done += len(items)
        tokens += int(usage["prompt_tokens"])
        wire += len(raw)
        if keep is not None:
            for x, v in zip(items, vecs, strict=True):
                if x["id"] in keep:
                    keep[x["id"]] = v.copy()

    async def worker(s: aiohttp.ClientSession) -> None:
        for items in todo:
            if time.perf_counter() >= deadline:
                return
            await one(s, items)

    # the bytes answer's metadata header grows ~110 bytes per text: past aiohttp's 8190-byte default at b=256
    async with aiohttp.ClientSession(
        timeout=timeout,
        connector=aiohttp.TCPConnector(limit=concurrency),
        max_field_size=1 << 22,
        max_line_size=1 << 22,
    ) as s:
        await asyncio.gather(*(worker(s) for _ in range(concurrency)))
    seconds = time.perf_counter() - t0
    latencies.sort()
    return Row(
        side="direct", phase="matrix", batch=batch, concurrency=concurrency, encoding=encoding, texts=done,
        corpus=len(corpus), seconds=round(seconds, 3), texts_per_s=round(done / seconds, 1),
        complete=done == len(corpus), tokens=tokens, client_cpu_s=round(time.process_time() - cpu0, 2),
        batch_ms_p50=round(1000 * statistics.median(latencies), 1) if latencies else None,
        batch_ms_p99=round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1) if latencies else None,
        wire_bytes_per_vector=round(wire / done, 1) if done else None, extra={"load1": round(os.getloadavg()[0], 2)},
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# The driver


def driver_command() -> list[str]:
    exe = Path(sys.executable).parent / "pooling-operator"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "pooling_operator"]


def driver_available() -> tuple[bool, str, int | None]:
    """Whether ``pooling-job run`` exists, why not, and its default --concurrency as its --help states it."""
    r = subprocess.run(
        [*driver_command(), "pooling-job", "run", "--help"], capture_output=True, text=True, cwd=REPO
    )
    if r.returncode != 0:
        return (
            False,
            (r.stderr or r.stdout).strip().splitlines()[-1]
            if (r.stderr or r.stdout).strip()
            else f"exit {r.returncode}",
            None,
        )
    at = r.stdout.find("\n  --concurrency")  # its line in the options list, not the usage
    m = re.search(r"default:?\s*(\d+)", r.stdout[at : at + 250]) if at >= 0 else None
    return True, "", int(m.group(1)) if m else None


def verify(out: Path, corpus: list[dict[str, str]], direct_vectors: dict[str, np.ndarray]) -> dict[str, Any]:
    """Check a finished driver's folder; returns its figures and a list of problems (empty when it is right)."""
    from safetensors import safe_open

    problems: list[str] = []
    shard = out / "shard-0"
    manifest = shard / "manifest.jsonl"
    lines = (
        [json.loads(x) for x in manifest.read_text().splitlines() if x.strip()] if manifest.exists() else []
    )
    ids = [x["id"] for x in lines]
    want = {x["id"] for x in corpus}
    if len(ids) != len(set(ids)):
        problems.append(f"{len(ids) - len(set(ids))} ids twice in the manifest")
    if set(ids) != want:
        problems.append(
            f"manifest ids differ from the corpus: {len(want - set(ids))} missing, {len(set(ids) - want)} extra"
        )
    parts = sorted(shard.glob("part-*.safetensors"))
    rows = 0
    tensors: dict[str, np.ndarray] = {}
    for p in parts:
        try:
            with safe_open(str(p), framework="numpy") as f:
                keys = list(f.keys())
                if keys != ["vectors"]:
                    problems.append(f"{p.name}: tensors {keys}")
                t = f.get_tensor("vectors")
        except Exception as exc:
            problems.append(f"{p.name}: unreadable ({exc})")
            continue
        if t.dtype != np.float32 or t.ndim != 2 or t.shape[1] != DIM:
            problems.append(f"{p.name}: {t.dtype} {t.shape}")
        rows += t.shape[0]
        tensors[p.name] = t
    if rows != len(corpus):
        problems.append(f"{rows} rows in the part files, {len(corpus)} texts")
    compared, max_diff = 0, 0.0
    for x in lines:
        if x["id"] in direct_vectors and direct_vectors[x["id"]] is not None and x["file"] in tensors:
            got = tensors[x["file"]][x["row"]]
            max_diff = max(max_diff, float(np.max(np.abs(got - direct_vectors[x["id"]]))))
            compared += 1
        if x["file"] in tensors and not (
            0 <= x["row"] and x["row"] + x["rows"] <= tensors[x["file"]].shape[0]
        ):
            problems.append(f"{x['id']}: row {x['row']}+{x['rows']} outside {x['file']}")
    if max_diff > 1e-4:
        problems.append(f"vectors differ from the direct client's by up to {max_diff:.2e}")
    part_bytes = sum(p.stat().st_size for p in parts)
    files = {p.relative_to(out).as_posix(): p.stat().st_size for p in out.rglob("*") if p.is_file()}
    failed = [k for k, v in files.items() if k.endswith("failed.jsonl") and v]
    if failed:
        problems.append(f"failed inputs listed in {failed}")
    if not any(k.endswith("_SUCCESS") for k in files):
        problems.append("no _SUCCESS")
    return {
        "manifest_lines": len(lines), "parts": len(parts), "rows": rows, "part_bytes": part_bytes,
        "manifest_bytes": manifest.stat().st_size if manifest.exists() else 0,
        "all_bytes": sum(files.values()), "files": len(files),
        "tokens": sum(int(x.get("tokens") or 0) for x in lines),
        "compared_with_direct": compared, "max_abs_diff_vs_direct": max_diff,
        "part_mtimes": sorted(p.stat().st_mtime for p in parts), "problems": problems,
    }  # fmt: skip


LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_timeline(log: Path, wall_started: float, texts: int) -> dict[str, Any]:
    """From the driver's log (its INFO lines, local time): when it sent its first request and when it
    finished, so its start-up and its rate while sending can be told apart. Empty when the lines are not
    there (the log's wording is the driver's, not a contract)."""
    import datetime as dt

    sending = finished = None
    for line in log.read_text(errors="replace").splitlines():
        m = LOG_TIME.match(line)
        if not m:
            continue
        at = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if sending is None and " Sending " in line:
            sending = at
        if " Finished shard " in line:
            finished = at
    out: dict[str, Any] = {}
    if sending is not None:
        out["sending_at_s"] = round(sending - wall_started, 2)  # process start -> first request
        if finished is not None and finished > sending:
            out["sending_s"] = round(finished - sending, 2)
            out["texts_per_s_while_sending"] = round(texts / (finished - sending), 1)
            out["finished_at_s"] = round(finished - wall_started, 2)
    return out


def run_driver(url: str, model: str, dataset: Path, corpus: list[dict[str, str]], batch: int,
               concurrency: int | None, limit: float, work: Path,
               direct_vectors: dict[str, np.ndarray]) -> Row:  # fmt: skip
    out = work / f"out-b{batch}-{time.monotonic_ns()}"
    log = work / f"{out.name}.log"
    argv = [*driver_command(), "pooling-job", "run", "--shard", "0", "--shards", "1", "--dataset", str(dataset),
            "--output", str(out), "--endpoint", url, "--model", model, "--task", "embed",
            "--batch-size", str(batch), "--dtype", "float32"]  # fmt: skip
    if concurrency:
        argv += ["--concurrency", str(concurrency)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    wall_started = time.time()
    with log.open("wb") as lf:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            if proc.poll() is None:
                stop_process(proc, 10)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    v = verify(out, corpus, direct_vectors)
    texts = v["manifest_lines"]
    note = ""
    if rc is None:
        note = f"stopped at the {limit:.0f} s limit"
    elif rc != 0:
        note = f"exit {rc}: " + " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])[:300]
    elif v["problems"]:
        note = "; ".join(v["problems"])[:300]
    mt = v.pop("part_mtimes")
    timeline: dict[str, Any] = {}
    if mt:
        timeline["first_part_s"] = round(mt[0] - wall_started, 2)
        timeline["last_part_s"] = round(mt[-1] - wall_started, 2)
        if len(mt) > 2:
            gaps = np.diff(mt)
            timeline["part_gap_ms_p50"] = round(1000 * float(np.median(gaps)), 1)
            timeline["part_gap_ms_max"] = round(1000 * float(np.max(gaps)), 1)
    timeline |= log_timeline(log, wall_started, texts)
    shutil.rmtree(out, ignore_errors=True)
    return Row(
        side="driver", phase="matrix", batch=batch, concurrency=concurrency or 0, encoding="bytes", texts=texts,
        corpus=len(corpus), seconds=round(seconds, 3), texts_per_s=round(texts / seconds, 1),
        complete=rc == 0 and not v["problems"], tokens=v["tokens"], client_cpu_s=round(cpu, 2), note=note,
        extra={**v, **timeline, "exit": rc, "load1": round(os.getloadavg()[0], 2), "log_tail": log.read_text(errors="replace").strip().splitlines()[-5:]},
    )  # fmt: skip
