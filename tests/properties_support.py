"""Hypothesis strategies for the property tests (issue 13, "bad input"), shared by both tiers.

Resources are drawn three ways, per kind:

- **mutated examples** (most draws): one of the valid resources of ``examples/`` (and of ``tests/factories``)
  with 0 to 4 mutations, each at a field path taken from the kind's CRD schema (``crds/``), so every declared
  field is reached, not only those the examples set: a value from the field's own schema (in range, at and
  past each bound, enum values and near misses, pattern matches and misses), a value of the wrong type, a
  deleted field (required ones included), an unknown field (typos of known names, odd keys), weird strings
  (empty, whitespace, unicode, control characters, 64/257/5000 characters), ``engine.extraArgs`` drawn from
  flags the operator owns, secrets, unknown and repeated flags, and nested ``model.hfOverrides``;
- **random specs**: ``apiVersion``/``kind``/``metadata`` right, ``spec`` a random JSON object;
- **random documents**: any JSON value at all.

Every draw is JSON (str keys, finite floats): the API-server tier sends the same draws. Values JSON cannot
carry (non-string keys, NaN, tuples) are in ``unit_only_values`` for the unit tier alone.

``tests/properties_paths.path_problem`` states what a Problem's field path must be.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pooling_operator.api.resources import KINDS as TABLE
from tests import factories

ROOT = Path(__file__).resolve().parents[1]
API = "vllm-pooling.io/v1alpha1"
# The kinds of the kinds table (api/resources.py), in its order, but ModelCache: its children are not built by
# builders.build, which test_properties.check_render holds every accepted resource to (not yet in the corpus).
KINDS = tuple(k for k in TABLE if k != "ModelCache")
PLURALS = {k: info.plural for k, info in TABLE.items()}
NAMESPACED = {k: info.namespaced for k, info in TABLE.items()}

# ObjectMeta has no schema in a CRD (the API server owns it); these are the fields the operator or Kubernetes
# knows, for naming a field that is absent from the input.
METADATA_FIELDS = (
    "name", "generateName", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences",
    "finalizers", "managedFields", "selfLink",
)  # fmt: skip


# ---- the valid starting points ----------------------------------------------------------------------------


@cache
def _examples() -> dict[str, tuple[str, ...]]:
    """JSON text of every valid starting resource, per kind (text: hashable, and copied by parsing)."""
    out: dict[str, list[str]] = {k: [] for k in KINDS}
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("kind") in out:
                out[doc["kind"]].append(json.dumps(doc, sort_keys=True))
    for doc in (
        factories.pooling(),
        factories.pooling({"task": "token_embed", "pooling": {"type": "ALL"}, "autoscaling": {"maxReplicas": 3, "backend": "keda", "minReplicas": 0,
                                                                                         "wake": {"prometheus": {"query": "vector(0)"}}}}),
        factories.scoring(),
        factories.generative(),
        factories.scoring({"mode": "biEncoder", "pooling": {"type": "MEAN"}, "model": {"hints": {"architectures": ["BertModel"], "numLabels": None}}}),
        factories.hidden_states(),
        factories.pooling_job(),
        factories.pooling_job({"task": "token_embed", "pooling": {"type": "ALL"}, "queue": {"name": "team-a"},
                               "output": {"storageBudget": "1Gi"}, "parallelism": 1}),
        factories.policy(),
    ):
        out[doc["kind"]].append(json.dumps(doc, sort_keys=True))
    return {k: tuple(v) for k, v in out.items()}


def examples(kind: str) -> list[dict[str, Any]]:
    return [json.loads(t) for t in _examples()[kind]]


# ---- the CRD schemas --------------------------------------------------------------------------------------


@cache
def crd_schema(kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of the kind's CRD in crds/."""
    text = (ROOT / "crds" / f"vllm-pooling.io_{PLURALS[kind]}.yaml").read_text(encoding="utf-8")
    crd = yaml.safe_load(text)
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _child_schema(schema: Mapping[str, Any] | None, key: str | int) -> Mapping[str, Any] | None:
    """The schema of ``key`` inside a node of ``schema`` (None: the schema does not declare it)."""
    if schema is None:
        return None
    if isinstance(key, int):
        return schema.get("items") if schema.get("type") == "array" else None
    props = schema.get("properties") or {}
    if key in props:
        return props[key]
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        return extra
    return None


