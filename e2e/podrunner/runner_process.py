"""Start and read the pod runner (``python -m e2e.podrunner.kubelet``) from tests and the demo."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from e2e.harness.poll import wait_for
from e2e.harness.processes import _child_setup, stop_pid, stop_process
from e2e.kube.controlplane import REPO_ROOT, ControlPlane
from e2e.podrunner.kubelet import DEFAULT_NODE, NODE_LABEL, NODE_LABEL_VALUE
from e2e.podrunner.podspec import image_repository
from e2e.realvllm.runtime import MODELS, Runtime
from e2e.standin import vllm_cli
from pooling_operator import OPERATOR_IMAGE

# The operator's own programs (pooling-operator: the hidden-state driver) as this repository's .venv has them.
OPERATOR_BIN = Path(sys.executable).parent

# Test-only: an image whose `vllm` is the hidden-state stand-in (e2e/standin/vllm_cli.py), not vLLM: a
# HiddenStateJob with engine.image set to it (and engine.version "0.32", which no tag here says) runs in seconds,
# for tests of the Job's plumbing. Its bin folder is written into the runner's state folder at start.
STANDIN_IMAGE = "vllm-standin:test"

# Test-only: lets vLLM 0.32's hidden-states connector write on a CPU (its docstring says how, and how little).
CONNECTOR_SHIM = Path(__file__).resolve().parent / "connector_shim"

MODEL_CLAIM = "models"  # the claim name test specs use for the model volume; its folder holds models/<key>/
DATA_CLAIM = "data"  # a read-write claim (datasets, outputs): <runner state dir>/claims/data
BUILT_CLAIM = "built-models"  # models the tests build (e2e/realvllm/tiny_models.py): <runner state dir>/claims/built-models

# What a spec adds to run on the runner's node (and only there).
PLACEMENT = {
    "nodeSelector": {NODE_LABEL: NODE_LABEL_VALUE},
    "tolerations": [{"key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
}


def placed(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the runner's nodeSelector and toleration merged into spec.template (a copy)."""
    doc = copy.deepcopy(doc)
    tmpl = doc["spec"].setdefault("template", {})
    tmpl.setdefault("nodeSelector", {}).update(PLACEMENT["nodeSelector"])
    tolerations = tmpl.setdefault("tolerations", [])
    tolerations += [t for t in PLACEMENT["tolerations"] if t not in tolerations]
    return doc


# What an example must change to run here, and nothing else: the 0.32 image (the only vLLM installable
# here; the examples target 0.33) and no GPU, one CPU.
MACHINE_OVERRIDES = {"engine.image": "vllm/vllm-openai:v0.32.0", "resources": {"gpu": {"count": 0}, "cpu": "1", "memory": "4Gi"}}

# A machine override for every real server whose test is not about compilation (all but
# test_compile_cache_real.py): vLLM without torch.compile starts in ~45 s here instead of ~90 s (25-61 s
# against 70-131 s for SmolLM2's hidden-state sidecar, hidden-states-cpu.md). Added to engine.extraArgs, so
# it shows in the rendered argv and the pool's key; vLLM's parser still checks every example's argv as
# rendered (test_examples.py), and the flag does not enter the embedding-space fingerprint.
EAGER_ARGS = ["--enforce-eager"]
# ... and half a CPU each (another machine override): the runner's node has this machine's two CPUs, and a
# HiddenStateJob's pod (vLLM's one CPU and the driver's request) must still fit beside one of them.
SMALL_SERVER_RESOURCES = {"gpu": {"count": 0}, "cpu": "500m", "memory": "4Gi"}


# A machine override for every vLLM process the runner starts (beneath the container's own env): on one GPU
# vLLM 0.32 runs the model in its engine-core process (UniProcExecutor, ParallelConfig's default for world size 1);
# the CPU platform switches to a separate worker process (MultiprocExecutor) to bind OpenMP threads, unless
# VLLM_ENABLE_V1_MULTIPROCESSING is 0 (vllm/platforms/cpu.py, check_and_update_config). With it 0, `vllm serve`
# still runs its engine core in a process of its own (AsyncLLM), but no worker process: one import of torch and
# vLLM fewer per start, ~54 -> ~38 s of CPU for MiniLM here (measured by hand, eager, one server, quiet machine).
# The argv, and so everything the operator renders, is unchanged.
UNIPROC_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def eager(engine: dict[str, Any]) -> dict[str, Any]:
    """``engine`` (a spec's engine block, changed in place) with EAGER_ARGS in its extraArgs, once."""
    extra = list(engine.get("extraArgs") or [])
    engine["extraArgs"] = extra + [a for a in EAGER_ARGS if a not in extra]
    return engine


