"""The webhook's serving certificate made at run time (issue 66): the values (runtime/certificates.py), and the
loop that keeps the Secret, the files kopf serves from and the caBundle (runtime/webhook_certs.py) against a
recording API. The real API server, a real TLS handshake and `kubectl diff` after `helm install` are in
e2e/tests/operator/test_release.py."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from pooling_operator.k8s.api import ApiError
from pooling_operator.runtime import certificates as certs
from pooling_operator.runtime.webhook_certs import RENEW, RENEWED_FOR, WebhookCertificate

NAMES = ["vpo.vpo-system.svc", "vpo.vpo-system.svc.cluster.local", "127.0.0.1"]
T0 = dt.datetime(2026, 12, 7, tzinfo=dt.UTC)


def test_a_new_bundle_serves_its_names_and_verifies_against_its_ca(tmp_path: Path) -> None:
    b = certs.issue(NAMES, T0)
    assert sorted(certs.names_of(b)) == sorted(NAMES) and certs.renewal(b, NAMES, T0) is None
    assert certs.from_data(b.data()) == b
    (tmp_path / "tls.crt").write_bytes(b.tls_crt)
    (tmp_path / "tls.key").write_bytes(b.tls_key)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")  # the key matches the certificate
    cert = x509.load_pem_x509_certificate(b.tls_crt)
    [ca] = x509.load_pem_x509_certificates(b.ca_crt)
    cert.verify_directly_issued_by(ca)
    assert cert.not_valid_after_utc - cert.not_valid_before_utc > dt.timedelta(days=364)


@pytest.mark.parametrize(
    ("data", "why"),
    [({}, "empty"), ({"tls.crt": "eA=="}, "keys missing"),
     ({"ca.crt": "bm90IGEgY2VydA==", "ca.key": "eA==", "tls.crt": "eA==", "tls.key": "eA=="}, "not PEM")],
)
def test_a_secret_that_does_not_hold_a_bundle_reads_as_none(data: dict[str, str], why: str) -> None:
    assert certs.from_data(data) is None, why


def test_renewal_is_due_at_two_thirds_of_the_life_for_other_names_and_the_ca_rolls_with_both_trusted() -> None:
    b = certs.issue(NAMES, T0)
    assert certs.renewal(b, NAMES, T0 + dt.timedelta(days=240)) is None
    assert "expires" in (certs.renewal(b, NAMES, T0 + dt.timedelta(days=250)) or "")
    assert "not" in (certs.renewal(b, NAMES[:1], T0) or "")
    renewed = certs.renew(b, NAMES, T0 + dt.timedelta(days=250))
    assert renewed.ca_crt == b.ca_crt and renewed.tls_crt != b.tls_crt  # the same CA: no caBundle change
    late = T0 + dt.timedelta(days=2500)  # the CA has less than a third of its ten years left
    assert "CA expires" in (certs.renewal(renewed, NAMES, late) or "")
    rolled = certs.renew(renewed, NAMES, late)
    cas = x509.load_pem_x509_certificates(rolled.ca_crt)
    assert len(cas) == 2 and cas[1].public_bytes(certs.serialization.Encoding.PEM) == b.ca_crt  # the old CA still trusted
    x509.load_pem_x509_certificate(rolled.tls_crt).verify_directly_issued_by(cas[0])
    assert certs.renewal(rolled, NAMES, late) is None


# ---- the loop, against a recording API -------------------------------------------------------------------------

class Api:
    """The Secret and the webhook configuration as the API server keeps them: an apply carrying a resourceVersion
    that is not the current one is refused with 409, as server-side apply's precondition is."""

    def __init__(self, secret: dict[str, Any] | None, hooks: int = 2) -> None:
        self.secret = secret
        self.rv = 1
        self.config = {"metadata": {"name": "vpo"}, "webhooks": [{"name": f"h{i}", "clientConfig": {}} for i in range(hooks)]}
        self.patches: list[dict[str, Any]] = []
        self.writes = 0
        self.conflicts = 0

    async def get(self, kind: Any, namespace: str | None, name: str) -> dict[str, Any] | None:
        answer = copy.deepcopy(self.secret if kind.kind == "Secret" else self.config)
        await asyncio.sleep(0)  # the answer in flight: another replica's sync may run in between
        return answer

    async def apply(self, obj: dict[str, Any], **_: Any) -> dict[str, Any]:
        assert self.secret is not None
        if obj["metadata"].get("resourceVersion") != self.secret["metadata"]["resourceVersion"]:
            self.conflicts += 1
            raise ApiError(409, "Conflict", "the object has been modified")
        self.rv += 1
        self.writes += 1
        notes = {**(self.secret["metadata"].get("annotations") or {}), **(obj["metadata"].get("annotations") or {})}
        self.secret = {"metadata": {**self.secret["metadata"], "resourceVersion": str(self.rv), "annotations": notes},
                       "data": obj["data"]}
        return self.secret

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        assert method == "PATCH" and path.endswith("/validatingwebhookconfigurations/vpo")
        self.patches.append(body)
        for w in body["webhooks"]:
            next(h for h in self.config["webhooks"] if h["name"] == w["name"])["clientConfig"].update(w["clientConfig"])
        return self.config