@cache
def schema_paths(kind: str) -> tuple[tuple[tuple[str, ...], str], ...]:
    """Every declared field below the root as (path, schema key), lists as the segment "[]" (e.g.
    ("spec", "generative", "labels", "[]", "id")). The schema is looked up again with ``schema_at``."""
    out: list[tuple[tuple[str, ...], str]] = []

    def walk(schema: Mapping[str, Any], path: tuple[str, ...]) -> None:
        for name, sub in (schema.get("properties") or {}).items():
            if path == () and name in ("apiVersion", "kind", "metadata"):
                continue
            here = (*path, name)
            out.append((here, name))
            walk(sub, here)
            if sub.get("type") == "array" and isinstance(sub.get("items"), Mapping):
                out.append(((*here, "[]"), "[]"))
                walk(sub["items"], (*here, "[]"))

    walk(crd_schema(kind), ())
    return tuple(out)


def schema_at(kind: str, path: tuple[str, ...]) -> Mapping[str, Any] | None:
    node: Mapping[str, Any] | None = crd_schema(kind)
    for seg in path:
        node = _child_schema(node, 0 if seg == "[]" else seg)
    return node


# ---- values -----------------------------------------------------------------------------------------------

WEIRD_STRINGS = (
    "", " ", "\t", "\n", "a b", "-", "--", "=", "_", ".", "/", "null", "true", "0", "1.5", "-1", "NaN", "∞",
    "Ünïcödé", "名前", "😀", "\u202e", "\u200b", "\x00", "a\x00b", "é" * 63, "a" * 64, "a" * 257, "x" * 5000,
    "UPPER", "CamelCase", "with.dot", "trailing-", "-leading", "ok-name", "${HOME}", "$(rm -rf /)", "'\"",
    "{{ .Values }}", "%s%n", "../../etc/passwd", "https://example.invalid/x", "Yes", "No",
    # where Python's re/Rust's regex and Go's RE2 differ: Unicode and \v whitespace for \s, "$" before a final "\n"
    "a\u00a0b", "a\u3000b", "a\x0bb", "a\x1cb", "a\u2028b", "models\n", "1Gi\n", "250ms\n",
)  # fmt: skip
WRONG_TYPES = (None, 0, -1, 1, 1.5, -0.0, 1e300, True, False, "", "x", "1", [], [1], ["a"], {}, {"a": 1}, [[]], [{}])
BIG_INTS = (-(2**63) - 1, -(2**31), -1, 0, 1, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64)
QUANTITIES = (
    "1", "0", "500m", "64Gi", "2Ti", "1e3", "1E3", "1.5", ".5", "+1", "-1", "1Ki", "1k", "1K", "1KI", "0x10",
    "1 Gi", "Gi", "1Gib", "1.Gi", "1e", "1e+3", "9" * 40, "1Ei", "1n", "-0.5Gi", "1Gi\n", "8\n",
)  # fmt: skip
DURATIONS = ("250ms", "0s", "0ms", "1h", "2h", "1m30s", "1.5s", "5000h", "1h0.5ms", "60", "1d", "-1s", "s", "1.s", "01s", "250ms\n")


@cache
def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any JSON value (str keys, finite numbers)."""
    leaf = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**64), max_value=2**64),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
        st.sampled_from(WEIRD_STRINGS),
    )
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.one_of(st.text(max_size=12), st.sampled_from(WEIRD_STRINGS)), inner, max_size=4),
        ),
        max_leaves=max_leaves,
    )


_MEMO: dict[tuple[int, int], st.SearchStrategy[Any]] = {}


def _memo(fn: Any) -> Any:
    """Build each field's strategy once (schemas are cached, so their ids are stable): drawing is then cheap."""

    def wrapper(schema: Any, depth: int = 0) -> Any:
        key = (id(schema), depth, fn.__name__)
        if key not in _MEMO:
            _MEMO[key] = fn(schema, depth) if fn.__name__ == "value_for" else fn(schema)
        return _MEMO[key]

    return wrapper


