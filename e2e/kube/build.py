"""Build or find the control-plane binaries for the e2e harness.

The versions are pinned by the wrapper Go modules under ``e2e/cluster/`` (their go.mod and go.sum are
committed): ``k8s/`` builds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl with one
``go build`` so they share compiled packages, ``etcd/`` builds etcd, ``kwok/`` builds kwok. The binaries land
in a cache folder outside the clone, keyed by those versions:

    ${VPO_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/vllm-pooling-operator}/bin/<key>/

and are reused when present. Binaries a user already has can be supplied the envtest way: every file named
like a component in ``$KUBEBUILDER_ASSETS`` (kube-apiserver, etcd, kubectl, ...) is used instead of ours.

    python -m e2e.kube.build            # build what is missing, print the folder
    python -m e2e.kube.build --check    # exit 1 if anything is missing, build nothing
    python -m e2e.kube.build --force    # rebuild
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

E2E_DIR = Path(__file__).resolve().parents[1]
MODULES_DIR = E2E_DIR / "cluster"


@dataclass(frozen=True)
class Group:
    """One wrapper module and the binaries one ``go build`` makes from it."""

    name: str
    module: str  # the pinned module whose version names the build
    binaries: dict[str, str]  # binary name -> Go package

    @property
    def dir(self) -> Path:
        return MODULES_DIR / self.name


GROUPS = (
    Group(
        "k8s",
        "k8s.io/kubernetes",
        {
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
            "kubectl": "k8s.io/kubernetes/cmd/kubectl",
        },
    ),
    Group("etcd", "go.etcd.io/etcd/server/v3", {"etcd": "go.etcd.io/etcd/server/v3"}),
    Group("kwok", "sigs.k8s.io/kwok", {"kwok": "sigs.k8s.io/kwok/cmd/kwok"}),
)
BINARIES = tuple(b for g in GROUPS for b in g.binaries)

# Tools the tests use beside the control plane, each cached in its own folder keyed by its own pins (so that
# adding or moving one never rebuilds the control plane): bin/<name>-<version>_<os>-<arch>_<hash>/.
TOOLS = (
    Group("helm", "helm.sh/helm/v3", {"helm": "helm.sh/helm/v3/cmd/helm"}),
    # an OCI registry (in memory, loopback) that `make release` pushes to in the release test
    Group("registry", "github.com/google/go-containerregistry", {"registry": "github.com/google/go-containerregistry/cmd/registry"}),
    # the release workflow's linter (make lint)
    Group("actionlint", "github.com/rhysd/actionlint", {"actionlint": "github.com/rhysd/actionlint/cmd/actionlint"}),
)

# Third-party controllers the tests run beside the operator (KEDA, Kueue): one wrapper module, because their
# pins resolve together (both on k8s.io/* v0.35 and controller-runtime v0.23; KEDA's replace block is copied
# into its go.mod), one ``go build``, and their own cache folder keyed by both versions and the pins, never
# the control plane's: bin/controllers-keda-<v>_kueue-<v>_<os>-<arch>_<hash>/. ``make test`` builds it in
# the background once the control plane is built (``python -m e2e.kube.build --controllers``), at low priority;
# the tests that need it wait for it with a deadline (``controllers``).
CONTROLLERS = Group(
    "controllers",
    "github.com/kedacore/keda/v2",
    {
        "keda-operator": "github.com/kedacore/keda/v2/cmd/operator",
        "keda-adapter": "github.com/kedacore/keda/v2/cmd/adapter",
        "kueue": "sigs.k8s.io/kueue/cmd/kueue",
    },
)
CONTROLLER_MODULES = {"keda": "github.com/kedacore/keda/v2", "kueue": "sigs.k8s.io/kueue"}
CONTROLLERS_FAILED = "FAILED"  # written into the cache folder by a build that failed, with its error

# The kwok Stage objects the harness runs with. They are data in the kwok module; the build copies them
# from the pinned module into the cache folder (kwok-stages.yaml) so the harness needs no Go at run time.
KWOK_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
KWOK_STAGES = "kwok-stages.yaml"


class MissingBinaries(RuntimeError):
    """Some binaries are neither cached nor in KUBEBUILDER_ASSETS, and building was not allowed."""


def cache_home() -> Path:
    """Root of everything the e2e harness caches (binaries, third-party CRDs)."""
    if os.environ.get("VPO_CACHE_DIR"):
        return Path(os.environ["VPO_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(xdg).expanduser() / "vllm-pooling-operator"


def pinned_versions() -> dict[str, str]:
    """The version of each group's main module, read from its committed go.mod."""
    versions = {}
    for g in GROUPS:
        text = (g.dir / "go.mod").read_text()
        m = re.search(rf"^\s*(?:require\s+)?{re.escape(g.module)}\s+(v\S+)", text, re.M)
        if not m:
            raise RuntimeError(f"{g.dir / 'go.mod'} does not require {g.module}")
        versions[g.name] = m.group(1)
    return versions


