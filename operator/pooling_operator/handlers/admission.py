"""The validating admission webhook (kopf): `kubectl apply` refuses what only the vLLM rules can judge, with
the lines `pooling-operator validate` prints. Imported by `run` only when `--webhook-port` is set (kopf refuses
to start with admission handlers and no server). The cluster registers it (the Helm chart's
ValidatingWebhookConfiguration); kopf serves each handler at `/<handler id>`, e.g. `/validate-poolingservices`.
"""

from __future__ import annotations

from typing import Any

import kopf

from pooling_operator import GROUP, VERSION
from pooling_operator.api.resources import KINDS
from pooling_operator.vllm.validate import admission_verdict

# Every kind of ours (the table the CRDs come from): a kind added there is judged here, and the chart registers
# it from the CRD files it ships (templates/webhook.yaml).
VALIDATED = tuple(info.plural for info in KINDS.values())
WEBHOOK_PATHS = {plural: f"/validate-{plural}" for plural in VALIDATED}


def _admit(body: kopf.Body, old: kopf.Body | None, warnings: list[str], memo: kopf.Memo, operation: str, **_: Any) -> None:
    verdict = admission_verdict(dict(body), memo.ctx.settings, dict(old) if old is not None and operation == "UPDATE" else None)
    warnings.extend(verdict.warnings)
    if not verdict.allowed:
        raise kopf.AdmissionError(verdict.message, code=422)


for _plural in VALIDATED:
    # kopf's WebhookFn protocol lists its kwargs without `old` and `operation`, which kopf passes all the same
    kopf.on.validate(GROUP, VERSION, _plural, id=WEBHOOK_PATHS[_plural].lstrip("/"),
                     operations=["CREATE", "UPDATE"])(_admit)  # type: ignore[arg-type]