# Strings matching each pattern of the CRDs (the first of each list is a typical valid value), and near misses.
PATTERN_SAMPLES: dict[str, tuple[str, ...]] = {
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$": ("models", "a", "a.b-c", "9x", "a" * 253, "a-", "A", "a..b", "a_b"),
    r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$": DURATIONS,
    r"^[^\s]+$": ("BAAI/bge-m3", "x", "ü/ß", "a b", "tab\t", "a\nb", "a\u00a0b", "a\x0bb", "a\u2003b"),
    r"^[0-9]+\.[0-9]+$": ("0.33", "0.32", "0.34", "1.0", "00.33", "0.33.1", "v0.33", "0.3x"),
    r"^([a-z0-9.-]+/)?[a-zA-Z0-9_.-]+$": ("nvidia.com/gpu", "amd.com/gpu", "gpu", "a/b/c", "Nvidia.com/gpu", "/gpu"),
    r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$": ("NVIDIA-H100-80GB-HBM3", "", "a", "-a", "a-", "a b"),
    r"^[-._a-zA-Z][-._a-zA-Z0-9]*$": ("MY_VAR", "HF_TOKEN", "VLLM_API_KEY", "VLLM_PORT", "_x", "1X", "A=B", "X\n"),
    r"^/": ("/data", "/", "/a/../b", "relative", "//x"),
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$": ("", "a", "ab-1", "-a", "A"),
    r"^[A-Za-z0-9][-A-Za-z0-9_.]*$": ("v1", "space_2.x", "-v", "a b"),
    r"^https?://[^\s]+$": ("http://prometheus:9090", "https://p.example/x", "ftp://x", "http://", "http://a b"),
}


def _wrong_for(kind: str | None) -> list[Any]:
    """Values of every type but the declared one."""
    def type_of(v: Any) -> str:
        return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object", type(None): "null"}[type(v)]

    return [v for v in WRONG_TYPES if type_of(v) != kind and not (kind == "number" and type(v) is int)]


def candidates(schema: Mapping[str, Any] | None, depth: int = 0) -> list[Any]:
    """Values for a field with this schema: valid ones, at and past its bounds, near misses, other types.
    Precomputed once per field (drawing one is a single choice: the unit tier stays fast)."""
    if schema is None or depth > 4:
        return [None, 0, "x", [], {}, {"a": [1, {"b": None}]}]
    kind = schema.get("type")
    out: list[Any] = []
    if "enum" in schema:
        enum = list(schema["enum"])
        out += enum + [e.upper() for e in enum if isinstance(e, str)] + [e[:-1] for e in enum if isinstance(e, str) and e] + ["bogus", ""]
    elif schema.get("x-kubernetes-int-or-string"):
        out += [*QUANTITIES, *BIG_INTS]
    elif kind == "integer":
        lo, hi = schema.get("minimum"), schema.get("maximum")
        mid = ((lo or 0) + min(hi if hi is not None else 100, (lo or 0) + 100)) // 2
        inside = [b + d for b, d in ((lo, 0), (hi, 0), (lo, 1), (hi, -1)) if b is not None]
        outside = [b + d for b, d in ((lo, -1), (hi, 1)) if b is not None]
        out += [mid, *inside, *outside, *BIG_INTS[::2], 1.0, 2.5]
    elif kind == "number":
        out += [0.5, *(v for v in (schema.get("minimum"), schema.get("maximum")) if v is not None), 0, 1, 1.0000001, -1e-9, 1e-300, 2.0, 100]
    elif kind == "boolean":
        out += [True, False, "true", 0, 1]
    elif kind == "string":
        pattern = schema.get("pattern")
        out += list(PATTERN_SAMPLES.get(pattern, ("x", "value-1"))) if pattern else ["x", "value-1"]
        lo, hi = schema.get("minLength"), schema.get("maxLength")
        if hi:
            out += ["a" * hi, "a" * (hi + 1)]
        if lo:
            out += ["a" * (lo - 1)]
        out += list(WEIRD_STRINGS[::3])
    elif kind == "array":
        item = candidates(schema.get("items"), depth + 1)
        hi = schema.get("maxItems")
        out += [[item[0]], [], item[:2], item[:3], [item[0], item[0]], item[::-1][:2]]
        if hi:
            out += [[item[i % len(item)] for i in range(hi)], [item[i % len(item)] for i in range(hi + 1)]]
    elif kind == "object":
        props = schema.get("properties")
        if props:
            required = list(schema.get("required") or [])
            firsts = {p: candidates(props[p], depth + 1)[0] for p in props}
            out += [{p: firsts[p] for p in required}, {}, dict(firsts)]
            out += [{**{p: firsts[p] for p in required}, p: v} for p in list(props)[:8] for v in candidates(props[p], depth + 1)[1:3]]
        elif isinstance(schema.get("additionalProperties"), Mapping):
            values = candidates(schema["additionalProperties"], depth + 1)
            out += [{"a": values[0]}, {}, {"x" * 64: values[0], "a/b": values[-1]}, *({"k": v} for v in values[:3])]
        else:  # x-kubernetes-preserve-unknown-fields
            out += [{}, {"a": 1}, {"architectures": ["X"], "nested": {"deep": [1, {"x": None}]}}, {"": ""}, {"matryoshka_dimensions": [8]}]
    if schema.get("nullable"):
        out.append(None)
    return out + _wrong_for(kind)