def cache_key(versions: dict[str, str] | None = None) -> str:
    """``k8s-v1.35.4_etcd-v3.6.16_kwok-v0.8.0_linux-amd64_<hash of the go.mod/go.sum pins>``."""
    versions = versions or pinned_versions()
    digest = hashlib.sha256()
    for g in GROUPS:
        for f in ("go.mod", "go.sum"):
            digest.update((g.dir / f).read_bytes())
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    parts = "_".join(f"{name}-{v}" for name, v in versions.items())
    return f"{parts}_{sys.platform}-{arch}_{digest.hexdigest()[:8]}"


def bin_dir(versions: dict[str, str] | None = None) -> Path:
    return cache_home() / "bin" / cache_key(versions)


@dataclass
class Binaries:
    """Where each component's executable is, plus the kwok stage config."""

    paths: dict[str, Path]
    kwok_stages: Path
    versions: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Path:
        return self.paths[name]


def _assets_dir() -> Path | None:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    return Path(assets).expanduser() if assets else None


def _executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def missing(versions: dict[str, str] | None = None) -> list[str]:
    """Binaries (and the stage file, as ``kwok-stages.yaml``) not available from assets or the cache."""
    d = bin_dir(versions)
    assets = _assets_dir()
    out = [
        name for name in BINARIES if not (assets and _executable(assets / name)) and not _executable(d / name)
    ]
    if not (d / KWOK_STAGES).is_file() and not (assets and (assets / KWOK_STAGES).is_file()):
        out.append(KWOK_STAGES)
    return out


