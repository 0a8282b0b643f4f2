"""`make release REGISTRY=host/org`: the operator image and the Helm chart at pyproject.toml's version, pushed.

1. The version is pyproject.toml's; Chart.yaml's `version` and `appVersion` must equal it (tests/test_release.py
   holds the repository to that), and the image's tag is `v<version>`.
2. The image is built from images/operator/Dockerfile as `make image` builds it (buildah on a debootstrap base,
   e2e/image.py; its Python dependencies from images/operator/requirements.lock, hash-checked) and pushed as
   `<registry>/vllm-pooling-operator:v<version>`; the registry's digest is read back.
3. The chart is packaged from a copy of charts/vllm-pooling-operator whose default image is what was just pushed
   (`image.repository` <registry>/vllm-pooling-operator, `image.digest` the digest: pulled by digest) and pushed with
   `helm push` as the OCI artifact `oci://<registry>/charts/vllm-pooling-operator:<version>`.
4. It prints what it pushed, one line each, and writes the same as JSON (`--out`, default dist/release.json).

A registry on a loopback address is spoken to over plain HTTP (the release test's); any other over TLS, logged in
with REGISTRY_USERNAME and REGISTRY_PASSWORD when set (the release workflow's), else with the credentials
`buildah login` and `helm registry login` stored.

    python -m tools.release --registry ghcr.io/vllm-pooling-operator [--out dist/release.json]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "vllm-pooling-operator"
IMAGE_NAME = "vllm-pooling-operator"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def version() -> str:
    """pyproject.toml's version, after checking that the chart says the same."""
    v = str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    if (str(chart["version"]), str(chart["appVersion"])) != (v, v):
        raise SystemExit(f"charts/vllm-pooling-operator/Chart.yaml says version {chart['version']}, appVersion "
                         f"{chart['appVersion']}; pyproject.toml says {v}: make them equal first")
    return v


def plain_http(registry: str) -> bool:
    """A registry on loopback (host[:port]/...) is reached over plain HTTP; anything else over TLS."""
    host = registry.split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(argv: list[str], what: str) -> str:
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{what} failed (exit {res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-3000:]}")
    return res.stdout + res.stderr


def push_image(local: str, ref: str, insecure: bool) -> str:
    """Push the local image to `ref`; the digest the registry stores it under."""
    from e2e import image

    with tempfile.TemporaryDirectory() as tmp:
        digestfile = Path(tmp) / "digest"
        run(image.buildah_argv("push", f"--tls-verify={str(not insecure).lower()}", "--digestfile", str(digestfile),
                               local, f"docker://{ref}"), f"buildah push {ref}")  # fmt: skip
        digest = digestfile.read_text().strip()
    if not DIGEST.fullmatch(digest):
        raise SystemExit(f"buildah push {ref} gave no digest ({digest!r})")
    return digest


def with_image(values: str, repository: str, digest: str) -> str:
    """values.yaml with the image's repository and digest replaced (the file's comments kept)."""
    out, n = re.subn(r"^(  repository: ).*$", rf"\g<1>{repository}", values, count=1, flags=re.M)
    out, m = re.subn(r'^(  digest: ).*$', rf'\g<1>"{digest}"', out, count=1, flags=re.M)
    if (n, m) != (1, 1):
        raise SystemExit("charts/vllm-pooling-operator/values.yaml has no image.repository or image.digest line to set")
    return out


def package_chart(helm: Path, v: str, repository: str, digest: str, dest: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / CHART.name
        shutil.copytree(CHART, chart)
        values = chart / "values.yaml"
        values.write_text(with_image(values.read_text(), repository, digest))
        run([str(helm), "lint", "--strict", str(chart)], "helm lint --strict")
        run([str(helm), "package", str(chart), "--version", v, "--app-version", v, "--destination", str(dest)], "helm package")
    return dest / f"{CHART.name}-{v}.tgz"


def push_chart(helm: Path, package: Path, registry: str, insecure: bool) -> str:
    out = run([str(helm), "push", str(package), f"oci://{registry}/charts", *(["--plain-http"] if insecure else [])], "helm push")
    found = re.search(r"Digest:\s*(sha256:[0-9a-f]{64})", out)
    if not found:
        raise SystemExit(f"helm push printed no digest:\n{out}")
    return found.group(1)


def login(registry: str, helm: Path) -> None:
    """With REGISTRY_USERNAME and REGISTRY_PASSWORD set (the release workflow), log buildah and helm in to the
    registry's host, the password on stdin (never an argument); else their stored credentials are used."""
    import os

    from e2e import image

    user, password = os.environ.get("REGISTRY_USERNAME"), os.environ.get("REGISTRY_PASSWORD")
    if not (user and password):
        return
    host = registry.split("/", 1)[0]
    for argv in (image.buildah_argv("login", "--username", user, "--password-stdin", host),
                 [str(helm), "registry", "login", host, "--username", user, "--password-stdin"]):
        res = subprocess.run(argv, input=password, capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"{argv[0]} could not log in to {host}: {res.stderr[-500:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.release", description=__doc__.split("\n\n")[0])
    ap.add_argument("--registry", required=True, help="host[:port]/org the image and chart are pushed to")
    ap.add_argument("--out", type=Path, default=REPO / "dist" / "release.json", help="where to write what was pushed")
    args = ap.parse_args(argv)
    from e2e import image
    from e2e.kube import build

    registry = args.registry.rstrip("/")
    v = version()
    insecure = plain_http(registry)
    print(f"==> release {v} to {registry}{' (plain HTTP: loopback)' if insecure else ''}", file=sys.stderr)
    helm = build.tool("helm")
    login(registry, helm)
    built = image.find(build=True, log=lambda m: print(m, file=sys.stderr))
    repository = f"{registry}/{IMAGE_NAME}"
    digest = push_image(built.name, f"{repository}:v{v}", insecure)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    package = package_chart(helm, v, repository, digest, args.out.parent)
    chart_digest = push_chart(helm, package, registry, insecure)
    record = {
        "version": v,
        "image": {"repository": repository, "tag": f"v{v}", "digest": digest, "ref": f"{repository}@{digest}",
                  "bytes": built.manifest.get("size_bytes")},
        "chart": {"ref": f"oci://{registry}/charts/{CHART.name}", "version": v, "digest": chart_digest,
                  "package": str(package), "bytes": package.stat().st_size},
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"pushed image {repository}:v{v} as {record['image']['ref']}")
    print(f"pushed chart {record['chart']['ref']}:{v} ({chart_digest}); install with:\n"
          f"  helm install vpo {record['chart']['ref']} --version {v} -n vllm-pooling-operator --create-namespace"
          + (" --plain-http" if insecure else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
