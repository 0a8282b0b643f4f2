"""`pooling-operator simulate`: Prometheus as the autoscaler sees it, the trace, the baselines' HPA rules, the
simulated world's accounting, the JSON shape, determinism, and one clear line for bad input."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from pooling_operator.autoscaling.decide import signals_from
from pooling_operator.autoscaling.simulator import cli
from pooling_operator.autoscaling.simulator.baselines import (
    HPA_DEFAULT_DOWN,
    Hpa,
    Metric,
    Oracle,
    Rules,
    hpa_queue,
    keda,
)
from pooling_operator.autoscaling.simulator.cli import read_service
from pooling_operator.autoscaling.simulator.promql import Prometheus, histogram_quantile
from pooling_operator.autoscaling.simulator.servicemodel import Counters, ServiceParams
from pooling_operator.autoscaling.simulator.simulate import (
    Operator,
    replica_rate,
    run,
    setup_for,
    simulate,
    to_json,
)
from pooling_operator.autoscaling.simulator.trace import InputError, arrivals, parse_trace
from pooling_operator.builders.services import scaled_object
from pooling_operator.cli import main
from tests.factories import hidden_states, policy, pooling

pytestmark = pytest.mark.thorough  # simulator runs: make test, not make unit's fast loop

FAST = ServiceParams(startup_s=20.0)
AUTOSCALING = {"minReplicas": 1, "maxReplicas": 4, "p99Latency": "250ms", "scaleDown": {"stabilizationSeconds": 30}}
STEP = "seconds,requests_per_second,mean_tokens\n0,80,16\n60,250,16\n150,80,16\n210,80,16\n"  # ends at 270 s


def write(tmp_path: Path, name: str, *docs: object) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(list(docs)) if not isinstance(docs[0], str) else str(docs[0]))
    return path


def service(**autoscaling: Any) -> dict[str, Any]:
    return pooling({"autoscaling": {**AUTOSCALING, **autoscaling}}, name="minilm")


# ---- Prometheus -----------------------------------------------------------------------------------------------


def test_histogram_quantile_interpolates_as_prometheus() -> None:
    bounds = (0.1, 0.2, 0.5)
    assert histogram_quantile(0.99, bounds, [0, 50, 100, 100]) == pytest.approx(0.2 + 0.3 * 49 / 50)
    assert histogram_quantile(0.99, bounds, [100, 100, 100, 100]) == pytest.approx(0.099)  # first bucket from 0
    assert histogram_quantile(0.99, bounds, [0, 0, 0, 100]) == 0.5  # +Inf bucket: the highest finite bound
    assert math.isnan(histogram_quantile(0.99, bounds, [0, 0, 0, 0]))


def counters(success: int, waiting: int = 0, latency: float = 0.05) -> Counters:
    c = Counters(success=success, prompt_tokens=16 * success, waiting=waiting)
    for _ in range(success):
        c.e2e.observe(latency)
    return c


def test_prometheus_rates_over_the_window_and_drops_a_gone_pod_from_instant_queries() -> None:
    prom = Prometheus(60.0, counters(0).e2e.bounds)
    for t in (0.0, 15.0, 30.0, 45.0, 60.0):
        prom.scrape(1, t, counters(int(10 * t), waiting=3))
    prom.scrape(2, 50.0, counters(100, waiting=4))  # just ready: one sample, no rate yet
    values = prom.evaluate(60.0)
    assert values["waiting"] == 7 and values["reporting"] == 2
    assert values["completions"] == pytest.approx(10.0)  # (600 - 150) / (60 - 15): the window is (0, 60]
    assert values["tokens"] == pytest.approx(160.0)
    assert values["inSystem"] == pytest.approx(0.5)  # rate of the latency sum: 10/s × 0.05 s
    assert values["p99"] == pytest.approx(0.03 + 0.02 * 0.99)  # inside the (0.03, 0.05] bucket
    prom.gone(1, 61.0)
    later = prom.evaluate(62.0)
    assert later["waiting"] == 4 and later["reporting"] == 1  # the staleness marker hides pod 1 at once
    assert later["completions"] == pytest.approx(10.0)  # its samples still make a rate
    assert Prometheus(60.0, (0.1,)).evaluate(0.0) == {
        "waiting": None, "reporting": None, "completions": None, "inSystem": None, "tokens": None, "p99": None,
    }


def test_signals_treat_nan_and_no_series_as_no_data() -> None:
    s = signals_from({"waiting": 0.0, "reporting": 2.0, "completions": 0.0, "inSystem": 0.0, "tokens": 0.0, "p99": math.nan}, {})
    assert (s.waiting, s.reporting, s.completions, s.p99) == (0.0, 2, 0.0, None)
    assert signals_from({"waiting": None, "reporting": None}, {}).missing() == "waiting"


# ---- the trace --------------------------------------------------------------------------------------------------


def test_trace_is_a_step_function_whose_last_row_lasts_a_minute() -> None:
    trace = parse_trace(STEP)
    assert trace.end == 270.0
    assert [(s.start, s.rate) for s in trace.overlapping(50, 61)] == [(0.0, 80.0), (60.0, 250.0)]
    stream = list(arrivals(trace, random.Random(1)))
    assert stream == list(arrivals(trace, random.Random(1)))
    assert sum(1 for t, _ in stream if 60 <= t < 150) == pytest.approx(250 * 90, rel=0.03)
    assert sum(n for _, n in stream) / len(stream) == pytest.approx(16.0)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("time,rps,tokens\n0,1,16\n", "must start with the header seconds,requests_per_second,mean_tokens"),
        ("seconds,requests_per_second,mean_tokens\n0,-5,16\n", "line 2: requests_per_second must not be negative"),
        ("seconds,requests_per_second,mean_tokens\n0,1,16\n0,2,16\n", "line 3: seconds must increase"),
        ("seconds,requests_per_second,mean_tokens\n5,1,16\n", "the first row must start at 0 seconds"),
        ("seconds,requests_per_second,mean_tokens\n0,x,16\n", "line 2: expected numbers"),
        ("seconds,requests_per_second,mean_tokens\n", "no rows"),
        ("", "an empty file"),
    ],
)
def test_trace_errors_name_the_line(text: str, words: str) -> None:
    with pytest.raises(InputError, match=words):
        parse_trace(text)


# ---- the baselines' HPA ----------------------------------------------------------------------------------------


def test_hpa_queue_follows_the_hpa_rules() -> None:
    hpa = hpa_queue(1, 40)
    assert hpa.replicas(0, 2, 2, {"waiting": 10.5}) == 2  # 10.5 / (5 × 2) is within the 0.1 tolerance
    assert hpa.replicas(15, 2, 2, {"waiting": 30}) == 6  # ceil(30 / 5); the limit is max(4 pods, 100 %)
    assert hpa.replicas(30, 10, 10, {"waiting": 500}) == 20  # wants 100, 100 % per 15 s allows 10 more
    assert hpa.replicas(45, 20, 20, {"waiting": None}) == 20  # 0 waiting, but the 300 s window holds
    assert hpa.replicas(346, 20, 20, {"waiting": 0}) == 1  # the window passed: down 100 % at once, to min


def test_keda_value_metric_scales_ready_pods_and_reads_nan_as_zero() -> None:
    p99 = Hpa("keda", (Metric("p99", "Value", 0.25),), 1, 10, down=Rules(0, HPA_DEFAULT_DOWN.policies))
    assert p99.replicas(0, 3, 2, {"p99": 0.5}) == 4  # ceil(0.5 / 0.25 × 2 ready)
    assert p99.replicas(15, 4, 4, {"p99": math.nan}) == 1  # NaN is 0 (ignoreNullValues)


def test_keda_reads_the_rendered_scaled_object() -> None:
    resource = read_resource(service(backend="keda", queueDepthPerReplica=8))
    setup = setup_for(resource, None, FAST)
    scaled = scaled_object(resource, None)
    hpa = keda(scaled, setup.queries)
    assert {(m.signal, m.metric_type, m.threshold) for m in hpa.metrics} == {("waiting", "AverageValue", 8.0), ("p99", "Value", 0.25)}
    assert (hpa.min_replicas, hpa.max_replicas, hpa.up.window, hpa.down.window) == (1, 4, 0, 30)
    scaled["spec"]["triggers"][0]["metadata"]["query"] = "sum(something_else)"
    with pytest.raises(InputError, match="none of the service's queries: sum\\(something_else\\)"):
        keda(scaled, setup.queries)


def test_oracle_runs_the_fewest_replicas_one_startup_ahead() -> None:
    trace = parse_trace("seconds,requests_per_second,mean_tokens\n0,150,16\n300,550,16\n600,0,16\n900,900,200\n")
    oracle = Oracle(trace, {16: 100.0, 200: 0.0}, 60.0, 1, 6)
    assert oracle.replicas(210, 2, 2, {}) == 2  # 300 s is beyond 210 + 60 + 15
    assert oracle.replicas(240, 2, 2, {}) == 6  # ceil(550 / 100)
    assert oracle.replicas(600, 6, 6, {}) == 1
    assert oracle.replicas(840, 1, 1, {}) == 6  # 200-token requests cannot meet the target: the maximum


def test_replica_rate_meets_the_target_and_not_much_more() -> None:
    rate = replica_rate(FAST, 16, 0.25)
    assert 0 < rate < FAST.capacity_rps(16)
    assert replica_rate(FAST, 16, 0.1) < rate


# ---- the simulated world ----------------------------------------------------------------------------------------


def read_resource(doc: dict[str, Any]) -> Any:
    from pooling_operator.vllm.validate import validate

    result = validate(doc)
    assert result.ok, result.problems
    return result.resource


class Fixed:
    """A policy that sets given counts at given times."""

    name = "fixed"
    period = 15.0

    def __init__(self, plan: Mapping[float, int]) -> None:
        self.plan = plan

    def start(self, replicas: int) -> None:
        pass

    def replicas(self, now: float, current: int, ready: int, values: Mapping[str, float | None]) -> int:
        return self.plan.get(now, current)


def test_loading_and_draining_replicas_hold_their_gpus() -> None:
    resource = read_resource(pooling({"autoscaling": AUTOSCALING, "resources": {"gpu": {"count": 2}}}, name="minilm"))
    setup = setup_for(resource, None, ServiceParams(startup_s=60))
    idle = parse_trace("seconds,requests_per_second,mean_tokens\n0,0,16\n60,0,16\n")  # 120 s
    result = run(setup, idle, Fixed({0.0: 3, 90.0: 1}))
    assert result.replica_minutes == pytest.approx(1 * 2 + 2 * 1.5)
    assert result.gpu_minutes == pytest.approx(2 * result.replica_minutes)  # 2 GPUs each, nothing to drain
    assert [(e.t, e.replicas, e.ready) for e in result.timeline if e.t in (0, 45, 60, 90)] == [
        (0, 3, 1), (45, 3, 1), (60, 3, 3), (90, 1, 1),
    ]
    assert result.max_replicas == 3


def test_requests_wait_at_the_front_end_while_nothing_is_ready() -> None:
    setup = setup_for(read_resource(service()), None, ServiceParams(startup_s=30), initial_replicas=0)
    trace = parse_trace("seconds,requests_per_second,mean_tokens\n0,10,16\n")
    result = run(setup, trace, Fixed({0.0: 1}))
    assert result.minutes[0].missed and result.minutes[0].p99 is not None and result.minutes[0].p99 > 25
    assert result.completed == pytest.approx(600, rel=0.15)


@pytest.fixture(scope="module")
def compared() -> dict[str, Any]:
    resource = read_resource(service())
    setup = setup_for(resource, None, FAST, seed=7)
    return simulate(resource, None, parse_trace(STEP), setup, ["hpa-queue", "keda", "oracle"])


def test_the_operator_scales_up_under_load_and_back_down(compared: dict[str, Any]) -> None:
    timeline = compared["operator"].timeline
    peak = max(e.replicas for e in timeline)
    assert [e.replicas for e in timeline if e.t < 60] == [1] * 4
    assert peak > 1
    assert timeline[-1].replicas < peak  # 80 req/s again and a 30 s scale-down window


def test_json_has_every_policy_with_its_figures(compared: dict[str, Any]) -> None:
    out = json.loads(json.dumps(to_json(compared)))
    assert list(out) == ["results"]
    assert list(out["results"]) == ["operator", "hpa-queue", "keda", "oracle"]
    for name, r in out["results"].items():
        assert {"slo_minutes_missed", "gpu_minutes", "replica_minutes", "max_replicas", "gpu_minutes_ratio_to_oracle",
                "timeline"} <= set(r), name
        assert r["gpu_minutes"] >= r["replica_minutes"] > 0
        assert r["minutes"] == 5
        ticks = {e["t"] for e in r["timeline"]}
        assert {float(t) for t in range(0, 270, 15)} <= ticks  # one entry per period (15 s), more at changes
        assert all(set(e) == {"t", "replicas", "ready", "p99"} for e in r["timeline"])
    assert out["results"]["oracle"]["gpu_minutes_ratio_to_oracle"] == 1.0


def test_the_same_seed_gives_the_same_output() -> None:
    resource = read_resource(service())
    trace = parse_trace("seconds,requests_per_second,mean_tokens\n0,200,16\n")

    def once(seed: int) -> dict[str, Any]:
        setup = setup_for(resource, None, FAST, seed=seed)
        return to_json({"operator": run(setup, trace, Operator(setup))})

    assert once(3) == once(3)
    assert once(3) != once(4)


# ---- the command line -------------------------------------------------------------------------------------------


@pytest.mark.integration  # starts a process
def test_cli_prints_exactly_one_json_object(tmp_path: Path) -> None:
    svc = write(tmp_path, "svc.yaml", service(), policy({"defaults": {"window": "30s"}}))
    trace = write(tmp_path, "t.csv", "seconds,requests_per_second,mean_tokens\n0,100,16\n")
    argv = [sys.executable, "-m", "pooling_operator", "simulate", str(svc), "--trace", str(trace), "--compare",
            "hpa-queue", "--output", "json", "--startup-seconds", "20", "--seed", "5"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert list(out["results"]) == ["operator", "hpa-queue"]
    assert out["results"]["operator"]["slo_minutes_missed"] == 0


def test_the_service_file_may_carry_its_policy(tmp_path: Path) -> None:
    path = write(tmp_path, "svc.yaml", pooling({"autoscaling": {"maxReplicas": 4}}, name="minilm"),
                 policy({"defaults": {"p99Latency": "300ms"}, "limits": {"maxReplicas": 2}}))
    resource, found = read_service(str(path))
    setup = setup_for(resource, found, FAST)
    assert (setup.p99_target, setup.max_replicas) == (0.3, 2)


def test_a_service_file_with_a_status_brings_its_measured_start_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kubectl get -o yaml` of a live service carries status.startup: the simulation starts replicas that
    slowly unless a flag says otherwise."""
    body = {**service(), "status": {"startup": {"lastSeconds": 70, "typicalSeconds": 81.5, "samples": 6}}}
    svc = write(tmp_path, "svc.yaml", body)
    trace = write(tmp_path, "t.csv", "seconds,requests_per_second,mean_tokens\n0,50,16\n")
    assert main(["simulate", str(svc), "--trace", str(trace)]) == 0
    assert "start-up 81.5 s: the service's status.startup.typicalSeconds" in capsys.readouterr().out
    assert main(["simulate", str(svc), "--trace", str(trace), "--startup-seconds", "20"]) == 0
    assert "status.startup" not in capsys.readouterr().out
    resource, _ = read_service(str(svc))
    assert setup_for(resource, None, cli.service_model(cli_args(svc, trace), cli.measured_startup(resource))).params.startup_s == 81.5


