"""A release as a platform team pulls it (issue 66): `make release` pushes the operator image and the chart to a real
OCI registry (go-containerregistry's, built from its Go module like the control plane), `helm install oci://...`
installs the chart on a control plane of its own, and the operator runs from the image pulled back from that
registry by the digest the chart names, in the image's own root filesystem, under the chart's ServiceAccount and
with the chart Deployment's arguments: it fills the chart's empty webhook Secret, puts the CA into the webhook
configuration, reconciles an example to Ready and answers admission reviews over TLS. Then what Argo CD compares:
`helm template ... | kubectl diff --server-side -f -` shows nothing, before and after a forced renewal of the
certificate. Then `helm upgrade` to a chart whose operator version changed rolls no serving pod.

No kube-proxy here: the webhook is registered through `webhook.url` at the operator's loopback address. It needs
root (buildah, a mount namespace, chroot): elsewhere it is skipped with the reason, except under ``CI=true``.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import image
from e2e.harness.config import ClusterConfig
from e2e.harness.poll import wait_for
from e2e.harness.processes import _free_ports, stop_process
from e2e.image import config_env, runner
from e2e.kube import build
from e2e.kube.controlplane import REPO_ROOT, ControlPlane
from e2e.operator_process import OperatorProcess, token_kubeconfig
from e2e.tests.operator.test_webhook import INVALID as WEBHOOK_INVALID
from tests.unavailable import unavailable

pytestmark = pytest.mark.timeout(600)

RELEASE, NS = "vpo", "vllm-pooling-operator"
FULLNAME = "vpo-vllm-pooling-operator"
KUBE = "1.35.4"
EXAMPLE = REPO_ROOT / "examples" / "minilm-embeddings.yaml"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of an in-memory OCI registry on loopback."""
    exe = build.tool("registry")
    log = tmp_path_factory.mktemp("registry") / "registry.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(exe), "-port", "0"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        port = wait_for(lambda: (m := re.search(r"serving on port (\d+)", log.read_text())) and m.group(1), timeout=30,
                        what="the registry's port")  # fmt: skip
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(proc, timeout=10)


