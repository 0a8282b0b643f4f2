"""The driver's side of vLLM's HTTP API: /health, /tokenize and /v1/completions with max_tokens 1.

Errors come in two kinds: Transient (a connection problem, a timeout, 408, 429 or a 5xx: a later attempt
may succeed; ``server_down`` when vLLM itself looks gone, so the caller waits for /health before trying
again) and Permanent (any other answer: the same request would fail the same way).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

log = logging.getLogger(__name__)


class RequestFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Transient(RequestFailed):
    def __init__(self, reason: str, *, server_down: bool = False) -> None:
        super().__init__(reason)
        self.server_down = server_down


class Permanent(RequestFailed):
    pass


@dataclass(frozen=True)
class Completion:
    hidden_states_path: str
    prompt_tokens: int | None


def error_message(status: int, body: bytes) -> str:
    """vLLM's error JSON is {"error": {"message": ...}} (older: {"message": ...}); else the raw text."""
    text = body[:2000].decode("utf-8", "replace")
    try:
        doc = json.loads(text)
        error = doc.get("error", doc) if isinstance(doc, dict) else doc
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            text = message
    except ValueError:
        pass
    return f"HTTP {status}: {text.strip()[:500]}"


class VllmClient:
    def __init__(self, endpoint: str, model: str, *, concurrency: int, request_timeout: float,
                 max_field_size: int | None = None) -> None:
        """``max_field_size``: the longest response header line accepted (aiohttp's default, 8190 bytes, when
        None); the pooling driver's answers carry their metadata in one header."""
        self.endpoint = endpoint.rstrip("/")
        self.model = model
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        limits: dict[str, int] = {}
        if max_field_size is not None:
            limits = {"max_field_size": max_field_size, "max_line_size": max_field_size}
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency + 2),
            timeout=self._timeout,
            **limits,  # type: ignore[arg-type]
        )
        self._tokenize_missing = False

    async def close(self) -> None:
        await self._session.close()

    async def healthy(self) -> bool:
        try:
            async with self._session.get(f"{self.endpoint}/health", timeout=aiohttp.ClientTimeout(total=5)) as r:
                await r.read()
                return r.status == 200
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def version(self) -> str | None:
        """vLLM's ``/version`` (``{"version": "0.32.0"}``), or None when it has none or cannot answer."""
        try:
            async with self._session.get(f"{self.endpoint}/version", timeout=aiohttp.ClientTimeout(total=5)) as r:
                doc = json.loads(await r.read()) if r.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
            return None
        version = doc.get("version") if isinstance(doc, dict) else None
        return version if isinstance(version, str) else None

    async def wait_healthy(self, timeout: float) -> bool:
        """Poll /health until it answers 200 or ``timeout`` seconds pass.

        vLLM refuses connections while the model loads, then answers 200 (503 once its engine died).
        """
        deadline = time.monotonic() + timeout
        pause = 0.05
        while True:
            if await self.healthy():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, 2.0)

    async def _send(self, path: str, body: dict[str, Any]) -> tuple[int, bytes, Any]:
        """POST `body` to `path`: (status, body, headers); no answer at all is Transient."""
        try:
            async with self._session.post(f"{self.endpoint}{path}", json=body) as r:
                return r.status, await r.read(), r.headers
        except TimeoutError as exc:
            raise Transient(f"no answer from {path} within {self._timeout.total:.0f} s") from exc
        except (aiohttp.ClientConnectionError, OSError) as exc:
            raise Transient(f"connection to vLLM failed: {type(exc).__name__}: {exc}", server_down=True) from exc
        except aiohttp.ClientError as exc:
            raise Transient(f"request to {path} failed: {type(exc).__name__}: {exc}") from exc

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        status, data, _ = await self._send(path, body)
        if status != 200:
            message = error_message(status, data)
            if status in (408, 429) or status >= 500:
                raise Transient(message, server_down=status == 503)
            raise Permanent(message)
        try:
            return json.loads(data)
        except ValueError as exc:
            raise Transient(f"{path} answered 200 with a body that is not JSON") from exc

    async def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """POST a JSON body; the answer's JSON (Transient or Permanent as for every request)."""
        return await self._post(path, body)

    async def count_tokens(self, prompt: str) -> list[int] | None:
        """The prompt's token ids as /v1/completions will see them, or None when the server has no /tokenize."""
        if self._tokenize_missing:
            return None
        try:
            doc = await self._post("/tokenize", {"model": self.model, "prompt": prompt, "add_special_tokens": True})
        except Permanent as exc:
            if exc.reason.startswith("HTTP 404"):
                log.warning("The server has no /tokenize (%s); estimating token counts from prompt bytes", exc.reason)
                self._tokenize_missing = True
                return None
            raise
        tokens = doc.get("tokens") if isinstance(doc, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise Transient("/tokenize answered without a token list")
        return tokens

    async def complete(self, prompt: str | Sequence[int]) -> Completion:
        """One prompt, one output token: vLLM extracts the prompt's hidden states and names the file."""
        body = {"model": self.model, "prompt": prompt if isinstance(prompt, str) else list(prompt),
                "max_tokens": 1, "temperature": 0}
        doc = await self._post("/v1/completions", body)
        params = doc.get("kv_transfer_params") if isinstance(doc, dict) else None
        path = params.get("hidden_states_path") if isinstance(params, dict) else None
        if not isinstance(path, str) or not path:
            raise Permanent("the answer has no kv_transfer_params.hidden_states_path: is the hidden-states connector configured?")
        usage = doc.get("usage")
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return Completion(path, tokens if isinstance(tokens, int) else None)
