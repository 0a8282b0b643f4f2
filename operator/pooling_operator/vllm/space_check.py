"""The embedding space guarded by numbers (spec.spaceCheck): the canaries, the requests that send them to a vLLM
server, their answers as numbers, the space's reference as a ConfigMap holds it, and the verdict. Pure.

A space's fingerprint covers its configuration; the canaries cover the engine. The built-in set is short and long
inputs in several scripts, with one past a typical chunk size (sent with ``truncate_prompt_tokens: -1``: vLLM cuts
it at the server's own maxModelLen, so a changed truncation or chunking shows, where a refusal would only say
"too long"). Every answer is compared with the reference canary by canary:

- vectors (embed, classify: one per canary; token_embed, token_classify: one per token): the same dimension and
  token count, a norm of 1 where the server normalises, and a cosine of at least ``min_cosine`` (token tasks:
  the least over the tokens);
- scores (a ScoringService's canary pairs): a difference of at most ``SCORE_TOLERANCE``.

The reference is recorded from the first pod of a space and kept in a ConfigMap named after the space
(``reference_name``): the fingerprint, the canaries' names and the digest of their inputs in ``data``, the
vectors as little-endian float32 in ``binaryData`` (32 canaries of 4,096 dimensions: 512 KiB, 683 KiB as the API
server stores it, base64). A reference recorded from other canaries (another digest) is recorded again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pooling_operator.api.pooling_job_contract import ROUTES
from pooling_operator.api.space_check import SCORE_TOLERANCE

READINESS_GATE = "vllm-pooling.io/space-verified"  # the pod condition the gate sets, and the readiness gate's type
REFERENCE_LABEL = "vllm-pooling.io/space-reference"  # on a reference ConfigMap: the space it is for
VECTORS_KEY = "vectors.f32"
NORM_TOLERANCE = 1e-3  # |norm - 1| allowed where the server normalises (float32 sums of 4,096 squares)
# Results, as the pod condition's reason and status.spaceCheck.lastCheck.result say them
VERIFIED, RECORDED, DRIFT, DRIFT_ALLOWED, UNREACHABLE = "Verified", "Recorded", "Drift", "DriftAllowed", "Unreachable"
CANARIES_INVALID = "CanariesInvalid"
RESULTS = (VERIFIED, RECORDED, DRIFT, DRIFT_ALLOWED, UNREACHABLE, CANARIES_INVALID)
RETRIED = (UNREACHABLE, CANARIES_INVALID)  # a pod with one of these verdicts is asked again (with back-off)


def pod_verdict(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The gate's verdict on a pod: its condition READINESS_GATE with one of RESULTS as the reason. A condition of
    that type set by anything else is no verdict (kwok, for one, turns every readiness gate True by itself)."""
    return next((c for c in (pod.get("status") or {}).get("conditions") or []
                 if c.get("type") == READINESS_GATE and c.get("reason") in RESULTS), None)

_LONG = " ".join(
    f"Paragraph {i}: the operator keeps every embedding of an index in one vector space, so that a query embedded "
    f"today lands near the passages embedded last month; a new engine that shifts the vectors by a little breaks "
    f"that promise without an error, and only numbers can tell." for i in range(1, 13)
)  # about 550 words: past a 512-token chunk, cut at the server's maxModelLen


@dataclass(frozen=True)
class Canary:
    """One canary: a text (the pooling tasks) or a query and document pair (scoring)."""

    name: str
    text: str | None = None
    query: str | None = None
    document: str | None = None


BUILTIN_TEXTS: tuple[Canary, ...] = (
    Canary("short-en", text="hello"),
    Canary("sentence-en", text="The quick brown fox jumps over the lazy dog."),
    Canary("question-en", text="How does Kubernetes decide which node a pod runs on?"),
    Canary("technical-en", text="vLLM serves embedding models with continuous batching and paged attention."),
    Canary("numbers", text="Order 4711 shipped on 2026-12-07 at 14:05 UTC for 1,299.95 EUR (tax 19%)."),
    Canary("code", text="def cosine(a, b): return sum(x * y for x, y in zip(a, b)) / (norm(a) * norm(b))"),
    Canary("de", text="Die Vektoren eines Index müssen aus demselben Raum stammen wie die der Anfragen."),
    Canary("fr", text="Les vecteurs d'un index doivent venir du même espace que ceux des requêtes."),
    Canary("es", text="¿Dónde está la biblioteca más cercana con libros en varios idiomas?"),
    Canary("ru", text="Векторы индекса должны принадлежать тому же пространству, что и векторы запросов."),
    Canary("zh", text="索引中的向量必须与查询向量来自同一个空间。"),
    Canary("ja", text="インデックスのベクトルはクエリと同じ空間に属していなければならない。"),
    Canary("ar", text="يجب أن تنتمي متجهات الفهرس إلى نفس فضاء متجهات الاستعلامات."),
    Canary("hi", text="इंडेक्स के वेक्टर उसी स्थान से होने चाहिए जिससे क्वेरी के वेक्टर हैं।"),
    Canary("emoji", text="launch day 🚀🔥 — all green ✅"),
    Canary("long", text=_LONG),
)
BUILTIN_PAIRS: tuple[Canary, ...] = (
    Canary("relevant-en", query="how are pods placed on nodes",
           document="The Kubernetes scheduler assigns each pod to a node that has the resources it requests."),
    Canary("irrelevant-en", query="how are pods placed on nodes", document="Bake the bread for forty minutes at 220 degrees."),
    Canary("capital", query="What is the capital of France?", document="Paris is the capital and largest city of France."),
    Canary("numbers", query="when did the order ship", document="Order 4711 shipped on 2026-12-07 at 14:05 UTC."),
    Canary("de", query="Wie hoch ist der Eiffelturm?", document="Der Eiffelturm ist 330 Meter hoch."),
    Canary("zh", query="向量数据库是什么", document="向量数据库存储嵌入向量并支持相似度搜索。"),
    Canary("code", query="python cosine similarity", document="def cosine(a, b): return dot(a, b) / (norm(a) * norm(b))"),
    Canary("long", query="what must stay the same for an index", document=_LONG),
)


