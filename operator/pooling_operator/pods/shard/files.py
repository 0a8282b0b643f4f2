"""The output volume's file-system primitives: every write a driver makes to it goes through ``DISK`` (write,
fsync, rename, replace), the one seam where tests make the volume fill up (ENOSPC) at an exact point;
``out_of_space`` tells such an error from any other. Atomic replace, moves across filesystems and removal are
built on it.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# The errors of a volume with no room left: the filesystem is full, or the writer's quota is used up.
OUT_OF_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


COPY_CHUNK = 1 << 20
# The suffix of a file being written beside its final name.
TMP_SUFFIX = ".tmp"


def out_of_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in OUT_OF_SPACE_ERRNOS


class Disk:
    """The system calls that put bytes or names on the output volume. Production uses the os functions;
    tests replace one on the ``DISK`` instance to fail it (``monkeypatch.setattr(DISK, "rename", ...)``)."""

    write = staticmethod(os.write)
    fsync = staticmethod(os.fsync)
    rename = staticmethod(os.rename)
    replace = staticmethod(os.replace)


DISK = Disk()


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written: a short write is retried, so a full volume raises ENOSPC."""
    view = memoryview(data)
    while view:
        n = DISK.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]


def write_new(path: Path, chunks: Iterable[bytes]) -> None:
    """Create (or truncate) ``path`` with ``chunks``, fsync'd; the descriptor is always closed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for chunk in chunks:
            write_all(fd, chunk)
        DISK.fsync(fd)
    finally:
        os.close(fd)


def remove(path: str | Path) -> None:
    """Unlink ``path``; an absent one is fine."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def move_into_place(source: str, target: Path, tmp_suffix: str = TMP_SUFFIX) -> None:
    """Atomic within one filesystem (rename). Should vLLM's staging folder sit on another filesystem, copy
    to a temporary name beside the target, flush, then rename: the target is never partial. When the copy
    fails (a full volume) the temporary file is removed at once, so the failure frees the space it took."""
    try:
        DISK.rename(source, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    tmp = target.with_name(target.name + tmp_suffix)
    try:
        with open(source, "rb") as src:
            write_new(tmp, iter(lambda: src.read(COPY_CHUNK), b""))
        DISK.rename(tmp, target)
    except BaseException:
        remove(tmp)
        raise
    os.unlink(source)


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the volume holding ``path``."""
    return shutil.disk_usage(path).free



def replace_atomically(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` or its old contents, never a mix; a failed write leaves no temporary file."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        write_new(tmp, [data])
        DISK.replace(tmp, path)
    except BaseException:
        remove(tmp)
        raise
    fsync_dir(path.parent)


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        DISK.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    fsync_path(path)


def write_json_atomically(path: Path, doc: dict[str, Any]) -> None:
    replace_atomically(path, (json.dumps(doc, separators=(",", ":")) + "\n").encode("utf-8"))
