"""Fill a claim with one model revision in the Hugging Face hub-cache layout, once, never in place.

1. If the claim's hub cache already holds the revision's snapshot and it matches the Hub's listing, nothing is
   downloaded.
2. Otherwise `huggingface_hub.snapshot_download`, unmodified, writes the revision into a private hub cache
   under `<claim>/.staging/<random>/` (same filesystem), and `HfApi.verify_repo_checksums` checks every file
   against the Hub's listing: the LFS sha256 for large files, the git blob sha1 for the rest.
3. Then it is published by renames: each content-addressed blob moved into `hub/models--<org>--<name>/blobs/`
   (one already there has the same bytes), the snapshot folder renamed to `snapshots/<commit>/` (an atomic
   rename of a whole folder: a reader sees all of it or none; another fill that got there first wins), and
   `refs/<revision>` written by a rename when the revision is a branch or tag. A new revision is a new
   snapshot folder beside the old ones, which stay for the pods still reading them.

The result (api/cache_fill_contract.py) goes to the container's termination message; the exit code says
whether a retry may help. Nothing here knows Kubernetes.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooling_operator.api import cache_fill_contract as F

log = logging.getLogger(__name__)

STALE_STAGING_SECONDS = 3600.0  # a staging folder older than this was left by a fill that was killed


class FillError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Filled:
    revision: str
    files: int
    bytes: int
    downloaded: int

    def result(self) -> dict[str, Any]:
        return {F.RESULT_REVISION: self.revision, F.RESULT_FILES: self.files, F.RESULT_BYTES: self.bytes,
                F.RESULT_MOVED: self.downloaded}


def storage_name(repo_id: str) -> str:
    from huggingface_hub.file_download import repo_folder_name

    return repo_folder_name(repo_id=repo_id, repo_type="model")


def fill(repo_id: str, revision: str, claim: Path, *, endpoint: str | None = None, token: str | None = None,
         max_workers: int = 8) -> Filled:
    """Fill `claim` (the mounted volume) with `repo_id` at `revision`; raises FillError with a reason."""
    from huggingface_hub import HfApi

    hub = claim / F.HUB_FOLDER
    api = HfApi(endpoint=endpoint, token=token or False)
    try:
        commit = _commit(api, repo_id, revision)
        present = hub / storage_name(repo_id) / "snapshots" / commit
        if present.is_dir() and _verified(api, repo_id, commit, hub) is None:
            log.info("%s@%s is already in the cache: nothing to download", repo_id, commit)
            _write_ref(hub / storage_name(repo_id), revision, commit)
            return _summary(present, commit, downloaded=0)
        _sweep(claim / F.STAGING_FOLDER)
        staging = claim / F.STAGING_FOLDER / uuid.uuid4().hex
        staging.mkdir(parents=True)
        try:
            # A snapshot folder already there did not match the listing: the new one replaces it, blobs too.
            return _download_and_publish(api, repo_id, revision, commit, hub, staging, endpoint, token, max_workers,
                                         replace=present.is_dir())
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except FillError:
        raise
    except Exception as exc:
        raise classify(exc) from exc


def _commit(api: Any, repo_id: str, revision: str) -> str:
    """The commit a revision names now (a 40-hex revision is one already)."""
    from huggingface_hub.file_download import REGEX_COMMIT_HASH

    if REGEX_COMMIT_HASH.fullmatch(revision):
        return revision
    sha = api.model_info(repo_id, revision=revision).sha
    if not sha:
        raise FillError(F.FILL_FAILED, f"the Hub named no commit for revision {revision!r}")
    return str(sha)


def _sweep(staging_root: Path) -> None:
    """Remove what fills killed before their cleanup left (SIGKILL, a node lost), after STALE_STAGING_SECONDS."""
    now = time.time()
    for folder in staging_root.iterdir() if staging_root.is_dir() else ():
        try:
            if now - folder.stat().st_mtime > STALE_STAGING_SECONDS:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue


def _download_and_publish(api: Any, repo_id: str, revision: str, commit: str, hub: Path, staging: Path,
                          endpoint: str | None, token: str | None, max_workers: int, *, replace: bool) -> Filled:
    from huggingface_hub import snapshot_download

    folder = Path(snapshot_download(repo_id, revision=commit, cache_dir=staging, endpoint=endpoint,
                                    token=token or False, max_workers=max_workers))
    problem = _verified(api, repo_id, commit, staging)
    if problem:
        raise FillError(F.CORRUPT, problem)
    downloaded = _summary(folder, commit, downloaded=0).bytes
    storage, staged = hub / storage_name(repo_id), staging / storage_name(repo_id)
    (storage / "blobs").mkdir(parents=True, exist_ok=True)
    (storage / "snapshots").mkdir(exist_ok=True)
    for blob in (staged / "blobs").iterdir() if (staged / "blobs").is_dir() else ():
        target = storage / "blobs" / blob.name
        if replace or not target.exists():  # content-addressed: a verified one already there holds the same bytes
            os.replace(blob, target)
    target = storage / "snapshots" / commit
    if replace and target.exists():  # the broken one goes aside (into staging, removed with it) first
        os.rename(target, staging / f"replaced-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(folder, target)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        log.info("another fill published %s@%s first", repo_id, commit)
    # What readers see now, checked again: a folder another fill left must match too.
    problem = _verified(api, repo_id, commit, hub)
    if problem:
        raise FillError(F.CORRUPT, f"the published snapshot: {problem}")
    _write_ref(storage, revision, commit)
    return _summary(target, commit, downloaded=downloaded)


def _verified(api: Any, repo_id: str, commit: str, cache_dir: Path) -> str | None:
    """None when every file of the snapshot matches the Hub's listing, else which do not."""
    v = api.verify_repo_checksums(repo_id, revision=commit, cache_dir=cache_dir)
    if not v.mismatches and not v.missing_paths:
        return None
    parts = [f"{m['path']}: {m['algorithm']} {m['actual'][:12]} is not the Hub's {m['expected'][:12]}" for m in v.mismatches]
    parts += [f"{p}: missing" for p in v.missing_paths]
    return f"{len(parts)} of {v.checked_count + len(v.missing_paths)} files do not match the Hub's listing: " + "; ".join(parts)


