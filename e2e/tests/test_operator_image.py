"""The operator image, built from images/operator/Dockerfile (e2e/image.py: buildah, a debootstrap base; ``make
test`` builds it beside the control plane) and run from its own root filesystem: its interpreter and user, its
commands, what it must not hold, and the operator started from it reconciling an example on a control plane of its
own, under the chart's ServiceAccount, mounted where kubelet mounts it.

It needs root (debootstrap, mount namespaces, chroot): elsewhere it is skipped with the reason, except under
``CI=true``, where that fails the run.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import image
from e2e.harness.config import ClusterConfig
from e2e.harness.poll import wait_for
from e2e.image import config_env, runner
from e2e.kube.controlplane import REPO_ROOT, ControlPlane
from e2e.kube.crds import install_crds
from e2e.operator_process import OperatorProcess, least_privilege_kubeconfig
from pooling_operator import __version__
from pooling_operator.cli import parser
from tests.unavailable import unavailable

pytestmark = pytest.mark.timeout(900)

UID = 65532
EXAMPLE = REPO_ROOT / "examples" / "minilm-embeddings.yaml"


@pytest.fixture(scope="module")
def built() -> image.Image:
    if reason := image.unavailable():
        unavailable(f"the operator image cannot be built or run here: {reason}")
    try:
        return image.find()  # built by make test's build phase
    except image.Unavailable:
        if failed := image.failed():  # that build failed: report its error rather than try again
            pytest.fail(f"the operator image's build failed (`make image` tries again): {failed}")
    return image.find(build=True)  # run without make: build now


@pytest.fixture(scope="module")
def rootfs(built: image.Image) -> Iterator[Path]:
    with image.mounted(built.name) as root:
        yield root


def in_image(built: image.Image, rootfs: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run a command of the image as its user, with its environment, from its root filesystem."""
    return subprocess.run([*runner(rootfs, user=built.config["User"]), *argv], capture_output=True, text=True,
                          env=config_env(built.config), timeout=120)  # fmt: skip


def final_stage() -> str:
    text = image.DOCKERFILE.read_text()
    return text[text.rindex("\nFROM ") :]


def test_the_config_is_the_dockerfiles(built: image.Image) -> None:
    stage, config = final_stage(), built.config
    assert config["User"] == re.search(r"^USER (\S+)$", stage, re.M)[1] == f"{UID}:{UID}"  # type: ignore[index]
    assert config["Entrypoint"] == json.loads(re.search(r"^ENTRYPOINT (.+)$", stage, re.M)[1])  # type: ignore[index]
    assert config["Cmd"] == json.loads(re.search(r"^CMD (.+)$", stage, re.M)[1])  # type: ignore[index]
    env = re.search(r"^ENV ((?:.*\\\n)*.*)$", stage, re.M)[1]  # type: ignore[index]
    assert config["Env"] == env.replace("\\\n", " ").split()
    ports = re.search(r"^EXPOSE (.+)$", stage, re.M)[1].split()  # type: ignore[index]
    assert sorted(config["ExposedPorts"]) == sorted(f"{p}/tcp" for p in ports)


def test_its_own_interpreter_runs_as_its_user(built: image.Image, rootfs: Path) -> None:
    python = str(Path(built.config["Entrypoint"][0]).parent / "python")
    probe = ("import json, os, platform, sys; r, e = os.stat('/'), os.stat(os.path.realpath(sys.executable)); "
             "print(json.dumps({'prefix': sys.prefix, 'base_prefix': sys.base_prefix, 'version': platform.python_version(), "
             "'exe': os.path.realpath(sys.executable), 'root': [r.st_dev, r.st_ino], 'exe_id': [e.st_dev, e.st_ino], "
             "'ids': [os.getuid(), os.geteuid(), os.getgid(), os.getegid()], 'groups': os.getgroups()}))")  # fmt: skip
    res = in_image(built, rootfs, python, "-c", probe)
    assert res.returncode == 0, res.stderr[-3000:]
    seen = json.loads(res.stdout)
    host_root, host_exe = rootfs.stat(), (rootfs / seen["exe"].lstrip("/")).stat()
    assert seen["root"] == [host_root.st_dev, host_root.st_ino], "its / is the image's root filesystem"
    assert seen["exe_id"] == [host_exe.st_dev, host_exe.st_ino], "its interpreter is the image's file"
    assert (rootfs / seen["prefix"].lstrip("/") / "pyvenv.cfg").is_file(), seen  # sys.prefix lies inside the root
    assert (seen["prefix"], seen["base_prefix"]) == ("/opt/venv", "/usr"), seen  # the venv on Debian's Python
    assert seen["version"].startswith(f"{image.PYTHON}."), seen
    assert seen["ids"] == [UID] * 4 and set(seen["groups"]) <= {UID}, seen


def test_its_commands_answer(built: image.Image, rootfs: Path) -> None:
    entry = built.config["Entrypoint"]
    version = in_image(built, rootfs, *entry, "--version")
    assert version.returncode == 0 and version.stdout.strip() == f"pooling-operator {__version__}", version.stderr
    commands = [["hidden-states", "run"]]
    if "pooling-job" in subcommands():  # the PoolingJob driver, once the repository's CLI registers it
        commands.append(["pooling-job", "run"])
    for command in commands:
        res = in_image(built, rootfs, *entry, *command, "--help")
        assert res.returncode == 0, (command, res.stderr[-3000:])
        assert res.stdout.startswith(f"usage: pooling-operator {' '.join(command)}"), (command, res.stdout[:300])


