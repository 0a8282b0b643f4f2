"""What `pooling-operator validate` and `render` make of a folder of manifests, as a GitOps repository holds it:
every document of ours judged (alone, then together: duplicates, shared compile caches, caches that hold another
model, one embedding-space label for two spaces, one front host for two services), documents of other kinds
(Namespace, Secret, Kustomization, ...) skipped and counted unless `--strict-kinds`, a notice where a spec gives no
`model.hints` (the checks that need the model's facts could not run), and one summary, as text or JSON.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

from pooling_operator import API_VERSION, GROUP
from pooling_operator.api import AutoscalingPolicy
from pooling_operator.api.front_hosts import host_clashes
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.api.problems import Problem
from pooling_operator.api.resources import VllmResource
from pooling_operator.manifests import Document, load
from pooling_operator.vllm.embedding_space import space_clashes
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.storage_rules import cache_contradictions, shared_compile_caches
from pooling_operator.vllm.validate import Result, duplicate_problems, problem_line, validate

# What the model's facts (model.hints) let validation check, by hint; without any hint none of these run.
HINTED_CHECKS = (
    "the architecture against vLLM's model registry for the task (runner, convert, pooling types)",
    "engine.maxModelLen against the model's own limit",
    "tensorParallelSize against the attention heads",
    "a cross-encoder's single label (numLabels)",
    "a GPU share's memory minimum (parameters, layers, hidden size)",
    "a HiddenStateJob's layers and storage budget, and label token ids within the vocabulary",
)


@dataclass
class Checked:
    """Every document of ours with its result, and the documents of other kinds that were skipped."""

    results: list[tuple[Document, Result]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # "Kind (apiVersion)" -> documents
    notices: list[tuple[Document, Result, Problem]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for _, r in self.results)


def foreign(body: Any) -> str | None:
    """`Kind (apiVersion)` of a document of another API group than ours, else None (ours, or too malformed to say)."""
    if not isinstance(body, dict) or not isinstance(body.get("apiVersion"), str) or not isinstance(body.get("kind"), str):
        return None
    group = body["apiVersion"].rpartition("/")[0]
    return None if group == GROUP else f"{body['kind']} ({body['apiVersion']})"


def check(paths: list[str], settings: Settings, *, strict_kinds: bool = False) -> Checked:
    out = Checked()
    docs: list[Document] = []
    for doc in load(paths):
        other = foreign(doc.body)
        if other is not None and not strict_kinds:
            out.skipped[other] += 1
        else:
            docs.append(doc)
    policies: dict[str, AutoscalingPolicySpec] = {}
    for doc in docs:
        result = validate(doc.body, settings)
        if isinstance(result.resource, AutoscalingPolicy) and result.ok:
            policies[result.resource.metadata.name] = result.resource.spec
    # Services are checked against the policies found in the same input, when there are any.
    results = [validate(doc.body, settings, policies or None) for doc in docs]
    for doc, result in zip(docs, results, strict=True):
        if strict_kinds and foreign(doc.body) is not None:
            result.problems[:] = [Problem("apiVersion", f"must be {API_VERSION}, got {doc.body['apiVersion']!r} (--strict-kinds "
                                          "refuses documents of other kinds; without it they are skipped and counted)")]
    duplicates = duplicate_problems([(f"{d.file} (document {d.index + 1}{', ' + d.item if d.item else ''})", d.body) for d in docs])
    for i, problem in duplicates.items():
        results[i].problems.append(problem)
    resources = [r.resource for r in results]
    # Resources that contradict each other in one input: a compile cache two services share, a cache that holds
    # another model or revision, one embeddingSpace label for two spaces, one front host for two services.
    for i, problem in shared_compile_caches(resources).items():
        results[i].problems.append(problem)
    for i, problems in cache_contradictions(resources).items():
        results[i].problems.extend(problems)
    for clashes in (space_clashes(resources), host_clashes(resources)):
        for i, problem in clashes.items():
            results[i].problems.append(problem)
    out.results = list(zip(docs, results, strict=True))
    for doc, result in out.results:
        if result.ok and isinstance(result.resource, VllmResource) and result.resource.spec.model.hints is None:
            out.notices.append((doc, result, Problem("spec.model.hints", "not given, so these checks could not run: "
                                                     + "; ".join(HINTED_CHECKS) + " (add the model's facts from its config)")))
    return out


def summary(c: Checked) -> dict[str, Any]:
    files = {d.file for d, _ in c.results}
    problems = [p for _, r in c.results for p in r.problems]
    return {
        "resources": len(c.results), "files": len(files),
        "valid": sum(r.ok for _, r in c.results), "invalid": sum(not r.ok for _, r in c.results),
        "errors": sum(p.severity == "error" for p in problems), "warnings": sum(p.severity == "warning" for p in problems),
        "notices": len(c.notices), "skipped": sum(c.skipped.values()), "skippedKinds": dict(sorted(c.skipped.items())),
    }


def summary_line(c: Checked) -> str:
    s = summary(c)
    line = (f"{s['resources']} resource{'s' * (s['resources'] != 1)} checked: {s['valid']} valid, {s['invalid']} invalid "
            f"({s['errors']} error{'s' * (s['errors'] != 1)}, {s['warnings']} warning{'s' * (s['warnings'] != 1)}, "
            f"{s['notices']} notice{'s' * (s['notices'] != 1)})")
    if s["skipped"]:
        kinds = ", ".join(f"{k} {n}" for k, n in s["skippedKinds"].items())
        line += f"; {s['skipped']} document{'s' * (s['skipped'] != 1)} of other kinds skipped: {kinds}"
    return line


def report_text(c: Checked, out: TextIO, err: TextIO, *, share_note: Any = None) -> None:
    """Problem lines (errors on `out`, a valid resource's warnings and notices on `err`), then the summary on `err`."""
    for doc, result in c.results:
        for p in result.problems:
            print(f"{doc.where}: {problem_line(result, p)}", file=out if result.errors else err)
        if share_note is not None and result.ok:
            share_note(doc.where, result, err)
    for doc, result, notice in c.notices:
        print(f"{doc.where}: {result.kind}/{result.name}: {notice.path}: notice: {notice.message}", file=err)
    print(summary_line(c), file=err)


def report_json(c: Checked, out: TextIO) -> None:
    """One JSON document: every problem and notice as an object, and the summary."""
    rows = []
    for doc, result in c.results:
        meta = getattr(result.resource, "metadata", None)
        where = {"file": doc.file, "document": doc.index + 1, **({"item": doc.item} if doc.item else {}), "kind": result.kind,
                 "name": result.name, **({"namespace": meta.namespace} if meta is not None and getattr(meta, "namespace", None) else {})}
        rows += [{**where, "path": p.path, "severity": p.severity, "message": p.message} for p in result.problems]
        rows += [{**where, "path": n.path, "severity": "notice", "message": n.message} for d, r, n in c.notices if r is result]
    json.dump({"problems": rows, "summary": summary(c)}, out, indent=1)
    out.write("\n")