def cli_args(svc: Path, trace: Path, *extra: str) -> Any:
    from pooling_operator.cli import parser

    return parser().parse_args(["simulate", str(svc), "--trace", str(trace), *extra])


def test_cli_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svc = write(tmp_path, "svc.yaml", service())
    trace = write(tmp_path, "t.csv", "seconds,requests_per_second,mean_tokens\n0,50,16\n")
    assert main(["simulate", str(svc), "--trace", str(trace), "--startup-seconds", "20"]) == 0
    out = capsys.readouterr().out
    assert "operator: SLO-minutes missed 0/1" in out
    assert "replicas/ready: 0s 1/1" in out


@pytest.mark.parametrize(
    ("docs", "trace", "words"),
    [
        ("missing", STEP, "no such file"),
        (None, "time,rps\n0,1\n", "t.csv: the trace must start with the header"),
        (None, "seconds,requests_per_second,mean_tokens\n0,-1,16\n", "t.csv: line 2: requests_per_second must not be negative"),
        (pooling(name="minilm"), STEP, "PoolingService/minilm has no spec.autoscaling"),
        (hidden_states(), STEP, "expected exactly one PoolingService or ScoringService, found 0 (HiddenStateJob)"),
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, STEP, "apiVersion: must be vllm-pooling.io/v1alpha1"),
        (pooling({"autoscaling": {"maxReplicas": 3}}, name="minilm"), STEP, "needs a p99 target"),
    ],
    ids=["missing-file", "bad-header", "negative-rate", "no-autoscaling", "not-a-service", "not-ours", "no-p99"],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: Any, trace: str,
                                         words: str) -> None:
    svc = tmp_path / "missing.yaml" if docs == "missing" else write(tmp_path, "svc.yaml", docs if docs is not None else service())
    path = write(tmp_path, "t.csv", trace)
    assert main(["simulate", str(svc), "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and words in err, err


def test_service_model_file_then_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--service-model FILE (the names of the flags) sets the model; a flag given too wins over the file."""
    svc = write(tmp_path, "svc.yaml", service())
    trace = write(tmp_path, "t.csv", "seconds,requests_per_second,mean_tokens\n0,400,16\n")
    slow = write(tmp_path, "slow.yaml", {"step-base-seconds": 0.03, "step-per-token-seconds": 0.001, "startup-seconds": 20,
                                         "about": {"fitted on": "a slower machine"}})

    def peak(*extra: str) -> int:
        assert main(["simulate", str(svc), "--trace", str(trace), "--output", "json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["results"]["operator"]["max_replicas"]

    fast = peak("--startup-seconds", "20")
    assert peak("--service-model", str(slow)) > fast  # a tenth of the speed needs more replicas
    assert peak("--service-model", str(slow), "--step-base-seconds", "0.0077", "--step-per-token-seconds", "0.000266") == fast


@pytest.mark.parametrize(("content", "words"), [
    ({"step-base": 0.01}, "slow.yaml: step-base: not a service-model parameter; known: step-base-seconds"),
    ({"max-num-seqs": 0}, "slow.yaml: max_num_seqs and max_num_batched_tokens must be at least 1"),
    ("- just a list", "slow.yaml: expected a mapping of service-model parameters, got list"),
], ids=["unknown-key", "invalid-value", "not-a-mapping"])
def test_a_bad_service_model_file_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: Any,
                                                     words: str) -> None:
    svc = write(tmp_path, "svc.yaml", service())
    trace = write(tmp_path, "t.csv", STEP)
    bad = write(tmp_path, "slow.yaml", content)
    assert main(["simulate", str(svc), "--trace", str(trace), "--service-model", str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and words in err, err


@pytest.mark.parametrize("suffix", ["svg", "png"])
def test_plot_draws_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    svc = write(tmp_path, "svc.yaml", service())
    trace = write(tmp_path, "t.csv", STEP)
    picture = tmp_path / f"run.{suffix}"
    assert main(["simulate", str(svc), "--trace", str(trace), "--startup-seconds", "20", "--compare", "keda,oracle",
                 "--plot", str(picture)]) == 0
    data = picture.read_bytes()
    if suffix == "svg":
        text = data.decode()
        assert text.startswith("<?xml") and "<svg" in text
        for words in ("demand", "replicas", "p99 per minute", "target 0.25s", "operator: ", "keda: ", "oracle: ", "GPU-min"):
            assert words in text, words
    else:
        assert data.startswith(b"\x89PNG") and len(data) > 10_000
    assert "operator: SLO-minutes missed" in capsys.readouterr().out  # the figures are still printed


def test_plot_names_the_formats_it_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svc = write(tmp_path, "svc.yaml", service())
    trace = write(tmp_path, "t.csv", STEP)
    assert main(["simulate", str(svc), "--trace", str(trace), "--plot", str(tmp_path / "run.pdf")]) == 2
    assert "run.pdf: the file name must end in .svg or .png" in capsys.readouterr().err
    assert not (tmp_path / "run.pdf").exists()


def test_least_outstanding_routing_drains_a_backlog_that_even_routing_keeps() -> None:
    # One replica takes 300 req/s (more than it serves) for 55 s while two more load; then 400 req/s, which three
    # serve. A Service (even) keeps sending a third of the arrivals to the replica with the backlog, which then
    # drains at a small fraction of its speed for minutes; a least-outstanding front sends them to the others.
    trace = parse_trace("seconds,requests_per_second,mean_tokens\n0,300,16\n55,400,16\n240,400,16\n")
    runs = {}
    for routing in ("even", "least-outstanding"):
        setup = setup_for(read_resource(service()), None, ServiceParams(startup_s=55), initial_replicas=1,
                          routing=routing)
        runs[routing] = run(setup, trace, Fixed({0.0: 3}))
    even, least = runs["even"], runs["least-outstanding"]
    assert abs(even.completed - least.completed) <= 5  # the same arrivals, answered (but the last instants)
    assert least.minutes[2].p99 is not None and even.minutes[2].p99 is not None
    assert least.minutes[2].p99 < 1.0 < even.minutes[2].p99  # the backlog is gone in one, still there in the other
    assert least.slo_minutes_missed < even.slo_minutes_missed


def test_power_of_two_routing_drains_the_backlog_too_and_never_picks_the_fuller_of_its_two() -> None:
    # The same backlog as above: vllm-router's powerOfTwo compares two replicas at random, so the loaded one is
    # passed over whenever it is drawn beside another (two of three pairs include it); one draw in three still
    # pairs the two fresh replicas. It drains the backlog as least-outstanding does, where even routing keeps it.
    trace = parse_trace("seconds,requests_per_second,mean_tokens\n0,300,16\n55,400,16\n240,400,16\n")
    runs = {}
    for routing in ("even", "power-of-two"):
        setup = setup_for(read_resource(service()), None, ServiceParams(startup_s=55), initial_replicas=1,
                          routing=routing)
        runs[routing] = run(setup, trace, Fixed({0.0: 3}))
    even, p2 = runs["even"], runs["power-of-two"]
    assert abs(even.completed - p2.completed) <= 5
    assert p2.minutes[2].p99 is not None and even.minutes[2].p99 is not None
    assert p2.minutes[2].p99 < 1.0 < even.minutes[2].p99
    assert p2.slo_minutes_missed < even.slo_minutes_missed


def test_power_of_two_takes_the_first_of_two_on_a_tie_and_the_fewer_in_flight_otherwise() -> None:
    import random

    from pooling_operator.autoscaling.simulator import simulate as sim

    class Replica:
        def __init__(self, n: int) -> None:
            self.in_flight = n

        def advance(self, t: float) -> list[object]:
            return []

    class Pod:
        def __init__(self, n: int) -> None:
            self.replica = Replica(n)

    class Seeded(random.Random):
        def sample(self, population, k):  # type: ignore[no-untyped-def,override]
            return [population[0], population[1]]

    world = object.__new__(sim.ServiceRun)  # only its routing is exercised: no run is set up
    setup = setup_for(read_resource(service()), None, ServiceParams(startup_s=55), routing="power-of-two")
    world.setup, world._route, world._record = setup, Seeded(0), None  # type: ignore[attr-defined]
    busy, idle, tied = Pod(3), Pod(1), Pod(3)
    assert world._to([busy, idle], 0.0) is idle  # type: ignore[attr-defined]
    assert world._to([idle, busy], 0.0) is idle  # type: ignore[attr-defined]
    assert world._to([busy, tied], 0.0) is busy  # a tie: the first drawn (power_of_two.rs: load1 <= load2)
    assert world._to([idle], 0.0) is idle  # type: ignore[attr-defined]


def test_a_routing_the_simulator_lacks_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svc, trace = write(tmp_path, "svc.yaml", service()), write(tmp_path, "t.csv", STEP)
    with pytest.raises(SystemExit):
        main(["simulate", str(svc), "--trace", str(trace), "--routing", "round-robin"])
    assert "least-outstanding" in capsys.readouterr().err
