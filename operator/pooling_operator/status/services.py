"""Status of a PoolingService or ScoringService from its observed Deployment and pods."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pooling_operator.api import ScoringService
from pooling_operator.api.clock import parse_time
from pooling_operator.api.identity import selector_labels
from pooling_operator.api.problems import Problem
from pooling_operator.api.quantity import binary_quantity
from pooling_operator.api.resources import GpuSharer, Service, in_space
from pooling_operator.builders import names
from pooling_operator.status import conditions as C
from pooling_operator.status.conditions import condition
from pooling_operator.status.placement import placement_problem
from pooling_operator.vllm import memory
from pooling_operator.vllm.args import pooler_config
from pooling_operator.vllm.contract import Contract
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.router import client_routes, mode_route
from pooling_operator.vllm.settings import KEDA_HTTP_INTERCEPTOR
from pooling_operator.vllm.vectors import served_task, vectors_status
from pooling_operator.vllm.workload import Workload, workload

CRASH_REASONS = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError")


def effective(resource: Service, c: Contract, argv: list[str], w: Workload | None = None,
              claim_template: dict[str, Any] | None = None) -> dict[str, Any]:
    w = w or workload(resource)
    out: dict[str, Any] = {"vllmVersion": c.version, "runner": w.runner}
    if w.runner == "pooling":
        config = pooler_config(w)
        out["task"] = served_task(w)
        out["poolingType"] = config.get("seq_pooling_type") or config.get("tok_pooling_type") or "model default"
        if "use_activation" in config:
            out["normalize"] = config["use_activation"]
        if "dimensions" in config:
            out["dimensions"] = config["dimensions"]
    if w.engine.max_model_len is not None:
        out["maxModelLen"] = w.engine.max_model_len
    out["args"] = argv
    share = share_status(resource, w, claim_template)
    if share:
        out["gpuShare"] = share
    return out


ISOLATION = {
    "timeSlicing": "none: time-slicing shares the device's memory; vLLM's --gpu-memory-utilization bound is the only guard",
    "mig": "hardware: the MIG slice's memory and compute are the server's own",
    "dra": "the scheduler counts each claim's memory (consumable capacity); on the device only vLLM's bound guards it",
}


WHOLE_DEVICE = (
    "a whole device per pod: kube-apiserver dropped the claim's capacity request (the DRAConsumableCapacity "
    "feature gate is off), so the scheduler gives each claim a device of its own"
)


def claim_capacity_dropped(template: dict[str, Any] | None) -> bool:
    """The observed ResourceClaimTemplate of a DRA share asks for no capacity: the API server dropped the request
    (it clears fields behind a disabled feature gate on write, without an error; checked on Kubernetes 1.35)."""
    if template is None:
        return False
    requests = ((((template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests")) or []
    return bool(requests) and not any(((r.get("exactly") or {}).get("capacity") or {}).get("requests") for r in requests)


def gpus_as_placed(resource: GpuSharer, whole_device: bool = False) -> float:
    """What one pod holds as the cluster placed it: what the spec asks (vllm.memory.gpus_held), or one whole
    device where a DRA claim's capacity request was dropped."""
    return 1.0 if whole_device else memory.gpus_held(resource.spec.resources)


def placed_whole(status: Mapping[str, Any]) -> bool:
    """The status says each pod was given a whole device instead of its share (share_status's `allocation`)."""
    return ((status.get("effective") or {}).get("gpuShare") or {}).get("allocation") == WHOLE_DEVICE


def share_status(resource: GpuSharer, w: Workload,
                 claim_template: dict[str, Any] | None = None) -> dict[str, Any] | None:
    gpu = resource.spec.resources.gpu if resource.spec.resources else None
    if gpu is None or gpu.share is None:
        return None
    need = memory.minimum(w)
    out: dict[str, Any] = {"memory": str(gpu.share.memory), "minimum": binary_quantity(need.total), "basis": need.summary()}
    util = memory.utilization(gpu)
    if util is not None:
        out["gpuMemoryUtilization"] = util
    dropped = claim_capacity_dropped(claim_template)
    out["gpus"] = round(gpus_as_placed(resource, dropped), 4)
    out["isolation"] = ISOLATION[gpu.share.via]
    if dropped:
        out["allocation"] = WHOLE_DEVICE
    return out


