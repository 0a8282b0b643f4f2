"""An embedding space's fingerprint: one function for every kind that produces vectors.

A PoolingService publishes it in status.embeddingSpace; a PoolingJob writes it into every shard's run.json. The
two agree exactly when the model name and revision, the pooling type, normalize and dimensions and the
instructions (spec.vectors.queryInstruction, documentInstruction) agree: the
fields the embeddingSpace rule protects (its CEL twin is in api/services.py), so an index built by a job can be
matched to the service that answers its queries.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pooling_operator.api.problems import Problem
from pooling_operator.api.resources import AnyResource, SpaceClaimant
from pooling_operator.vllm.workload import Workload, workload


def embedding_fingerprint(w: Workload) -> str:
    """sha256 of model name and revision, pooling type, normalize and dimensions, and the query and document
    instructions where set (spec.vectors), of the workload as it is served (builders.common.served: a ModelCache's
    commit is the revision of a model read from it)."""
    pooling = w.pooling
    essence: dict[str, Any] = {
        "model": w.model.name,
        "revision": w.model.revision,
        "type": pooling.type if pooling else None,
        "normalize": pooling.normalize if pooling else None,
        "dimensions": pooling.dimensions if pooling else None,
    }
    v = w.vectors  # the instructions join only when set: a space without them keeps the fingerprint it had
    if v is not None and v.query_instruction is not None:
        essence["query"] = v.query_instruction
    if v is not None and v.document_instruction is not None:
        essence["document"] = v.document_instruction
    return "sha256:" + hashlib.sha256(json.dumps(essence, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _essence(resource: SpaceClaimant) -> str:
    spec = resource.spec
    p = spec.pooling
    rev = f"@{spec.model.revision}" if spec.model.revision else " (unpinned)"
    v = spec.vectors
    instructions = "".join(f", {name} {text!r}" for name, text in (
        ("query instruction", v.query_instruction if v else None),
        ("document instruction", v.document_instruction if v else None)) if text is not None)  # fmt: skip
    return (f"{spec.model.name}{rev}, pooling {p.type if p and p.type else 'model default'}, normalize "
            f"{p.normalize if p else None}, dimensions {p.dimensions if p and p.dimensions else 'all'}{instructions}")


def space_clashes(resources: Sequence[AnyResource | None]) -> dict[int, Problem]:
    """{index: problem} for every PoolingService or PoolingJob whose embeddingSpace label an earlier one of the same
    namespace claims (input order) with another space: one label, one space, or an index built by the job is
    queried through a service that computes other vectors."""
    first: dict[tuple[str, str], tuple[str, str, str]] = {}  # (namespace, label) -> (Kind/name, fingerprint, essence)
    out: dict[int, Problem] = {}
    for i, r in enumerate(resources):
        if not isinstance(r, SpaceClaimant) or not r.spec.embedding_space:
            continue
        key = (r.metadata.namespace or "default", r.spec.embedding_space)
        mine = embedding_fingerprint(workload(r))  # as the spec says: a file's resources are judged offline
        if key not in first:
            first[key] = (f"{r.kind}/{r.metadata.name}", mine, _essence(r))
            continue
        other, theirs, essence = first[key]
        if theirs != mine:
            out[i] = Problem("spec.embeddingSpace", f"{other} claims embedding space {key[1]!r} too, with another space "
                             f"({essence}; here {_essence(r)}): one label, one space; give one of them another label "
                             "or make the model, revision and pooling agree")
    return out