def find(*, build: bool = False, log: Callable[[str], None] | None = None) -> Binaries:
    """Return the binaries, building the missing ones first when ``build`` is true."""
    log = log or _stderr
    versions = pinned_versions()
    todo = missing(versions)
    if todo:
        if not build:
            raise MissingBinaries(
                f"missing {', '.join(todo)} in {bin_dir(versions)}; run `make cluster-build` "
                "(python -m e2e.kube.build) or point KUBEBUILDER_ASSETS at a folder holding them"
            )
        build_missing(versions, log=log)
    d = bin_dir(versions)
    assets = _assets_dir()
    paths = {}
    for name in BINARIES:
        p = assets / name if assets and _executable(assets / name) else d / name
        paths[name] = p
    stages = assets / KWOK_STAGES if assets and (assets / KWOK_STAGES).is_file() else d / KWOK_STAGES
    return Binaries(paths=paths, kwok_stages=stages, versions=versions)


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """Serialize concurrent builds of the same key (two terminals, pytest and make)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _go() -> str:
    go = shutil.which("go")
    if not go:
        raise MissingBinaries(
            "the Go toolchain (go) is not on PATH: install Go >= 1.25 or set KUBEBUILDER_ASSETS to a folder "
            f"holding {', '.join(BINARIES)}"
        )
    return go


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    return env


def _ldflags(group: Group, version: str) -> str:
    flags = ["-s", "-w"]
    if group.name == "k8s":
        major, minor = version.lstrip("v").split(".")[:2]
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [
                f"-X {pkg}.gitVersion={version}",
                f"-X {pkg}.gitMajor={major}",
                f"-X {pkg}.gitMinor={minor}",
                f"-X {pkg}.gitTreeState=clean",
            ]
    elif group.name == "etcd":
        flags.append(f"-X go.etcd.io/etcd/api/v3/version.GitSHA={version}")
    elif group.name == "helm":
        flags.append(f"-X helm.sh/helm/v3/internal/version.version={version}")
    elif group.name == "actionlint":
        flags.append(f"-X github.com/rhysd/actionlint.version={version}")
    elif group.name == "controllers":
        versions = controller_versions()
        flags.append(f"-X github.com/kedacore/keda/v2/version.Version={versions['keda']}")
        flags.append(f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={versions['kueue']}")
    return " ".join(flags)


def _fmt_time(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"


def _build_group(group: Group, version: str, out: Path, logfile: Path, log: Callable[[str], None]) -> float:
    """One ``go build`` of every binary in the group into ``out``; returns the seconds it took."""
    go = _go()
    env = _go_env()
    started = time.monotonic()
    pkgs = list(group.binaries.values())
    log(f"[{group.name}] resolving {group.module} {version} (downloads modules on first use)")
    listed = subprocess.run(
        [go, "list", "-mod=readonly", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", *pkgs],
        cwd=group.dir,
        env=env,
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        raise RuntimeError(f"[{group.name}] go list failed:\n{listed.stderr[-4000:]}")
    total = sum(1 for line in listed.stdout.splitlines() if line.strip())
    if len(pkgs) == 1:
        target = ["-o", str(out / next(iter(group.binaries)))]
    else:  # go names each binary after its package's last element; renamed to the group's names below
        target = ["-o", str(out) + os.sep]
    argv = [
        go, "build", "-mod=readonly", "-buildvcs=false", "-trimpath", "-v",
        "-ldflags", _ldflags(group, version), *target, *pkgs,
    ]  # fmt: skip
    log(f"[{group.name}] go build {' '.join(group.binaries)} ({total} non-std packages; log: {logfile})")
    done = 0
    last_report = time.monotonic()
    last_pct = -1
    with open(logfile, "a") as lf:
        lf.write(f"$ (cd {group.dir} && {' '.join(argv)})\n")
        lf.flush()
        proc = subprocess.Popen(
            argv, cwd=group.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            lf.write(line)
            if re.fullmatch(r"[\w.\-/~]+", line.strip()) and "." in line.split("/")[0]:
                done += 1
            now = time.monotonic()
            pct = min(99, done * 100 // max(total, 1))
            if (pct // 10 > last_pct // 10) or now - last_report > 60:
                log(
                    f"[{group.name}] compiled {done}/{total} packages ({pct}%) after {_fmt_time(now - started)}"
                )
                last_report, last_pct = now, pct
        rc = proc.wait()
    if rc != 0:
        tail = "".join(logfile.read_text().splitlines(keepends=True)[-40:])
        raise RuntimeError(f"[{group.name}] go build failed (exit {rc}); last lines of {logfile}:\n{tail}")
    for name, pkg in group.binaries.items():
        built_as = out / pkg.rsplit("/", 1)[-1]
        if len(pkgs) > 1 and built_as.name != name:
            os.replace(built_as, out / name)
    seconds = time.monotonic() - started
    log(f"[{group.name}] built in {_fmt_time(seconds)}")
    return seconds


def _write_kwok_stages(kwok_version: str, dest: Path, log: Callable[[str], None]) -> None:
    """Concatenate kwok's own Stage YAMLs from the pinned module into one ``--config`` file."""
    go = _go()
    res = subprocess.run(
        [go, "mod", "download", "-json", "sigs.k8s.io/kwok"],
        cwd=MODULES_DIR / "kwok",
        env=_go_env(),
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise RuntimeError(f"go mod download sigs.k8s.io/kwok failed:\n{res.stdout}{res.stderr}")
    info = json.loads(res.stdout)
    moddir = Path(info["Dir"])
    docs = [f"# Stage objects of sigs.k8s.io/kwok {info['Version']} ({moddir}), for kwok --config\n"]
    for rel in KWOK_STAGE_FILES:
        docs.append(f"---\n# {rel}\n" + (moddir / rel).read_text())
    tmp = dest.with_suffix(".tmp")
    tmp.write_text("".join(docs))
    os.replace(tmp, dest)
    log(f"[kwok] wrote {dest.name} from {info['Path']}@{info['Version']}")


def build_missing(
    versions: dict[str, str] | None = None, *, force: bool = False, log: Callable[[str], None] | None = None
) -> Path:
    """Build every binary that is not in the cache (all of them with ``force``); return the cache folder."""
    log = log or _stderr
    versions = versions or pinned_versions()
    d = bin_dir(versions)
    with _lock(d.parent / f"{d.name}.lock"):
        d.mkdir(parents=True, exist_ok=True)
        manifest_path = d / "manifest.json"
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        manifest.setdefault("versions", versions)
        manifest.setdefault("build_seconds", {})
        assets = _assets_dir()
        logfile = d / "build.log"
        for g in GROUPS:
            need = [
                b
                for b in g.binaries
                if force or not (_executable(d / b) or (assets and _executable(assets / b)))
            ]
            if not need:
                continue
            staging = d / f".staging-{g.name}-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            try:
                seconds = _build_group(g, versions[g.name], staging, logfile, log)
                for b in g.binaries:
                    os.replace(staging / b, d / b)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            manifest["build_seconds"][g.name] = round(seconds, 1)
        if force or not (d / KWOK_STAGES).is_file():
            _write_kwok_stages(versions["kwok"], d / KWOK_STAGES, log)
        manifest["sizes_bytes"] = {b: (d / b).stat().st_size for b in BINARIES if (d / b).exists()}
        go = shutil.which("go")
        if go:
            manifest["go"] = subprocess.run(
                [go, "env", "GOVERSION"], capture_output=True, text=True
            ).stdout.strip()
        manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return d


def _module_version(g: Group) -> str:
    text = (g.dir / "go.mod").read_text()
    m = re.search(rf"^\s*(?:require\s+)?{re.escape(g.module)}\s+(v\S+)", text, re.M)
    if not m:
        raise RuntimeError(f"{g.dir / 'go.mod'} does not require {g.module}")
    return m.group(1)


def tool_dir(g: Group) -> Path:
    digest = hashlib.sha256((g.dir / "go.mod").read_bytes() + (g.dir / "go.sum").read_bytes()).hexdigest()[:8]
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return cache_home() / "bin" / f"{g.name}-{_module_version(g)}_{sys.platform}-{arch}_{digest}"


def tool(name: str, *, build: bool = True, log: Callable[[str], None] | None = None) -> Path:
    """The path of a tool's binary (TOOLS), built into its cache folder first when missing and allowed."""
    log = log or _stderr
    g = next(t for t in TOOLS if t.name == name)
    d = tool_dir(g)
    exe = d / next(iter(g.binaries))
    if _executable(exe):
        return exe
    if not build:
        raise MissingBinaries(f"{name} is not built in {d}; run `make cluster-build`")
    with _lock(d.parent / f"{d.name}.lock"):
        if _executable(exe):
            return exe
        d.mkdir(parents=True, exist_ok=True)
        staging = d / f".staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            seconds = _build_group(g, _module_version(g), staging, d / "build.log", log)
            os.replace(staging / exe.name, exe)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        (d / "manifest.json").write_text(json.dumps({"version": _module_version(g), "build_seconds": round(seconds, 1)}) + "\n")
    return exe


def _required_version(d: Path, module: str) -> str:
    m = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", (d / "go.mod").read_text(), re.M)
    if not m:
        raise RuntimeError(f"{d / 'go.mod'} does not require {module}")
    return m.group(1)


def controller_versions() -> dict[str, str]:
    """``{"keda": "v2.20.2", "kueue": "v0.17.0"}``, read from the controllers' committed go.mod."""
    return {name: _required_version(CONTROLLERS.dir, module) for name, module in CONTROLLER_MODULES.items()}


def controllers_dir() -> Path:
    """``bin/controllers-keda-v2.20.2_kueue-v0.17.0_linux-amd64_<hash of go.mod and go.sum>``."""
    g = CONTROLLERS
    digest = hashlib.sha256((g.dir / "go.mod").read_bytes() + (g.dir / "go.sum").read_bytes()).hexdigest()[:8]
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    versions = "_".join(f"{n}-{v}" for n, v in controller_versions().items())
    return cache_home() / "bin" / f"controllers-{versions}_{sys.platform}-{arch}_{digest}"


def _controller_paths(d: Path) -> dict[str, Path] | None:
    paths = {name: d / name for name in CONTROLLERS.binaries}
    return paths if all(_executable(p) for p in paths.values()) else None


def build_controllers(*, log: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Build the controllers into their cache folder (under its lock) unless they are there; a failure is written
    to ``FAILED`` in that folder, so that tests waiting for a background build say why instead of timing out."""
    log = log or _stderr
    d = controllers_dir()
    with _lock(d.parent / f"{d.name}.lock"):
        if paths := _controller_paths(d):
            return paths
        d.mkdir(parents=True, exist_ok=True)
        (d / CONTROLLERS_FAILED).unlink(missing_ok=True)
        staging = d / f".staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            seconds = _build_group(CONTROLLERS, "+".join(controller_versions().values()), staging, d / "build.log", log)
            for name in CONTROLLERS.binaries:
                os.replace(staging / name, d / name)
        except BaseException as e:
            (d / CONTROLLERS_FAILED).write_text(f"{type(e).__name__}: {e}\n")
            raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        manifest = {
            "versions": controller_versions(),
            "build_seconds": round(seconds, 1),
            "sizes_bytes": {name: (d / name).stat().st_size for name in CONTROLLERS.binaries},
        }
        (d / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    paths = _controller_paths(d)
    assert paths is not None
    return paths


def controllers(*, wait_seconds: float = 0.0, log: Callable[[str], None] | None = None) -> dict[str, Path]:
    """The controllers' binaries. When a build holds the lock (``make test`` starts one in the background), wait
    for it up to ``wait_seconds``; when none is running and they are missing, build them now. A background build
    that failed raises ``MissingBinaries`` with its error."""
    log = log or _stderr
    d = controllers_dir()
    if paths := _controller_paths(d):
        return paths
    lock = d.parent / f"{d.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    said = False
    while True:
        with open(lock, "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                busy = False
                fcntl.flock(fh, fcntl.LOCK_UN)
            except BlockingIOError:
                busy = True
        if paths := _controller_paths(d):
            return paths
        if not busy:
            failed = d / CONTROLLERS_FAILED
            if failed.is_file():
                raise MissingBinaries(f"the controllers' build failed ({d / 'build.log'}; `make controllers` tries again): {failed.read_text().strip()}")
            log(f"[controllers] not built and no build running: building now into {d}")
            return build_controllers(log=log)
        waited = time.monotonic() - started
        if waited > wait_seconds:
            raise MissingBinaries(f"the controllers' background build was still running after {waited:.0f} s ({d / 'build.log'})")
        if not said:
            log(f"[controllers] waiting up to {wait_seconds:.0f} s for the background build ({d / 'build.log'})")
            said = True
        # a poll of the build's lock with a deadline (the build holds it until it is done)
        with open(lock, "w") as fh:
            deadline = time.monotonic() + min(5.0, max(0.1, wait_seconds - waited))
            while time.monotonic() < deadline:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(fh, fcntl.LOCK_UN)
                    break
                except BlockingIOError:
                    time.sleep(0.5)


def controllers_report() -> str:
    """One line on the controllers' build: cached or not, and the figures of the build that made them."""
    d = controllers_dir()
    manifest = d / "manifest.json"
    if not _controller_paths(d) or not manifest.is_file():
        failed = d / CONTROLLERS_FAILED
        return f"controllers: not built ({failed.read_text().strip() if failed.is_file() else 'no build finished'})"
    m = json.loads(manifest.read_text())
    sizes = ", ".join(f"{n} {b / 1e6:.0f} MB" for n, b in m["sizes_bytes"].items())
    versions = ", ".join(f"{n} {v}" for n, v in m["versions"].items())
    return f"controllers: {versions}; built in {_fmt_time(m['build_seconds'])} ({sizes}) in {d}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.kube.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only report; exit 1 when something is missing")
    ap.add_argument("--force", action="store_true", help="rebuild even when cached")
    ap.add_argument("--print-dir", action="store_true", help="print only the cache folder")
    ap.add_argument("--controllers", action="store_true", help="build the third-party controllers (KEDA, Kueue) only")
    ap.add_argument("--report", action="store_true", help="with --controllers: print how their build went, build nothing")
    args = ap.parse_args(argv)
    if args.controllers:
        if not args.report:
            started = time.monotonic()
            _stderr(f"[controllers] {', '.join(f'{n} {v}' for n, v in controller_versions().items())} into {controllers_dir()}")
            build_controllers()
            _stderr(f"[controllers] ready after {_fmt_time(time.monotonic() - started)}")
        print(controllers_report())
        return 0
    versions = pinned_versions()
    d = bin_dir(versions)
    if args.print_dir:
        print(d)
        return 0
    todo = missing(versions)
    if args.check:
        for name in BINARIES:
            print(f"{name:26} {'missing' if name in todo else 'ok'}")
        return 1 if todo else 0
    if todo or args.force:
        started = time.monotonic()
        build_missing(versions, force=args.force)
        _stderr(f"build finished in {_fmt_time(time.monotonic() - started)}")
    else:
        _stderr(f"all binaries cached ({', '.join(f'{k} {v}' for k, v in versions.items())})")
    bins = find()
    for name in BINARIES:
        p = bins[name]
        _stderr(f"  {name:26} {p.stat().st_size / 1e6:7.1f} MB  {p}")
    for t in TOOLS:
        started = time.monotonic()
        p = tool(t.name)
        _stderr(f"  {t.name:26} {p.stat().st_size / 1e6:7.1f} MB  {p} ({_fmt_time(time.monotonic() - started)})")
    print(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