@_memo
def value_for(schema: Mapping[str, Any] | None, depth: int = 0) -> st.SearchStrategy[Any]:
    """One of the field's candidate values (see candidates), half of the time one of the first three (mostly
    valid ones: enough resources stay valid to exercise the vLLM rules and the builders)."""
    values = candidates(schema, depth)
    return st.one_of(st.sampled_from(values[:3]), st.sampled_from(values))


# vLLM flags: owned by typed fields, secrets, unknown, version-specific, valid, and malformed.
FLAGS = (
    "--max-model-len", "--max-model-len=512", "--task", "--task=embed", "--runner", "--runner=pooling",
    "--pooler-config", '--pooler-config={"pooling_type": "MEAN"}', "--convert", "--served-model-name",
    "--hf-overrides", '--hf-overrides={"architectures": ["X"]}', "--port", "--port=9000", "--host", "--model",
    "--api-key", "--api-key=secret", "--hf-token", "--hf-token=hf_x", "--trust-remote-code", "--dtype=half",
    "--dtype", "bfloat16", "--tensor-parallel-size", "2", "--max-num-seqs", "--revision", "--kv-transfer-config",
    "--speculative-config", "--disable-log-requests", "--enable-log-requests", "--no-enable-prefix-caching",
    "--enforce-eager", "--seed", "3", "--seed=3", "--max-logprobs", "40", "--gpu-memory-utilization=0.5",
    "--enable-chunked-prefill", "--no-such-flag", "--no-such-flag=1", "-O3", "-O", "-tp", "-tp=2", "--", "-",
    "--=", "---x", "--max_model_len", "--MAX-MODEL-LEN", "value", "", " ", "--seed ", "--séed", "--disable-log-stats",
    "--uvicorn-log-level", "debug", "--root-path", "/x", "--middleware", "--config", "/etc/vllm.yaml",
)  # fmt: skip
HF_KEYS = (
    "architectures", "matryoshka_dimensions", "is_matryoshka", "num_labels", "model_type", "torch_dtype",
    "max_position_embeddings", "text_config", "", "a.b", "x[0]", "int", "ÿ",
)  # fmt: skip


@cache
def extra_args() -> st.SearchStrategy[list[Any]]:
    flag = st.one_of(st.sampled_from(FLAGS), st.sampled_from(FLAGS), st.text(max_size=12), st.sampled_from(WEIRD_STRINGS))
    return st.one_of(
        st.lists(flag, max_size=6),
        st.lists(st.sampled_from(FLAGS), min_size=2, max_size=4).map(lambda xs: xs + xs),  # repeated flags
        st.lists(flag, min_size=129, max_size=130),  # past maxItems
        st.sampled_from(WRONG_TYPES),
        st.lists(st.sampled_from(WRONG_TYPES), min_size=1, max_size=3),
    )


@cache
def hf_overrides() -> st.SearchStrategy[Any]:
    architectures = st.one_of(
        st.just(["BgeM3EmbeddingModel"]),
        st.lists(st.sampled_from(["BertModel", "Qwen3ForCausalLM", "XLMRobertaModel", "", "BgeM3EmbeddingModel"]), max_size=3),
        st.sampled_from(WRONG_TYPES),
    )
    key = st.one_of(st.sampled_from(HF_KEYS), st.text(max_size=10))
    nested = st.recursive(
        json_values(4),
        lambda inner: st.dictionaries(key, inner, max_size=3),
        max_leaves=8,
    )
    return st.one_of(
        st.fixed_dictionaries({"architectures": architectures}, optional={"text_config": nested, "num_labels": st.integers(-1, 3)}),
        st.dictionaries(key, nested, max_size=4),
        st.fixed_dictionaries({"matryoshka_dimensions": st.lists(st.integers(0, 2048), max_size=3)}),
        st.fixed_dictionaries({"is_matryoshka": st.booleans()}),
        st.sampled_from(WRONG_TYPES),
    )