def _write_ref(storage: Path, revision: str, commit: str) -> None:
    if revision == commit:
        return
    refs = storage / "refs"
    ref = refs / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    temp = ref.with_name(f".{ref.name}.{uuid.uuid4().hex}")
    temp.write_text(commit)
    os.replace(temp, ref)


def _summary(snapshot: Path, commit: str, *, downloaded: int) -> Filled:
    files = [p for p in snapshot.rglob("*") if p.is_file()]  # follows the snapshot's links to its blobs
    return Filled(commit, len(files), sum(p.stat().st_size for p in files), downloaded)


def classify(exc: BaseException) -> FillError:
    """The reason of a failure, from huggingface_hub's own error classes and the OS's errno: the first error of
    the chain (`__cause__`, `__context__`) that has one; snapshot_download wraps a connection error, a 5xx or a
    403 of its first request in LocalEntryNotFoundError."""
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen and len(seen) < 10:
        seen.append(e)
        e = e.__cause__ or e.__context__
    for e in seen:
        found = _classify_one(e)
        if found.reason != F.FILL_FAILED:
            return found
    return _classify_one(exc)


def _classify_one(exc: BaseException) -> FillError:
    from huggingface_hub import errors

    message = str(exc).strip().splitlines()
    text = " ".join(line.strip() for line in message if line.strip())[:1500] or type(exc).__name__
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return FillError(F.NO_SPACE, f"the claim is full: {text}")
    if isinstance(exc, errors.RevisionNotFoundError):
        return FillError(F.REVISION_NOT_FOUND, text)
    if isinstance(exc, errors.GatedRepoError):
        return FillError(F.UNAUTHORIZED, text)
    if isinstance(exc, errors.RepositoryNotFoundError):  # the Hub answers a private repository without access so too
        return FillError(F.REPOSITORY_NOT_FOUND, text)
    if isinstance(exc, errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            return FillError(F.UNAUTHORIZED, text)
    if "Consistency check failed" in text:  # file_download.py: the bytes received are not the size announced
        return FillError(F.CORRUPT, text)
    if _is_connection_error(exc):
        return FillError(F.HUB_UNREACHABLE, text)
    return FillError(F.FILL_FAILED, f"{type(exc).__name__}: {text}")


def _is_connection_error(exc: BaseException) -> bool:
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"ConnectError", "ConnectTimeout", "TimeoutException", "ReadTimeout", "ConnectionError"})
