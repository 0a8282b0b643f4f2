"""REST access to the API server without dependencies: ``Api`` (admin client cert, JSON, server-side apply)
and ``ApiError`` for the harness's own reads and writes, plus the plain HTTP(S) probes used by readiness
checks. Tests use the ``kubernetes`` package or kubectl instead.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

FIELD_MANAGER = "vpo-e2e"


class ApiError(RuntimeError):
    """A non-success answer of the API server; ``message`` is the Status message when there is one."""

    def __init__(self, method: str, path: str, status: int, body: Any):
        self.status = status
        self.body = body
        self.message = body.get("message", str(body)) if isinstance(body, dict) else str(body)
        super().__init__(f"{method} {path}: {status} {self.message}")


class Api:
    """A tiny dependency-free client (admin cert) for the harness's own reads and writes."""

    def __init__(self, server: str, pki: dict[str, Path]):
        self.server = server.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=str(pki["ca.crt"]))
        self.ctx.load_cert_chain(str(pki["admin.crt"]), str(pki["admin.key"]))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        timeout: float = 10,
    ) -> tuple[int, Any]:
        url = self.server + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            raw, status = err.read(), err.code
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def get(self, path: str, **kw: Any) -> Any:
        status, body = self.request("GET", path, **kw)
        if status != 200:
            raise ApiError("GET", path, status, body)
        return body

    def apply(self, path: str, obj: dict[str, Any]) -> Any:
        """Server-side apply ``obj`` at ``path`` (the object's own URL)."""
        status, body = self.request(
            "PATCH",
            path,
            obj,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
        )
        if status not in (200, 201):
            raise ApiError("apply", path, status, body)
        return body

    def healthy(self, path: str = "/readyz") -> bool:
        status, _ = self.request("GET", path, timeout=3)
        return status == 200


def _https_ok(url: str, ctx: ssl.SSLContext) -> bool:
    with urllib.request.urlopen(url, context=ctx, timeout=3) as resp:
        return resp.status == 200


def _http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=3) as resp:
        return json.loads(resp.read())
