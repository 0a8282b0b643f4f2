"""How a server gets its weights: the model source and revision, and `engine.loadFormat` against vLLM's loader
registry. Pure; a rule of every chain in vllm/rules.py. Formats are validated here, never run: the operator
cannot know which optional packages an image ships, so a format that needs one is accepted with a warning
naming the package."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Sequence

from pooling_operator.api import ModelCache
from pooling_operator.api import messages as M
from pooling_operator.api.problems import Problem
from pooling_operator.api.resources import AnyResource, VllmResource, in_space
from pooling_operator.vllm.contract import LOAD_FORMAT_NOTES, LOAD_FORMAT_PACKAGES, LOAD_FORMATS
from pooling_operator.vllm.workload import Workload, workload


def source_problems(w: Workload) -> Iterator[Problem]:
    """Exactly one source, and a revision pinned where one applies."""
    model = w.model
    source = model.source
    if source is not None and [source.hugging_face, source.volume, source.cache].count(None) != 2:
        yield Problem("spec.model.source", M.SOURCE_EXACTLY_ONE)
    from_hub = source is None or source.hugging_face is not None
    if from_hub and not model.revision:
        yield Problem(
            "spec.model.revision",
            "no revision pinned: every new pod downloads whatever the repository's main branch holds then; "
            "set a commit sha",
            "warning",
        )
    if source is not None and source.volume is not None and model.revision:
        yield Problem("spec.model.revision", "a revision applies only to huggingFace and cache sources; remove it for a volume")
    elif from_hub and model.revision:
        yield from branch_revision_problems(model.revision, "every new pod downloads what it points to then")


COMMIT = re.compile(r"[0-9a-f]{40}")


def branch_revision_problems(revision: str, then: str) -> Iterator[Problem]:
    """A revision that is not a commit sha (40 hex digits): a branch or tag that may move."""
    if not COMMIT.fullmatch(revision):
        yield Problem("spec.model.revision", f"{revision!r} is a branch, a tag or a shortened sha, not a commit: "
                                             f"{then}; set the full commit sha (40 hex digits)", "warning")


def embedding_space_cache_problems(resource: VllmResource, w: Workload) -> Iterator[Problem]:
    """A PoolingService that labels its embedding space and reads a ModelCache must pin the commit: otherwise a
    refill of the cache changes the vectors under the same label (the fingerprint reads the served commit, which
    the spec would then not state)."""
    source = w.model.source
    if in_space(resource) and resource.spec.embedding_space and source is not None \
            and source.cache is not None and not w.model.revision:
        yield Problem("spec.model.revision", "set it to the commit the ModelCache holds: with embeddingSpace set, a "
                                             "refill of the cache must not change the vectors under the same label")


def cache_problems(resource: ModelCache) -> Iterator[Problem]:
    """A ModelCache's own rules (the schema and CEL hold the rest)."""
    spec = resource.spec
    if (spec.storage.claim_name is None) == (spec.storage.size is None):
        yield Problem("spec.storage", M.CACHE_STORAGE_EXACTLY_ONE)
    if spec.storage.claim_name is not None and spec.storage.storage_class_name is not None:
        yield Problem("spec.storage.storageClassName", "applies only to a claim the operator creates (storage.size); "
                                                        "remove it, or set size instead of claimName")
    if not spec.model.revision:
        yield Problem("spec.model.revision", "no revision pinned: the fill takes what the main branch holds then, and "
                                             "a later refill may hold other weights; set a commit sha", "warning")
    else:
        yield from branch_revision_problems(spec.model.revision, "the fill resolves it once, and a later refill may "
                                                                  "hold other weights")