@pytest.fixture(scope="module")
def released(registry: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if reason := image.unavailable():
        unavailable(f"the operator image cannot be built or pushed here: {reason}")
    out = tmp_path_factory.mktemp("release") / "release.json"
    res = subprocess.run([sys.executable, "-m", "tools.release", "--registry", f"{registry}/vpo", "--out", str(out)],
                         capture_output=True, text=True, cwd=REPO_ROOT, timeout=900)  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    record = json.loads(out.read_text())
    assert f"pushed image {record['image']['repository']}:v{record['version']} as {record['image']['ref']}" in res.stdout
    return record


class Env:
    def __init__(self, cp: ControlPlane, helm: Path, tmp: Path, webhook_port: int, record: dict[str, Any]) -> None:
        self.cp, self.helm, self.tmp, self.webhook_port, self.record = cp, helm, tmp, webhook_port, record
        self.sets = ["--set", f"webhook.url=https://127.0.0.1:{webhook_port}"]

    def helm_run(self, *args: str) -> str:
        res = subprocess.run([str(self.helm), *args], capture_output=True, text=True, env=self.cp.env(), timeout=300)
        assert res.returncode == 0, f"helm {' '.join(args)}:\n{res.stdout}\n{res.stderr}"
        return res.stdout

    def get(self, *args: str) -> Any:
        res = self.cp.kubectl("get", *args, "-o", "json", check=False)
        return json.loads(res.stdout) if res.returncode == 0 else None

    def diff(self, chart: str, *version: str) -> subprocess.CompletedProcess[str]:
        """What Argo CD sees: the chart rendered with `helm template`, against the cluster (server-side dry run)."""
        rendered = self.helm_run("template", RELEASE, chart, *version, "--plain-http", "-n", NS, "--kube-version", KUBE, *self.sets)
        return self.cp.kubectl("diff", "--server-side", "-f", "-", input=rendered, check=False)


@pytest.fixture(scope="module")
def env(released: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cp = ControlPlane(ClusterConfig.from_env(gpu_nodes=1, cpu_nodes=0)).start()
    try:
        (port,) = _free_ports(1)
        yield Env(cp, build.tool("helm"), tmp_path_factory.mktemp("oci"), port, released)
    finally:
        cp.stop()


def pulled(ref: str, tmp: Path) -> tuple[Path, dict[str, Any], list[str]]:
    """The image pulled by digest from the registry into a storage of its own (nothing shared with the build's):
    its root filesystem mounted, its config, and the argv prefix that unmounts it all."""
    store = ["--storage-driver", image.storage_driver(), "--root", str(tmp / "root"), "--runroot", str(tmp / "run")]
    buildah = [image.which("buildah") or "buildah", *store]
    res = subprocess.run([*buildah, "pull", "--tls-verify=false", "--quiet", ref], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    ctr = subprocess.run([*buildah, "from", "--pull=never", ref], capture_output=True, text=True, check=True).stdout.strip()
    root = Path(subprocess.run([*buildah, "mount", ctr], capture_output=True, text=True, check=True).stdout.strip())
    info = json.loads(subprocess.run([*buildah, "inspect", "--type", "image", ref], capture_output=True, text=True, check=True).stdout)
    return root, info["OCIv1"]["config"], [*buildah, "rm", ctr]


def operator_from_image(e: Env, rootfs: Path, config: dict[str, Any], name: str) -> OperatorProcess:
    """The chart's operator pod, as a kubelet would run it: the image's entrypoint from its root filesystem as its
    user, the Deployment's arguments and environment, the chart's ServiceAccount token where kubelet mounts it."""
    deployment = e.get("deployment", FULLNAME, "-n", NS)
    kubeconfig = yaml.safe_load(token_kubeconfig(e.cp, NS, FULLNAME, e.tmp / f"{name}.kubeconfig", hours=2).read_text())
    secrets = e.tmp / f"{name}-serviceaccount"
    secrets.mkdir(mode=0o755, exist_ok=True)
    (secrets / "token").write_text(kubeconfig["users"][0]["user"]["token"])
    (secrets / "ca.crt").write_bytes(base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]))
    (secrets / "namespace").write_text(NS)
    for f in secrets.iterdir():
        f.chmod(0o644)
    op = OperatorProcess.from_chart(e.cp, deployment, name, webhook_port=e.webhook_port)
    op.argv = [*runner(rootfs, user=config["User"], secrets=secrets), *config["Entrypoint"], *op.argv[op.argv.index("run"):]]
    host, port = e.cp.server.removeprefix("https://").rsplit(":", 1)
    op.env = {**config_env(config), **{k: v for k, v in op.env.items() if k.startswith(("VPO_", "POD_"))},
              "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port, "VPO_RESYNC_SECONDS": "3",
              "VPO_WEBHOOK_CERT_CHECK_SECONDS": "1"}  # fmt: skip
    return op.start(timeout=120)


def ready(e: Env, kind: str, ns: str, name: str) -> dict[str, Any] | None:
    obj = e.get(kind, name, "-n", ns)
    st = (obj or {}).get("status") or {}
    conds = {c["type"]: c["status"] for c in st.get("conditions") or []}
    return obj if conds.get("Ready") == "True" and st.get("observedGeneration") == obj["metadata"]["generation"] else None


def templates(e: Env, ns: str) -> dict[str, tuple[int, str]]:
    return {d["metadata"]["name"]: (d["metadata"]["generation"], json.dumps(d["spec"]["template"], sort_keys=True))
            for d in e.get("deployments", "-n", ns)["items"]}


def test_released_pulled_installed_held_by_git_and_upgraded_without_a_roll(env: Env) -> None:
    e, record = env, env.record
    chart, version = record["chart"]["ref"], record["version"]
    e.helm_run("install", RELEASE, chart, "--version", version, "--plain-http", "-n", NS, "--create-namespace", "--wait=false", *e.sets)
    deployment = e.get("deployment", FULLNAME, "-n", NS)
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == record["image"]["ref"] and f"--operator-image={record['image']['ref']}" in container["args"]
    secret = e.get("secret", f"{FULLNAME}-webhook-cert", "-n", NS)
    assert not secret.get("data"), "the chart renders the webhook Secret empty"

    rootfs, config, unmount = pulled(record["image"]["ref"], e.tmp / "pulled")
    ops: list[OperatorProcess] = []
    try:
        op = operator_from_image(e, rootfs, config, "released-operator")
        ops.append(op)
        wait_for(op.ready, timeout=60, what="/readyz: the webhook's certificate made and loaded")
        secret = e.get("secret", f"{FULLNAME}-webhook-cert", "-n", NS)
        ca = secret["data"]["ca.crt"]

        def ca_injected() -> bool:
            hooks = e.get("validatingwebhookconfiguration", FULLNAME)["webhooks"]
            return all(h["clientConfig"].get("caBundle") == ca for h in hooks)

        wait_for(ca_injected, timeout=30, what="the operator's CA in every webhook's caBundle")

        doc = yaml.safe_load(EXAMPLE.read_text())
        ns, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
        e.cp.kubectl("create", "namespace", ns)
        wait_for(lambda: e.get("serviceaccount", "default", "-n", ns), timeout=30, what=f"namespace {ns}")
        cached = {**doc, "metadata": {**doc["metadata"], "name": "minilm-compiled"},
                  "spec": {**doc["spec"], "embeddingSpace": "minilm-compiled", "engine": {**doc["spec"]["engine"], "compileCache": {"claimName": "cc"}}}}
        e.cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all([doc, cached]))
        wait_for(lambda: ready(e, "poolingservice", ns, name), timeout=120, what="the example Ready, reconciled by the released image")
        wait_for(lambda: e.get("deployment", "minilm-compiled", "-n", ns), timeout=60, what="the compile-cache service's Deployment")

        refused = wait_for(lambda: (r := e.cp.kubectl("apply", "-f", "-", input=WEBHOOK_INVALID.replace("NS", ns), check=False)).returncode != 0 and r,
                           timeout=30, what="the webhook, over TLS with the operator's certificate, refusing an invalid service")  # fmt: skip
        assert "spec.engine.maxNumBatchedTokens" in refused.stderr, refused.stderr

        # what Argo CD compares: nothing differs, then a forced renewal, then nothing differs again
        diff = e.diff(chart, "--version", version)
        assert diff.returncode == 0 and not diff.stdout, diff.stdout[-4000:] + diff.stderr[-2000:]
        before = e.get("secret", f"{FULLNAME}-webhook-cert", "-n", NS)["data"]["tls.crt"]
        e.cp.kubectl("annotate", "secret", f"{FULLNAME}-webhook-cert", "-n", NS, "vllm-pooling.io/renew=e2e", "--overwrite")
        wait_for(lambda: e.get("secret", f"{FULLNAME}-webhook-cert", "-n", NS)["data"]["tls.crt"] != before, timeout=30,
                 what="a new serving certificate after the renew annotation")  # fmt: skip
        diff = e.diff(chart, "--version", version)
        assert diff.returncode == 0 and not diff.stdout, diff.stdout[-4000:] + diff.stderr[-2000:]

        # an upgrade to a chart whose operator version changed rolls no serving pod
        running = templates(e, ns)
        upgraded = e.tmp / "upgraded"
        with tarfile.open(record["chart"]["package"]) as tar:
            tar.extractall(upgraded, filter="data")
        chart_dir = upgraded / "vllm-pooling-operator"
        meta = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
        meta["version"] = meta["appVersion"] = f"{version}-e2e.1"
        (chart_dir / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
        e.helm_run("upgrade", RELEASE, str(chart_dir), "-n", NS, "--wait=false", *e.sets, "--set", "image.digest=",
                   "--set", f"image.repository={record['image']['repository']}")  # fmt: skip
        new_image = f"{record['image']['repository']}:v{version}-e2e.1"
        assert e.get("deployment", FULLNAME, "-n", NS)["spec"]["template"]["spec"]["containers"][0]["image"] == new_image
        op.stop()
        op = operator_from_image(e, rootfs, config, "upgraded-operator")
        ops.append(op)
        wait_for(lambda: float(re.search(r"^vllm_pooling_operator_first_pass_seconds (\S+)$",
                                         op.metrics("vllm_pooling_operator_first_pass_seconds"), re.M)[1]) > 0,  # type: ignore[index]
                 timeout=60, what="the upgraded operator's first full pass")  # fmt: skip
        fresh = {**cached, "metadata": {**cached["metadata"], "name": "minilm-after"}, "spec": {**cached["spec"], "embeddingSpace": "after"}}
        e.cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(fresh))
        after = wait_for(lambda: e.get("deployment", "minilm-after", "-n", ns), timeout=60, what="a service created after the upgrade")
        # the control: what the new operator renders does carry the new image, so a roll was there to avoid
        assert {c["image"] for c in after["spec"]["template"]["spec"]["initContainers"]} == {new_image}
        assert templates(e, ns) == {**running, "minilm-after": templates(e, ns)["minilm-after"]}, "an upgrade rolled a serving pod"
    except BaseException:
        for op in ops:
            print(f"--- {op.name} log (tail)\n{op.tail(80)}")
        raise
    finally:
        for op in ops:
            op.stop()
        subprocess.run(unmount, capture_output=True)
        shutil.rmtree(e.tmp / "pulled", ignore_errors=True)
