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
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "operator")]

# bench/pooling_job/: workload.py (the corpus, the server) and clients.py (the direct client, the driver).
from bench.pooling_job.clients import DIM, Row, direct, driver_available, run_driver  # noqa: E402
from bench.pooling_job.workload import make_corpus, start_server, write_jsonl  # noqa: E402
from e2e.harness.processes import stop_process  # noqa: E402

RESULTS = REPO / "bench" / "results" / "pooling_job_throughput.json"


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
