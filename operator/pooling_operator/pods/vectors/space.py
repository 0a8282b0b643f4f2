"""A PoolingJob shard's canaries (spec.spaceCheck): before any input, the shard sends the canaries to its vLLM and
compares the answers with its space's reference; a drift ends the shard (state space_drift, exit 6, the Job fails)
before it writes a vector. Every shard keeps its canaries' answers in its run.json (key ``spaceCheck``), so an
index carries its own reference and a later service can be checked against it.

Which reference: the space's, recorded by a PoolingService of the same embeddingSpace (its ConfigMap, mounted
optional at SPACE_REFERENCE_MOUNT), else the canaries an earlier shard of this job kept in its run.json (the earliest
started), else none: this shard's answers are the job's reference. A reference of other canaries or another
fingerprint is no reference for this space (vllm/space_check.py decides the verdict).
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooling_operator.api.pooling_job_contract import RUN_RECORD_SPACE_CHECK
from pooling_operator.api.shard_contract import RUN_RECORD
from pooling_operator.pods.shard.client import VllmClient
from pooling_operator.pods.shard.run import ShardFailed
from pooling_operator.vllm import space_check as sc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpaceCheckConfig:
    """The driver's --space-check: what to send and compare, from the operator."""

    fingerprint: str
    label: str
    min_cosine: float
    normalize: bool
    canaries: Path | None = None  # the user's canaries (JSON lines), else the built-in set
    reference: Path | None = None  # the folder the space's reference ConfigMap is mounted at (may be empty)

    @classmethod
    def parse(cls, text: str) -> SpaceCheckConfig:
        doc = json.loads(text)
        return cls(str(doc["fingerprint"]), str(doc["label"]), float(doc["minCosine"]), bool(doc.get("normalize")),
                   Path(doc["canaries"]) if doc.get("canaries") else None,
                   Path(doc["reference"]) if doc.get("reference") else None)  # fmt: skip


class SpaceDrifted(Exception):
    """The shard's engine answers the canaries in another space than its reference."""


def canaries_of(config: SpaceCheckConfig) -> list[sc.Canary]:
    """The built-in canaries, or the user's (spaceCheck.canaries: its ConfigMap's key, mounted); ShardFailed where
    those are missing or not canaries (the Job retries: a ConfigMap created meanwhile is mounted then)."""
    if config.canaries is None:
        return list(sc.builtin(scoring=False))
    try:
        return sc.parse_canaries(config.canaries.read_text(encoding="utf-8"), scoring=False)
    except OSError:
        raise ShardFailed(f"spec.spaceCheck.canaries: {config.canaries} is not mounted: the ConfigMap or its key "
                          "does not exist") from None
    except ValueError as exc:
        raise ShardFailed(f"spec.spaceCheck.canaries: {exc}") from None


def mounted_reference(folder: Path | None) -> sc.Reference | None:
    """The space's reference ConfigMap as mounted: its data keys as text files, binaryData's as raw bytes."""
    if folder is None or not (folder / sc.VECTORS_KEY).is_file():
        return None
    data = {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir() if p.is_file() and p.name != sc.VECTORS_KEY
            and not p.name.startswith(".")}  # fmt: skip
    return sc.reference_from(data, {sc.VECTORS_KEY: base64.b64encode((folder / sc.VECTORS_KEY).read_bytes()).decode()})


def record_doc(ref: sc.Reference) -> dict[str, Any]:
    data, binary = ref.data()
    return {**data, sc.VECTORS_KEY: binary[sc.VECTORS_KEY]}


def reference_of_record(doc: Any) -> sc.Reference | None:
    if not isinstance(doc, dict):
        return None
    vectors = doc.get(sc.VECTORS_KEY)
    return sc.reference_from({k: v for k, v in doc.items() if k != sc.VECTORS_KEY and isinstance(v, str)},
                             {sc.VECTORS_KEY: vectors} if isinstance(vectors, str) else None)  # fmt: skip


def earliest_shard_reference(output: Path, shard: int) -> tuple[sc.Reference, str] | None:
    """The canaries another shard of this job kept in its run.json, the earliest recorded first."""
    found: list[tuple[str, sc.Reference, str]] = []
    for record in sorted(output.glob(f"shard-*/{RUN_RECORD}")):
        if record.parent.name == f"shard-{shard}":
            continue
        try:
            doc = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        ref = reference_of_record(doc.get(RUN_RECORD_SPACE_CHECK))
        if ref is not None:
            found.append((ref.recorded_at, ref, record.parent.name))
    if not found:
        return None
    _, ref, name = min(found, key=lambda f: (f[0], f[2]))
    return ref, name


async def check(client: VllmClient, model: str, task: str, config: SpaceCheckConfig, output: Path, shard: int,
                at: str) -> tuple[sc.Reference, str]:
    """Send the canaries; raise SpaceDrifted where the answers drift from the reference. Returns this shard's own
    answers as a reference (for its run.json) and what it was compared with."""
    canaries = canaries_of(config)
    answers: list[list[list[float]]] = []
    for route, body in sc.requests_for(canaries, model, task=task):
        answers += sc.answers_of(route, await client.post_json(route, body))
    mine = sc.as_reference(config.fingerprint, canaries, answers, at, f"shard-{shard}")
    candidates: list[tuple[sc.Reference, str]] = []
    space = mounted_reference(config.reference)
    if space is not None:
        candidates.append((space, f"the space's reference (recorded from {space.recorded_from or '?'})"))
    earlier = earliest_shard_reference(output, shard)
    if earlier is not None:
        candidates.append((earlier[0], f"{earlier[1]}'s canaries"))
    usable = [(ref, what) for ref, what in candidates if ref.digest == mine.digest and ref.fingerprint == mine.fingerprint]
    if not usable:
        log.info("No reference for embedding space %s yet: shard %d's canaries are the job's", config.label, shard)
        return mine, "none: this shard's answers are the reference"
    reference, what = usable[0]
    verdict = sc.verdict(reference, answers, min_cosine=config.min_cosine, normalize=config.normalize and task == "embed")
    if not verdict.ok:
        raise SpaceDrifted(f"the canaries drifted from {what} of embedding space {config.label}: {verdict.message}")
    log.info("The canaries match %s of embedding space %s: %s", what, config.label, verdict.message)
    return mine, f"{what}: {verdict.message}"
