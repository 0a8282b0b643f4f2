"""The contract between a ModelCache's fill Job (pods/model_cache/) and the operator (builders/, status/).

Defined once for both sides:

- the layout: the claim holds a Hugging Face hub cache under ``HUB_FOLDER`` (``hub/models--<org>--<name>/``
  with ``blobs/``, ``snapshots/<commit>/`` and ``refs/<revision>``), exactly what ``huggingface_hub`` writes
  and reads; a fill stages under ``STAGING_FOLDER`` on the same volume and renames into place;
- the result: the fill writes one compact JSON object (``RESULT_FIELDS``) to its container's termination
  message (the kubelet keeps up to 4096 bytes of it in the pod's status), success or failure alike;
- the exit codes, and which of them end the Job at once (a retry cannot help).

Pure data: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

HUB_FOLDER = "hub"  # HF_HUB_CACHE inside the claim
STAGING_FOLDER = ".staging"  # a fill's private hub cache, beside HUB_FOLDER on the same filesystem
TERMINATION_LOG = "/dev/termination-log"  # the container's terminationMessagePath (the Kubernetes default)
MESSAGE_LIMIT = 4096  # what a kubelet keeps of a termination message

# The result's keys.
RESULT_REVISION = "revision"  # the commit the snapshot holds (40 hex)
RESULT_FILES = "files"
RESULT_BYTES = "bytes"  # what the snapshot holds, and what this fill downloaded (RESULT_MOVED)
RESULT_MOVED = "downloaded"
RESULT_REASON = "reason"  # set only on failure: one of REASONS
RESULT_MESSAGE = "message"
RESULT_FIELDS = (RESULT_REVISION, RESULT_FILES, RESULT_BYTES, RESULT_MOVED, RESULT_REASON, RESULT_MESSAGE)

# Why a fill failed (the ModelCache's Failed condition's reason), and whether a retry may help.
NO_SPACE = "NoSpace"  # the claim is full (ENOSPC)
UNAUTHORIZED = "Unauthorized"  # 401/403, or a gated repository: the token is missing, wrong or not allowed
REPOSITORY_NOT_FOUND = "RepositoryNotFound"  # 404 on the repository (the Hub answers private repos so too)
REVISION_NOT_FOUND = "RevisionNotFound"  # the repository exists, the revision does not
CORRUPT = "CorruptDownload"  # a file's bytes do not match the Hub's listing (sha256 for LFS, git sha1 otherwise)
HUB_UNREACHABLE = "HubUnreachable"  # no connection to the endpoint, or it timed out
FILL_FAILED = "FillFailed"  # anything else
REASONS = (NO_SPACE, UNAUTHORIZED, REPOSITORY_NOT_FOUND, REVISION_NOT_FOUND, CORRUPT, HUB_UNREACHABLE, FILL_FAILED)
PERMANENT = frozenset({UNAUTHORIZED, REPOSITORY_NOT_FOUND, REVISION_NOT_FOUND})

EXIT_OK = 0
EXIT_RETRY = 1  # a retry may help: counted against the Job's backoffLimit
EXIT_PERMANENT = 3  # the Job's podFailurePolicy fails the Job at once
BACKOFF_LIMIT = 2


def exit_code(reason: str | None) -> int:
    return EXIT_OK if reason is None else EXIT_PERMANENT if reason in PERMANENT else EXIT_RETRY


def encode(result: dict[str, Any]) -> str:
    """The termination message: compact JSON within MESSAGE_LIMIT (a long message is cut, never the JSON)."""
    out = {k: result[k] for k in RESULT_FIELDS if result.get(k) is not None}
    text = json.dumps(out, separators=(",", ":"))
    while len(text.encode()) > MESSAGE_LIMIT and out.get(RESULT_MESSAGE):
        out[RESULT_MESSAGE] = out[RESULT_MESSAGE][: max(0, len(out[RESULT_MESSAGE]) - 256)]
        text = json.dumps(out, separators=(",", ":"))
    return text


def decode(message: Any) -> dict[str, Any] | None:
    """A result read back from a pod's termination message; None for anything else (a crash's traceback)."""
    if not isinstance(message, str):
        return None
    try:
        value = json.loads(message)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    out = {k: value[k] for k in RESULT_FIELDS if k in value}
    reason = out.get(RESULT_REASON)
    if reason is not None and reason not in REASONS:
        out[RESULT_REASON] = FILL_FAILED
    ok = isinstance(out.get(RESULT_REVISION), str) and all(
        isinstance(out.get(k), int) and not isinstance(out.get(k), bool) for k in (RESULT_FILES, RESULT_BYTES))
    return out if ok or reason is not None else None
