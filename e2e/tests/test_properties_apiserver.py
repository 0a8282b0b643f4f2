"""The real API server (schema + CEL of crds/) against `validate` on 1,000 generated resources per kind.

The resources are the unit tier's (tests/properties_support.py: `corpus` gives exactly what
tests/test_properties.py checked when they share a session, or draws them afresh), each sent as a server-side
dry-run create (``dryRun=All``, ``fieldValidation=Strict``, as `kubectl apply --dry-run=server --validate=strict`)
into the test's namespace; a namespaced resource's ``metadata.namespace`` is set to it first, and validate judges
that same object. For each we record (validate ok?, API server ok?) and assert that every disagreement is in a
class below; then every child `build()` renders for a resource validate accepts is sent the same way and must be
admitted or fall in a known class. ServiceMonitor, PodMonitor and ScaledObject children are sent too: the `crds`
fixture installs the prometheus-operator and KEDA CRDs, so no child kind is skipped.

The validating webhook is not in the loop: it answers with `admission_verdict`, which is `validate` itself
(tests/test_admission.py), so it would only add validate's refusals to the API server's.

validate refuses, the API server admits (the operator then sets SpecValid=False, InvalidSpec, naming the field):

| class | example | intended because |
|---|---|---|
| vLLM or cross-field rule | owned/secret/unknown/repeated flags in extraArgs, maxNumBatchedTokens < maxModelLen, a task the architecture cannot serve, BGE-M3 heads without the override, hfOverrides owning typed keys, dataset inside the output folder, GPUs vs parallel sizes, an image tag without rules | vLLM's parser, registry and startup checks are data CEL does not have; the rest is kept out of CEL's cost budget |
| status on create | a status of the wrong shape | the status subresource: the API server drops status on create; validate parses what it is given |
| explicit null | `convert: null`, `default: null` | the API server prunes nulls of non-nullable fields; validate reads the document as written |
| regex dialect of \\s | `model.name: "a\\u00a0b"` | `\\s` is Unicode (and \\v) in Python/Rust regex, ASCII in Go's RE2; validate is the stricter |
| quantity syntax | `resources.cpu: "_"`, `output.storageBudget: -2147483648` | the CRD's int-or-string quantities carry no pattern and no minimum; validate checks both (a pattern and a CEL rule in the CRD would close it) |

the API server refuses, validate accepts (KNOWN_API_ONLY):

| class | example | status |
|---|---|---|
| metadata syntax | bad label/annotation keys or values, generateName (a bad string or a bool), unknown metadata fields | explained: validate checks only metadata.name; the rest of ObjectMeta is the API server's, and the operator only sees admitted metadata |
| unknown field under status | `status: {a: 1}` | explained: status models ignore unknown fields (written by the operator, read across versions) |

children the API server refuses (KNOWN_CHILD_REFUSALS):

| class | example | status |
|---|---|---|
| pass-through pod field Kubernetes validates | a toleration with no key and operator Equal, tolerationSeconds without NoExecute, bad nodeSelector/label/annotation keys, an unknown key in affinity, fieldRef/resourceFieldRef/secret keys Kubernetes refuses, priorityClassName | by design: the operator turns the refusal into SpecValid=False, ChildRejected (reconcile/writes.py; an unknown affinity key is answered 500 "failed to create typed patch object", also a refusal: k8s/api.py classify) |

Found by this test and fixed (tests/test_properties.py pins each): a key named like a pydantic union-branch tag
crashed validate; lax type coercion ("3" for an integer, 0 for false); a quantity with a trailing newline;
tolerationSeconds past int64; CEL rules reading minReplicas / shards when left out; a HiddenStateJob name that
leaves no room for the shard index; a whole float (-0.0, 2.0) where the schema says integer, which the API
server admits as an integer and validate refused; a quantity past int64 (2**63) or a float from 2**53 up, which
the API server reads as a number and refuses, and validate admitted.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import json
import os
import re
import ssl
import time
from typing import Any

import httpx
import pytest

from e2e.kube.controlplane import ControlPlane
from pooling_operator.api import AutoscalingPolicy
from pooling_operator.api.kinds import KINDS as API_KINDS
from pooling_operator.builders import BuildContext, build
from pooling_operator.vllm.contract import contract, resolve_version
from pooling_operator.vllm.validate import validate
from tests.properties_support import EXAMPLES_PER_KIND, KINDS, NAMESPACED, PLURALS, corpus

CONCURRENCY = 12
PARAMS = {"dryRun": "All", "fieldValidation": "Strict"}

# Messages of the schema layer (pydantic via api/problems.py); every other message is a rule's.
SCHEMA_MESSAGE = re.compile(
    r"^(Input should|required field is missing|unknown field|.* does not match the pattern|.* is not a Kubernetes "
    r"quantity|List should have|String should have|Dictionary should have|Value should have|Object has no attribute"
    r"|must be a non-negative Kubernetes quantity|metadata\.name must be)"
)
ASCII_SPACE = set("\t\n\f\r ")


def _value_at(obj: Any, path: str) -> tuple[bool, Any]:
    node = obj
    for key, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        if index:
            if not isinstance(node, list) or int(index) >= len(node):
                return False, None
            node = node[int(index)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return False, None
    return True, node


def validate_only_class(obj: Any, path: str, message: str) -> str | None:
    """The intended class of one error of a resource validate refuses and the API server admits (None: none)."""
    if path == "status" or path.startswith(("status.", "status[")):
        return "status on create"  # the status subresource: the API server drops status on create
    if not SCHEMA_MESSAGE.match(message):
        return "vLLM or cross-field rule"  # a rule of vllm/rules.py, engine_rules.py, hidden_state_rules.py, policy_rules.py
    found, value = _value_at(obj, path)
    if found and value is None:
        return "explicit null"  # the API server prunes a null of a non-nullable field; validate reads the document
    if "does not match the pattern" in message and "\\s" in message and isinstance(value, str):
        if any(c.isspace() or c == "\x0b" for c in value) and not any(c in ASCII_SPACE for c in value):
            return "regex dialect of \\s"  # Unicode whitespace and \v: \s in Python/Rust regex, not in Go's RE2
    if "is not a Kubernetes quantity" in message or "must be a non-negative Kubernetes quantity" in message:
        # the CRD's int-or-string quantities have no pattern and no minimum (a negative integer is admitted);
        # validate checks both
        return "quantity syntax"
    return None


# The API server refuses what validate accepts: (class, regex over the API server's message, bug?); each is
# explained in the docstring. The bugs it found are fixed and pinned in tests/test_properties.py.
KNOWN_API_ONLY: list[tuple[str, str, bool]] = [
    ("metadata syntax", r'^metadata\.|unknown field "metadata\.|Go struct field ObjectMeta\.', False),
    ("unknown field under status", r'unknown field "status\.', False),
]

# Children of resources validate accepts that the API server refuses: (class, regex, bug?).
KNOWN_CHILD_REFUSALS: list[tuple[str, str, bool]] = [
    ("pass-through pod field Kubernetes validates (ChildRejected)", r"spec\.template\.(spec\.(tolerations|nodeSelector|affinity|priorityClassName|containers\[\d+\]\.(env|resources))|labels|annotations)|unknown field \"spec\.template\.spec\.affinity\.", False),
]


def _ssl(cluster: ControlPlane) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cluster.pki["ca.crt"]))
    ctx.load_cert_chain(str(cluster.pki["admin.crt"]), str(cluster.pki["admin.key"]))
    return ctx


def _sent(obj: Any, kind: str, namespace: str) -> Any:
    """The object as sent: a namespaced kind's metadata.namespace is the test's (the URL's) namespace."""
    obj = copy.deepcopy(obj)
    if NAMESPACED[kind] and isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        obj["metadata"]["namespace"] = namespace
    return obj


def _url(kind: str, namespace: str) -> str:
    base = "/apis/vllm-pooling.io/v1alpha1"
    return f"{base}/namespaces/{namespace}/{PLURALS[kind]}" if NAMESPACED[kind] else f"{base}/{PLURALS[kind]}"


async def _post_all(cluster: ControlPlane, requests: list[tuple[str, Any]]) -> list[tuple[int, Any]]:
    """Dry-run create each (path, body), CONCURRENCY at a time; identical requests are sent once."""
    keys = [f"{path} {json.dumps(body, sort_keys=True)}" for path, body in requests]
    unique = dict(zip(keys, requests, strict=True))
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    sem = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(base_url=cluster.server, verify=_ssl(cluster), limits=limits, timeout=60) as client:

        async def one(path: str, body: Any) -> tuple[int, Any]:
            async with sem:
                r = await client.post(path, params=PARAMS, content=json.dumps(body), headers={"Content-Type": "application/json"})
            try:
                return r.status_code, r.json()
            except ValueError:
                return r.status_code, r.text

        answers = await asyncio.gather(*(one(p, b) for p, b in unique.values()))
    by_key = dict(zip(unique, answers, strict=True))
    return [by_key[k] for k in keys]


def _api_message(body: Any) -> str:
    if not isinstance(body, dict):
        return str(body)
    causes = (body.get("details") or {}).get("causes") or []
    if causes:
        return "; ".join(f"{c.get('field', '')}: {c.get('message', '')}" for c in causes)
    return str(body.get("message", body))


def _known(table: list[tuple[str, str, bool]], message: str) -> str | None:
    return next((name for name, regex, _ in table if re.search(regex, message)), None)


@pytest.mark.timeout(600)
def test_api_server_agrees_with_validate(cluster: ControlPlane, crds: list[str], namespace: str) -> None:
    started = time.monotonic()
    records: list[dict[str, Any]] = []
    for kind in KINDS:
        for i, obj in enumerate(corpus(kind)):
            sent = _sent(obj, kind, namespace)
            rec: dict[str, Any] = {"kind": kind, "i": i, "obj": sent}
            result = validate(sent)  # never raises (tests/test_properties.py)
            rec["validate"] = result.ok
            rec["result"] = result
            records.append(rec)
    generated = time.monotonic() - started

    answers = asyncio.run(_post_all(cluster, [(_url(r["kind"], namespace), r["obj"]) for r in records]))
    for rec, (status, body) in zip(records, answers, strict=True):
        rec["status"], rec["api"], rec["api_message"] = status, 200 <= status < 300, _api_message(body)
    parents = time.monotonic() - started - generated

    # children of every resource validate accepts
    child_requests: list[tuple[str, Any]] = []
    owners: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for rec in records:
        resource = rec["result"].resource if rec["validate"] else None
        if resource is None or isinstance(resource, AutoscalingPolicy):
            continue
        version, _ = resolve_version(resource.spec.engine.version, resource.spec.engine.image)
        for child in build(resource, contract(version), BuildContext()):  # type: ignore[arg-type]
            child_requests.append((API_KINDS[child["kind"]].path(namespace), child))
            owners.append((rec, child))
    child_answers = asyncio.run(_post_all(cluster, child_requests))
    children_time = time.monotonic() - started - generated - parents

    # ---- the table ----------------------------------------------------------------------------------------
    counts: dict[str, collections.Counter[str]] = {k: collections.Counter() for k in KINDS}
    validate_only: collections.Counter[str] = collections.Counter()
    unexplained_validate_only: list[str] = []
    api_only: collections.Counter[str] = collections.Counter()
    unexplained_api_only: list[str] = []
    unexpected_status: list[str] = []
    for rec in records:
        c = counts[rec["kind"]]
        c["inputs"] += 1
        c[f"validate {'ok' if rec['validate'] else 'crash' if rec['validate'] is None else 'refused'}"] += 1
        c[f"api {'ok' if rec['api'] else 'refused'}"] += 1
        if rec["status"] not in (200, 201, 400, 422):
            unexpected_status.append(f"{rec['kind']}#{rec['i']}: HTTP {rec['status']} {rec['api_message'][:300]}")
        if rec["validate"] == rec["api"]:
            c["agree"] += 1
            continue
        if rec["api"]:  # validate refuses, API server admits
            c["validate-only refusal"] += 1
            for p in rec["result"].errors:
                name = validate_only_class(rec["obj"], p.path, p.message)
                if name is None:
                    unexplained_validate_only.append(
                        f"{rec['kind']}#{rec['i']}: {p.path}: {p.message[:200]} || {json.dumps(rec['obj'])[:600]}"
                    )
                else:
                    validate_only[name] += 1
        else:
            c["API-only refusal"] += 1
            name = _known(KNOWN_API_ONLY, rec["api_message"])
            if name is None:
                unexplained_api_only.append(f"{rec['kind']}#{rec['i']}: {rec['api_message'][:300]} || {json.dumps(rec['obj'])[:600]}")
            else:
                api_only[name] += 1
    refused_children: list[str] = []
    child_classes: collections.Counter[str] = collections.Counter()
    for (rec, child), (status, body) in zip(owners, child_answers, strict=True):
        if 200 <= status < 300:
            continue
        name = _known(KNOWN_CHILD_REFUSALS, _api_message(body))
        if name is None:
            refused_children.append(
                f"{rec['kind']}#{rec['i']} -> {child['kind']}/{child['metadata']['name']}: HTTP {status} {_api_message(body)[:300]}"
            )
        else:
            child_classes[name] += 1
    children_by_kind = collections.Counter(child["kind"] for _, child in owners)

    dump = os.environ.get("VPO_PROPERTIES_DUMP")  # every record as JSON lines, for reading the classes
    if dump:
        with open(dump, "w", encoding="utf-8") as fh:
            for rec in records:
                errors = [[p.path, p.message] for p in rec["result"].errors] if rec["result"] is not None else None
                row = {k: rec[k] for k in ("kind", "i", "obj", "validate", "api", "status", "api_message")}
                fh.write(json.dumps({**row, "errors": errors}) + "\n")
            for (rec, child), (status, body) in zip(owners, child_answers, strict=True):
                fh.write(json.dumps({"child": child, "of": [rec["kind"], rec["i"]], "status": status, "api_message": _api_message(body)}) + "\n")
    print(f"\ngenerate+validate {generated:.1f}s, {len(records)} dry-run creates {parents:.1f}s, "
          f"{len(child_requests)} children {children_time:.1f}s")  # fmt: skip
    for kind, c in counts.items():
        print(f"  {kind}: {dict(c)}")
    print(f"  children sent: {dict(children_by_kind)}")
    print(f"  validate-only classes: {dict(validate_only)}")
    print(f"  API-only classes: {dict(api_only)}")
    print(f"  refused children classes: {dict(child_classes)}")

    for kind, c in counts.items():
        assert c["inputs"] >= EXAMPLES_PER_KIND, (kind, c)
    assert not unexpected_status, "\n".join(unexpected_status[:20])
    assert not unexplained_validate_only, f"{len(unexplained_validate_only)} unexplained:\n" + "\n".join(unexplained_validate_only[:30])
    assert not unexplained_api_only, f"{len(unexplained_api_only)} unexplained:\n" + "\n".join(unexplained_api_only[:30])
    assert not refused_children, f"{len(refused_children)} refused:\n" + "\n".join(refused_children[:30])


OPTIONAL_FIELDS_IN_CEL = [
    ("autoscaling without minReplicas", "PoolingService", {"autoscaling": {"maxReplicas": 3}}),
    ("parallelism without shards", "HiddenStateJob", {"shards": None, "parallelism": 1}),
]


@pytest.mark.parametrize(("kind", "spec"), [c[1:] for c in OPTIONAL_FIELDS_IN_CEL], ids=[c[0] for c in OPTIONAL_FIELDS_IN_CEL])
def test_optional_fields_read_by_cel_may_be_left_out(
    cluster: ControlPlane, crds: list[str], namespace: str, kind: str, spec: dict[str, Any]
) -> None:
    from tests.factories import hidden_states, pooling

    obj = _sent((pooling if kind == "PoolingService" else hidden_states)(spec), kind, namespace)
    assert validate(obj).ok, validate(obj).problems
    ((status, body),) = asyncio.run(_post_all(cluster, [(_url(kind, namespace), obj)]))
    assert 200 <= status < 300, _api_message(body)
