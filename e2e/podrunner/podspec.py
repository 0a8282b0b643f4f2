"""How the pod runner turns a Pod's container into a local process: pure, no I/O (tests: test_podspec.py).

A kubelet runs a container's ``command`` + ``args`` with its ``env`` inside its own filesystem and network
namespace. The runner has neither, so it maps, and reports every mapping:

- **volumes → local folders.** emptyDir: a folder per pod; projected (the ServiceAccount token volume) and
  configMap (its keys as files, binaryData's decoded; an optional one that is missing: empty): a folder per pod
  the runner fills; persistentVolumeClaim: the folder the runner was given for that claim name
  (the model claim → the prepared model); anything else is refused with a message.
  Every argv element and env value that is a mount path, or lies under one, is rewritten to the local folder
  (``--flag=/path`` too, and each such string inside a JSON value, such as the hidden-states connector's
  ``shared_storage_path`` in ``--kv-transfer-config``). Nothing else in a value is touched.
- **ports → free local ports, one map per pod.** The containers of a pod share one network namespace, so each
  ``containerPort`` of any of its containers gets one free local port for the whole pod; ``--port N`` (or
  ``--port=N``) and a loopback address ``127.0.0.1:N`` / ``localhost:N`` in a value (another container's
  endpoint, e.g. the hidden-state driver's ``--endpoint http://127.0.0.1:8000``), where N is a declared
  containerPort, are rewritten to it. The probes' named or numbered ports resolve to it.
- **images → local programs.** A container whose image is one the runner was given (``images``: repository →
  a bin folder, e.g. the operator's image → this repository's ``.venv/bin``) has ``command[0]`` resolved in
  that folder. Other images run what PATH (the vLLM runtime's) finds.
- **per program env** (``program_env``: a program's name → names and values), beneath the container's own:
  the test harness's connector shim goes on ``PYTHONPATH`` of ``vllm`` processes only.
- **machine overrides** (``program_override``), over the container's own and recorded as rewrites: one
  ``VLLM_CACHE_ROOT`` in the run folder for every ``vllm`` process, so a restarted server finds its
  torch.compile cache warm; not for a pod with the operator's ``compile-cache`` volume, which brings its own.
- **in-cluster clients.** Every container gets ``KUBERNETES_SERVICE_HOST``/``PORT`` (the API server on
  loopback), as a kubelet injects them; a mount under ``/var/run/secrets/`` (the ServiceAccount token, CA and
  namespace a client library reads at that fixed path) is listed in ``fixed_mounts`` for the runner to bind
  at its real path in a private mount namespace.
- **env** is the container's, resolved as a kubelet does (``value`` with ``$(VAR)`` expansion,
  ``secretKeyRef``/``configMapKeyRef`` through the callbacks, ``fieldRef``), on top of a base env the runner
  supplies (PATH to the runtime, and the offline switches); the container's own names win.
- **a Hugging Face model** named in argv (``vllm serve ORG/NAME``) that the runner has prepared is laid out
  as a hub cache inside the pod's own ``HF_HUB_CACHE`` (or ``$HF_HOME/hub``) at the revision ``--revision`` pins
  (else the prepared one), as an image with a pre-filled cache would have it; the argv is not touched. Never
  on a claim: a hub cache on a persistentVolumeClaim (a ModelCache's) holds what was written there, nothing
  more.
- **the termination message**: the container's ``terminationMessagePath`` (default ``/dev/termination-log``)
  is a file in the pod's folder, its path rewritten in argv and env like a mount's; when the container exits
  its first 4096 bytes become ``state.terminated.message``, as a kubelet reports them
  (``terminationMessagePolicy: File``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

Lookup = Callable[[str, str, str], str | None]  # (kind "secret"|"configmap", name, key) -> value or None


class PlanError(ValueError):
    """The container cannot be run here (kubelet: CreateContainerConfigError); the message says why."""


@dataclass(frozen=True)
class Probe:
    kind: str  # startup | readiness | liveness
    path: str
    port: int  # local
    period: float
    failure_threshold: int
    success_threshold: int
    timeout: float
    initial_delay: float


@dataclass
class LocalContainer:
    """What the runner starts for one container, and what it changed to get there."""

    name: str
    argv: list[str]
    env: dict[str, str]
    ports: dict[str, tuple[int, int]]  # port name (or "port-N") -> (containerPort, local port)
    probes: dict[str, Probe]
    mounts: dict[str, Path]  # mountPath -> local folder
    rewrites: list[str] = field(default_factory=list)  # "args[0]: /models/minilm -> /home/..." etc.
    env_added: list[str] = field(default_factory=list)  # base env names the container did not set
    hub_layout: list[tuple[Path, str, Path, str]] = field(default_factory=list)  # (hub, repo id, folder, revision)
    kind: str = "main"  # main | init | sidecar (an init container with restartPolicy: Always)
    image: str = ""
    fixed_mounts: list[tuple[Path, str]] = field(default_factory=list)  # (local folder, path it must appear at)
    termination_log: Path | None = None  # the local file of terminationMessagePath


@dataclass
class PodPlan:
    """Every container of a pod in start order (init containers, then the main ones) and the pod's ports."""

    containers: list[LocalContainer]
    ports: dict[int, int]  # containerPort -> local port, shared by the pod's containers

    def container(self, name: str) -> LocalContainer:
        return next(c for c in self.containers if c.name == name)


