"""The webhook's serving certificate at run time: kept in a Secret the chart renders empty, loaded by every replica,
renewed and put into the webhook configuration by the one that leads (runtime/certificates.py makes the values).

Every replica serves the webhook (the Service sends admission requests to any ready one), so every replica reads
the Secret and writes its certificate and key where kopf's webhook server loads them (kopf re-reads the files when
they change). A replica that finds the Secret empty fills it, whether it leads or not (a new install has no leader
yet); the write carries the Secret's resourceVersion, so of two replicas racing one wins and the other reads what
it wrote. Renewals (a third of the life left, other names, or asked for with the annotation RENEW) and the
caBundle of the ValidatingWebhookConfiguration are the leader's. The chart therefore renders no key, no
certificate and no caBundle, and `helm template` gives the same bytes every time (Argo CD stays in sync).

With cert-manager (`manage=False`) the operator only reads: cert-manager writes the Secret and injects the CA.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pooling_operator.k8s.api import FIELD_MANAGER, KINDS, ApiError, Kube
from pooling_operator.runtime.certificates import Bundle, expires, from_data, renew, renewal

log = logging.getLogger(__name__)

RENEW = "vllm-pooling.io/renew"  # set to a new value on the Secret to have the serving certificate made again
RENEWED_FOR = "vllm-pooling.io/renewed-for"  # the value of RENEW the last renewal answered
CHECK_SECONDS = max(1.0, float(os.environ.get("VPO_WEBHOOK_CERT_CHECK_SECONDS", "60")))
WEBHOOK_CONFIGURATION = "ValidatingWebhookConfiguration"
CERT_FILE, KEY_FILE = "tls.crt", "tls.key"  # in the folder kopf's webhook server loads them from


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class WebhookCertificate:
    kube: Kube
    namespace: str
    secret: str
    names: list[str]  # what the serving certificate is for: the Service's DNS names, a webhook URL's host
    cert_dir: Path
    configuration: str | None = None  # the ValidatingWebhookConfiguration whose caBundle is kept; None: not ours
    manage: bool = True  # False: cert-manager makes and renews it, the operator reads it
    clock: Callable[[], dt.datetime] = _now
    written: str | None = None  # digest of the files last written (None: none yet; the replica is not ready)
    _nudged: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def loaded(self) -> bool:
        return self.written is not None

    async def sync(self, leading: bool) -> Bundle | None:
        """Read the Secret; fill or renew it where this replica may; keep the caBundle (leading); write the files."""
        secret = await self.kube.get(KINDS["Secret"], self.namespace, self.secret)
        if secret is None:
            log.warning("Found no Secret %s/%s for the webhook's certificate (the chart renders it): not serving yet",
                        self.namespace, self.secret)
            return None
        bundle = from_data(secret.get("data"))
        if self.manage:
            notes = (secret.get("metadata") or {}).get("annotations") or {}
            asked = notes.get(RENEW)
            why = renewal(bundle, self.names, self.clock())
            if why is None and asked and asked != notes.get(RENEWED_FOR):
                why = f"asked for ({RENEW}: {asked})"
            if why is not None and (leading or bundle is None):
                bundle = await self._write(secret, renew(bundle, self.names, self.clock()), why, asked)
            if bundle is not None and leading and self.configuration:
                await self._ca_bundle(bundle)
        if bundle is not None:
            self._files(bundle)
        return bundle

    async def _write(self, secret: dict[str, Any], bundle: Bundle, why: str, asked: str | None) -> Bundle | None:
        meta = secret["metadata"]
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": self.secret, "namespace": self.namespace, "resourceVersion": meta.get("resourceVersion")},
            "data": bundle.data(),
        }
        if asked:
            body["metadata"]["annotations"] = {RENEWED_FOR: asked}
        try:
            await self.kube.apply(body)
        except ApiError as exc:
            if exc.status == 409:  # another replica wrote it first: its certificate is read next time
                log.info("Left the webhook's certificate to the replica that wrote Secret %s/%s first", self.namespace, self.secret)
                return None
            raise
        log.info("Wrote a new serving certificate for the webhook into Secret %s/%s (%s), for %s, valid until %s",
                 self.namespace, self.secret, why, ", ".join(self.names), f"{expires(bundle):%Y-%m-%d}")
        return bundle

    async def _ca_bundle(self, bundle: Bundle) -> None:
        """Every webhook of the configuration trusts the bundle's CAs (a strategic merge by webhook name: the
        chart's fields stay the chart's, caBundle is the operator's)."""
        assert self.configuration is not None
        kind = KINDS[WEBHOOK_CONFIGURATION]
        live = await self.kube.get(kind, None, self.configuration)
        if live is None:
            return
        stale = [w["name"] for w in live.get("webhooks") or [] if (w.get("clientConfig") or {}).get("caBundle") != bundle.ca_bundle]
        if not stale:
            return
        patch = {"webhooks": [{"name": name, "clientConfig": {"caBundle": bundle.ca_bundle}} for name in stale]}
        await self.kube.request("PATCH", kind.path(None, self.configuration), body=patch,
                                query=[("fieldManager", FIELD_MANAGER)], content_type="application/strategic-merge-patch+json")
        log.info("Set the caBundle of %s %s for %d webhook(s)", WEBHOOK_CONFIGURATION, self.configuration, len(stale))

    def _files(self, bundle: Bundle) -> None:
        digest = hashlib.sha256(bundle.tls_crt + bundle.tls_key).hexdigest()
        if digest == self.written:
            return
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        # the key first, each file replaced whole: kopf reloads when a file changes and must never read half of one
        for name, content in ((KEY_FILE, bundle.tls_key), (CERT_FILE, bundle.tls_crt)):
            fd, tmp = tempfile.mkstemp(dir=self.cert_dir, prefix=f".{name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            os.replace(tmp, self.cert_dir / name)
        self.written = digest
        log.info("Loaded the webhook's serving certificate (valid until %s) into %s", f"{expires(bundle):%Y-%m-%d}", self.cert_dir)

    async def first(self, deadline_seconds: float = 120.0) -> None:
        """Until the files are written (or the deadline passes: kopf then starts without them and the replica
        stays unready): the start of a replica that serves the webhook."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_seconds
        while True:
            try:
                if await self.sync(leading=False) is not None:
                    return
            except ApiError as exc:
                log.warning("Could not read or fill the webhook's certificate yet: %s", exc)
            if loop.time() >= end:
                log.warning("No webhook certificate after %.0f s: serving starts when one is found", deadline_seconds)
                return
            await asyncio.sleep(2.0)

    def nudge(self) -> None:
        """Check now rather than at the next period (this replica just took the Lease: the caBundle is its to keep)."""
        self._nudged.set()

    async def run(self, leading: Callable[[], bool]) -> None:
        """Every CHECK_SECONDS, and at once when nudged, for the life of the process: read, renew where due
        (leading), write the files."""
        while True:
            self._nudged.clear()
            try:
                await self.sync(leading())
            except ApiError as exc:
                log.warning("Could not check the webhook's certificate: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudged.wait(), CHECK_SECONDS)

