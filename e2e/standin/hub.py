"""TEST STAND-IN for the Hugging Face Hub's file API, on loopback, for a ModelCache's fill. Never ship it.

It serves one folder as a model repository at one commit, the routes and headers `huggingface_hub` 2.4.0's
`snapshot_download` and `HfApi.verify_repo_checksums` read (what `HF_ENDPOINT` / the fill's `--endpoint`
points at), each cited:

- ``GET /api/models/{repo}/revision/{revision}``: `model_info` (hf_api.py:3201-3215): JSON with ``sha`` (the
  commit the revision names; snapshot_download asserts it, _snapshot_download.py:279-280) and ``siblings``.
- ``GET /api/models/{repo}/tree/{revision}?recursive=..&expand=..``: `list_repo_tree` (hf_api.py:4018-4033),
  one page (no ``Link: next`` header, utils/_pagination.py:68-69); each entry ``type``, ``path``, ``size``,
  ``oid`` (the git blob sha1) and for an LFS file ``lfs: {oid: <sha256>, size, pointerSize}``
  (RepoFile, hf_api.py:711-719). verify_repo_checksums compares the sha256 for LFS files, the sha1 otherwise
  (utils/_verification.py:97-134).
- ``HEAD /{repo}/resolve/{revision}/{path}``: `get_hf_file_metadata` (file_download.py:1668-1690) reads
  ``X-Repo-Commit``, ``X-Linked-Etag`` (an LFS file's sha256) or ``ETag`` (the sha1), ``X-Linked-Size`` or
  ``Content-Length``; the etag names the blob in the cache.
- ``GET`` of the same URL: the bytes, honouring ``Range`` (a resumed download, file_download.py:378, 403).
- errors carry ``X-Error-Code``: ``RepoNotFound`` / ``RevisionNotFound`` / ``EntryNotFound`` (404) and
  ``GatedRepo`` (403), as `hf_raise_for_status` maps them (utils/_http.py:871-895); a wrong or missing token
  where one is required is 401.

Which files count as LFS is the stand-in's choice (the suffixes the Hub's default .gitattributes tracks).
Faults, per path: ``corrupt`` serves the same size with one byte changed; ``truncate`` serves the first half
with headers that agree with it (a mirror holding a partial object): both pass the HTTP layer and only a
check against the listing catches them.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".h5", ".msgpack", ".ot", ".gguf")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    repo_id: str
    folder: Path
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit (main is added)
    token: str | None = None  # required when set
    gated: bool = False
    faults: dict[str, str] = field(default_factory=dict)  # path -> corrupt | truncate

    def __post_init__(self) -> None:
        self.files = {p.relative_to(self.folder).as_posix(): p.read_bytes() for p in sorted(self.folder.rglob("*")) if p.is_file()}
        digest = hashlib.sha1(b"".join(k.encode() + hashlib.sha1(v).digest() for k, v in self.files.items()))
        self.commit = digest.hexdigest()
        self.refs.setdefault("main", self.commit)

    def lfs(self, path: str) -> bool:
        return path.endswith(LFS_SUFFIXES)

    def served(self, path: str) -> bytes:
        data = self.files[path]
        fault = self.faults.get(path)
        if fault == "corrupt" and data:
            return data[:-1] + bytes([data[-1] ^ 0xFF])
        if fault == "truncate":
            return data[: len(data) // 2]
        return data

    def entry(self, path: str) -> dict[str, Any]:
        data = self.files[path]
        out: dict[str, Any] = {"type": "file", "path": path, "size": len(data), "oid": git_blob_sha1(data)}
        if self.lfs(path):
            out["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return out


class Hub:
    """One or more repositories on 127.0.0.1:<free port>; `requests` counts what was asked (method, path)."""

    def __init__(self, repos: Mapping[str, Repo]) -> None:
        self.repos = dict(repos)
        self.requests: list[tuple[str, str]] = []
        self.bytes_served = 0
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                return

            def do_HEAD(self) -> None:
                hub.handle(self, head=True)

            def do_GET(self) -> None:
                hub.handle(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Hub:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- routing ----------------------------------------------------------------------------------------

    _INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/revision/(?P<rev>[^/]+)$")
    _TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?P<sub>/.*)?$")
    _RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")

    def handle(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        path = unquote(urlsplit(h.path).path)
        self.requests.append((h.command, path))
        for pattern, route in ((self._INFO, self._info), (self._TREE, self._tree), (self._RESOLVE, self._resolve)):
            m = pattern.match(path)
            if m:
                repo = self.repos.get(m["repo"])
                if repo is None:
                    return self._error(h, 404, "RepoNotFound", "Repository not found")
                auth = h.headers.get("authorization") or ""
                if repo.token is not None and auth != f"Bearer {repo.token}":
                    return self._error(h, 401, None, "Invalid credentials in Authorization header")
                if repo.gated:
                    return self._error(h, 403, "GatedRepo", "Access to this model is restricted")
                commit = repo.refs.get(m["rev"], m["rev"] if m["rev"] == repo.commit else None)
                if commit is None:
                    return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {m['rev']}")
                return route(h, repo, commit, m, head)
        return self._error(h, 404, None, "not a route of this stand-in")

    def _info(self, h: BaseHTTPRequestHandler, repo: Repo, commit: str, m: re.Match[str], head: bool) -> None:
        body = {"id": repo.repo_id, "modelId": repo.repo_id, "sha": commit, "private": repo.token is not None,
                "siblings": [{"rfilename": p} for p in repo.files]}
        self._json(h, body, head)

    def _tree(self, h: BaseHTTPRequestHandler, repo: Repo, commit: str, m: re.Match[str], head: bool) -> None:
        sub = (m["sub"] or "").strip("/")
        entries = [repo.entry(p) for p in repo.files if not sub or p.startswith(sub + "/")]
        self._json(h, entries, head)

    def _resolve(self, h: BaseHTTPRequestHandler, repo: Repo, commit: str, m: re.Match[str], head: bool) -> None:
        path = m["path"]
        if path not in repo.files:
            return self._error(h, 404, "EntryNotFound", f"{path} does not exist on {commit}")
        data = repo.served(path)
        entry = repo.entry(path)
        start, end = 0, len(data)
        ranged = re.match(r"bytes=(\d+)-(\d*)$", h.headers.get("range") or "")
        if ranged and not head:
            start, end = int(ranged[1]), (int(ranged[2]) + 1 if ranged[2] else len(data))
        h.send_response(206 if ranged and not head else 200)
        h.send_header("X-Repo-Commit", commit)
        if repo.lfs(path):
            h.send_header("X-Linked-Etag", f'"{entry["lfs"]["oid"]}"')
            h.send_header("X-Linked-Size", str(len(data)))
        h.send_header("ETag", f'"{git_blob_sha1(repo.files[path])}"')
        h.send_header("Content-Length", str(len(data) if head else end - start))
        if ranged and not head:
            h.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        h.send_header("Accept-Ranges", "bytes")
        h.end_headers()
        if not head:
            h.wfile.write(data[start:end])
            self.bytes_served += end - start

    def _json(self, h: BaseHTTPRequestHandler, body: Any, head: bool) -> None:
        raw = json.dumps(body).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        if not head:
            h.wfile.write(raw)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str | None, message: str) -> None:
        raw = json.dumps({"error": message}).encode()
        h.send_response(status)
        if code:
            h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", message)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(raw)
