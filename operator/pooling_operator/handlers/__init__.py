"""The thin kopf layer: the operator's lifetime (startup, cleanup), its liveness probe and, when served, the
validating webhook (`handlers/admission.py`); no logic here.

kopf watches nothing of ours: the cache is fed by the runtime's own informers (`runtime/watches.py`), which
list each kind once and watch it from there. No finalizers, no kopf annotations on objects, so deleting a
resource works while the operator is down.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from pooling_operator.runtime import Runtime

log = logging.getLogger(__name__)

PREFIX = "operator.vllm-pooling.io"


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # kopf's own bookkeeping would live in annotations under our prefix, never in the status we own.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX, key="last-handled-configuration")
    # We post our own events (child changes, condition flips).
    settings.posting.enabled = False
    settings.networking.request_timeout = 60
    runtime: Runtime = memo.runtime
    if memo.get("webhook"):  # served only; the cluster registers it (the Helm chart)
        if runtime.webhook_cert is not None:  # its files, from the Secret (filled by the first replica up)
            await runtime.webhook_cert.first()
        settings.admission.server = kopf.WebhookServer(**memo.webhook)
        settings.admission.managed = None
    await runtime.start()


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    await memo.runtime.stop()
