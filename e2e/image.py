"""Build the operator image from images/operator/Dockerfile without Docker and without a registry.

The Dockerfile is the one description of what goes in; this builds exactly it with buildah (chroot isolation),
from a base made the way Debian makes ``debian:bookworm-slim``: ``debootstrap --variant=minbase bookworm``,
then debuerreotype's "slim" rules (no docs, man pages or locales; apt keeps no .debs). The image lands in a
buildah storage and a folder keyed by what decides its content, outside the clone:

    ${VPO_CACHE_DIR:-~/.cache/vllm-pooling-operator}/image/
      base-debian12-minbase-slim_<hash>/                  the base's manifest and debootstrap log
      image-debian12-py3.11_vllm-pooling-operator-<version>_<hash>/   manifest.json, build.log
      storage-<driver>/                                   buildah's images (overlay where the kernel has it, else vfs)

The hash covers the wheels' versions (images/operator/requirements.lock, with the hash of every file; the
project's venv installs the same versions), the Dockerfile, install.sh and every file of the build context. The
build's pip is offline: the lock's wheels are downloaded here first, each checked against its hashes (this host
has the network and its CA bundle), and a pip configuration mounted into the build points at them.

    python -m e2e.image            # build unless cached; print name, size and folder
    python -m e2e.image --check    # exit 1 when not built; build nothing
    python -m e2e.image --force    # rebuild
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import inspect
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from e2e.kube.build import _fmt_time, _lock, _stderr, cache_home

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "images" / "operator" / "Dockerfile"
NAME = "localhost/vllm-pooling-operator"
BASE_NAME = "localhost/vpo-debian"
DEBIAN, SUITE, PYTHON = "12", "bookworm", "3.11"  # bookworm ships Python 3.11 and no other
MIRROR = os.environ.get("VPO_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get("VPO_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
TOOLS = {"buildah": "buildah", "debootstrap": "debootstrap"}  # executable -> Debian package
CONTAINER_PREFIX = "vpo-run-"  # vpo-run-<pid>-<n>: the containers mounted() makes
FAILED = "FAILED"  # written into the key folder by a build that failed, with its error
KEEP_IMAGES = 2  # images of older keys beyond this many are removed with their folders
PRUNE_ABOVE_BYTES = 6 * 1024**3  # past this, buildah's layer cache (unnamed images) is dropped

# What debuerreotype does to a minbase tree to make debian:<suite>-slim (its .slimify-excludes/-includes and
# its apt "docker-clean" configuration), and the deb822 sources that image carries.
SLIM_DPKG_CFG = """\
# the "slim" rules of Debian's container images (debuerreotype): files containers do not need
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
"""
APT_CLEAN = """\
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
"""
SOURCES = f"""\
Types: deb
URIs: {MIRROR}
Suites: {SUITE} {SUITE}-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: {SECURITY_MIRROR}
Suites: {SUITE}-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
# Mounted over the base's empty /mnt for the build's RUN steps only, so nothing of it stays in a layer.
BUILD_MOUNT = "/mnt"
PIP_CONF = f"[global]\nno-index = true\nfind-links = {BUILD_MOUNT}/wheels\n"


class Unavailable(RuntimeError):
    """The image cannot be built or run here (no root, tools missing and not installable, not Linux)."""


def unavailable() -> str | None:
    """Why this machine cannot build or run the image, or None. Building needs root: debootstrap creates
    device nodes and root-owned files, and the image's user is switched to with chroot(2) and setuid(2)."""
    if sys.platform != "linux":
        return f"the image is built with Linux tools (buildah, debootstrap, chroot); this is {sys.platform}"
    if os.geteuid() != 0:
        return ("building and running the image needs root: debootstrap makes device nodes and root-owned files, "
                "and the runner uses mount namespaces, chroot and setuid to 65532 (a rootless build in a user "
                "namespace, with /etc/subuid ranges, is not wired up)")
    if not all(which(t) for t in TOOLS) and not shutil.which("apt-get"):
        return f"{' and '.join(TOOLS)} are not installed and there is no apt-get to install them"
    return None