def empty() -> dict[str, Any]:
    return {"metadata": {"name": "vpo-webhook-cert", "namespace": "vpo-system", "resourceVersion": "1"}}


def keeper(api: Api, tmp_path: Path, now: dt.datetime = T0, manage: bool = True) -> WebhookCertificate:
    return WebhookCertificate(api, "vpo-system", "vpo-webhook-cert", NAMES, tmp_path / "certs", configuration="vpo",  # type: ignore[arg-type]
                              manage=manage, clock=lambda: now)


def test_the_first_replica_fills_the_empty_secret_and_every_replica_loads_it(tmp_path: Path) -> None:
    api = Api(empty())
    standby, other = keeper(api, tmp_path / "a"), keeper(api, tmp_path / "b")
    asyncio.run(standby.sync(leading=False))  # no leader yet on a new install: the first replica up fills it
    assert api.writes == 1 and standby.loaded and api.patches == []  # the caBundle is the leader's
    asyncio.run(other.sync(leading=False))
    assert api.writes == 1 and other.loaded  # read, not made again
    assert (tmp_path / "b/certs/tls.crt").read_bytes() == base64.b64decode(api.secret["data"]["tls.crt"])  # type: ignore[index]
    leader = keeper(api, tmp_path / "c")
    asyncio.run(leader.sync(leading=True))
    bundle = certs.from_data(api.secret["data"])  # type: ignore[index]
    assert bundle is not None and all(h["clientConfig"]["caBundle"] == bundle.ca_bundle for h in api.config["webhooks"])
    asyncio.run(leader.sync(leading=True))
    assert len(api.patches) == 1 and api.writes == 1  # steady: nothing written again


def test_two_replicas_racing_on_an_empty_secret_write_it_once(tmp_path: Path) -> None:
    api = Api(empty())
    a, b = keeper(api, tmp_path / "a"), keeper(api, tmp_path / "b")

    async def both() -> None:
        await asyncio.gather(a.sync(leading=False), b.sync(leading=False))
        await a.sync(leading=False)
        await b.sync(leading=False)

    asyncio.run(both())
    assert api.conflicts == 1 and api.writes == 1 and a.written == b.written  # the loser read what the winner wrote


def test_the_leader_renews_when_due_or_asked_and_a_standby_does_not(tmp_path: Path) -> None:
    api = Api(empty())
    asyncio.run(keeper(api, tmp_path).sync(leading=True))
    first = api.secret["data"]["tls.crt"]  # type: ignore[index]
    later = T0 + dt.timedelta(days=300)
    asyncio.run(keeper(api, tmp_path / "s", later).sync(leading=False))
    assert api.secret["data"]["tls.crt"] == first  # type: ignore[index]
    asyncio.run(keeper(api, tmp_path / "l", later).sync(leading=True))
    assert api.secret["data"]["tls.crt"] != first and api.writes == 2  # type: ignore[index]
    api.secret["metadata"]["annotations"][RENEW] = "2026-12-07"  # type: ignore[index]
    asyncio.run(keeper(api, tmp_path / "l", later).sync(leading=True))
    assert api.writes == 3 and api.secret["metadata"]["annotations"][RENEWED_FOR] == "2026-12-07"  # type: ignore[index]
    asyncio.run(keeper(api, tmp_path / "l", later).sync(leading=True))
    assert api.writes == 3  # answered once


def test_with_cert_manager_the_operator_only_reads(tmp_path: Path) -> None:
    api = Api(empty())
    k = keeper(api, tmp_path, manage=False)
    asyncio.run(k.sync(leading=True))
    assert api.writes == 0 and not k.loaded and api.patches == []
    api.secret = {"metadata": empty()["metadata"], "data": certs.issue(NAMES, T0).data()}
    asyncio.run(k.sync(leading=True))
    assert k.loaded and api.writes == 0 and api.patches == []
