"""vLLM's source distribution: unpacked, or the few files runtime mode reads from its ``.tar.gz``; the
transformers version vLLM tests with."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

# What runtime mode reads from the sdist (the wheel lacks tests/ and requirements/).
SDIST_FILES = ("tests/models/registry.py", "requirements/test/cuda.in")


def open_sdist(path: Path | None) -> Path | None:
    """An unpacked sdist, or a ``vllm-X.tar.gz`` of which only SDIST_FILES are unpacked (to a temp folder)."""
    if path is None or path.is_dir():
        return path
    import tarfile

    out = Path(tempfile.mkdtemp(prefix="vllm-sdist-"))
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            rel = m.name.split("/", 1)[-1]
            if rel in SDIST_FILES and m.isfile():
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                (out / rel).write_bytes(tf.extractfile(m).read())  # type: ignore[union-attr]
    return out


def sdist_transformers_pin(sdist: Path | None) -> str | None:
    if sdist is None:
        return None
    p = sdist / "requirements" / "test" / "cuda.in"
    if not p.is_file():
        return None
    m = re.search(r"^transformers==(\S+)", p.read_text(), re.MULTILINE)
    return m.group(1) if m else None