@cache
def dns_names() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.from_regex(r"[a-z]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True),
        st.sampled_from(["a", "a" * 63, "a" * 64, "3abc", "abc-", "ABC", "a.b", "a_b", "-a", "é"]),
        st.sampled_from(WEIRD_STRINGS),
        st.sampled_from(WRONG_TYPES),
    )


# ---- mutations --------------------------------------------------------------------------------------------


@cache
def _index(n: int) -> st.SearchStrategy[int]:
    return st.integers(0, n - 1)


@cache
def _choice(options: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(options)


def pick(draw: Any, options: Any) -> Any:
    """One of ``options`` (a cheap draw: one integer, the strategy cached by length)."""
    options = list(options)
    return options[draw(_index(len(options)))]


def _existing_paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path of the document (dict keys and list indices), the root excluded."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*path, k)
            yield from _existing_paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield (*path, i)
            yield from _existing_paths(v, (*path, i))


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for seg in path:
        doc = doc[seg]
    return doc


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any, draw: Any) -> None:
    """Set ``path`` (schema segments, "[]" for a list element) to value, making the parents it needs; a
    parent that is not a container is replaced by one."""
    value = copy.deepcopy(value)  # drawn values may be shared constants (WRONG_TYPES): never mutate those
    node: Any = doc
    for i, seg in enumerate(path[:-1]):
        nxt = path[i + 1]
        empty: Any = [] if nxt == "[]" else {}
        if seg == "[]":
            if not isinstance(node, list):
                return
            if not node:
                node.append(empty)
            idx = draw(_index(len(node)))
            if not isinstance(node[idx], (dict, list)):
                node[idx] = empty
            node = node[idx]
        else:
            if not isinstance(node.get(seg), (dict, list)):
                node[seg] = empty
            node = node[seg]
        if (nxt == "[]" and not isinstance(node, list)) or (nxt != "[]" and not isinstance(node, dict)):
            return
    last = path[-1]
    if last == "[]":
        if not isinstance(node, list):
            return
        if node and draw(_index(2)):
            node[draw(_index(len(node)))] = value
        else:
            node.append(value)
    elif isinstance(node, dict):
        node[last] = value


_meta_maps = st.one_of(
    st.dictionaries(st.sampled_from(["a", "a/b", "ÿ", "", "x" * 64]), st.text(max_size=8), max_size=2), st.sampled_from(WRONG_TYPES)
)
_text40 = st.text(min_size=1, max_size=40)
ODD_KEYS = ("x[0]", "int", "str", "a.b", "", " ", "__proto__", "status", "ÿ", "1", "spec", "apiVersion")
_text12 = st.text(max_size=12)
OPS = ("schema", "schema", "schema", "wrong", "delete", "delete", "unknown", "weird", "extra", "hf", "meta", "top")