def builtin(scoring: bool) -> tuple[Canary, ...]:
    return BUILTIN_PAIRS if scoring else BUILTIN_TEXTS


def parse_canaries(text: str, scoring: bool) -> list[Canary]:
    """The canaries of a user's ConfigMap (JSON lines); ValueError naming the line and what it needs."""
    out: list[Canary] = []
    want = ("name", "query", "document") if scoring else ("name", "text")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            raise ValueError(f"line {number}: not JSON; each line is an object with {', '.join(want)}") from None
        if not isinstance(doc, dict) or any(not isinstance(doc.get(k), str) or not doc.get(k) for k in want):
            raise ValueError(f"line {number}: needs the strings {', '.join(want)}")
        out.append(Canary(doc["name"], doc.get("text"), doc.get("query"), doc.get("document")))
    if not out:
        raise ValueError("no canaries: one JSON object a line")
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ValueError("canary names must be distinct")
    return out


def digest(canaries: Sequence[Canary]) -> str:
    """sha256 of the canaries' names and inputs: a reference holds answers to exactly these."""
    raw = json.dumps([[c.name, c.text, c.query, c.document] for c in canaries], ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(raw.encode()).hexdigest()


# ---- requests and answers -------------------------------------------------------------------------------------

# The route and request of each kind of server: the pooling tasks and the scoring modes (the routes vLLM 0.32 serves
# them on: vllm-contract.md). "truncate_prompt_tokens": -1 cuts an input at the server's maxModelLen.
TASK_ROUTES = ROUTES  # as a PoolingJob sends each task: /v1/embeddings for embed, /pooling with the task for the others
SCORE_ROUTES = {"crossEncoder": "/score", "biEncoder": "/score", "lateInteraction": "/score"}


def requests_for(canaries: Sequence[Canary], served: str, *, task: str | None = None, mode: str | None = None,
                 generative: dict[str, Any] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(route, JSON body) of the requests that send every canary: one for the texts, one per pair for scoring
    (`generative`: the scoring contract's label_token_ids, apply_softmax and item_first, as clients send them)."""
    if mode is None:
        assert task is not None
        body: dict[str, Any] = {"model": served, "input": [c.text for c in canaries], "truncate_prompt_tokens": -1}
        if task != "embed":
            body["task"] = task
        return [(TASK_ROUTES[task], body)]
    if mode == "generative":
        return [("/generative_scoring", {"model": served, "query": c.query, "items": [c.document], **(generative or {})})
                for c in canaries]
    return [(SCORE_ROUTES[mode], {"model": served, "text_1": c.query, "text_2": [c.document], "truncate_prompt_tokens": -1})
            for c in canaries]


def _numbers(value: Any) -> list[float]:
    if isinstance(value, list) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        return [float(v) for v in value]
    raise ValueError("an answer that is not a list of numbers")


def answers_of(route: str, body: dict[str, Any]) -> list[list[list[float]]]:
    """The numbers of one answer, per item: its rows (one row for a sequence vector or a score, one per token for
    a token task). ValueError for an answer of another shape."""
    data = body.get("data")
    if not isinstance(data, list):
        raise ValueError(f"{route} answered without a data list")
    data = sorted(data, key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
    out: list[list[list[float]]] = []
    for item in data:
        if not isinstance(item, dict):
            raise ValueError(f"{route} answered an item that is not an object")
        if "embedding" in item:
            out.append([_numbers(item["embedding"])])
        elif "probs" in item:
            out.append([_numbers(item["probs"])])
        elif "score" in item:
            out.append([[float(item["score"])]])
        elif "data" in item and isinstance(item["data"], list) and item["data"] and isinstance(item["data"][0], list):
            out.append([_numbers(row) for row in item["data"]])
        elif "data" in item:
            out.append([_numbers(item["data"])])
        else:
            raise ValueError(f"{route} answered an item with none of embedding, probs, score or data")
    return out


# ---- the reference --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """A space's reference: its answers to one set of canaries (each canary's rows)."""

    fingerprint: str
    digest: str
    names: tuple[str, ...]
    rows: tuple[tuple[tuple[float, ...], ...], ...]  # per canary, per row
    recorded_at: str = ""
    recorded_from: str = ""

    def data(self) -> tuple[dict[str, str], dict[str, str]]:
        """(data, binaryData) of the ConfigMap that keeps it."""
        shapes = [[len(rows), len(rows[0]) if rows else 0] for rows in self.rows]
        flat = [x for rows in self.rows for row in rows for x in row]
        packed = struct.pack(f"<{len(flat)}f", *flat)
        meta = {"fingerprint": self.fingerprint, "canaries": self.digest, "names": json.dumps(list(self.names)),
                "shapes": json.dumps(shapes), "recordedAt": self.recorded_at, "recordedFrom": self.recorded_from}  # fmt: skip
        return meta, {VECTORS_KEY: base64.b64encode(packed).decode()}


def reference_from(data: dict[str, str] | None, binary: dict[str, str] | None) -> Reference | None:
    """The reference a ConfigMap holds, or None where it holds none readable."""
    try:
        assert data is not None and binary is not None
        names, shapes = json.loads(data["names"]), json.loads(data["shapes"])
        raw = base64.b64decode(binary[VECTORS_KEY])
        flat = struct.unpack(f"<{len(raw) // 4}f", raw)
        rows, at = [], 0
        for count, width in shapes:
            rows.append(tuple(tuple(flat[at + i * width: at + (i + 1) * width]) for i in range(count)))
            at += count * width
        if at != len(flat) or len(rows) != len(names):
            return None
        return Reference(data["fingerprint"], data["canaries"], tuple(names), tuple(rows), data.get("recordedAt", ""),
                         data.get("recordedFrom", ""))  # fmt: skip
    except (AssertionError, KeyError, ValueError, TypeError, struct.error):
        return None


def reference_name(key: str, *, scoring: bool = False) -> str:
    """The ConfigMap of a space's reference: the space's label (a ScoringService's scores: its name), made a DNS
    name, and a hash that keeps two labels apart which read the same once made one."""
    base = re.sub(r"[^a-z0-9-]+", "-", key.lower()).strip("-")[:40] or "space"
    return f"vpo-{'scores' if scoring else 'space'}-{base}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def as_reference(fingerprint: str, canaries: Sequence[Canary], answers: Sequence[Sequence[Sequence[float]]],
                 at: str, source: str) -> Reference:
    return Reference(fingerprint, digest(canaries), tuple(c.name for c in canaries),
                     tuple(tuple(tuple(row) for row in rows) for rows in answers), at, source)


# ---- the verdict ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    ok: bool
    worst: float  # the least cosine (scores: 1 - the largest difference)
    canary: str  # the canary of that value
    message: str


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)


def verdict(reference: Reference, answers: Sequence[Sequence[Sequence[float]]], *, min_cosine: float,
            normalize: bool = False, scores: bool = False) -> Verdict:
    """How the answers compare with the reference (module docstring)."""
    if len(answers) != len(reference.rows):
        return Verdict(False, 0.0, "", f"{len(answers)} answers to {len(reference.rows)} canaries")
    worst, at = 1.0, reference.names[0] if reference.names else ""
    for name, want, got in zip(reference.names, reference.rows, answers, strict=True):
        if len(got) != len(want) or any(len(g) != len(w) for g, w in zip(got, want, strict=False)):
            shape = f"{len(got)} x {len(got[0]) if got else 0}"
            return Verdict(False, 0.0, name, f"canary {name}: answered {shape}, the reference holds "
                           f"{len(want)} x {len(want[0]) if want else 0} (another dimension or token count)")
        if scores:
            value = 1.0 - max(abs(g[0] - w[0]) for g, w in zip(got, want, strict=True))
        else:
            value = min(cosine(g, w) for g, w in zip(got, want, strict=True))
            if normalize:
                off = max(abs(math.sqrt(sum(x * x for x in g)) - 1.0) for g in got)
                if off > NORM_TOLERANCE:
                    return Verdict(False, value, name, f"canary {name}: a norm of {1 + off:.6f} where the server normalises")
        if value < worst:
            worst, at = value, name
    limit = 1.0 - SCORE_TOLERANCE if scores else min_cosine
    what = f"largest score difference {1 - worst:.6f} (canary {at}; at most {SCORE_TOLERANCE})" if scores else \
        f"least cosine {worst:.6f} (canary {at}; at least {min_cosine})"
    return Verdict(worst >= limit, worst, at, what)
