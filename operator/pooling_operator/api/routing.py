"""spec.routing: a router between a service's clients and its pods. Today one router, vLLM's own (vllm-router, the
PyPI package of github.com/vllm-project/router): the operator renders it per service (builders/router.py) and
keeps it in Kubernetes service discovery of the service's Ready pods; what it carries of vLLM's routes and what it
refuses is vllm/router.py. Field names are fixed by the team's API list.

A Service spreads requests evenly, so a backlog stays on the replica that took it; the router's powerOfTwo picks
the less loaded of two replicas by the requests it has in flight to each (docs/routing.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pooling_operator.api.schema import Quantity, Spec

# The router release the operator renders and whose behaviour vllm/router.py states (read from its 0.1.17 sources
# and a loopback run; docs/routing.md). The image is the project's release image on Docker Hub
# (vllm/vllm-router, .buildkite/scripts/publish-release-images.sh), tagged v<version>.
ROUTER_VERSION = "0.1.17"
DEFAULT_ROUTER_IMAGE = f"vllm/vllm-router:v{ROUTER_VERSION}"
# The policies offered, by their camelCase names, and the router's own (--policy): the load-aware one, and the two
# even ones to compare it with. cache_aware is left out (for pooling requests it finds no tokens and falls back to
# least-in-flight with ties to the first worker: src/policies/cache_aware.rs), kv_aware needs KV events a pooling
# server does not publish, consistent_hash and sticky_least_loaded pin clients to replicas.
POLICIES = {"powerOfTwo": "power_of_two", "roundRobin": "round_robin", "random": "random"}
RouterPolicy = Literal["powerOfTwo", "roundRobin", "random"]


class RouterResources(Spec):
    """CPU and memory per router replica (requests; memory also the limit)."""

    cpu: Quantity = Field(default="1", description="CPU request, e.g. '500m'. Default 1.")
    memory: Quantity = Field(default="512Mi", description="Memory request and limit, e.g. 256Mi. Default 512Mi.")


class VllmRouterSpec(Spec):
    """vLLM's own router (vllm-router) in front of the service's pods: a Deployment, a Service named
    `<service>-router`, and a ServiceAccount with a Role that lets it list and watch the namespace's pods (its
    Kubernetes service discovery adds a pod once it is Ready, space-checked where spaceCheck is on). status.endpoint
    names the router; a front (autoscaling.front) sends what it holds to the router. The router checks no API key
    and forwards no client Authorization header, so it is refused beside service.apiKeySecretRef (restrict clients
    with networkPolicy instead). /rerank and /v1/rerank do not pass it (use /v2/rerank); /v1/embeddings passes
    with OpenAI's fields only (use /pooling for vLLM's own): docs/routing.md."""

    policy: RouterPolicy = Field(
        default="powerOfTwo",
        description="How the router picks a replica: powerOfTwo (the less loaded of two at random, by the "
        "requests in flight the router holds to each; default), roundRobin or random (even spreading, as a "
        "Service does).",
    )
    replicas: int = Field(default=2, ge=1, le=100, description="Router replicas. Default 2.")
    resources: RouterResources = Field(default_factory=RouterResources, description=RouterResources.__doc__)
    image: str = Field(
        default=DEFAULT_ROUTER_IMAGE, min_length=1, max_length=512,
        description=f"The router's image: one of vllm-router {ROUTER_VERSION}'s CLI (a mirror of it in an air-gapped "
        f"cluster). Default {DEFAULT_ROUTER_IMAGE}.",
    )


class RoutingSpec(Spec):
    """A router between the service's clients and its pods, balancing by load."""

    vllm_router: VllmRouterSpec = Field(description=VllmRouterSpec.__doc__)