@st.composite
def mutated(draw: Any, kind: str) -> dict[str, Any]:
    doc = json.loads(pick(draw, _examples()[kind]))
    for _ in range(pick(draw, (0, 0, 1, 1, 1, 2, 3, 4))):
        op = pick(draw, OPS)
        if op in ("schema", "wrong", "weird"):
            path, _ = pick(draw, schema_paths(kind))
            if op == "schema":
                value = draw(value_for(schema_at(kind, path)))
            elif op == "wrong":
                value = pick(draw, WRONG_TYPES)
            else:
                value = pick(draw, WEIRD_STRINGS) if draw(_index(3)) else draw(_text40)
            _set(doc, path, value, draw)
        elif op == "delete":
            paths = list(_existing_paths(doc))
            if paths:
                path = pick(draw, paths)
                parent = _get(doc, path[:-1])
                del parent[path[-1]]
        elif op == "unknown":
            dicts = [p for p in _existing_paths(doc) if isinstance(_get(doc, p), dict)]
            target = _get(doc, pick(draw, dicts)) if dicts and draw(_index(2)) else doc
            known = list(target) or ["spec"]
            typo = str(pick(draw, known))
            how = draw(_index(3))
            if how == 0:
                key = pick(draw, [typo + "s", typo.lower(), typo.upper(), typo[:-1] or "x", typo.replace("e", "3")])
            elif how == 1:
                key = pick(draw, ODD_KEYS)
            else:
                key = draw(_text12)
            if key not in target:
                target[key] = copy.deepcopy(pick(draw, WRONG_TYPES) if draw(_index(2)) else draw(json_values(4)))
        elif op == "extra":
            _set(doc, ("spec", "engine", "extraArgs"), draw(extra_args()), draw)
        elif op == "hf":
            _set(doc, ("spec", "model", "hfOverrides"), draw(hf_overrides()), draw)
        elif op == "meta":
            field = pick(draw, ["name", "name", "namespace", "labels", "annotations", "generateName", "uid"])
            if field in ("labels", "annotations"):
                value = draw(_meta_maps)
            else:
                value = draw(dns_names())
            if isinstance(doc.get("metadata"), dict):
                doc["metadata"][field] = copy.deepcopy(value)
        else:  # top level: apiVersion, kind, metadata itself, status
            field = pick(draw, ["apiVersion", "kind", "metadata", "status", "spec"])
            value = pick(draw, [API, "vllm-pooling.io/v1", "v1", "", *KINDS, "Pod", *WRONG_TYPES])
            if draw(_index(2)):
                value = draw(value_for(crd_schema(kind)["properties"].get(field), 1))
            doc[field] = copy.deepcopy(value)
    return doc


@st.composite
def random_spec(draw: Any, kind: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": draw(dns_names())}
    if NAMESPACED[kind]:
        meta["namespace"] = "ns"
    return {"apiVersion": API, "kind": kind, "metadata": meta, "spec": draw(json_values(16))}


@cache
def resources(kind: str) -> st.SearchStrategy[Any]:
    """What the property tests feed validate for one kind: mostly mutated examples, some random specs and
    random documents."""
    m, r, j = mutated(kind), random_spec(kind), json_values(16)
    return st.one_of(*[m] * 17, r, r, j)


@cache
def unit_only_values() -> st.SearchStrategy[Any]:
    """Documents JSON cannot carry (YAML can): non-string keys, NaN and infinities, tuples, bytes."""
    odd = st.one_of(
        st.just(float("nan")), st.just(float("inf")), st.just(float("-inf")), st.binary(max_size=4),
        st.tuples(st.integers(), st.text(max_size=3)), st.integers(-3, 3), st.none(), st.booleans(),
    )  # fmt: skip
    return st.one_of(
        st.dictionaries(st.one_of(st.integers(), st.booleans(), st.none(), st.floats()), odd, max_size=3),
        odd,
    )


# ---- one run of the strategy per kind, the same in both tiers ----------------------------------------------

EXAMPLES_PER_KIND = 1000
# the rest (derandomized: the same draws on every run, CI too) is the suite's one profile (conftest.py)
PROPERTY_SETTINGS = settings(max_examples=EXAMPLES_PER_KIND)


_DRAWN: dict[str, list[str]] = {}  # kind -> what a passing default run of for_each_resource drew (JSON text)


def for_each_resource(kind: str, check: Any, max_examples: int = EXAMPLES_PER_KIND) -> None:
    """Run ``check(obj)`` on ``max_examples`` drawn resources of ``kind`` (hypothesis shrinks a failure).
    Both tiers call this one function, so with derandomize they see the same resources; a passing run with the
    default count is remembered, so an API-server tier in the same pytest session reuses its draws (`make test` runs
    the unit tier in a session of its own, on both cores, so there the API-server tier draws them afresh)."""
    drawn: list[str] = []

    @settings(PROPERTY_SETTINGS, max_examples=max_examples)
    @given(obj=resources(kind))
    def generated_resource(obj: Any) -> None:
        drawn.append(json.dumps(obj, sort_keys=True))
        check(obj)

    generated_resource()
    if max_examples == EXAMPLES_PER_KIND:
        _DRAWN.setdefault(kind, drawn)


def corpus(kind: str) -> list[Any]:
    """The resources ``for_each_resource`` draws for ``kind``, in order (fresh copies)."""
    if kind not in _DRAWN:
        for_each_resource(kind, lambda obj: None)
    return [json.loads(t) for t in _DRAWN[kind]]