def which(exe: str) -> str | None:
    return shutil.which(exe, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def ensure_tools(log: Callable[[str], None]) -> None:
    """buildah and debootstrap from Debian's archive, installed with apt-get when missing (once)."""
    if reason := unavailable():
        raise Unavailable(reason)
    missing = [pkg for exe, pkg in TOOLS.items() if not which(exe)]
    if not missing:
        return
    with _lock(root() / "tools.lock"):
        missing = [pkg for exe, pkg in TOOLS.items() if not which(exe)]
        if not missing:
            return
        started = time.monotonic()
        log(f"[image] installing {' '.join(missing)} from Debian with apt-get (once; they build the image without Docker)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]):
            res = subprocess.run(argv, env=env, capture_output=True, text=True)
            if res.returncode != 0:
                raise Unavailable(f"`{' '.join(argv)}` failed:\n{(res.stdout + res.stderr)[-3000:]}")
        log(f"[image] installed {' '.join(missing)} in {_fmt_time(time.monotonic() - started)}")


def root() -> Path:
    return cache_home() / "image"


def storage_driver() -> str:
    """overlay where the kernel has it (layers share files, so buildah's layer cache is cheap), else vfs."""
    if driver := os.environ.get("VPO_IMAGE_STORAGE_DRIVER"):
        return driver
    with contextlib.suppress(OSError):
        if "\toverlay\n" in Path("/proc/filesystems").read_text():
            return "overlay"
    return "vfs"


def buildah_argv(*args: str) -> list[str]:
    """buildah on this cache's storage; runroot on tmpfs (/run), so mount state never outlives a reboot."""
    driver = storage_driver()
    return [which("buildah") or "buildah", "--storage-driver", driver, "--root", str(root() / f"storage-{driver}"),
            "--runroot", f"/run/vllm-pooling-operator-buildah-{driver}", *args]  # fmt: skip


def buildah(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(buildah_argv(*args), capture_output=True, text=True)
    if check and res.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args[:3])} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    return res


def _exists(name: str) -> bool:
    return buildah("inspect", "--type", "image", name, check=False).returncode == 0


# ---- what decides the content: the key ------------------------------------------------------------------


LOCK = REPO / "images" / "operator" / "requirements.lock"


def dependency_pins() -> dict[str, str]:
    """The operator's dependencies as images/operator/requirements.lock pins them, those whose markers hold for the
    image (Debian's Python on Linux, this machine's architecture): what the image installs."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    env = {**default_environment(), "python_version": PYTHON, "python_full_version": f"{PYTHON}.2",
           "sys_platform": "linux", "platform_system": "Linux", "implementation_name": "cpython",
           "platform_python_implementation": "CPython"}  # fmt: skip
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        if not line or line[0] in " #-":
            continue
        req = Requirement(line.rstrip(" \\"))
        if req.marker is None or req.marker.evaluate(env):
            pins[canonicalize_name(req.name)] = next(iter(req.specifier)).version
    return dict(sorted(pins.items()))


def context_files() -> list[Path]:
    """The build context as .dockerignore lets it in (its `!` lines name what enters, its other lines what
    then stays out), so that the key changes exactly when the context does."""
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#") and ln != "*"]
    allowed = [ln[1:].rstrip("/") for ln in lines if ln.startswith("!")]
    excluded = [ln.replace("**/", "*/") for ln in lines if not ln.startswith("!")]

    def out(rel: str) -> bool:
        parts = rel.split("/")
        return any(fnmatch.fnmatch("/".join(parts[: i + 1]), pat) for pat in excluded for i in range(len(parts)))

    files: list[Path] = []
    for top in allowed:
        p = REPO / top
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            rel = f.relative_to(REPO).as_posix()
            if f.is_file() and not out(rel):
                files.append(f)
    return files


def base_key() -> str:
    """``base-debian12-minbase-slim_<arch>_<hash of the suite, mirrors and the code that slims it>``."""
    parts = [SUITE, MIRROR, SECURITY_MIRROR, SLIM_DPKG_CFG, APT_CLEAN, SOURCES, inspect.getsource(_slim)]
    digest = hashlib.sha256("\0".join(parts).encode())
    return f"base-debian{DEBIAN}-minbase-slim_{_arch()}_{digest.hexdigest()[:8]}"


def key(pins: dict[str, str] | None = None) -> str:
    """``image-debian12-py3.11_vllm-pooling-operator-<version>_<hash of the wheels' versions, the Dockerfile,
    install.sh, the build context and the base>``."""
    from pooling_operator import __version__

    pins = dependency_pins() if pins is None else pins
    digest = hashlib.sha256(base_key().encode())
    digest.update("".join(f"{n}=={v}\n" for n, v in pins.items()).encode())
    for f in [DOCKERFILE, REPO / ".dockerignore", *context_files()]:
        digest.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return f"image-debian{DEBIAN}-py{PYTHON}_vllm-pooling-operator-{__version__}_{digest.hexdigest()[:12]}"


def _arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


# ---- the build ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    """A built image: its name in the storage, its folder and what its build recorded."""

    name: str
    dir: Path
    manifest: dict
    fresh: bool = False  # built by this call

    @property
    def config(self) -> dict:
        return self.manifest["config"]

    def summary(self) -> str:
        m = self.manifest
        layers = " + ".join(f"{b / 1e6:.0f}" for b in m["layer_bytes"])
        steps = ", ".join(f"{k} {_fmt_time(v)}" for k, v in m["build_seconds"].items())
        return (f"operator image {self.name}: {m['size_bytes'] / 1e6:.0f} MB ({layers} MB layers, uncompressed), "
                f"Debian {DEBIAN} Python {m['python']}, {len(m['pins'])} pinned dependencies; built in {steps} "
                f"({m['storage_driver']} storage) in {self.dir}")


def image_name(k: str) -> str:
    return f"{NAME}:{k.rsplit('_', 1)[-1]}"


def find(*, build: bool = False, force: bool = False, log: Callable[[str], None] | None = None) -> Image:
    """The image of the current sources, built first when missing and ``build`` (or ``force``); without
    ``build`` a missing image raises Unavailable with the error a failed build left. Installs the tools first."""
    log = log or _stderr
    ensure_tools(log)
    pins = dependency_pins()
    k = key(pins)
    d, name = root() / k, image_name(k)
    manifest = d / "manifest.json"
    if not force and manifest.is_file() and _exists(name):
        return Image(name, d, json.loads(manifest.read_text()))
    if not (build or force):
        failed = d / FAILED
        why = failed.read_text().strip() if failed.is_file() else "not built"
        raise Unavailable(f"the operator image {name} is not built ({why}); run `make image` (python -m e2e.image)")
    with _lock(root() / f"{k}.lock"):
        if not force and manifest.is_file() and _exists(name):
            return Image(name, d, json.loads(manifest.read_text()))
        d.mkdir(parents=True, exist_ok=True)
        (d / FAILED).unlink(missing_ok=True)
        try:
            img = _build(k, d, name, pins, log, no_cache=force)
        except Exception as e:  # (not an interrupt: that is no verdict on the build)
            (d / FAILED).write_text(f"{type(e).__name__}: {e}\n")
            raise
    _prune(keep=k, log=log)
    return img


def failed() -> str | None:
    """The error the last build of the current sources left (FAILED in its folder), or None."""
    f = root() / key() / FAILED
    return f.read_text().strip() if f.is_file() else None


def _run_logged(argv: list[str], logfile: Path, what: str, progress: Callable[[str], None] | None = None,
                **kw: object) -> None:
    """Run with its output in ``logfile``; each line that starts a build step is passed to ``progress``."""
    started = time.monotonic()
    with open(logfile, "a") as lf:
        lf.write(f"$ {' '.join(argv)}\n")
        lf.flush()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)  # type: ignore[call-overload]
        for line in proc.stdout:
            lf.write(line)
            if progress and re.match(r"(\[\d+/\d+\] )?STEP \d+/\d+: (FROM|RUN|COPY)", line):
                progress(f"{line.strip()[:100]} (at {_fmt_time(time.monotonic() - started)})")
        rc = proc.wait()
    if rc != 0:
        tail = "".join(logfile.read_text(errors="replace").splitlines(keepends=True)[-30:])
        raise RuntimeError(f"{what} failed (exit {rc}); last lines of {logfile}:\n{tail}")


def _base_name() -> str:
    return f"{BASE_NAME}:{SUITE}-slim-{base_key().rsplit('_', 1)[-1]}"


def _base(log: Callable[[str], None]) -> tuple[str, float]:
    """The Debian base in the storage (debootstrap, slimmed, imported); its name and the seconds spent."""
    k, name = base_key(), _base_name()
    d = root() / k
    with _lock(root() / f"{k}.lock"):
        if _exists(name):
            return name, 0.0
        started = time.monotonic()
        d.mkdir(parents=True, exist_ok=True)
        rootfs = Path(tempfile.mkdtemp(prefix=".rootfs-", dir=d))
        try:
            log(f"[image] debootstrap --variant=minbase {SUITE} from {MIRROR} (log: {d / 'build.log'})")
            _run_logged([which("debootstrap") or "debootstrap", "--variant=minbase", SUITE, str(rootfs), MIRROR],
                        d / "build.log", "debootstrap")
            _slim(rootfs)
            spent = time.monotonic() - started
            log(f"[image] base made in {_fmt_time(spent)}; importing it as {name}")
            ctr = buildah("from", "scratch").stdout.strip()
            try:
                mnt = Path(buildah("mount", ctr).stdout.strip())
                _run_logged(["cp", "-a", f"{rootfs}/.", f"{mnt}/"], d / "build.log", "copying the base into buildah")
                buildah("config", "--os", "linux", "--arch", _arch(), "--cmd", "bash", ctr)
                buildah("commit", "--quiet", "--rm", ctr, name)
            except BaseException:
                buildah("rm", ctr, check=False)
                raise
        finally:
            shutil.rmtree(rootfs, ignore_errors=True)
        spent = time.monotonic() - started
        (d / "manifest.json").write_text(json.dumps({"name": name, "suite": SUITE, "mirror": MIRROR,
                                                     "build_seconds": round(spent, 1)}, indent=2) + "\n")
        return name, spent


def _slim(rootfs: Path) -> None:
    (rootfs / "etc/dpkg/dpkg.cfg.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker").write_text(SLIM_DPKG_CFG)
    (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(APT_CLEAN)
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(SOURCES)
    for f in sorted((rootfs / "usr/share/doc").rglob("*"), reverse=True):  # all but the copyright files
        if f.is_dir() and not f.is_symlink():
            with contextlib.suppress(OSError):
                f.rmdir()  # an empty one
        elif f.name != "copyright":
            f.unlink()
    for top in ("usr/share/groff", "usr/share/info", "usr/share/linda", "usr/share/lintian/overrides",
                "usr/share/locale", "usr/share/man"):
        for f in (rootfs / top).glob("*"):
            shutil.rmtree(f) if f.is_dir() and not f.is_symlink() else f.unlink()
    for f in (rootfs / "dev").iterdir():  # an image's /dev is empty: the runtime provides one
        shutil.rmtree(f) if f.is_dir() and not f.is_symlink() else f.unlink()
    for top in ("var/cache/apt", "var/lib/apt/lists", "var/log"):  # files only: apt and dpkg expect the folders
        for f in (rootfs / top).rglob("*"):
            if not f.is_dir() and f.name != "lock":
                f.unlink()


def _build(k: str, d: Path, name: str, pins: dict[str, str], log: Callable[[str], None], no_cache: bool) -> Image:
    started = time.monotonic()
    seconds: dict[str, float] = {}
    logfile = d / "build.log"
    logfile.write_text("")
    base, seconds["base"] = _base(log)
    log(f"[image] {k}: {len(pins)} pinned dependencies; base {base}" + (" (cached)" if not seconds["base"] else ""))

    t = time.monotonic()
    mount = Path(tempfile.mkdtemp(prefix=".build-", dir=d))
    try:
        (mount / "pip.conf").write_text(PIP_CONF)
        log("[image] downloading the lock's wheels, each checked against its hashes (and setuptools, wheel to build the operator's) with pip")
        wheels = str(mount / "wheels")
        quiet = ["--quiet", "--disable-pip-version-check", "--only-binary=:all:", "--dest", wheels]
        # this interpreter is the image's Python version on the image's platform (dependency_pins says so)
        _run_logged([sys.executable, "-m", "pip", "download", *quiet, "--require-hashes", "--no-deps", "-r", str(LOCK)],
                    logfile, "pip download (the lock)", env={**os.environ, "PIP_FIND_LINKS": ""})  # fmt: skip
        _run_logged([sys.executable, "-m", "pip", "download", *quiet, "setuptools>=77", "wheel"],
                    logfile, "pip download (build tools)", env={**os.environ, "PIP_FIND_LINKS": ""})  # fmt: skip
        seconds["wheels"] = time.monotonic() - t

        t = time.monotonic()
        log(f"[image] buildah bud -f images/operator/Dockerfile (chroot isolation; log: {logfile})")
        layers = storage_driver() == "overlay"  # vfs copies the whole tree per cached step: slower than none
        _run_logged(buildah_argv("bud", "--isolation", "chroot", "--pull=never", f"--layers={str(layers).lower()}", f"--no-cache={str(no_cache).lower()}",
                     "--build-arg", f"DEBIAN_IMAGE={base}", "--build-arg", f"PIP_CONFIG_FILE={BUILD_MOUNT}/pip.conf",
                     "--volume", f"{mount}:{BUILD_MOUNT}:ro", "--file", str(DOCKERFILE), "--tag", name, str(REPO)),
                    logfile, "buildah bud", progress=lambda msg: log(f"[image] {msg}"))  # fmt: skip
        seconds["bud"] = time.monotonic() - t
    finally:
        shutil.rmtree(mount, ignore_errors=True)

    info = json.loads(buildah("inspect", "--type", "image", name).stdout)
    layer_bytes = [int(layer["size"]) for layer in json.loads(info["Manifest"])["layers"]]
    with mounted(name) as rootfs:  # Debian's version of the package, from dpkg's own record in the image
        status = (rootfs / "var/lib/dpkg/status").read_text().split("\n\n")
    version = next((re.search(r"^Version: (\S+)", p, re.M)[1] for p in status if f"Package: python{PYTHON}\n" in p), "")  # type: ignore[index]
    if not version.startswith(f"{PYTHON}."):
        raise RuntimeError(f"the image holds no Debian python{PYTHON} package ({version!r})")
    seconds["total"] = time.monotonic() - started
    manifest = {
        "name": name, "id": info["FromImageID"], "key": k, "base": base, "python": version,
        "storage_driver": storage_driver(), "size_bytes": sum(layer_bytes), "layer_bytes": layer_bytes,
        "config": info["OCIv1"]["config"], "pins": pins, "build_seconds": {k: round(v, 1) for k, v in seconds.items()},
    }  # fmt: skip
    (d / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return Image(name, d, manifest, fresh=True)


def _prune(keep: str, log: Callable[[str], None]) -> None:
    """The images (and folders) of all but the newest KEEP_IMAGES keys, bases other than the current one, then
    buildah's layer cache when the storage grew past PRUNE_ABOVE_BYTES."""
    folders = sorted((p for p in root().glob(f"image-debian{DEBIAN}-*") if (p / "manifest.json").is_file()),
                     key=lambda p: (p.name == keep, (p / "manifest.json").stat().st_mtime), reverse=True)
    for old in folders[KEEP_IMAGES:]:
        shutil.rmtree(old, ignore_errors=True)
    wanted = {image_name(p.name) for p in folders[:KEEP_IMAGES]} | {_base_name()}
    for tagged in buildah("images", "--format", "{{.Name}}:{{.Tag}}").stdout.split():
        if tagged.startswith((f"{NAME}:", f"{BASE_NAME}:")) and tagged not in wanted:
            if buildah("rmi", tagged, check=False).returncode == 0:
                log(f"[image] removed the older image {tagged}")
    store = root() / f"storage-{storage_driver()}"
    used = int(subprocess.run(["du", "-sb", str(store)], capture_output=True, text=True).stdout.split()[0] or 0)
    if used > PRUNE_ABOVE_BYTES:
        buildah("rmi", "--prune", check=False)
        log(f"[image] the storage held {used / 1e9:.1f} GB: dropped buildah's layer cache (unnamed images)")


# ---- running what is inside -----------------------------------------------------------------------------


@contextlib.contextmanager
def mounted(name: str) -> Iterator[Path]:
    """A throw-away container of the image, its root filesystem mounted; removed afterwards (and, should this
    process die first, by the next call from another)."""
    for ctr in buildah("containers", "--format", "{{.ContainerName}}").stdout.split():
        if ctr.startswith(CONTAINER_PREFIX) and not Path(f"/proc/{ctr.split('-')[2]}").exists():
            buildah("rm", ctr, check=False)
    ctr = buildah("from", "--pull=never", "--name", f"{CONTAINER_PREFIX}{os.getpid()}-{time.monotonic_ns()}", name).stdout.strip()
    try:
        yield Path(buildah("mount", ctr).stdout.strip())
    finally:
        buildah("rm", ctr, check=False)


# The runner, as the host's /bin/sh in a private mount namespace: the image's root read-only (a pod's
# readOnlyRootFilesystem), tmpfs on /tmp, /run and /dev with the usual device nodes, /proc, the
# ServiceAccount's folder where kubelet mounts it, then chroot(2) and setuid/setgid to the image's user.
RUNNER = r"""
set -eu
root=$1 user=$2 secrets=$3 mount=$4 chroot=$5
shift 5
"$mount" --bind "$root" "$root"
"$mount" -o remount,bind,ro "$root"
"$mount" -t tmpfs -o mode=1777,size=64m tmpfs "$root/tmp"
"$mount" -t tmpfs -o mode=755,size=1m tmpfs "$root/run"
"$mount" -t tmpfs -o mode=755,size=1m tmpfs "$root/dev"
for d in null zero full random urandom; do : > "$root/dev/$d"; "$mount" --bind "/dev/$d" "$root/dev/$d"; done
"$mount" -t proc proc "$root/proc"
if [ -n "$secrets" ]; then
  sa="$root/run/secrets/kubernetes.io/serviceaccount"
  /bin/mkdir -p "$sa"
  "$mount" --bind "$secrets" "$sa"
  "$mount" -o remount,bind,ro "$sa"
fi
exec "$chroot" --userspec="$user" "$root" "$@"
"""


def runner(rootfs: Path, *, user: str, secrets: Path | None = None) -> list[str]:
    """The argv prefix that runs a command of the image (an absolute path inside it) from ``rootfs``: the host's
    unshare, sh, mount and chroot, with any environment (PATH included) passed to the command unchanged."""
    tools = [which(t) or t for t in ("mount", "chroot")]
    return [which("unshare") or "unshare", "--mount", "--", "/bin/sh", "-c", RUNNER, "runner", str(rootfs), user,
            str(secrets or ""), *tools]  # fmt: skip


def config_env(config: dict) -> dict[str, str]:
    """The image's ENV as a process environment (HOME=/ as container runtimes set for a user without a home)."""
    return {"HOME": "/", **dict(e.split("=", 1) for e in config.get("Env") or [])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.image", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only report; exit 1 when the image is not built")
    ap.add_argument("--force", action="store_true", help="rebuild even when cached, buildah's layer cache unused")
    ap.add_argument("--print-dir", action="store_true", help="print only the image's cache folder")
    args = ap.parse_args(argv)
    if args.print_dir:
        print(root() / key())
        return 0
    if (reason := unavailable()) and not args.check:
        _stderr(f"[image] cannot build the operator image here: {reason}")
        return 2
    started = time.monotonic()
    try:
        img = find(build=not args.check, force=args.force)
    except Unavailable as e:
        _stderr(f"[image] {e}")
        return 1
    _stderr(f"[image] {'built' if img.fresh else 'cached, checked'} in {_fmt_time(time.monotonic() - started)}")
    print(img.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