def cache_source_problems(w: Workload, cache: ModelCache | None) -> Iterator[Problem]:
    """A service or job using `model.source.cache`, against the ModelCache it names (None: not there). The
    reconcile knows the cache; `validate` offline checks what is in the same files."""
    source = w.model.source
    if source is None or source.cache is None:
        return
    name = source.cache.name
    if cache is None:
        return  # a wait, not an error: the cache may be created after the service (status says so)
    if cache.spec.model.name != w.model.name:
        yield Problem("spec.model.name", f"{w.model.name!r} is not the model ModelCache {name!r} holds "
                                         f"({cache.spec.model.name!r}); set model.name to it or name another cache")
    held = cache.status.revision if cache.status is not None else None
    wanted = w.model.revision
    if wanted and wanted not in {cache.spec.model.revision or "main", held} - {None}:  # an unset revision is main
        holds = held or cache.spec.model.revision or "main"
        yield Problem("spec.model.revision", f"{wanted!r} is not the revision ModelCache {name!r} holds ({holds!r}); "
                                             "remove model.revision to serve what the cache holds, or change the cache's")


def load_format_problems(w: Workload, version: str | None) -> Iterator[Problem]:
    given = w.engine.load_format
    if given is None:
        return
    path = "spec.engine.loadFormat"
    fmt = given.lower()  # as vLLM reads it (config/load.py:136-138)
    if fmt not in LOAD_FORMATS:
        near = difflib.get_close_matches(fmt, LOAD_FORMATS, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        yield Problem(path, f"{given!r} is not a load format of vLLM{' ' + version if version else ''}{hint}; "
                            f"accepted: {', '.join(LOAD_FORMATS)}")
        return
    package = LOAD_FORMAT_PACKAGES.get(fmt)
    if package is not None:
        yield Problem(path, f"{given!r} needs the Python package {package!r}, which vLLM does not require: the image "
                            f"{w.engine.image!r} must ship it, or vLLM fails at start-up when it loads the weights",
                      "warning")
    note = LOAD_FORMAT_NOTES.get(fmt)
    if note is not None:
        yield Problem(path, f"{given!r} {note}", "warning")


def compile_cache_problems(w: Workload) -> Iterator[Problem]:
    if w.engine.compile_cache is not None and w.job:
        yield Problem("spec.engine.compileCache", f"applies to services only: a {w.kind}'s pods compile into "
                                                  "their own emptyDir; remove it")


def shared_compile_caches(resources: Sequence[AnyResource | None]) -> dict[int, Problem]:
    """{index: warning} for every service whose engine.compileCache names a claim an earlier service of the same
    namespace names too (input order): compiled artifacts are code vLLM runs, and one service's writer could
    plant code in another's pods."""
    first: dict[tuple[str, str], str] = {}
    out: dict[int, Problem] = {}
    for i, r in enumerate(resources):
        if not isinstance(r, VllmResource) or r.spec.engine.compile_cache is None:
            continue
        cache, meta = r.spec.engine.compile_cache, r.metadata
        key = (meta.namespace or "default", cache.claim_name)
        if key in first:
            out[i] = Problem("spec.engine.compileCache.claimName", f"claim {cache.claim_name!r} is also the compile "
                             f"cache of {first[key]}: a compile-cache claim serves one service only (its artifacts "
                             "are code vLLM runs); give each service its own", "warning")
        else:
            first[key] = f"{r.kind}/{meta.name}"
    return out


def cache_contradictions(resources: Sequence[AnyResource | None]) -> dict[int, list[Problem]]:
    """{index: problems} for every service or job whose model.source.cache names a ModelCache of the same input
    (same namespace) that holds another model or revision (cache_source_problems, as the reconcile judges it
    against the cluster's cache), each naming the cache as Kind/name."""
    caches = {(r.metadata.namespace or "default", r.metadata.name): r for r in resources if isinstance(r, ModelCache)}
    out: dict[int, list[Problem]] = {}
    for i, r in enumerate(resources):
        if not isinstance(r, VllmResource) or r.spec.model.source is None or r.spec.model.source.cache is None:
            continue
        cache = caches.get((r.metadata.namespace or "default", r.spec.model.source.cache.name))
        if cache is not None:
            problems = list(cache_source_problems(workload(r), cache))
            if problems:
                out[i] = problems
    return out
