"""Argo CD health checks (argocd/resource_customizations/): each kind's health_test.yaml run the way Argo CD's
own runner does (util/lua/health_test.go): ``obj`` is the object, the script returns ``hs``.

The Lua runtime is Lua 5.1 (PyPI ``lupa.lua51``; Argo CD embeds gopher-lua, also 5.1). Scripts pasted into
``argocd-cm`` run sandboxed — base, table and package libraries plus a safe ``os`` (time, date, clock), no
``string``/``math``/``io`` unless ``useOpenLibs`` — so every script is also run in that sandbox.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import lupa.lua51 as lupa  # a test dependency: a missing Lua runtime fails, it does not skip
import pytest
import yaml

from pooling_operator.api.cache_fill_contract import REASONS as FILL_REASONS
from pooling_operator.status import conditions as c

ROOT = Path(__file__).resolve().parents[1] / "argocd" / "resource_customizations" / "vllm-pooling.io"
KINDS = sorted(p.name for p in ROOT.iterdir() if p.is_dir())
CASES = [
    (kind, t)
    for kind in KINDS
    for t in yaml.safe_load((ROOT / kind / "health_test.yaml").read_text())["tests"]
]

SANDBOX = """
string, math, io, debug, coroutine, load, loadstring, dofile, loadfile = nil, nil, nil, nil, nil, nil, nil, nil, nil
local time, date, clock = os.time, os.date, os.clock
os = {time = time, date = date, clock = clock}
"""


def _lua(value: Any, lua: Any) -> Any:
    if isinstance(value, dict):
        return lua.table_from({k: _lua(v, lua) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([_lua(v, lua) for v in value])
    return value


def health(kind: str, obj: dict[str, Any], *, sandboxed: bool) -> dict[str, Any]:
    lua = lupa.LuaRuntime(register_eval=False)
    if sandboxed:
        lua.execute(SANDBOX)
    lua.globals().obj = _lua(obj, lua)
    script = (ROOT / kind / "health.lua").read_text()
    hs = lua.execute(script)
    return {"status": hs["status"], "message": hs["message"]}


@pytest.mark.parametrize("sandboxed", [True, False], ids=["argocd-cm sandbox", "open libs"])
@pytest.mark.parametrize(("kind", "case"), CASES, ids=[f"{k}:{t['inputPath']}" for k, t in CASES])
def test_health_test_yaml(kind: str, case: dict[str, Any], sandboxed: bool) -> None:
    obj = yaml.safe_load((ROOT / kind / case["inputPath"]).read_text())
    assert health(kind, obj, sandboxed=sandboxed) == case["healthStatus"]


def test_every_kind_with_conditions_has_a_check_and_the_services_share_one() -> None:
    from pooling_operator.api.resources import KINDS as API_KINDS

    assert KINDS == sorted(API_KINDS)
    assert (ROOT / "PoolingService" / "health.lua").read_bytes() == (ROOT / "ScoringService" / "health.lua").read_bytes()


def test_the_scripts_and_the_snippet_are_what_generate_py_writes() -> None:
    """One source (argocd/generate.py's table) for every kind's script: `make argocd` after changing it."""
    spec = importlib.util.spec_from_file_location("argocd_generate", ROOT.parents[1] / "generate.py")
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = generate  # dataclasses look their module up while the module runs
    spec.loader.exec_module(generate)
    for path, text in generate.files().items():
        assert path.read_text() == text, f"{path} is stale: run 'make argocd'"


def test_testdata_uses_only_the_operators_condition_types_and_reasons() -> None:
    types = set(c.TYPES_ORDER)
    reasons = {v for k, v in vars(c).items() if k.isupper() and isinstance(v, str)} | set(FILL_REASONS)  # a fill's own
    for kind, case in CASES:
        obj = yaml.safe_load((ROOT / kind / case["inputPath"]).read_text())
        for cond in (obj.get("status") or {}).get("conditions") or []:
            assert cond["type"] in types, (kind, case["inputPath"], cond)
            assert cond["reason"] in reasons, (kind, case["inputPath"], cond)


def test_argocd_cm_snippet_carries_exactly_the_scripts() -> None:
    cm = yaml.safe_load((ROOT.parents[1] / "argocd-cm.yaml").read_text())
    want = {f"resource.customizations.health.vllm-pooling.io_{k}": (ROOT / k / "health.lua").read_text() for k in KINDS}
    assert cm["data"] == want
