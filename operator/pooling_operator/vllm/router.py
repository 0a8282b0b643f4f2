"""A service's routes, and what vllm-router (api/routing.py, ROUTER_VERSION) carries of them: the one place both
facts live (status publishes them, validation warns and refuses from them, the builders render the router). Pure.

What the router carries was read from vllm-router 0.1.17's sources (the PyPI sdist: src/server.rs,
src/routers/http/router.rs, src/protocols/spec.rs) and seen in a loopback run, two recording workers behind it and
one request per route (docs/routing.md, "What passes the router"):
- a path it has no handler of its own for is forwarded as written (path and JSON body; not the query string, not
  the client's headers; no retries): /pooling, /classify, /score, /v1/score, /v2/rerank, /v2/embed,
  /generative_scoring, /tokenize;
- /v1/embeddings is re-serialized through OpenAI's request (model, input, encoding_format, user, dimensions), so
  vLLM's own fields (truncate_prompt_tokens, normalize, priority) are dropped, and a body of chat messages is 422;
- /rerank and /v1/rerank are rewritten to SGLang's request (top_n dropped; /v1/rerank's model forced to
  "default", which vLLM answers 404) and vLLM's answer fails to parse in the router: 500 (router.rs 2589-2600).
bench/router_real.py sends each route to real vLLM 0.32 directly and through the real router and holds this table
to what comes back (docs/routing.md has its run).
"""

from __future__ import annotations

from collections.abc import Iterator

from pooling_operator.api import ScoringService
from pooling_operator.api import messages as M
from pooling_operator.api.problems import Problem
from pooling_operator.api.resources import Service
from pooling_operator.api.routing import ROUTER_VERSION
from pooling_operator.vllm.contract import Contract
from pooling_operator.vllm.workload import MODE_ROUTES, Workload, workload

ROUTER = f"vllm-router {ROUTER_VERSION}"
# Routes the router answers wrongly for a vLLM server, and why.
NOT_CARRIED = {
    "/rerank": "rewritten to SGLang's rerank request (top_n dropped) and vLLM's answer fails to parse in the "
    "router: 500",
    "/v1/rerank": "rewritten to SGLang's rerank request with model \"default\", which vLLM does not serve: 404",
}
# Routes it carries with less than the client wrote.
ALTERED = {
    "/v1/embeddings": "re-serialized as OpenAI's request (model, input, encoding_format, user, dimensions): vLLM's "
    "own fields (truncate_prompt_tokens, normalize, priority) are dropped and chat messages are refused; "
    "/pooling carries them as written",
    # read from its sources, not run (no generating model in bench/router_real.py): the typed chat and completions
    # requests are re-serialized with the router's own defaults for fields left out (src/protocols/spec.rs)
    "/v1/completions": "re-serialized with the router's defaults for fields the client left out (ignore_eos, "
    "skip_special_tokens, no_stop_trim)",
    "/v1/chat/completions": "re-serialized with the router's defaults for fields the client left out (ignore_eos, "
    "skip_special_tokens, no_stop_trim)",
}
# The router's own Prometheus listener (--prometheus-port, builders/router.py): the serving port cannot be it.
METRICS_PORT = 29000
# vLLM answers /v2/rerank with the handler and the shapes of /rerank (entrypoints/pooling/scoring/api_router.py):
# the scoring route of a routed service.
ROUTED_RERANK = "/v2/rerank"


def served_routes(resource: Service, c: Contract, w: Workload | None = None) -> list[str]:
    """The routes a server of this resource answers (not 501), by its runner, task and mode (contract §4)."""
    w = w or workload(resource)
    if w.runner == "generate":
        return c.routes(None, score=False, generate=True)
    hints = w.model.hints
    if w.mode is not None:
        score = True  # a scoring mode (a cross-encoder is validated to have one label)
    else:
        score = w.task in ("embed", "token_embed") or (w.task == "classify" and bool(hints and hints.num_labels == 1))
    return c.routes(w.task, score=score)


def routed(resource: Service) -> bool:
    return resource.spec.routing is not None


def client_routes(resource: Service, c: Contract, w: Workload | None = None) -> list[str]:
    """The routes a client reaches at status.endpoint: the server's, less what the router cannot carry."""
    routes = served_routes(resource, c, w)
    return [r for r in routes if r not in NOT_CARRIED] if routed(resource) else routes


def mode_route(resource: ScoringService) -> str:
    """The route a ScoringService's mode is used through (status.contract.route): /v2/rerank behind the router."""
    route = MODE_ROUTES[resource.spec.mode]
    return ROUTED_RERANK if routed(resource) and route in NOT_CARRIED else route


def routing_problems(resource: Service, w: Workload, c: Contract | None) -> Iterator[Problem]:
    """The router beside an API key is refused (it would let every client through with its own key); a server
    none of whose routes pass it is refused; each route it cannot carry, or carries altered, is a warning."""
    if not routed(resource):
        return
    if resource.spec.service.api_key_secret_ref is not None:
        yield Problem("spec.routing", M.ROUTER_NO_API_KEY)
    if resource.spec.service.port == METRICS_PORT:
        yield Problem("spec.service.port", f"{METRICS_PORT} is the router's own metrics port (routing.vllmRouter); "
                      "any other port from 1 to 65535")  # fmt: skip
    if c is None:
        return  # the version's own problem is said elsewhere
    served = served_routes(resource, c, w)
    what = f"mode {w.mode}" if w.mode is not None else f"task {w.task}"
    if not [r for r in served if r not in NOT_CARRIED]:
        yield Problem(
            "spec.routing.vllmRouter",
            f"{ROUTER} carries none of the routes a server of {what} answers ({', '.join(served)}): "
            + "; ".join(f"{r}: {NOT_CARRIED[r]}" for r in served)
            + "; remove routing",
        )
        return
    for route in served:
        if route in NOT_CARRIED:
            instead = f"; clients use {ROUTED_RERANK} (the same request and answer)" if ROUTED_RERANK in served else ""
            yield Problem("spec.routing.vllmRouter", f"{route} of {what} does not pass {ROUTER}: {NOT_CARRIED[route]}{instead}", "warning")
        elif route in ALTERED:
            yield Problem("spec.routing.vllmRouter", f"{route} of {what} passes {ROUTER} altered: {ALTERED[route]}", "warning")
