"""An embedding space's fingerprint: one function for every kind that produces vectors.

A PoolingService publishes it in status.embeddingSpace; a PoolingJob writes it into every shard's run.json. The
two agree exactly when the model name and revision, the pooling type, normalize and dimensions agree: the
fields the embeddingSpace rule protects (its CEL twin is in api/services.py), so an index built by a job can be
matched to the service that answers its queries.
"""

from __future__ import annotations

import hashlib
import json

from pooling_operator.api import PoolingJob, PoolingService


def embedding_fingerprint(resource: PoolingService | PoolingJob) -> str:
    """sha256 of model name and revision, pooling type, normalize and dimensions."""
    spec = resource.spec
    pooling = spec.pooling
    essence = {
        "model": spec.model.name,
        "revision": spec.model.revision,
        "type": pooling.type if pooling else None,
        "normalize": pooling.normalize if pooling else None,
        "dimensions": pooling.dimensions if pooling else None,
    }
    return "sha256:" + hashlib.sha256(json.dumps(essence, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
