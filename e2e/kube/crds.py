"""CRDs for the e2e control plane: third-party ones from their Go modules, ours from ``crds/``.

Third-party CRDs are obtained at test time with ``go mod download -json <module>@<version>`` (the checksum
database verifies the zip), read from the module's ``.Dir`` and cached in
``${VPO_CACHE_DIR:-~/.cache/vllm-pooling-operator}/crds/<module>@<version>/``, so later runs need no Go.
Nothing fetched is copied into the repository.

    python -m e2e.kube.crds            # fetch/cache the third-party CRDs and print their paths
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from e2e.harness.poll import Fatal, wait_for
from e2e.harness.rest import ApiError
from e2e.kube import build
from e2e.kube.controlplane import REPO_ROOT

if TYPE_CHECKING:
    from e2e.kube.controlplane import ControlPlane

# (module, version, files inside the module). The proxy's version list for prometheus-operator shows only
# v0.85.0, yet v0.93.0 downloads (and matches shared/reference/crds), so the version is pinned here.
THIRD_PARTY: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "github.com/kedacore/keda/v2",
        "v2.20.2",
        (
            "config/crd/bases/keda.sh_scaledobjects.yaml",
            "config/crd/bases/keda.sh_triggerauthentications.yaml",
            "config/crd/bases/keda.sh_clustertriggerauthentications.yaml",
            # the rest of KEDA's kinds: its operator watches them all and does not start without them
            "config/crd/bases/keda.sh_scaledjobs.yaml",
            "config/crd/bases/eventing.keda.sh_cloudeventsources.yaml",
            "config/crd/bases/eventing.keda.sh_clustercloudeventsources.yaml",
        ),
    ),
    (  # the KEDA HTTP add-on's route (autoscaling.front.kedaHttpAddOn): its newest version the proxy serves
        "github.com/kedacore/http-add-on",
        "v0.15.0",
        ("config/crd/bases/http.keda.sh_interceptorroutes.yaml",),
    ),
    (
        "github.com/prometheus-operator/prometheus-operator",
        "v0.93.0",
        (
            "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
            "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml",
            "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
        ),
    ),
)
# Kueue (e2e/kube/kueue.py): every kind of its API, since its manager starts controllers and informers for all of them
# (AdmissionCheck, Cohort, Topology, MultiKueue, ProvisioningRequestConfig too). Served at v1beta1 and v1beta2
# (storage); e2e/kube/kueue.py sets the conversion webhook of the kinds Kueue converts while it runs.
KUEUE_MODULE = build.CONTROLLER_MODULES["kueue"]
KUEUE_CRDS = tuple(
    f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml"
    for plural in (
        "resourceflavors", "clusterqueues", "localqueues", "workloads", "workloadpriorityclasses", "cohorts",
        "admissionchecks", "topologies", "provisioningrequestconfigs", "multikueueconfigs", "multikueueclusters",
    )
)
OUR_CRDS_DIR = REPO_ROOT / "crds"


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def third_party_crd_files(log: Callable[[str], None] | None = None) -> list[Path]:
    """Paths of the cached third-party CRD files, downloading the modules on first use."""
    out = []
    for module, version, files in THIRD_PARTY:
        out.extend(module_files(module, version, files, log))
    return out


def kueue_crd_files(log: Callable[[str], None] | None = None) -> list[Path]:
    """Kueue's CRDs at the version the controllers' go.mod pins (``e2e/kube/kueue.py`` installs them when it starts
    Kueue; they are not among ``THIRD_PARTY``, which every session installs)."""
    return module_files(KUEUE_MODULE, build.controller_versions()["kueue"], KUEUE_CRDS, log)


def module_files(module: str, version: str, files: Iterable[str], log: Callable[[str], None] | None = None) -> list[Path]:
    """``files`` (paths inside ``module@version``) from the cache, downloading the module on first use."""
    log = log or _say
    files = tuple(files)
    cache = build.cache_home() / "crds" / f"{module.replace('/', '_')}@{version}"
    wanted = [cache / Path(f).name for f in files]
    if not all(p.is_file() for p in wanted):
        moddir = _download(module, version, log)
        cache.mkdir(parents=True, exist_ok=True)
        for rel, dest in zip(files, wanted, strict=True):
            tmp = dest.with_suffix(".tmp")
            shutil.copyfile(moddir / rel, tmp)
            os.replace(tmp, dest)
        with open(cache / "SOURCE", "a") as fh:
            fh.write(f"{module}@{version}\n" + "".join(f"{f}\n" for f in files))
        log(f"Cached {len(files)} files of {module}@{version} in {cache}")
    return wanted


def _download(module: str, version: str, log: Callable[[str], None]) -> Path:
    go = shutil.which("go")
    if not go:
        raise RuntimeError(f"need the Go toolchain to fetch {module}@{version} (not cached yet)")
    log(f"go mod download {module}@{version}")
    with tempfile.TemporaryDirectory(prefix="vpo-e2e-gomod-") as tmp:  # outside any main module
        env = dict(os.environ, GOFLAGS="-mod=mod")
        res = subprocess.run(
            [go, "mod", "download", "-json", f"{module}@{version}"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
    info = json.loads(res.stdout) if res.stdout.strip().startswith("{") else {}
    if res.returncode != 0 or info.get("Error") or not info.get("Dir"):
        raise RuntimeError(f"go mod download {module}@{version} failed: {info.get('Error') or res.stderr}")
    return Path(info["Dir"])


def our_crd_files() -> list[Path]:
    """Every YAML under ``crds/`` of the repository (none yet is fine)."""
    if not OUR_CRDS_DIR.is_dir():
        return []
    return sorted(p for p in OUR_CRDS_DIR.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def load_crds(paths: Iterable[Path]) -> list[dict[str, Any]]:
    import yaml

    crds = []
    for p in paths:
        for doc in yaml.safe_load_all(p.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                crds.append(doc)
    return crds


class CrdRejected(AssertionError):
    """The API server refused one or more CRDs; the message lists each with the server's reason."""


