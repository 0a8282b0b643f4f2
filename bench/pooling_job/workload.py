"""bench/pooling_job_throughput.py's workload: the corpus it embeds (generated from a seed) and the one real
vLLM 0.32 CPU server it starts, with the command line the operator renders for examples/minilm-embeddings.yaml.
Imported by that script, which puts the repository on sys.path first."""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from e2e.harness.poll import wait_for
from e2e.harness.processes import _free_ports, stop_process
from e2e.realvllm import runtime

REPO = Path(__file__).resolve().parents[2]

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

    from e2e.podrunner.runner_process import on_this_machine

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
