"""Co-tenants in the simulator (autoscaling/simulator/cotenants.py): the lockstep world is the single-service world
when nothing is shared, placement spreads over the pool and grows it only when full, and busy tenants of one
device share its time."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pooling_operator.autoscaling.simulator.cotenants import Devices, Tenant, run_namespace
from pooling_operator.autoscaling.simulator.servicemodel import Replica, ServiceParams
from pooling_operator.autoscaling.simulator.simulate import Operator, run, setup_for
from pooling_operator.autoscaling.simulator.trace import Trace, parse_trace
from pooling_operator.vllm.validate import validate
from tests.factories import pooling

pytestmark = pytest.mark.thorough  # simulator runs: make test, not make unit's fast loop

FAST = ServiceParams(startup_s=20.0)
GiB = 2**30
DEVICE = 80 * GiB


def tenant(name: str, trace: Trace, *, share_gib: int | None = None, seed: int = 0, replicas: int = 1, **autoscaling: Any) -> Tenant:
    gpu: dict[str, Any] = {"count": 1}
    if share_gib is not None:
        gpu = {"product": "NVIDIA-H100-80GB-HBM3", "share": {"memory": f"{share_gib}Gi", "via": "timeSlicing"}}
    doc = pooling({"resources": {"gpu": gpu}, "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "p99Latency": "250ms",
                                                              "scaleDown": {"stabilizationSeconds": 30}, **autoscaling}},
                  name=name)  # fmt: skip
    r = validate(doc)
    assert r.ok, r.problems
    setup = setup_for(r.resource, None, FAST, seed=seed, initial_replicas=replicas)
    return Tenant(name, setup, trace, None if share_gib is None else share_gib * GiB)


STEP = parse_trace("seconds,requests_per_second,mean_tokens\n0,60,16\n60,250,16\n150,60,16\n")
BURSTY = parse_trace("seconds,requests_per_second,mean_tokens\n0,20,16\n30,180,16\n50,20,16\n120,5,48\n")
QUIET = parse_trace("seconds,requests_per_second,mean_tokens\n0,3,16\n")


def test_in_lockstep_with_nothing_shared_each_service_runs_as_it_does_alone() -> None:
    # whole GPUs, no contention: the same random numbers and decisions, to the last request
    tenants = [tenant("a", STEP, seed=1), tenant("b", BURSTY, seed=2), tenant("c", QUIET, seed=3)]
    together = run_namespace(tenants, DEVICE, contention=False)
    for t in tenants:
        alone = run(t.setup, t.trace, Operator(t.setup))
        assert together.services[t.name] == alone, t.name
    assert together.device_minutes == pytest.approx(together.gpu_minutes)  # a device per pod, whole GPUs


def test_contention_with_one_pod_per_device_changes_nothing() -> None:
    # nobody to share with: every step as long as alone
    tenants = [tenant("a", STEP, seed=1), tenant("b", BURSTY, seed=2)]
    assert run_namespace(tenants, DEVICE).services == run_namespace(tenants, DEVICE, contention=False).services


PLACEMENT = [
    # (id, pool, shares in GiB placed in order (None: whole GPU), freed after placing (indexes), device of each)
    ("spreads over the pool", 2, [10, 10, 10], [], [0, 1, 0]),
    ("least allocated first", 2, [30, 10, 10], [], [0, 1, 1]),
    ("grows only when full", 1, [50, 20, 20], [], [0, 0, 1]),
    ("a whole GPU needs an empty device", 1, [10, None], [], [0, 1]),
    ("a freed share makes room", 1, [50, 40, 20], [0], [0, 1, 0]),
]  # fmt: skip


@pytest.mark.parametrize(("pool", "shares", "freed", "where"), [c[1:] for c in PLACEMENT], ids=[c[0] for c in PLACEMENT])
def test_placement(pool: int, shares: list[int | None], freed: list[int], where: list[int]) -> None:
    devices = Devices(DEVICE, pool)
    placed = []
    for i, share in enumerate(shares):
        if i == len(shares) - 1:
            for f in freed:
                devices.free(1.0, placed[f])
        placed.append(devices.place(0.0, Replica(FAST), None if share is None else share * GiB))
    assert [p[0][0] for p in placed] == where


def test_device_minutes_count_a_device_once_while_any_pod_holds_it() -> None:
    devices = Devices(DEVICE)
    a = devices.place(0.0, Replica(FAST), 10 * GiB)
    b = devices.place(30.0, Replica(FAST), 10 * GiB)
    devices.free(90.0, a)
    devices.free(120.0, b)
    c = devices.place(180.0, Replica(FAST), 10 * GiB)
    assert c[0][0] == 0 and devices.device_minutes(240.0) == pytest.approx((120 + 60) / 60)


def test_a_pod_of_two_whole_gpus_takes_two_devices() -> None:
    devices = Devices(DEVICE, 1)
    pair = devices.place(0.0, Replica(FAST), None, whole=2)
    assert [i for i, *_ in pair] == [0, 1]
    devices.free(60.0, pair)
    assert devices.device_minutes(60.0) == pytest.approx(2.0) and all(d.used == 0 for d in devices.devices)


def test_busy_tenants_of_one_device_share_its_time() -> None:
    """Two services at ~60 % of one replica's capacity each. On one time-sliced device that is 120 %: both miss
    their p99 (the autoscaler adds replicas, on the same device: no more time). With two devices in the pool,
    the scheduler spreads them and neither misses; without contention neither misses either."""
    load = parse_trace("seconds,requests_per_second,mean_tokens\n0,130,16\n180,130,16\n")
    tenants = [tenant("a", load, share_gib=4, seed=1, maxReplicas=2), tenant("b", load, share_gib=4, seed=2, maxReplicas=2)]
    shared = run_namespace(tenants, DEVICE, pool=1)
    spread = run_namespace(tenants, DEVICE, pool=2)
    free_ride = run_namespace(tenants, DEVICE, pool=1, contention=False)
    assert shared.devices == 1 and spread.devices == 2
    assert all(r.slo_minutes_missed >= 2 for r in shared.services.values()), {k: r.slo_minutes_missed for k, r in shared.services.items()}
    assert spread.slo_minutes_missed == 0 and free_ride.slo_minutes_missed == 0
    # chargeback counts the share's fraction (4Gi of an H100's 81559Mi), not the device
    r = shared.services["a"]
    assert r.gpu_minutes == pytest.approx(r.replica_minutes * 4096 / 81559, rel=0.05)


def test_tenant_names_are_unique() -> None:
    t = tenant("a", QUIET)
    with pytest.raises(ValueError, match="unique"):
        run_namespace([t, dataclasses.replace(t)], DEVICE)


# ---- pooling-operator simulate --cotenant --------------------------------------------------------------------


def shared_doc(name: str, share: dict[str, Any]) -> dict[str, Any]:
    return pooling({"resources": {"gpu": {"product": "NVIDIA-H100-80GB-HBM3", "share": share}},
                    "autoscaling": {"minReplicas": 1, "maxReplicas": 2, "p99Latency": "250ms"}}, name=name)  # fmt: skip


def files(tmp_path: Any, *docs: dict[str, Any]) -> list[str]:
    import yaml

    trace = tmp_path / "trace.csv"
    trace.write_text("seconds,requests_per_second,mean_tokens\n0,20,16\n60,40,16\n")
    out = []
    for doc in docs:
        path = tmp_path / f"{doc['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(doc))
        out.append(f"{path}={trace}")
    return out


def test_simulate_runs_a_namespace_of_cotenants(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from pooling_operator.cli import main

    ts = {"memory": "4Gi", "via": "timeSlicing"}
    a, b = files(tmp_path, shared_doc("a", ts), shared_doc("b", ts))
    code = main(["simulate", a.split("=")[0], "--trace", a.split("=")[1], "--cotenant", b, "--output", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert sorted(out["services"]) == ["PoolingService/a", "PoolingService/b"]
    assert out["namespace"]["devices"] == 1  # both 4Gi shares on one H100
    assert out["namespace"]["gpu_minutes"] < out["namespace"]["device_minutes"]  # charged the fraction, the device paid


@pytest.mark.parametrize(("other", "extra", "said"), [
    ({"memory": "4Gi", "via": "timeSlicing"}, ["--cotenant", "no-trace.yaml"], "expected SERVICE.yaml=TRACE.csv"),
    ({"memory": "4Gi", "via": "mig", "migProfile": "1g.10gb"}, [], "spec.resources.gpu.share.via is mig"),
    ({"memory": "4Gi", "via": "timeSlicing"}, ["--compare", "keda"], "--compare and --plot are for one service"),
])  # fmt: skip
def test_simulate_cotenants_refuses_what_it_cannot_model(tmp_path: Any, capsys: pytest.CaptureFixture[str], other: dict[str, Any],
                                                        extra: list[str], said: str) -> None:
    from pooling_operator.cli import main

    a, b = files(tmp_path, shared_doc("a", {"memory": "4Gi", "via": "timeSlicing"}), shared_doc("b", other))
    code = main(["simulate", a.split("=")[0], "--trace", a.split("=")[1], "--cotenant", b, *extra])
    assert code == 2 and said in capsys.readouterr().err


def test_simulate_cotenants_names_a_service_given_twice(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from pooling_operator.cli import main

    [a] = files(tmp_path, shared_doc("a", {"memory": "4Gi", "via": "timeSlicing"}))
    assert main(["simulate", a.split("=")[0], "--trace", a.split("=")[1], "--cotenant", a]) == 2
    assert "PoolingService/a is there twice" in capsys.readouterr().err