def subcommands() -> set[str]:
    sub = next(a for a in parser()._actions if a.dest == "command")
    return set(sub.choices)  # type: ignore[arg-type]


def test_it_holds_no_test_code_and_the_pinned_versions(built: image.Image, rootfs: Path) -> None:
    site = next((rootfs / "opt/venv/lib").glob("python3.*")) / "site-packages"
    found = []
    for top, dirs, files in os.walk(rootfs):
        here = Path(top)
        found += [here / d for d in dirs if d == "e2e" or (d == "tests" and here == site)]
        for f in files:
            p = here / f
            if p.is_file() and not p.is_symlink() and p.stat().st_size < 64 * 1024**2 and b"pin_memory" in p.read_bytes():
                found.append(p)
    assert not found, f"test code in the image: {found}"
    dist = next(site.glob("vllm_pooling_operator-*.dist-info"))
    record = [line.split(",")[0] for line in (dist / "RECORD").read_text().splitlines()]
    assert all(r.startswith(("pooling_operator/", f"{dist.name}/", "../../../bin/pooling-operator")) for r in record), record
    assert not list(site.glob("pip-*.dist-info")), "pip only builds; the image installs nothing"
    assert not (rootfs / "src").exists() and not any((rootfs / "mnt").iterdir()), "the build stage stays out"
    installed = {m["name"]: m["version"] for m in map(_dist_info, site.glob("*.dist-info"))}
    assert installed.pop("vllm-pooling-operator") == __version__
    assert installed == built.manifest["pins"], "the image holds the versions its key names"


def _dist_info(d: Path) -> dict[str, str]:
    from packaging.utils import canonicalize_name

    meta = dict(ln.split(": ", 1) for ln in (d / "METADATA").read_text().splitlines()[:3] if ": " in ln)
    return {"name": canonicalize_name(meta["Name"]), "version": meta["Version"]}


def test_the_operator_from_the_image_reconciles_an_example(built: image.Image, rootfs: Path, tmp_path: Path) -> None:
    cp = ControlPlane(ClusterConfig.from_env(gpu_nodes=1, cpu_nodes=0)).start()
    op: OperatorProcess | None = None
    try:
        install_crds(cp, third_party=False)
        # the chart's ServiceAccount (deploy/rbac.yaml is the chart's RBAC, rendered), its token where kubelet puts it
        account = yaml.safe_load(least_privilege_kubeconfig(cp).read_text())
        secrets = tmp_path / "serviceaccount"
        secrets.mkdir(mode=0o755)
        (secrets / "token").write_text(account["users"][0]["user"]["token"])
        (secrets / "ca.crt").write_bytes(base64.b64decode(account["clusters"][0]["cluster"]["certificate-authority-data"]))
        (secrets / "namespace").write_text("vllm-pooling-operator")
        for f in secrets.iterdir():
            f.chmod(0o644)

        op = OperatorProcess(cp, "image-operator", standalone=False)
        op.argv = [*runner(rootfs, user=built.config["User"], secrets=secrets), *built.config["Entrypoint"],
                   *op.argv[op.argv.index("run"):]]  # fmt: skip
        host, port = cp.server.removeprefix("https://").rsplit(":", 1)
        op.env = {**config_env(built.config), "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
                  "POD_NAMESPACE": "vllm-pooling-operator", "VPO_RESYNC_SECONDS": "3"}  # fmt: skip
        op.start(timeout=120)
        assert op.proc is not None
        status = Path(f"/proc/{op.proc.pid}/status").read_text()
        assert re.search(rf"^Uid:\s+{UID}\s+{UID}\s+{UID}\s+{UID}$", status, re.M), status
        assert Path(f"/proc/{op.proc.pid}/root").stat().st_ino == rootfs.stat().st_ino, "it runs from the image's root"

        doc = yaml.safe_load(EXAMPLE.read_text())
        ns, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
        cp.kubectl("create", "namespace", ns)
        wait_for(lambda: cp.kubectl("get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0,
                 timeout=30, what=f"namespace {ns}")  # fmt: skip
        cp.kubectl("apply", "--server-side", "-f", str(EXAMPLE))

        def get(kind: str) -> dict[str, Any] | None:
            res = cp.kubectl("get", kind, name, "-n", ns, "-o", "json", "--show-managed-fields", check=False)
            return json.loads(res.stdout) if res.returncode == 0 else None

        def ready() -> dict[str, Any] | None:
            svc = get("poolingservice")
            st = (svc or {}).get("status") or {}
            conds = {c["type"]: c["status"] for c in st.get("conditions") or []}
            return svc if conds.get("Ready") == "True" and st.get("observedGeneration") == svc["metadata"]["generation"] else None  # type: ignore[index]

        svc = wait_for(ready, timeout=180, what=f"PoolingService {ns}/{name} Ready, reconciled by the image's operator")
        deployment = get("deployment")
        assert deployment is not None
        owner = deployment["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("PoolingService", svc["metadata"]["uid"])
        managers = {f["manager"] for f in deployment["metadata"]["managedFields"]}
        assert "vllm-pooling-operator" in managers, managers
    except BaseException:
        if op is not None:
            print(f"--- the image's operator log (tail)\n{op.tail(80)}")
        raise
    finally:
        if op is not None:
            op.stop()
        cp.stop()
