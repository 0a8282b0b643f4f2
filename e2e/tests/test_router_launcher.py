"""The router's command line the operator renders (builders/router.py: router_args), parsed by vllm-router's own
launcher from its PyPI wheel (e2e/router/install.py, ROUTER_VERSION): every flag known and every value taken as
rendered, for each policy. The image's Rust binary cannot be pulled here; the wheel's launcher is the same
release's other front door over the same router (docs/routing.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from e2e.router.install import RouterUnavailable, ensure_router
from pooling_operator.api.routing import POLICIES
from pooling_operator.builders import BuildContext, plan
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.validate import validate
from tests.factories import pooling
from tests.unavailable import unavailable

# the launcher's own parser (argparse, exits 2 on a flag it does not know), its result printed as JSON
PARSE = ("import json, sys\nfrom vllm_router.launch_router import parse_router_args\n"
         "print(json.dumps(vars(parse_router_args(sys.argv[1:])), default=str))\n")  # fmt: skip


@pytest.fixture(scope="module")
def launcher() -> Path:
    try:
        return ensure_router() / "bin" / "python"
    except RouterUnavailable as exc:
        unavailable(f"vllm-router's wheel: {exc}")


def rendered(policy: str) -> list[str]:
    result = validate(pooling({"routing": {"vllmRouter": {"policy": policy}}}, name="minilm", namespace="search"))
    assert result.ok and result.resource is not None, [str(p) for p in result.errors]
    deployment = next(o for o in plan(result.resource, contract("0.32"), BuildContext()).objects
                      if o["kind"] == "Deployment" and o["metadata"]["name"] == "minilm-router")  # fmt: skip
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["vllm-router"]
    return [a.replace("$(POD_NAMESPACE)", "search") for a in container["args"]]  # as the kubelet expands it


def parse(launcher: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(launcher), "-c", PARSE, *argv], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_the_rendered_command_line_parses_as_rendered(launcher: Path, policy: str) -> None:
    argv = rendered(policy)
    out = parse(launcher, argv)
    assert out.returncode == 0, out.stderr[-2000:]
    args: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert args["policy"] == POLICIES[policy]
    assert args["service_discovery"] is True and args["service_discovery_namespace"] == "search"
    selector = argv[argv.index("--selector") + 1 : argv.index("--service-discovery-namespace")]
    assert args["selector"] == dict(s.split("=", 1) for s in selector)
    assert (args["port"], args["service_discovery_port"]) == (int(argv[argv.index("--port") + 1]), 8000)
    assert args["prometheus_port"] == 29000 and args["host"] == "0.0.0.0"


def test_a_flag_the_launcher_does_not_know_is_refused(launcher: Path) -> None:
    out = parse(launcher, [*rendered("powerOfTwo"), "--no-such-flag"])
    assert out.returncode != 0 and "unrecognized arguments: --no-such-flag" in out.stderr
