"""A real Prometheus for the tests, started as a local process: Debian's ``prometheus`` package, our own
configuration, a data folder in the run folder and a free loopback port. Targets come from file-based
discovery: whoever knows the targets (``e2e.standin.exporters.ExporterFleet``) writes JSON files into
``targets_dir`` and Prometheus picks them up within a second.

    prom = PrometheusServer(run_dir).start()     # installs the package first when absent and allowed
    prom.query('count(vllm:num_requests_waiting{namespace="ns"})')  # -> [(labels, value), ...]
    prom.stop(); prom.restart()                   # same port, same data: a Prometheus outage and its end

The package's own systemd service, if the package started one, plays no part: nothing here talks to it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from e2e.harness.poll import Fatal, wait_for
from e2e.harness.processes import _child_setup, _free_ports, stop_process

PACKAGE = "prometheus"
JOB = "vllm-standin"
START_TIMEOUT = 60.0


class PrometheusUnavailable(RuntimeError):
    """The prometheus binary is absent and could not be installed; the message says why and what to do."""


class PrometheusError(RuntimeError):
    """A query failed: Prometheus unreachable (stopped) or the HTTP API answered with an error."""


def find_binary() -> Path | None:
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None
    )
    return Path(found) if found else None


def ensure_installed(log: Callable[[str], None] = print) -> Path:
    """The path of the prometheus binary; installs Debian's package with apt-get when it is absent and we
    run as root on a Debian-like system. Raises ``PrometheusUnavailable`` (naming the reason) otherwise."""
    binary = find_binary()
    if binary:
        return binary
    apt = shutil.which("apt-get")
    if apt is None:
        raise PrometheusUnavailable(
            "prometheus is not installed and apt-get is absent: put a prometheus binary (2.x) on PATH"
        )
    if os.geteuid() != 0:
        raise PrometheusUnavailable(
            "prometheus is not installed and installing it needs root: run `sudo apt-get install -y prometheus`"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        [apt, "update"],
        [apt, "install", "-y", "--no-install-recommends", PACKAGE],
    ):
        log(f"prometheus: running {' '.join(argv)}")
        t = time.monotonic()
        proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
            raise PrometheusUnavailable(f"`{' '.join(argv)}` failed (exit {proc.returncode}):\n{tail}")
        log(f"prometheus: {argv[1]} done in {time.monotonic() - t:.0f}s")
    binary = find_binary()
    if binary is None:
        raise PrometheusUnavailable(f"apt-get installed {PACKAGE} but no prometheus binary is on PATH")
    return binary


def _atomic_write(path: Path, text: str) -> None:
    # a dot name and a .tmp suffix: never matched by the discovery glob while half-written
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class PrometheusServer:
    """One Prometheus process with a 1 s scrape and evaluation interval (by default) and file-based discovery
    of the JSON files in ``targets_dir`` (``targets_file`` is the default one; ``targets_path(name)`` gives
    one file per writer, so several fleets can share a server)."""

    ensure_installed = staticmethod(ensure_installed)

    def __init__(
        self,
        run_dir: Path | str,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        *,
        log: Callable[[str], None] = print,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.log = log
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds: float | None = None  # how long the last start took until /-/ready

    # ---- files

    @property
    def config_file(self) -> Path:
        return self.run_dir / "prometheus.yml"

    @property
    def data_dir(self) -> Path:
        return self.run_dir / "data"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "prometheus.log"

    @property
    def targets_dir(self) -> Path:
        return self.run_dir / "targets"

    @property
    def targets_file(self) -> Path:
        return self.targets_path("targets")

    def targets_path(self, name: str) -> Path:
        """A file_sd file of its own for one writer (``<targets_dir>/<name>.json``)."""
        return self.targets_dir / f"{name}.json"

    def write_targets(self, path: Path, groups: list[dict[str, Any]]) -> None:
        """Replace a file_sd file atomically: ``[{"targets": ["host:port"], "labels": {...}}, ...]``."""
        _atomic_write(path, json.dumps(groups, indent=1, sort_keys=True))

    def config(self) -> dict[str, Any]:
        return {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "evaluation_interval": self.evaluation_interval,
            },
            "scrape_configs": [
                {
                    "job_name": JOB,
                    "metrics_path": "/metrics",
                    "file_sd_configs": [
                        {"files": [str(self.targets_dir / "*.json")], "refresh_interval": "1s"}
                    ],
                }
            ],
        }

    # ---- process

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("Prometheus was never started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> PrometheusServer:
        """Start (or start again, on the same port and data) and wait for ``/-/ready``."""
        if self.running:
            return self
        binary = ensure_installed(self.log)
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        if self.port is None:
            self.port = _free_ports(1)[0]
        argv = [
            str(binary),
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.data_dir}",
            "--storage.tsdb.retention.time=1d",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            "--log.level=info",
        ]
        t = time.monotonic()
        with open(self.log_file, "ab") as logf:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                cwd=self.run_dir,
                start_new_session=True,
                preexec_fn=_child_setup,  # dies with the thread that started it
            )
        try:
            wait_for(
                self._ready, timeout=START_TIMEOUT, what=f"Prometheus {self.url}/-/ready", alive=self._alive
            )
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t
        self.log(f"Started Prometheus on {self.url} in {self.start_seconds:.1f}s (data {self.data_dir})")
        return self

    def _alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise Fatal(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
            return resp.status == 200

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (a clean TSDB shutdown), SIGKILL after ``timeout``."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        stop_process(proc, timeout)
        self.log(f"Stopped Prometheus on {self.url}")

    def restart(self) -> PrometheusServer:
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- HTTP API

    def _api(self, path: str, params: dict[str, str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                body = json.loads(raw)
            except ValueError:
                raise PrometheusError(f"GET {path}: HTTP {err.code}: {raw[:200]!r}") from err
        except (urllib.error.URLError, OSError) as err:
            raise PrometheusError(f"GET {url}: {err}") from err
        if body.get("status") != "success":
            raise PrometheusError(f"GET {path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """An instant query: one (labels, value) per series; a scalar result is one ({}, value)."""
        data = self._api("/api/v1/query", {"query": promql})
        kind, result = data["resultType"], data["result"]
        if kind == "vector":
            return [(s["metric"], float(s["value"][1])) for s in result]
        if kind == "scalar":
            return [({}, float(result[1]))]
        raise PrometheusError(f"query {promql!r} returned a {kind}, not an instant vector or scalar")

    def samples(self, selector: str, seconds: int) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """The raw samples of the last ``seconds`` of each series ``selector`` names: (labels, [(unix time of the
        scrape, value), ...]); the times are Prometheus's own, when each scrape happened."""
        data = self._api("/api/v1/query", {"query": f"{selector}[{seconds}s]"})
        return [(s["metric"], [(float(t), float(v)) for t, v in s["values"]]) for s in data["result"]]

    def value(self, promql: str) -> float | None:
        """The single value of a query, None when it returned no series (NaN stays NaN)."""
        result = self.query(promql)
        if not result:
            return None
        if len(result) != 1:
            raise PrometheusError(f"query {promql!r} returned {len(result)} series, expected one")
        return result[0][1]

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets (``labels``, ``health``, ``lastError``, ``scrapeUrl``, ...)."""
        return self._api("/api/v1/targets", {"state": "active"})["activeTargets"]


def main() -> int:
    """`make prometheus`: install Debian's package when absent, before the unit tier (its promtool checks the chart's
    alert rules and the dashboards' queries) and the tiers that start a server."""
    try:
        binary = ensure_installed()
    except PrometheusUnavailable as e:
        print(f"prometheus: {e}")
        return 1
    tool = binary.with_name("promtool")
    print(f"prometheus: {binary}" + (f" and {tool}" if tool.exists() else ", no promtool beside it"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
