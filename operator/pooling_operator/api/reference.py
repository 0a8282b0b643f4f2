"""docs/api.md, the API reference in the repository: every kind and every field, from the same models the CRDs
come from (api/crd.py), so it says exactly what `kubectl explain` and the API server say.

    python -m pooling_operator.api.reference [--output docs/api.md]      (make api-docs)

tests/test_api_reference.py fails when docs/api.md differs from what this writes. Per field: its path, type,
whether it is required, its default, its bounds (lengths, ranges, patterns, allowed values, item counts) and the
rules the API server checks on it (CEL), the release it appeared in (api/since.json: a field the record lacks is
new in this release, and `make api-docs` writes it there), and its description.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pooling_operator import __version__
from pooling_operator.api.crd import _resolve, crd
from pooling_operator.api.resources import KINDS

SINCE_FILE = Path(__file__).with_name("since.json")  # {version: [Kind.field, ...]}: the version each field appeared in

HEADER = """# API reference

Every kind of `vllm-pooling.io/{version}` and every field, generated from the operator's models (the CRDs come
from the same models) by `make api-docs` (`operator/pooling_operator/api/reference.py`); `make test` fails when
this file is stale. `kubectl explain <kind>.<field>` shows the same descriptions on a cluster, and
`pooling-operator validate` checks every rule below (and vLLM's own) before anything is applied.

Columns: **type** (`[]` a list, `map` string keys), **required** (✓ when the parent object must carry it),
**default** (as the API server fills it; other defaults are said in the description), **bounds** (what the API
server refuses beyond: lengths, ranges, patterns, allowed values, item counts, and the rules it checks on that
field), **since** (the operator release the field appeared in; `api/since.json` records it) and the description.

{toc}
"""


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _type(schema: dict[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "int or string"
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return "object (free-form)"
    if "anyOf" in schema:
        return " or ".join(sorted({_type(s) for s in schema["anyOf"]}))
    kind = schema.get("type", "")
    if kind == "array":
        return f"[]{_type(schema.get('items') or {})}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map[string]{_type(schema['additionalProperties'])}"
    return str(kind or "any") + (f" ({schema['format']})" if schema.get("format") else "")


def _bounds(schema: dict[str, Any]) -> str:
    out = []
    for low, high, what in (("minLength", "maxLength", "chars"), ("minItems", "maxItems", "items"),
                            ("minProperties", "maxProperties", "keys"), ("minimum", "maximum", "")):  # fmt: skip
        lo, hi = schema.get(low), schema.get(high)
        unit = f" {what}" if what else ""
        if lo is not None and hi is not None:
            out.append(f"{lo}–{hi}{unit}")
        elif lo is not None:
            out.append(f"≥ {lo}{unit}")
        elif hi is not None:
            out.append(f"≤ {hi}{unit}")
    if schema.get("exclusiveMinimum") is True:
        out.append("> minimum")
    if "enum" in schema:
        out.append("one of " + ", ".join(f"`{json.dumps(v)}`" for v in schema["enum"]))
    if "pattern" in schema:
        out.append(f"pattern `{schema['pattern']}`")
    if schema.get("x-kubernetes-list-type") in ("map", "set"):
        keys = schema.get("x-kubernetes-list-map-keys")
        out.append("unique" + (f" by {', '.join(keys)}" if keys else ""))
    for rule in schema.get("x-kubernetes-validations") or []:
        out.append(f"rule: {rule.get('message') or rule.get('rule')}")
    return "; ".join(out)


def defaults(model: type, root: str) -> dict[str, Any]:
    """{field path: default} from a pydantic model's own schema (the CRD leaves defaults to the operator)."""
    raw = model.model_json_schema(by_alias=True)  # type: ignore[attr-defined]
    out: dict[str, Any] = {}

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        if "default" in node and node["default"] is not None and node["default"] != {} and node["default"] != []:
            out[path] = node["default"]
        for option in node.get("anyOf") or []:
            walk(option, path)
        for name, sub in (node.get("properties") or {}).items():
            walk(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.<key>")

    walk(_resolve(raw, raw.get("$defs", {})), root)
    return out


def _rows(schema: dict[str, Any], path: str, required: bool, known: dict[str, Any], since: dict[str, str]) -> Iterator[tuple[str, ...]]:
    default = json.dumps(known[path]) if path in known else ""
    yield (f"`{path}`", _type(schema), "✓" if required else "", f"`{default}`" if default else "", _bounds(schema),
           since.get(path, ""), schema.get("description", ""))  # fmt: skip
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            if option.get("properties"):
                yield from _children(option, path, known, since)
    yield from _children(schema, path, known, since)


def _children(schema: dict[str, Any], path: str, known: dict[str, Any], since: dict[str, str]) -> Iterator[tuple[str, ...]]:
    need = set(schema.get("required") or [])
    for name, sub in (schema.get("properties") or {}).items():
        yield from _rows(sub, f"{path}.{name}", name in need, known, since)
    items = schema.get("items")
    if isinstance(items, dict) and (items.get("properties") or items.get("items")):
        yield from _children(items, f"{path}[]", known, since)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and (extra.get("properties") or extra.get("items")):
        yield from _children(extra, f"{path}.<key>", known, since)


def kind_section(crd: dict[str, Any], known: dict[str, Any], since: dict[str, str]) -> str:
    """One kind's section; `known` its defaults and `since` the release of each field, by path (`spec.model.name`)."""
    spec = crd["spec"]
    names = spec["names"]
    [version] = [v for v in spec["versions"] if v.get("storage")]
    root = version["schema"]["openAPIV3Schema"]
    lines = [f"## {names['kind']}", ""]
    scope = "cluster-scoped" if spec["scope"] == "Cluster" else "namespaced"
    short = ", ".join(f"`{s}`" for s in names.get("shortNames") or [])
    lines += [f"`{spec['group']}/{version['name']}`, {scope}; `kubectl get {names['plural']}`"
              + (f" (short: {short})" if short else "") + ".", ""]  # fmt: skip
    if root.get("description"):
        lines += [root["description"], ""]
    columns = version.get("additionalPrinterColumns") or []
    if columns:
        lines += ["`kubectl get` columns: " + ", ".join(f"{c['name']} (`{c['jsonPath']}`)" for c in columns) + ".", ""]
    for part in ("spec", "status"):
        schema = (root.get("properties") or {}).get(part)
        if not schema:
            continue
        lines += [f"### {names['kind']}.{part}", "", "| field | type | required | default | bounds | since | description |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for row in _children(schema, part, known, since):
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        lines.append("")
    return "\n".join(lines)


def field_paths(crd: dict[str, Any]) -> list[str]:
    """Every field of a kind as the tables name it, with the kind in front (`PoolingService.spec.model.name`)."""
    [version] = [v for v in crd["spec"]["versions"] if v.get("storage")]
    root = version["schema"]["openAPIV3Schema"]
    kind = crd["spec"]["names"]["kind"]
    return [f"{kind}.{row[0].strip('`')}" for part in ("spec", "status") if (root.get("properties") or {}).get(part)
            for row in _children(root["properties"][part], part, {}, {})]  # fmt: skip


def since(paths: list[str], recorded: dict[str, list[str]], current: str) -> dict[str, list[str]]:
    """{version: the fields that appeared in it}: what `recorded` says, fields gone dropped, and fields it does not
    know put under `current` (the operator's version now: they appear in it)."""
    known = {p: v for v, ps in recorded.items() for p in ps}
    out: dict[str, list[str]] = {}
    for p in paths:
        out.setdefault(known.get(p, current), []).append(p)
    return {v: sorted(ps) for v, ps in sorted(out.items(), key=lambda kv: [int(x) for x in kv[0].split(".")])}


def reference(kinds: list[tuple[dict[str, Any], dict[str, Any], dict[str, str]]]) -> str:
    """The whole page from (CRD, {field path: default}, {field path: release}) per kind, in the order given."""
    version = next(v["name"] for v in kinds[0][0]["spec"]["versions"] if v.get("storage"))
    toc = "\n".join(f"- [{c['spec']['names']['kind']}](#{c['spec']['names']['kind'].lower()})" for c, _, _ in kinds)
    return HEADER.format(version=version, toc=toc) + "\n" + "\n".join(kind_section(c, known, since) for c, known, since in kinds)


def generate() -> tuple[str, dict[str, list[str]]]:
    """docs/api.md as the models say it (every kind of api/resources.py's table, in its order), and the record of
    the version each field appeared in (api/since.json, fields new since it was written under this version)."""
    crds = [crd(info) for info in KINDS.values()]
    record = since([p for c in crds for p in field_paths(c)], json.loads(SINCE_FILE.read_text()), __version__)
    appeared = {p: v for v, ps in record.items() for p in ps}
    kinds = []
    for c, info in zip(crds, KINDS.values(), strict=True):
        prefix = c["spec"]["names"]["kind"] + "."
        kinds.append((c, defaults(info.spec_model, "spec"), {p.removeprefix(prefix): v for p, v in appeared.items() if p.startswith(prefix)}))
    return reference(kinds), record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pooling_operator.api.reference", description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", type=Path, help="write here (default: stdout)")
    args = ap.parse_args(argv)
    text, record = generate()
    if args.output:
        args.output.write_text(text)
        SINCE_FILE.write_text(json.dumps(record, indent=1) + "\n")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