def contract_status(resource: ScoringService) -> dict[str, Any]:
    spec = resource.spec
    out: dict[str, Any] = {"mode": spec.mode, "route": mode_route(resource)}
    if spec.generative is not None:
        g = spec.generative
        out.update({"labelTokenIds": [label.id for label in g.labels], "applySoftmax": g.apply_softmax, "itemFirst": g.item_first})
        if g.query_template is not None:
            out["queryTemplate"] = g.query_template
    return out


def _crashing(pods: list[dict[str, Any]]) -> str | None:
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
            if reason in CRASH_REASONS:
                return f"pod {pod['metadata']['name']} container {cs.get('name')}: {reason}"
    return None


def endpoint(resource: Service, interceptor: str) -> str:
    """Where clients send requests: the KEDA HTTP add-on's interceptor (with a Host header among the front's
    hosts) when it fronts the service, holding requests while no replica runs (and sending them to the router,
    with routing); else the router's Service with routing; else the service's own Service."""
    a = resource.spec.autoscaling
    if a is not None and a.front is not None:
        return interceptor
    return service_url(resource)


def service_url(resource: Service) -> str:
    """The Service clients reach in cluster DNS: the router's with routing, else the service's own."""
    meta = resource.metadata
    name = names.router(meta.name) if resource.spec.routing is not None else meta.name
    return f"http://{name}.{meta.namespace or 'default'}.svc:{resource.spec.service.port}"


def _router_ready(ready_cond: dict[str, Any], router: dict[str, Any] | None, name: str, generation: int | None) -> dict[str, Any]:
    """Clients reach the router: the replicas' readiness counts only once it has a ready replica itself (it is
    ready once it has found a ready vLLM pod: /readiness)."""
    router_name = names.router(name)
    if router is None:
        message = f"{ready_cond['message'][:-1]}, but the router's Deployment {router_name} is being created."
    elif ((router.get("status") or {}).get("readyReplicas") or 0) < 1:
        message = (f"{ready_cond['message'][:-1]}, but the router (Deployment {router_name}) has no ready replica: "
                   "status.endpoint answers nothing (its pods' events and logs say why).")  # fmt: skip
    else:
        return ready_cond
    return condition(C.READY, False, C.ROUTER_NOT_READY, message, generation)


