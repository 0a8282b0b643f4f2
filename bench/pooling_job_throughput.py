"""The PoolingJob driver's throughput against the best direct client of the same vLLM process.

Not part of the test suite; never gates anything (exits 0 after printing its table, whatever it measured).

Starts ONE real vLLM 0.32 CPU server (the runtime of e2e/realvllm, ``make vllm-runtime``) with the command line
the operator renders for examples/minilm-embeddings.yaml -- changed only where this machine forces it
(runner_process.on_this_machine: the 0.32 image, no GPU), ``engine.dtype: float32`` (what the driver is asked for),
the host 127.0.0.1 and a free port -- or uses the server at --url. Then, on a corpus generated from --seed
(short queries to ~200-word passages, JSONL {"id", "text"}):

1. a warm-up pass (discarded);
2. **direct**: for each batch size (1, 32, 256) x concurrency (1, 4, 16) x encoding ("float" JSON, "bytes":
   raw little-endian float32 and a ``metadata`` header), an aiohttp client embeds the whole corpus (c workers
   take the next batch from one shared iterator; each answer is parsed into 384-float vectors and counted,
   nothing is written); texts/s by wall clock. The best of them is "the best direct client";
3. **driver**: ``pooling-operator pooling-job run`` as a subprocess on the same corpus at its default
   concurrency for each of --driver-batch-sizes, into a fresh folder; texts/s by the process's wall clock
   (start-up included), and its output checked (every id once, every part file readable by ``safetensors``,
   rows = the corpus size, a sample of vectors equal to the direct client's);
4. **repeat**: the best direct configuration again and the best driver batch size again, so that neither side
   is favoured by running later (a warmer server) or earlier; both measurements are reported, and every
   driver row's ratio is to the best direct measurement, repeats included.

Every configuration is bounded by --limit seconds (the direct client stops sending and reports the texts
answered; the driver is stopped and reported from its manifest). Results: a table on stdout and
bench/results/pooling_job_throughput.json (--json).

    .venv/bin/python bench/pooling_job_throughput.py --quick     # 400 texts, about 4 minutes here
    .venv/bin/python bench/pooling_job_throughput.py             # 2,000 texts, about 17 minutes here
    .venv/bin/python bench/pooling_job_throughput.py --url http://127.0.0.1:18200 --model minilm --quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from e2e.harness.poll import wait_for  # noqa: E402
from e2e.harness.processes import _free_ports, stop_process  # noqa: E402
from e2e.realvllm import runtime  # noqa: E402

DIM = 384  # all-MiniLM-L6-v2
RESULTS = REPO / "bench" / "results" / "pooling_job_throughput.json"

# Common English words, each one WordPiece token in MiniLM's (bert-base-uncased) vocabulary, so a text's token
# count is about its words plus its punctuation plus 2: a 200-word passage stays under the rendered
# --max-model-len 256.
VOCABULARY = """
the of and to in is was for on that with as by at from it his an were are which this be or has had not but
one first new two their after its who they have been also her other more all she during into time three
when can only may most city over these would some used later years between world state under some many
such school people year states since where part team known both series about film made well while three
then through than national called including there during region music number until season place family
life four being early best area like against government large high before them each former war five
river until second few main public most year american village south north west east home best work name
game small several group system found game around because local three same old water great since without
general history county music among each same form began power often days period court show book death
age next book local long open early night back town church own land light late life high air base army
line control support power book field police social water full club health major single paper market
office service member order point young road human north level side light field sound party short
data model search query answer question result page site user time text value price room hotel food
travel weather car train flight ticket phone email account order store shop product review rating
movie song artist album game player score match league cup final win team coach fan stadium ball
doctor hospital patient care drug study test report news story article author letter note message
house garden tree flower bird dog cat fish horse animal farm field forest mountain lake sea island
money bank loan card cost pay tax income job work office meeting project plan goal task list step
""".split()
CONNECTORS = "and but so because while although when if then also however therefore".split()


# ---------------------------------------------------------------------------------------------------------
# The corpus


def make_corpus(n: int, seed: int) -> list[dict[str, str]]:
    """``n`` texts from ``seed``: 35 % short queries (2-12 words), 40 % one to three sentences (12-60 words),
    25 % passages (60-200 words), in a shuffled order."""
    rng = random.Random(seed)

    def sentence(words: int) -> str:
        out = [rng.choice(VOCABULARY) for _ in range(words)]
        if words > 8 and rng.random() < 0.4:
            out.insert(rng.randrange(3, words - 2), rng.choice(CONNECTORS))
            out.insert(rng.randrange(2, len(out) - 2), ",")
        return " ".join(out).replace(" ,", ",").capitalize() + "."

    def text(words: int) -> str:
        parts, left = [], words
        while left > 0:
            k = min(left, rng.randint(6, 22))
            parts.append(sentence(k))
            left -= k
        return " ".join(parts)

    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.35:
            words = rng.randint(2, 12)
            t = " ".join(rng.choice(VOCABULARY) for _ in range(words)) + ("?" if rng.random() < 0.3 else "")
        elif r < 0.75:
            t = text(rng.randint(12, 60))
        else:
            t = text(rng.randint(60, 200))
        out.append({"id": f"t{seed}-{i:06d}", "text": t})
    return out


def write_jsonl(rows: list[dict[str, str]], path: Path) -> None:
    with path.open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


# ---------------------------------------------------------------------------------------------------------
# The server


def rendered_argv() -> list[str]:
    """What the operator renders for examples/minilm-embeddings.yaml on this machine, engine.dtype float32."""
    import yaml

    from e2e.realvllm.runner_process import on_this_machine

    doc = next(
        d
        for d in yaml.safe_load_all((REPO / "examples" / "minilm-embeddings.yaml").read_text())
        if d and d.get("kind")
    )
    doc = on_this_machine(doc)
    doc["spec"]["engine"]["dtype"] = "float32"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(doc, f)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pooling_operator", "render", "--vllm-args", f.name],
            check=True, capture_output=True, text=True, cwd=REPO,
        ).stdout.splitlines()  # fmt: skip
    finally:
        os.unlink(f.name)
    return shlex.split(out[1])


def start_server(log: Path) -> tuple[subprocess.Popen[bytes], str, str, list[str], float]:
    rt = runtime.find(install_missing=True)
    argv = rendered_argv()
    port = _free_ports(1)[0]
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("serve") + 1] = str(rt.model_dir(runtime.MINILM))  # the prepared folder (offline)
    argv[0] = str(rt.bin / "vllm")
    served = argv[argv.index("--served-model-name") + 1]
    print(f"starting vLLM: {shlex.join(argv)}\n  log: {log}", flush=True)
    began = time.monotonic()
    proc = subprocess.Popen(
        argv,
        env={**os.environ, **rt.env()},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited {proc.returncode}; see {log}")
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200

    try:
        wait_for(healthy, timeout=900, what="vLLM /health")
    except BaseException:
        stop_process(proc, 30)
        raise
    return proc, url, served, argv, time.monotonic() - began


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


# ---------------------------------------------------------------------------------------------------------


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def machine() -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "")  # fmt: skip
    mem = 0
    with contextlib.suppress(OSError, StopIteration, ValueError):
        mem = int(
            next(
                ln.split()[1]
                for ln in Path("/proc/meminfo").read_text().splitlines()
                if ln.startswith("MemTotal")
            )
        )
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**20, 1), "python": platform.python_version(),
            "kernel": platform.release(), "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip


def show(r: Row, best: float | None = None) -> str:
    ratio = f"{r.texts_per_s / best:5.2f}x" if best else "      "
    lat = f"p50 {r.batch_ms_p50:7.1f} ms/batch" if r.batch_ms_p50 is not None else ""
    if r.side == "driver" and "texts_per_s_while_sending" in r.extra:
        e = r.extra
        lat = (
            f"first request at {e['sending_at_s']:.2f} s, {e['texts_per_s_while_sending']:.1f} texts/s from it to "
            f"'Finished' at {e['finished_at_s']:.2f} s"
        )
    c = r.concurrency or "dflt"
    return (f"{r.side:>7} {r.phase:>6} b={r.batch:<4} c={c!s:<4} {r.encoding:<5} {r.texts:>5}/{r.corpus:<5} "
            f"{r.seconds:7.2f} s {r.texts_per_s:8.1f} texts/s {ratio} cpu {r.client_cpu_s:6.1f} s  {lat}"
            f"{'  ' + r.note if r.note else ''}")  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--texts", type=int, default=2000, help="corpus size (default 2000; --quick: 400)")
    p.add_argument("--seed", type=int, default=0, help="the corpus's seed (default 0)")
    p.add_argument("--quick", action="store_true", help="400 texts and a 30 s limit per configuration")
    p.add_argument("--limit", type=float, help="seconds per configuration (default 90; --quick 30)")
    p.add_argument(
        "--batch-sizes", type=ints, default=[1, 32, 256], metavar="B,..", help="direct (default 1,32,256)"
    )
    p.add_argument(
        "--concurrencies", type=ints, default=[1, 4, 16], metavar="C,..", help="direct (default 1,4,16)"
    )
    p.add_argument("--encodings", default="float,bytes", help="direct encodings (default float,bytes)")
    p.add_argument(
        "--driver-batch-sizes", type=ints, default=[32, 64, 256], metavar="B,..", help="(default 32,64,256)"
    )
    p.add_argument(
        "--driver-concurrency", type=int, help="pass --concurrency to the driver (default: its own)"
    )
    p.add_argument("--url", help="use this running MiniLM server instead of starting one")
    p.add_argument("--model", default="minilm", help="the served model name with --url (default minilm)")
    p.add_argument(
        "--client-core",
        type=int,
        default=-1,
        help="pin the direct client and the driver to this core (default -1: no pinning)",
    )
    p.add_argument(
        "--json", type=Path, default=RESULTS, help=f"results file (default {RESULTS.relative_to(REPO)})"
    )
    p.add_argument("--keep", type=Path, help="keep the corpus and the driver's logs in this folder")
    a = p.parse_args()
    texts = 400 if a.quick and a.texts == 2000 else a.texts
    limit = a.limit or (30.0 if a.quick else 90.0)
    encodings = [e for e in a.encodings.split(",") if e]
    began = time.perf_counter()
    command = shlex.join([Path(sys.executable).relative_to(REPO).as_posix() if str(sys.executable).startswith(str(REPO))
                          else sys.executable, *sys.argv])  # fmt: skip
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="pooling-job-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = make_corpus(texts, a.seed)
    dataset = work / "corpus.jsonl"
    write_jsonl(corpus, dataset)
    words = sorted(len(x["text"].split()) for x in corpus)
    print(
        f"corpus: {len(corpus)} texts (seed {a.seed}), words per text p50 {words[len(words) // 2]}, "
        f"p90 {words[int(0.9 * len(words))]}, max {words[-1]}, mean {statistics.fmean(words):.1f}; {dataset}",
        flush=True,
    )
    ok, why, driver_default_c = driver_available()
    print(f"driver: {'pooling-job run, default concurrency ' + str(driver_default_c) if ok else 'UNAVAILABLE: ' + why}",
          flush=True)  # fmt: skip

    result: dict[str, Any] = {
        "benchmark": "bench/pooling_job_throughput.py", "date": time.strftime("%Y-%m-%d"), "command": command,
        "machine": machine(), "corpus": {"texts": len(corpus), "seed": a.seed, "words_p50": words[len(words) // 2],
        "words_p90": words[int(0.9 * len(words))], "words_max": words[-1], "words_mean": round(statistics.fmean(words), 1)},
        "limit_s": limit, "driver_available": ok, "driver_unavailable_because": why or None,
        "driver_default_concurrency": driver_default_c, "rows": [],
    }  # fmt: skip
    rows: list[Row] = []
    proc = None

    def on_term(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        if a.url:
            url, model, argv, start_s = a.url.rstrip("/"), a.model, None, None
        else:
            proc, url, model, argv, start_s = start_server(work / "vllm.log")
            print(f"vLLM answered /health {start_s:.0f} s after start", flush=True)
        result |= {
            "server": url if a.url else "started here",
            "vllm_argv": argv,
            "vllm_start_s": start_s and round(start_s, 1),
        }
        if 0 <= a.client_core < (os.cpu_count() or 1):
            os.sched_setaffinity(0, {a.client_core})  # the driver inherits it
        result["client_core"] = a.client_core

        # the warm-up's vectors of a sample of ids, to compare the driver's with
        warm = corpus[: max(64, len(corpus) // 10)]
        sample = {x["id"]: None for x in random.Random(a.seed + 1).sample(warm, min(64, len(warm)))}

        print("\nwarm-up (discarded)", flush=True)
        for b, c, enc in [
            (32, 4, "float"),
            *((32, 4, e) for e in encodings if e != "float"),
            (256, 1, "float"),
        ]:
            r = asyncio.run(direct(url, model, warm, b, c, enc, limit, keep=sample))
            r.side = "warm-up"
            rows.append(r)
            print(show(r), flush=True)

        print("\ndirect client", flush=True)
        for b in a.batch_sizes:
            for c in a.concurrencies:
                for enc in encodings:
                    r = asyncio.run(direct(url, model, corpus, b, c, enc, limit))
                    rows.append(r)
                    print(show(r), flush=True)
        matrix = [r for r in rows if r.side == "direct"]
        best = max(matrix, key=lambda r: r.texts_per_s)
        print(
            f"best direct: b={best.batch} c={best.concurrency} {best.encoding}: {best.texts_per_s} texts/s",
            flush=True,
        )

        if ok:
            print(f"\ndriver (pooling-job run, concurrency {a.driver_concurrency or f'default ({driver_default_c})'})",
                  flush=True)  # fmt: skip
            tiny = work / "one.jsonl"
            write_jsonl(corpus[:1], tiny)
            r = run_driver(
                url, model, tiny, corpus[:1], a.driver_batch_sizes[0], a.driver_concurrency, limit, work, {}
            )
            r.phase, r.note = (
                "fixed",
                ("one text: the process's fixed cost (start-up, connect, files) " + r.note).strip(),
            )
            rows.append(r)
            print(show(r), flush=True)
            for b in a.driver_batch_sizes:
                r = run_driver(url, model, dataset, corpus, b, a.driver_concurrency, limit, work, sample)
                rows.append(r)
                print(show(r, best.texts_per_s), flush=True)

        print("\nrepeat (after the driver)", flush=True)
        again = asyncio.run(direct(url, model, corpus, best.batch, best.concurrency, best.encoding, limit))
        again.phase = "repeat"
        rows.append(again)
        print(show(again, best.texts_per_s), flush=True)
        drivers = [r for r in rows if r.side == "driver" and r.phase == "matrix" and r.complete]
        if drivers:
            top = max(drivers, key=lambda r: r.texts_per_s)
            r = run_driver(url, model, dataset, corpus, top.batch, a.driver_concurrency, limit, work, sample)
            r.phase = "repeat"
            rows.append(r)
            print(show(r, best.texts_per_s), flush=True)
    except KeyboardInterrupt:
        print("interrupted: reporting what was measured", flush=True)
        result["interrupted"] = True
    except Exception as exc:
        print(f"FAILED: {type(exc).__name__}: {exc}", flush=True)
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if proc is not None:
            print("stopping vLLM", flush=True)
            stop_process(proc, 60)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)

    # the table
    direct_rows = [r for r in rows if r.side == "direct"]
    best_direct = max((r.texts_per_s for r in direct_rows), default=None)
    best_row = max(direct_rows, key=lambda r: r.texts_per_s, default=None)
    print(f"\n{'=' * 100}\ncorpus {len(corpus)} texts; limit {limit:.0f} s per configuration; "
          f"best direct {best_direct} texts/s" + (f" (b={best_row.batch} c={best_row.concurrency} {best_row.encoding}, "
          f"{best_row.phase})" if best_row else ""))  # fmt: skip
    for r in rows:
        print(show(r, best_direct if r.side in ("direct", "driver") and r.phase != "fixed" else None))
    summary: dict[str, Any] = {"best_direct_texts_per_s": best_direct,
                               "best_direct": best_row and {"batch": best_row.batch, "concurrency": best_row.concurrency,
                                                            "encoding": best_row.encoding, "phase": best_row.phase},
                               "driver": []}  # fmt: skip
    for r in rows:
        if r.side == "driver" and r.phase != "fixed":
            vectors = r.extra.get("rows") or 0
            summary["driver"].append({
                "batch": r.batch, "phase": r.phase, "texts_per_s": r.texts_per_s, "complete": r.complete,
                "ratio_to_best_direct": round(r.texts_per_s / best_direct, 3) if best_direct else None,
                # the direct client with the same batch size at the driver's concurrency, both encodings' best
                "same_shape_direct_texts_per_s": max(
                    (
                        d.texts_per_s
                        for d in direct_rows
                        if d.batch == r.batch and d.concurrency == (r.concurrency or driver_default_c)
                    ),
                    default=None,
                ),
                "startup_s": r.extra.get("sending_at_s"),
                "texts_per_s_while_sending": r.extra.get("texts_per_s_while_sending"),
                "ratio_while_sending": round(r.extra["texts_per_s_while_sending"] / best_direct, 3)
                if best_direct and r.extra.get("texts_per_s_while_sending") else None,
                "part_bytes_per_vector": round(r.extra["part_bytes"] / vectors, 1) if vectors else None,
                "manifest_bytes_per_vector": round(r.extra["manifest_bytes"] / vectors, 1) if vectors else None,
                "all_bytes_per_vector": round(r.extra["all_bytes"] / vectors, 1) if vectors else None,
                "raw_bytes_per_vector": DIM * 4,
            })  # fmt: skip
    if summary["driver"]:
        print(f"\nratios and bytes per vector (raw float32: {DIM * 4})")
        for d in summary["driver"]:
            same = d["same_shape_direct_texts_per_s"]
            print(f"  driver b={d['batch']} {d['phase']}: ratio {d['ratio_to_best_direct']}x (from its first request: "
                  f"{d['ratio_while_sending']}x; to direct at its batch size and concurrency: "
                  f"{round(d['texts_per_s'] / same, 3) if same else '-'}x); part files "
                  f"{d['part_bytes_per_vector']}, manifest {d['manifest_bytes_per_vector']}, "
                  f"everything {d['all_bytes_per_vector']}")  # fmt: skip
    wire = {r.encoding: r.wire_bytes_per_vector for r in direct_rows if r.wire_bytes_per_vector}
    print(f"  on the wire (direct client, response body per vector): {wire}")
    summary["wire_bytes_per_vector"] = wire
    result["summary"] = summary
    result["rows"] = [asdict(r) for r in rows]
    result["seconds"] = round(time.perf_counter() - began, 1)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {a.json}; {result['seconds']:.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