def install_crds(
    cp: ControlPlane,
    paths: Iterable[Path] | None = None,
    *,
    third_party: bool = True,
    ours: bool = True,
    timeout: float = 60,
) -> list[str]:
    """Server-side apply CRDs (default: third-party + ours); wait until each is Established and its schema
    is published in /openapi/v3 (what `kubectl explain` reads).

    Returns the CRD names. Every CRD is tried; rejections are raised together as ``CrdRejected``.
    Server-side apply because the prometheus-operator CRDs exceed the size limit of client-side apply's
    last-applied annotation.
    """
    if paths is None:
        paths = (third_party_crd_files() if third_party else []) + (our_crd_files() if ours else [])
    crds = load_crds(paths)
    api = cp.api
    assert api is not None, "the control plane is not started"
    base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    rejected = {}
    for crd in crds:
        name = crd["metadata"]["name"]
        try:
            api.apply(f"{base}/{name}", crd)
        except ApiError as exc:
            rejected[name] = exc.message
    if rejected:
        raise CrdRejected(
            "the API server rejected these CRDs:\n" + "\n".join(f"  {n}: {m}" for n, m in rejected.items())
        )
    names = [c["metadata"]["name"] for c in crds]

    def established(name: str) -> bool:
        obj = api.get(f"{base}/{name}")
        conds = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
        if conds.get("NamesAccepted", {}).get("status") == "False":
            raise Fatal(f"CRD {name}: {conds['NamesAccepted'].get('message')}")
        return conds.get("Established", {}).get("status") == "True"

    def published(crd: dict[str, Any]) -> bool:
        # Established is not enough for `kubectl explain` and OpenAPI-based clients: the schema reaches
        # /openapi/v3 a second or two later.
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        index = api.get("/openapi/v3")["paths"]
        for v in (v["name"] for v in crd["spec"]["versions"] if v.get("served", True)):
            entry = index.get(f"apis/{group}/{v}")
            if not entry:
                return False
            doc = api.get("/" + entry["serverRelativeURL"].lstrip("/"), timeout=30)
            gvks = (
                g
                for schema in doc.get("components", {}).get("schemas", {}).values()
                for g in schema.get("x-kubernetes-group-version-kind", [])
            )
            if not any(g.get("kind") == kind and g.get("version") == v for g in gvks):
                return False
        return True

    for crd in crds:
        name = crd["metadata"]["name"]
        wait_for(lambda n=name: established(n), timeout=timeout, what=f"CRD {name} Established")
        wait_for(lambda c=crd: published(c), timeout=timeout, what=f"CRD {name} in /openapi/v3")
    return names


def main() -> int:
    for p in third_party_crd_files():
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