def on_this_machine(doc: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    """An example changed only where this machine forces it (MACHINE_OVERRIDES, and eager: EAGER_ARGS), placed
    on the runner."""
    doc = placed(doc)
    if namespace:
        doc["metadata"]["namespace"] = namespace
    spec = doc["spec"]
    spec["engine"]["image"] = MACHINE_OVERRIDES["engine.image"]
    spec["engine"].pop("version", None)
    eager(spec["engine"])
    spec["resources"] = copy.deepcopy(MACHINE_OVERRIDES["resources"])
    return doc


class PodRunner:
    def __init__(
        self, cluster: ControlPlane, rt: Runtime, *, node: str = DEFAULT_NODE, name: str = "pod-runner", detached: bool = False,
        idle: bool = False,
    ):
        """``detached``: the runner outlives this process (the demo); otherwise it dies with it. ``idle``: the
        runner and every container it starts yield the CPU (SCHED_IDLE where chrt exists, else nice 19):
        make test runs the real_vllm tier beside the tiers that wait on the API server."""
        self.detached = detached
        self.cluster = cluster
        self.rt = rt
        self.node = node
        self.state_dir = Path(cluster.run_dir) / name
        self.log = Path(cluster.run_dir) / "logs" / f"{name}.log"
        self.data_dir = self.state_dir / "claims" / DATA_CLAIM
        self.built_dir = self.state_dir / "claims" / BUILT_CLAIM
        self.standin_bin = self.state_dir / "standin-bin"
        self.proc: subprocess.Popen[bytes] | None = None
        self.argv = [
            sys.executable, "-m", "e2e.podrunner.kubelet",
            "--kubeconfig", str(cluster.kubeconfig),
            "--node-name", node,
            "--state-dir", str(self.state_dir),
            "--claim", f"{MODEL_CLAIM}={rt.root / 'models'}",
            "--claim", f"{DATA_CLAIM}={self.data_dir}",
            "--claim", f"{BUILT_CLAIM}={self.built_dir}",
            *[f"--hub-model={m.repo_id}={rt.model_dir(m)}@{m.revision}" for m in MODELS],
            *[f"--env={k}={v}" for k, v in rt.env().items()],  # beneath each container's own env
            # the operator's image (the hidden-state driver) runs this repository's .venv: its pooling-operator
            f"--image={image_repository(OPERATOR_IMAGE)}={OPERATOR_BIN}",
            # the stand-in image: its `vllm` runs the hidden-state stand-in in this interpreter (STANDIN_IMAGE)
            f"--image={image_repository(STANDIN_IMAGE)}={self.standin_bin}",
            # vllm only: the connector shim (test-only, see CONNECTOR_SHIM), so the hidden-states connector writes on a CPU
            f"--program-env=vllm=PYTHONPATH={CONNECTOR_SHIM}",
            # vllm only: the model runs in the engine-core process (UNIPROC_ENV), as vLLM runs one device on a GPU
            *[f"--program-env=vllm={k}={v}" for k, v in UNIPROC_ENV.items()],
            # a machine override: one torch.compile cache for the run's vLLM servers, so a restart starts warm
            f"--program-override=vllm=VLLM_CACHE_ROOT={self.state_dir / 'vllm-cache'}",
        ]  # fmt: skip
        if idle and shutil.which("chrt"):
            # SCHED_IDLE, not just a nice level: vLLM's many torch threads at nice 10 still outweigh one API
            # server thread at nice 0 (CFS weighs each thread), which starved the other tiers (50 services not
            # Ready in 240 s beside two vLLM starts). chrt execs the runner: the pid is the runner's.
            self.argv = ["chrt", "--idle", "0", *self.argv]
        elif idle:
            self.argv = ["nice", "-n", "19", *self.argv]

    def start(self, timeout: float = 60) -> PodRunner:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        vllm_cli.write_bin(self.standin_bin)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, cwd=REPO_ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=None if self.detached else _child_setup,
            )  # fmt: skip
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.built_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "runner.pid").write_text(str(self.proc.pid))
        wait_for(self.node_ready, timeout=timeout, what=f"node {self.node} Ready")
        return self

    def node_ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"pod runner exited ({self.proc.returncode}):\n{self.tail()}")
        status, node = self.cluster.api.request("GET", f"/api/v1/nodes/{self.node}")
        if status != 200:
            return False
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))
        untainted = not any(t["key"].startswith("node.kubernetes.io/") for t in node["spec"].get("taints", []))
        return ready and untainted

    def stop(self, timeout: float = 60) -> None:
        stop_process(self.proc, timeout)
        self.cluster.api.request("DELETE", f"/api/v1/nodes/{self.node}")

    @staticmethod
    def stop_detached(state_dir: Path, timeout: float = 60) -> bool:
        """Stop a runner started detached (its pid file in ``state_dir``); True when one was running."""
        pidfile = state_dir / "runner.pid"
        if not pidfile.exists():
            return False
        pid = int(pidfile.read_text())
        pidfile.unlink()
        return stop_pid(pid, timeout)

    def model_claim(self, namespace: str) -> None:
        """The ``models`` claim in ``namespace``, bound to a hostPath PersistentVolume on the runtime's model
        folder (the runner maps the claim to that folder; the scheduler needs the claim bound to place a pod)."""
        self.claim(namespace, MODEL_CLAIM, self.rt.root / "models", "ReadOnlyMany")

    def data_claim(self, namespace: str) -> Path:
        """The ``data`` claim in ``namespace`` (read-write; a dataset and an output); returns the folder the runner
        serves for it, shared by namespaces (use a sub-folder per namespace)."""
        self.claim(namespace, DATA_CLAIM, self.data_dir, "ReadWriteMany")
        return self.data_dir

    def built_claim(self, namespace: str) -> Path:
        """The ``built-models`` claim in ``namespace`` (read-only to pods); returns its folder, where the tests
        write the models they build before a pod mounts them."""
        self.claim(namespace, BUILT_CLAIM, self.built_dir, "ReadOnlyMany")
        return self.built_dir

    def claim(self, namespace: str, name: str, folder: Path, mode: str) -> None:
        pv = f"{name}-{namespace}"[:253]
        self.cluster.api.request("POST", "/api/v1/persistentvolumes", {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": [mode], "storageClassName": "",
                     "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(folder), "type": "Directory"},
                     "claimRef": {"namespace": namespace, "name": name}},
        })  # fmt: skip
        self.cluster.api.request("POST", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": [mode], "storageClassName": "", "volumeName": pv,
                     "resources": {"requests": {"storage": "10Gi"}}},
        })  # fmt: skip

        def bound() -> bool:
            status, body = self.cluster.api.request("GET", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")
            return status == 200 and body.get("status", {}).get("phase") == "Bound"

        wait_for(bound, timeout=60, what=f"claim {namespace}/{name} Bound")

    def release_claim(self, namespace: str) -> None:
        for name in (MODEL_CLAIM, DATA_CLAIM, BUILT_CLAIM):
            self.cluster.api.request("DELETE", f"/api/v1/persistentvolumes/{name}-{namespace}"[:300])

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    # ---- what runs where

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        """The plans of the pods of ``namespace`` this runner started (state files)."""
        out = []
        for f in sorted((self.state_dir / "pods").glob(f"{namespace}_*.json")):
            out.append(json.loads(f.read_text()))
        return out

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return json.loads((self.state_dir / "pods" / f"{namespace}_{name}.json").read_text())

    def url(self, namespace: str, pod: str, port: str = "http") -> str:
        return f"http://127.0.0.1:{self.pod(namespace, pod)['ports'][port]['local']}"

    def container_log(self, namespace: str, pod: str, lines: int = 80) -> str:
        p = Path(self.pod(namespace, pod)["log"])
        return "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) if p.exists() else ""