def service_status(
    resource: Service,
    c: Contract,
    argv: list[str],
    deployment: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    w: Workload | None = None,
    claim_template: dict[str, Any] | None = None,
    interceptor: str = KEDA_HTTP_INTERCEPTOR,
    router: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole status (conditions without timestamps) of a valid service; `w` is its workload view when the
    caller has it (the reconcile's plan does); `claim_template` its observed ResourceClaimTemplate (a DRA share);
    `interceptor` the KEDA HTTP add-on's proxy, the endpoint of a service it fronts; `router` the observed
    Deployment of its router (spec.routing), which must have a ready replica for Ready."""
    meta, spec = resource.metadata, resource.spec
    generation = meta.generation
    w = w or workload(resource)
    dep_spec = (deployment or {}).get("spec") or {}
    dep_status = (deployment or {}).get("status") or {}
    desired = dep_spec.get("replicas", spec.replicas) if spec.autoscaling else spec.replicas
    replicas = dep_status.get("replicas", 0)
    ready = dep_status.get("readyReplicas", 0)
    updated = dep_status.get("updatedReplicas", 0)
    current = deployment is not None and dep_status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)

    if deployment is None:
        progressing = condition(C.PROGRESSING, True, C.CREATING, "The Deployment is being created.", generation)
    elif not current or updated < desired or replicas > desired or ready < desired:
        progressing = condition(
            C.PROGRESSING, True, C.ROLLING_OUT,
            f"{updated} of {desired} replicas updated, {ready} ready.", generation,
        )
    else:
        progressing = condition(C.PROGRESSING, False, C.COMPLETE, f"{ready} of {desired} replicas ready.", generation)

    dep_conditions = {x.get("type"): x for x in dep_status.get("conditions") or []}
    crash = _crashing(pods)
    deadline = dep_conditions.get("Progressing", {}).get("reason") == "ProgressDeadlineExceeded"
    placement = placement_problem(deployment, pods)
    if deployment is None:  # the first visit: nothing is known yet about pods
        degraded = condition(C.DEGRADED, "Unknown", C.CREATING, "Not known until the Deployment's pods exist.", generation)
    elif crash:
        degraded = condition(C.DEGRADED, True, C.CRASH_LOOP, crash, generation)
    elif placement is not None and ready < desired:
        degraded = condition(C.DEGRADED, True, placement.reason, placement.message, generation)
    elif deadline and ready < desired:
        degraded = condition(
            C.DEGRADED, True, C.STARTUP_BUDGET_EXCEEDED,
            f"{ready} of {desired} replicas ready after the startup budget "
            f"({w.engine.startup_timeout_seconds}s) and the rollout deadline.", generation,
        )
    else:
        degraded = condition(C.DEGRADED, False, C.HEALTHY, "No crash-looping or unplaceable pods; rollout within its deadline.", generation)

    if deployment is None:  # the first visit: Unknown, not False (nothing has failed)
        ready_cond = condition(C.READY, "Unknown", C.CREATING, "The Deployment is being created.", generation)
    elif desired == 0:
        ready_cond = condition(C.READY, False, C.SCALED_TO_ZERO, "The service has 0 replicas.", generation)
    elif current and ready >= desired and updated >= desired:
        ready_cond = condition(C.READY, True, C.AVAILABLE, f"{ready} of {desired} replicas ready.", generation)
    else:
        if not current:
            message = f"The Deployment has not yet taken up the new spec ({ready} of {desired} replicas ready on the old one)."
        else:
            message = f"{min(ready, updated)} of {desired} replicas ready and updated ({ready} ready, {updated} updated)."
        ready_cond = condition(C.READY, False, C.REPLICAS_NOT_READY, message, generation)
        if placement is not None:
            # At a glance (kubectl get shows Ready's reason): the controller's or scheduler's own words.
            ready_cond = condition(C.READY, False, placement.reason, f"{message[:-1]}: {placement.message}", generation)

    if spec.routing is not None and ready_cond["status"] == "True":
        ready_cond = _router_ready(ready_cond, router, resource.metadata.name, generation)
    service_routes = client_routes(resource, c, w)
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": [ready_cond, condition(C.SPEC_VALID, True, C.VALID, "Every rule of vLLM " + c.version + " holds.", generation), progressing, degraded],
        "replicas": replicas,
        "readyReplicas": ready,
        "selector": ",".join(f"{k}={v}" for k, v in selector_labels(w.name, w.kind).items()),
        "endpoint": endpoint(resource, interceptor),
        "routes": service_routes,
        "effective": effective(resource, c, argv, w, claim_template),
    }
    if spec.service.api_key_secret_ref is not None:
        status["unprotectedRoutes"] = c.unprotected(service_routes)
    vectors = vectors_status(w)
    if vectors is not None:
        status["vectors"] = vectors
    if in_space(resource):
        status["embeddingSpace"] = {"fingerprint": embedding_fingerprint(w)}
        if resource.spec.embedding_space:
            status["embeddingSpace"]["label"] = resource.spec.embedding_space
    else:
        status["contract"] = contract_status(resource)
    return status


def front_withheld(status: dict[str, Any], resource: Service, message: str) -> None:
    """A service whose front hosts another service or route holds (api/front_hosts.py): its InterceptorRoute is not
    written, so the interceptor does not reach it; Ready is False saying who holds which host, and the endpoint is
    the service's own Service, which still serves. Mutates ``status``."""
    status["endpoint"] = service_url(resource)
    for cond in status["conditions"]:
        if cond["type"] == C.READY:
            cond.update(status="False", reason=C.FRONT_HOST_CLAIMED, message=message + ".")


def invalid_status(
    generation: int | None, problems: list[Problem], reason: str = C.INVALID_SPEC, kept: str | None = None
) -> dict[str, Any]:
    """Status of a resource that breaks a rule: SpecValid=False naming the fields; Ready=False, saying what of
    the running workload is kept (`kept_children`)."""
    errors = [p for p in problems if p.severity == "error"]
    message = "; ".join(str(p) for p in errors)
    ready = "The spec is invalid; see SpecValid." + (f" {kept}" if kept else "")
    return {
        "observedGeneration": generation,
        "conditions": [
            condition(C.READY, False, reason, ready, generation),
            condition(C.SPEC_VALID, False, reason, message, generation),
        ],
    }


def taken_status(generation: int | None, kind: str, taken: list[tuple[str, str, str]]) -> dict[str, Any]:
    """Status of a resource some of whose child names are held by objects it does not control (builders/ownership.py):
    Ready=False naming each object and who holds it; the spec itself is valid. Nothing is written over those
    objects or deleted, nothing that would name them is created, and the reconcile tries again by itself, so the
    resource goes on once the names are free."""
    held = "; ".join(f"{k} {n} exists {who}" for k, n, who in taken)
    message = (f"{held}. The operator neither changes nor deletes an object it does not control, and creates "
               f"nothing that would name it: delete or rename it, or give this {kind} another name; this resource "
               f"goes on by itself once the name is free.")
    return {
        "observedGeneration": generation,
        "conditions": [
            condition(C.READY, False, C.CHILD_NAME_TAKEN, message, generation),
            condition(C.SPEC_VALID, True, C.VALID, "The spec is valid.", generation),
        ],
    }


def kept_children(observed: Mapping[tuple[str, str], dict[str, Any]]) -> str | None:
    """What a refused spec leaves running, as observed: a spec that passed before (an older operator's rules,
    or an earlier generation) and is refused now never takes its workload down; its children stay as last
    applied until the spec is valid again."""
    for (kind, name), obj in sorted(observed.items()):
        if kind == "Deployment":
            st = obj.get("status") or {}
            want = (obj.get("spec") or {}).get("replicas", 1)
            return (
                f"Deployment {name}, as last applied, is kept and not changed until the spec is valid again "
                f"({st.get('readyReplicas', 0)}/{want} replicas ready)."
            )
        if kind == "Job":
            return f"Job {name}, as last applied, is kept and not changed until the spec is valid again."
    return None


def degraded_by_time(status: dict[str, Any], old_conditions: list[dict[str, Any]] | None, now: datetime, budget_seconds: int) -> None:
    """Degraded when fewer replicas than desired have been ready for longer than the startup budget, also
    after a finished rollout (a lost node, a pod that never comes back), which the Deployment's own
    progress deadline does not see. Mutates ``status``."""
    new = {c["type"]: c for c in status["conditions"]}
    ready, degraded = new.get(C.READY), new.get(C.DEGRADED)
    if not ready or not degraded or ready["status"] == "True" or ready["reason"] != C.REPLICAS_NOT_READY or degraded["status"] == "True":
        return
    before = next((c for c in old_conditions or [] if c.get("type") == C.READY), None)
    if not before or before.get("status") != "False" or not before.get("lastTransitionTime"):
        return
    since = parse_time(before["lastTransitionTime"])
    if since is None:
        return
    waited = (now - since).total_seconds()
    if waited > budget_seconds:
        degraded.update(
            status="True", reason=C.REPLICAS_UNAVAILABLE,
            message=f"{ready['message']} for {int(waited)}s, longer than the startup budget ({budget_seconds}s).",
        )