FIXED_MOUNT_ROOT = "/var/run/secrets/"
_LOOPBACK = re.compile(r"(?<![\w.-])(127\.0\.0\.1|localhost):(\d+)(?!\d)")


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined names are replaced, ``$$`` is a literal ``$``, others stay."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR.sub(sub, value)


def map_path(value: str, mounts: Mapping[str, Path]) -> str | None:
    """The local form of a container path under one of ``mounts`` (longest mount wins), or None."""
    for mount in sorted(mounts, key=len, reverse=True):
        m = mount.rstrip("/") or "/"
        if value == m:
            return str(mounts[mount])
        if value.startswith(m + "/"):
            return str(mounts[mount] / value[len(m) + 1 :])
    return None


def _map_json(value: str, mounts: Mapping[str, Path]) -> str | None:
    """A JSON object or array (``--kv-transfer-config '{..."shared_storage_path": "/output/..."}'``) with every
    string in it that is a mounted path mapped; None when it is not JSON or names no mounted path."""
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    changed = False

    def walk(x: Any) -> Any:
        nonlocal changed
        if isinstance(x, str) and x.startswith("/"):
            mapped = map_path(x, mounts)
            if mapped is not None:
                changed = True
                return mapped
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    out = walk(doc)
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False) if changed else None


def _map_value(value: str, mounts: Mapping[str, Path]) -> str | None:
    """A value that is a path, ``--flag=path``, or JSON holding paths, mapped; None when it names no
    mounted path."""
    if value.startswith(("{", "[")):
        return _map_json(value, mounts)
    if value.startswith("/"):
        return map_path(value, mounts)
    if value.startswith("--") and "=/" in value:
        flag, path = value.split("=", 1)
        mapped = map_path(path, mounts)
        return f"{flag}={mapped}" if mapped is not None else None
    return None


def _field_ref(pod: Mapping[str, Any], path: str, pod_ip: str) -> str:
    meta = pod.get("metadata", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": pod.get("spec", {}).get("nodeName", ""),
        "spec.serviceAccountName": pod.get("spec", {}).get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.hostIP": pod_ip,
    }
    if path in simple:
        return simple[path]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return meta.get(m.group(1), {}).get(m.group(2), "")
    raise PlanError(f"fieldRef {path!r} is not supported by the pod runner")


def container_env(container: Mapping[str, Any], pod: Mapping[str, Any], lookup: Lookup, pod_ip: str) -> dict[str, str]:
    """The container's environment as a kubelet resolves it (envFrom first, then env in order)."""
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        raise PlanError(f"envFrom ({sorted(src)}) is not supported by the pod runner")
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item or "valueFrom" not in item:
            env[name] = expand(str(item.get("value", "")), env)
            continue
        ref = item["valueFrom"]
        if "secretKeyRef" in ref or "configMapKeyRef" in ref:
            kind, r = ("secret", ref["secretKeyRef"]) if "secretKeyRef" in ref else ("configmap", ref["configMapKeyRef"])
            value = lookup(kind, r["name"], r["key"])
            if value is None:
                if r.get("optional"):
                    continue
                raise PlanError(f'{kind} "{r["name"]}" key "{r["key"]}" not found (env {name})')
            env[name] = value
        elif "fieldRef" in ref:
            env[name] = _field_ref(pod, ref["fieldRef"]["fieldPath"], pod_ip)
        else:
            raise PlanError(f"env {name}: valueFrom {sorted(ref)} is not supported by the pod runner")
    return env


