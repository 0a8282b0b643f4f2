"""A request that each vLLM route accepts, to ask real servers which routes answer (and which need the key).

``answered`` means the route exists and took the request: anything but 401 (the API key refused it) and
404 (no such route on this server). The bodies are the smallest valid ones for vLLM 0.32's request models.
"""

from __future__ import annotations

from typing import Any

import httpx

# route -> (method, JSON body or None); "{model}" is replaced by the served model name
PROBES: dict[str, tuple[str, Any]] = {
    "/health": ("GET", None),
    "/ping": ("GET", None),
    "/metrics": ("GET", None),
    "/version": ("GET", None),
    "/load": ("GET", None),
    "/v1/models": ("GET", None),
    "/tokenize": ("POST", {"model": "{model}", "prompt": "hello"}),
    "/detokenize": ("POST", {"model": "{model}", "tokens": [1]}),
    "/invocations": ("POST", {"model": "{model}", "input": "hello"}),
    "/v1/embeddings": ("POST", {"model": "{model}", "input": "hello"}),
    "/v2/embed": ("POST", {"model": "{model}", "texts": ["hello"]}),
    "/pooling": ("POST", {"model": "{model}", "input": "hello"}),
    "/classify": ("POST", {"model": "{model}", "input": "hello"}),
    "/score": ("POST", {"model": "{model}", "text_1": "hello", "text_2": "world"}),
    "/rerank": ("POST", {"model": "{model}", "query": "hello", "documents": ["world"]}),
    "/v1/score": ("POST", {"model": "{model}", "text_1": "hello", "text_2": "world"}),
    "/v1/rerank": ("POST", {"model": "{model}", "query": "hello", "documents": ["world"]}),
    "/v2/rerank": ("POST", {"model": "{model}", "query": "hello", "documents": ["world"]}),
    "/generative_scoring": ("POST", {"model": "{model}", "query": "Is it?", "items": [" yes"], "label_token_ids": [1, 2]}),
    "/v1/completions": ("POST", {"model": "{model}", "prompt": "hello", "max_tokens": 1}),
    "/v1/chat/completions": ("POST", {"model": "{model}", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
}


def _fill(body: Any, model: str) -> Any:
    if isinstance(body, dict):
        return {k: _fill(v, model) for k, v in body.items()}
    return model if body == "{model}" else body


def probe(base: str, route: str, model: str, key: str | None = None) -> httpx.Response:
    method, body = PROBES[route]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=base, timeout=120) as c:
        return c.request(method, route, json=_fill(body, model) if body is not None else None, headers=headers)


def answered(r: httpx.Response) -> bool:
    return r.status_code not in (401, 404)