def volume_folders(
    pod: Mapping[str, Any], pod_dir: Path, claims: Mapping[str, Path]
) -> dict[str, Path]:
    """Each volume's local folder (emptyDir under the pod's folder; a claim's from ``claims``)."""
    out: dict[str, Path] = {}
    for v in pod.get("spec", {}).get("volumes") or []:
        name = v["name"]
        if "emptyDir" in v or "projected" in v or "configMap" in v:  # the runner writes projected's and configMap's files
            out[name] = pod_dir / "volumes" / name
        elif "persistentVolumeClaim" in v:
            claim = v["persistentVolumeClaim"]["claimName"]
            if claim not in claims:
                raise PlanError(
                    f'volume "{name}": claim "{claim}" has no local folder '
                    f"(the runner maps: {', '.join(sorted(claims)) or 'none'})"
                )
            out[name] = claims[claim]
        else:
            kinds = sorted(k for k in v if k != "name")
            raise PlanError(f'volume "{name}": {kinds} volumes are not supported by the pod runner')
    return out


def _all_containers(pod: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    spec = pod.get("spec", {})
    out: list[tuple[str, Mapping[str, Any]]] = []
    for c in spec.get("initContainers") or []:
        out.append(("sidecar" if c.get("restartPolicy") == "Always" else "init", c))
    out += [("main", c) for c in spec.get("containers") or []]
    return out


def pod_ports(pod: Mapping[str, Any], free_port: Callable[[], int]) -> dict[int, int]:
    """One free local port for each containerPort any container of the pod declares."""
    out: dict[int, int] = {}
    for _, c in _all_containers(pod):
        for p in c.get("ports") or []:
            cp = int(p["containerPort"])
            if cp not in out:
                out[cp] = free_port()
    return out


def _ports(container: Mapping[str, Any], shared: Mapping[int, int]) -> dict[str, tuple[int, int]]:
    return {p.get("name") or f"port-{p['containerPort']}": (int(p["containerPort"]), shared[int(p["containerPort"])])
            for p in container.get("ports") or []}  # fmt: skip


def image_repository(image: str) -> str:
    """``registry/name`` without its tag or digest."""
    name = image.split("@", 1)[0]
    head, _, tail = name.rpartition("/")
    return f"{head}/{tail.split(':', 1)[0]}" if head else tail.split(":", 1)[0]


def _loopback(value: str, shared: Mapping[int, int]) -> str:
    def sub(m: re.Match[str]) -> str:
        port = int(m.group(2))
        return f"{m.group(1)}:{shared[port]}" if port in shared else m.group(0)

    return _LOOPBACK.sub(sub, value)


def _probe(kind: str, spec: Mapping[str, Any] | None, ports: Mapping[str, tuple[int, int]]) -> Probe | None:
    if not spec:
        return None
    if "httpGet" not in spec:
        raise PlanError(f"{kind}Probe: only httpGet probes are supported by the pod runner, not {sorted(spec)}")
    get = spec["httpGet"]
    port = get["port"]
    if isinstance(port, str) and not port.isdigit():
        if port not in ports:
            raise PlanError(f"{kind}Probe: port {port!r} is not a declared container port")
        local = ports[port][1]
    else:
        local = next((loc for cp, loc in ports.values() if cp == int(port)), int(port))
    return Probe(
        kind=kind,
        path=get.get("path", "/"),
        port=local,
        period=float(spec.get("periodSeconds", 10)),
        failure_threshold=int(spec.get("failureThreshold", 3)),
        success_threshold=int(spec.get("successThreshold", 1)),
        timeout=float(spec.get("timeoutSeconds", 1)),
        initial_delay=float(spec.get("initialDelaySeconds", 0)),
    )


def _positional_model(argv: list[str]) -> str | None:
    """The model ``vllm serve MODEL ...`` names (the first argument after ``serve``), or ``--model``'s value."""
    for i, a in enumerate(argv):
        if a == "--model" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--model="):
            return a.split("=", 1)[1]
    if "serve" in argv:
        i = argv.index("serve") + 1
        if i < len(argv) and not argv[i].startswith("-"):
            return argv[i]
    return None


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def plan(
    pod: Mapping[str, Any],
    container_name: str,
    *,
    pod_dir: Path,
    claims: Mapping[str, Path],
    hub_models: Mapping[str, tuple[Path, str]],
    base_env: Mapping[str, str],
    lookup: Lookup,
    free_port: Callable[[], int],
    pod_ip: str,
    shared_ports: Mapping[int, int] | None = None,
    images: Mapping[str, Path] | None = None,
    cluster_env: Mapping[str, str] | None = None,
    program_env: Mapping[str, Mapping[str, str]] | None = None,
    program_override: Mapping[str, Mapping[str, str]] | None = None,
) -> LocalContainer:
    """The local process for one container of ``pod`` (raises PlanError with the reason when it cannot run).
    ``shared_ports``: the pod's port map (``pod_ports``), drawn here when not given."""
    found = next(((k, c) for k, c in _all_containers(pod) if c["name"] == container_name), None)
    if found is None:
        raise PlanError(f"no container {container_name!r}")
    kind, container = found
    shared = pod_ports(pod, free_port) if shared_ports is None else shared_ports
    volumes = volume_folders(pod, pod_dir, claims)
    mounts: dict[str, Path] = {}
    for m in container.get("volumeMounts") or []:
        if m["name"] not in volumes:
            raise PlanError(f'volumeMount "{m["mountPath"]}": no volume "{m["name"]}"')
        mounts[m["mountPath"]] = volumes[m["name"]] / m.get("subPath", "")
    env = container_env(container, pod, lookup, pod_ip)
    rewrites: list[str] = []
    # The termination message file: mapped like a mount of one file (map_path maps the path itself).
    message_path = str(container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH)
    termination_log = pod_dir / f"{container_name}.termination-log"
    claim_paths = [m["mountPath"] for m in container.get("volumeMounts") or [] if m["name"] in _claim_volumes(pod)]
    mounts_and_log = {**mounts, message_path: termination_log}

    argv_in = [expand(a, env) for a in (container.get("command") or [])] + [
        expand(a, env) for a in (container.get("args") or [])
    ]
    if not argv_in:
        raise PlanError("the container has no command: the pod runner cannot use an image's entrypoint")
    ncmd = len(container.get("command") or [])
    ports = _ports(container, shared)
    declared = {str(cp): loc for cp, loc in shared.items()}
    image = str(container.get("image", ""))
    bin_dir = (images or {}).get(image_repository(image))
    argv: list[str] = []
    for i, a in enumerate(argv_in):
        where = f"command[{i}]" if i < ncmd else f"args[{i - ncmd}]"
        new = a
        mapped = _map_value(a, mounts_and_log)
        if i == 0 and ncmd and bin_dir is not None and "/" not in a:
            new = str(bin_dir / a)
        elif mapped is not None:
            new = mapped
        elif i > 0 and argv_in[i - 1] == "--port" and a in declared:
            new = str(declared[a])
        elif a.startswith("--port=") and a.split("=", 1)[1] in declared:
            new = f"--port={declared[a.split('=', 1)[1]]}"
        else:
            new = _loopback(a, shared)
        if new != a:
            rewrites.append(f"{where}: {a} -> {new}" + (f" (image {image})" if i == 0 and bin_dir is not None else ""))
        argv.append(new)

    original_hub = env.get("HF_HUB_CACHE")
    for name, value in list(env.items()):
        mapped = _map_value(value, mounts_and_log)
        new = mapped if mapped is not None else _loopback(value, shared)
        if new != value:
            rewrites.append(f"env {name}: {value} -> {new}")
            env[name] = new
    program = PurePosixPath(argv[0]).name if argv else ""
    own_compile_cache = any(v.get("name") == OWN_COMPILE_CACHE_VOLUME for v in pod.get("spec", {}).get("volumes") or [])
    for name, value in (program_override or {}).get(program, {}).items():
        if own_compile_cache and name == "VLLM_CACHE_ROOT":
            rewrites.append(f"env {name}: machine override skipped: the pod brings its own compile cache")
            continue
        if env.get(name) != value:
            rewrites.append(f"env {name}: {env.get(name, '(unset)')} -> {value} (machine override)")
            env[name] = value
    base = {**base_env, **(cluster_env or {}), **(program_env or {}).get(program, {})}
    added = [k for k in base if k not in env]
    full_env = {**base, **env}
    fixed = [(folder, path) for path, folder in mounts.items() if path.startswith(FIXED_MOUNT_ROOT)]

    layout: list[tuple[Path, str, Path, str]] = []
    model = _positional_model(argv)
    on_claim = original_hub is not None and map_path(original_hub, {p: Path(p) for p in claim_paths}) is not None
    if on_claim:
        rewrites.append(f"hub cache {original_hub}: on a claim, not laid out (it holds what was written there)")
    if model in hub_models and not on_claim:
        folder, prepared_rev = hub_models[model]
        revision = _flag_value(argv, "--revision") or prepared_rev
        hub = full_env.get("HF_HUB_CACHE") or (
            str(PurePosixPath(full_env["HF_HOME"]) / "hub") if "HF_HOME" in full_env else None
        )
        if hub is None:
            raise PlanError(f"model {model} is a Hugging Face name but neither HF_HUB_CACHE nor HF_HOME is set")
        layout.append((Path(hub), model, folder, revision))

    probes = {}
    for probe_kind in ("startup", "readiness", "liveness"):
        p = _probe(probe_kind, container.get(f"{probe_kind}Probe"), ports)
        if p is not None:
            probes[probe_kind] = p
    return LocalContainer(
        name=container_name,
        argv=argv,
        env=full_env,
        ports=ports,
        probes=probes,
        mounts=mounts,
        rewrites=rewrites,
        env_added=added,
        hub_layout=layout,
        kind=kind,
        image=image,
        fixed_mounts=fixed,
        termination_log=termination_log,
    )


DEFAULT_TERMINATION_PATH = "/dev/termination-log"
OWN_COMPILE_CACHE_VOLUME = "compile-cache"  # builders/compile_cache.py VOLUME: a pod with it keeps its VLLM_CACHE_ROOT
TERMINATION_MESSAGE_LIMIT = 4096  # what a kubelet keeps of it


def _claim_volumes(pod: Mapping[str, Any]) -> set[str]:
    return {v["name"] for v in pod.get("spec", {}).get("volumes") or [] if "persistentVolumeClaim" in v}


def plan_pod(pod: Mapping[str, Any], **kw: Any) -> PodPlan:
    """Every container of ``pod`` planned against one port map (``plan``'s keywords, without
    ``shared_ports``); raises PlanError naming the container that cannot run."""
    shared = pod_ports(pod, kw["free_port"])
    out = []
    for _, c in _all_containers(pod):
        try:
            out.append(plan(pod, c["name"], shared_ports=shared, **kw))
        except PlanError as e:
            raise PlanError(f'container "{c["name"]}": {e}') from None
    return PodPlan(out, shared)


def in_mount_namespace(argv: list[str], fixed: list[tuple[Path, str]]) -> list[str]:
    """``argv`` run in a private mount namespace where each (local folder, path) of ``fixed`` is bound at its
    path (``unshare`` execs, ``sh`` execs: the process keeps the pid the runner started)."""
    if not fixed:
        return argv
    script = 'set -e; while [ "$1" != "--" ]; do mkdir -p "$2"; mount --bind "$1" "$2"; shift 2; done; shift; exec "$@"'
    pairs = [x for folder, path in fixed for x in (str(folder), path)]
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", *pairs, "--", *argv]


def hub_entries(hub: Path, repo_id: str, folder: Path, revision: str) -> Iterable[tuple[Path, Path | str]]:
    """The files that make ``folder`` appear as ``repo_id`` at ``revision`` in a hub cache:
    (path, target) where a Path target is a symlink and a str is file content."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            yield repo / "snapshots" / revision / f.relative_to(folder), f
    yield repo / "refs" / "main", revision
