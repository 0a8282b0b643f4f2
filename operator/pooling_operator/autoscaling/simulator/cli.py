"""``pooling-operator simulate SERVICE.yaml --trace TRACE.csv``: the what-if's command line. It reads the files,
hands values to the pure simulator (simulate.py) and prints; bad input exits 2 with one line on stderr."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from pooling_operator.api import AutoscalingPolicy
from pooling_operator.api.policy import AutoscalingPolicySpec, policy_for
from pooling_operator.api.resources import Service
from pooling_operator.autoscaling.simulator import calibrate, plot
from pooling_operator.autoscaling.simulator.cotenants import NamespaceResult, run_namespace, tenant_for
from pooling_operator.autoscaling.simulator.routing import ROUTINGS
from pooling_operator.autoscaling.simulator.servicemodel import ServiceParams
from pooling_operator.autoscaling.simulator.simulate import (
    DEFAULT_SCRAPE_SECONDS,
    POLICIES,
    Result,
    Setup,
    setup_for,
    simulate,
    steady_start,
    to_json,
)
from pooling_operator.autoscaling.simulator.trace import InputError, Trace, parse_trace
from pooling_operator.manifests import ManifestError, load
from pooling_operator.vllm.validate import validate

EXIT_OK, EXIT_INPUT = 0, 2


def _flag(field: str) -> str:
    """The flag of a ServiceParams field: step_base_s -> --step-base-seconds (the parameters file's key, dashed)."""
    return "--" + calibrate.flag(field)


def _number(kind: type, positive: bool = False) -> Any:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"must be {'positive' if positive else 'non-negative'}: {text}")
        return value

    return parse


def _policies(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICIES[1:]]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown policy {unknown[0]!r}; known: {', '.join(POLICIES[1:])}")
    return names


def add_parser(subparsers: Any) -> None:
    """Register ``simulate`` on the main CLI's subparsers."""
    s = subparsers.add_parser(
        "simulate",
        help="replay a request trace through the service model and the autoscaler, offline",
        description="Replays TRACE (CSV: seconds,requests_per_second,mean_tokens; a step function whose last "
        "row lasts 60 s; Poisson arrivals) through a model of vLLM (defaults: the fit on real vLLM 0.32) and the "
        "operator's own autoscaling decision fed what Prometheus would return, and prints the replica timeline, "
        "the p99 per minute, SLO-minutes missed, replica-minutes and GPU-minutes. Exit 2 on bad input.",
    )
    s.add_argument("service", metavar="SERVICE.yaml", help="one PoolingService or ScoringService with spec.autoscaling "
                   "(an AutoscalingPolicy may follow as another document)")
    s.add_argument("--trace", required=True, metavar="TRACE.csv", help="the request trace")
    s.add_argument("--compare", type=_policies, default=[], metavar="POLICIES",
                   help=f"also run these on the same trace, comma-separated: {', '.join(POLICIES[1:])}")
    s.add_argument("--seed", type=int, default=0, help="seed of arrivals, routing and scrape phases (default 0)")
    s.add_argument("--routing", choices=ROUTINGS, default="even",
                   help="how requests reach ready replicas: even (a Kubernetes Service, the default), least-outstanding "
                        "(a front that sends each to the replica with the fewest in flight: what such a front would buy) or "
                        "power-of-two (vllm-router's powerOfTwo: the fewer in flight of two replicas at random)")
    s.add_argument("--output", choices=("text", "json"), default="text", help="text (default) or one JSON object")
    s.add_argument("--scrape-interval", type=_number(float, positive=True), default=DEFAULT_SCRAPE_SECONDS, metavar="SECONDS",
                   help=f"seconds between Prometheus scrapes of a pod (default {DEFAULT_SCRAPE_SECONDS:g})")
    s.add_argument("--initial-replicas", type=_number(int), metavar="N", help="replicas ready at the start (default: the fewest that meet the target at the "
                   "first row's rate, a steady start)")
    s.add_argument("--cotenant", action="append", default=[], metavar="SERVICE.yaml=TRACE.csv",
                   help="another service of the namespace with its own trace (repeatable): every service's pods share "
                   "time-sliced devices (resources.gpu.share; whole GPUs take a device each), busy co-tenants share a "
                   "device's time, and the namespace's device-minutes are printed (autoscaling/simulator/cotenants.py). "
                   "The service model, its flags and --initial-replicas apply to every service")
    s.add_argument("--plot", metavar="FILE", help="also draw the run (demand, replicas ready and asked for, p99 per "
                   "minute against the target) into FILE: .svg or .png (needs matplotlib, the 'plot' extra)")
    model = s.add_argument_group("service model (defaults: the fit; see autoscaling/servicemodel.py)")
    model.add_argument("--service-model", metavar="FILE", help="a parameters file (YAML, the flags' names below without "
                       "the dashes, as bench/realvllm_calibration.py --write FILE fits them); a flag given too wins")
    for f in dataclasses.fields(ServiceParams):
        metavar = "SECONDS" if f.name.endswith("_s") else "N" if isinstance(f.default, int) else "X"
        model.add_argument(_flag(f.name), dest=f"param_{f.name}", type=_number(type(f.default)), default=None,
                           metavar=metavar, help=f"default {f.default}")
    s.set_defaults(func=cmd_simulate)


def read_service(path: str) -> tuple[Service, AutoscalingPolicySpec | None]:
    """The one service of the file and the policy it follows (from the same file)."""
    docs = list(load([path]))
    results = [(doc, validate(doc.body)) for doc in docs]
    for doc, result in results:
        if result.errors:
            p = result.errors[0]
            raise InputError(f"{doc.file}: {result.kind}/{result.name}: {p.path}: {p.message}")
    policies = {r.resource.metadata.name: r.resource.spec for _, r in results if isinstance(r.resource, AutoscalingPolicy)}
    services = [(doc, r.resource) for doc, r in results if isinstance(r.resource, Service)]
    if len(services) != 1:
        kinds = ", ".join(sorted({r.kind for _, r in results})) or "no documents"
        raise InputError(f"{path}: expected exactly one PoolingService or ScoringService, found {len(services)} ({kinds})")
    doc, service = services[0]
    checked = validate(doc.body, None, policies or None)
    if checked.errors:
        p = checked.errors[0]
        raise InputError(f"{doc.file}: {checked.kind}/{checked.name}: {p.path}: {p.message}")
    assert isinstance(service, Service)
    return service, policy_for(service.spec.autoscaling, policies)


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc.strerror if isinstance(exc, OSError) else exc}") from None


def cmd_simulate(args: argparse.Namespace) -> int:
    try:
        resource, policy = read_service(args.service)
        try:
            trace = parse_trace(_read_text(args.trace))
        except InputError as exc:
            raise InputError(f"{args.trace}: {exc}") from None
        params = service_model(args, measured_startup(resource))
        setup = setup_for(resource, policy, params, seed=args.seed, scrape_interval=args.scrape_interval,
                          initial_replicas=args.initial_replicas, routing=args.routing)
        if args.cotenant:
            return cmd_cotenants(args, resource, setup, trace)
        results = simulate(resource, policy, trace, setup, args.compare)
    except (InputError, ManifestError) as exc:
        print(f"error: {str(exc).replace(chr(10), ' ')}", file=sys.stderr)
        return EXIT_INPUT
    if args.plot:
        try:
            picture = plot.render(results, trace, setup.p99_target, plot.format_of(args.plot),
                                  title=f"{Path(args.service).name} on {Path(args.trace).name}")
            Path(args.plot).write_bytes(picture)
        except (ValueError, plot.PlotUnavailable) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_INPUT
        except OSError as exc:
            print(f"error: --plot {args.plot}: {exc.strerror}", file=sys.stderr)
            return EXIT_INPUT
    if args.output == "json":
        print(json.dumps(to_json(results), separators=(",", ":")))
    else:
        measured = measured_startup(resource)
        if measured is not None and measured == setup.params.startup_s and args.param_startup_s is None:
            print(f"start-up {measured:g} s: the service's status.startup.typicalSeconds")
        print(render_text(results, setup.p99_target))
    return EXIT_OK


def cmd_cotenants(args: argparse.Namespace, resource: Service, setup: Setup, trace: Trace) -> int:
    """SERVICE.yaml and every --cotenant in one namespace (raises InputError, as cmd_simulate's body does)."""
    if args.compare or args.plot:
        raise InputError("--cotenant runs the operator's autoscaler on every service: --compare and --plot are for one service")
    tenants, devices = [], []
    for i, item in enumerate([f"{args.service}={args.trace}", *args.cotenant]):
        path, sep, trace_path = item.rpartition("=")
        if not sep or not path or not trace_path:
            raise InputError(f"--cotenant {item}: expected SERVICE.yaml=TRACE.csv")
        if i == 0:
            service, own = resource, steady_start(setup, trace)
        else:
            service, policy = read_service(path)
            try:
                own_trace = parse_trace(_read_text(trace_path))
            except InputError as exc:
                raise InputError(f"{trace_path}: {exc}") from None
            own = steady_start(setup_for(service, policy, setup.params, seed=args.seed + i, scrape_interval=args.scrape_interval,
                                         initial_replicas=args.initial_replicas, routing=args.routing), own_trace)
        tenant, device = tenant_for(service, own, trace if i == 0 else own_trace)
        tenants.append(tenant)
        devices.append((device, service))
    shared = [(d, s) for d, s in devices if d is not None]
    other = next(((d, s) for d, s in shared if d != shared[0][0]), None)
    if other is not None:
        a, b = shared[0][1], other[1]
        raise InputError(f"{a.kind}/{a.metadata.name} and {b.kind}/{b.metadata.name}: shares of different devices "
                         "(spec.resources.gpu.product or memory): co-tenants share one kind of device")
    seen: set[str] = set()
    for t in tenants:
        if t.name in seen:
            raise InputError(f"--cotenant: {t.name} is there twice: every service of the namespace needs its own kind and name")
        seen.add(t.name)
    sizes = {d for d, _ in shared}
    device = sizes.pop() if sizes else 1  # whole GPUs only: each pod takes a device, whatever its size
    result = run_namespace(tenants, device)
    if args.output == "json":
        print(json.dumps(cotenants_json(result), separators=(",", ":")))
    else:
        lines = [f"{len(tenants)} services, {result.devices} devices"]
        for name, r in result.services.items():
            lines.append(f"{name}: SLO-minutes missed {r.slo_minutes_missed}/{len(r.minutes)}, GPU-minutes {r.gpu_minutes:.2f}, "
                         f"replica-minutes {r.replica_minutes:.1f}, max replicas {r.max_replicas}")
        lines.append(f"namespace: SLO-minutes missed {result.slo_minutes_missed}, GPU-minutes (charged) {result.gpu_minutes:.2f}, "
                     f"device-minutes {result.device_minutes:.1f}")
        print("\n".join(lines))
    return EXIT_OK


def cotenants_json(result: NamespaceResult) -> dict[str, Any]:
    return {
        "services": to_json(result.services)["results"],
        "namespace": {"slo_minutes_missed": result.slo_minutes_missed, "gpu_minutes": round(result.gpu_minutes, 3),
                      "device_minutes": round(result.device_minutes, 3), "devices": result.devices},
    }


def measured_startup(resource: Service) -> float | None:
    """The service's own typical start-up when the file carries its status (`kubectl get -o yaml`)."""
    startup = resource.status.startup if resource.status is not None else None
    value = startup.typical_seconds if startup is not None else None
    return value if value is not None and value > 0 else None


def service_model(args: argparse.Namespace, startup_s: float | None = None) -> ServiceParams:
    """The service model: the defaults, then the --service-model file, then the service's own measured start-up
    (status.startup.typicalSeconds, when the file has a status), then the flags given."""
    base = ServiceParams()
    if args.service_model:
        try:
            content = yaml.safe_load(_read_text(args.service_model))
            base = calibrate.from_file(content)
        except (ValueError, yaml.YAMLError) as exc:
            raise InputError(f"{args.service_model}: {str(exc).splitlines()[0]}") from None
        except InputError as exc:
            raise InputError(f"{args.service_model}: {exc}") from None
    if startup_s is not None:
        base = dataclasses.replace(base, startup_s=startup_s)
    given = {f.name: getattr(args, f"param_{f.name}") for f in dataclasses.fields(ServiceParams)}
    try:
        return dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise InputError(f"service model: {exc}") from None


def render_text(results: dict[str, Result], target: float) -> str:
    """A summary line per policy, then per policy its minutes (replicas and ready at each minute's end) and the
    times its replicas changed."""
    oracle = results.get("oracle")
    lines = [f"p99 target {target:g}s"]
    for name, r in results.items():
        ratio = f", {r.gpu_minutes / oracle.gpu_minutes:.2f}x the oracle's GPU-minutes" if oracle and oracle.gpu_minutes else ""
        lines.append(f"{name}: SLO-minutes missed {r.slo_minutes_missed}/{len(r.minutes)}, GPU-minutes {r.gpu_minutes:.1f}, "
                     f"replica-minutes {r.replica_minutes:.1f}, max replicas {r.max_replicas}{ratio}")
    for name, r in results.items():
        lines += ["", f"{name}", "  minute  completed  replicas  ready  p99 s"]
        for m in r.minutes:
            at_end = [e for e in r.timeline if e.t <= (m.minute + 1) * 60]
            replicas, ready = (at_end[-1].replicas, at_end[-1].ready) if at_end else (0, 0)
            p99 = f"{m.p99:.3f}" if m.p99 is not None else "-"
            lines.append(f"  {m.minute:6d}  {m.completed:9d}  {replicas:8d}  {ready:5d}  {p99}{'  missed' if m.missed else ''}")
        changes, last = [], (-1, -1)
        for e in r.timeline:
            if (e.replicas, e.ready) != last:
                changes.append(f"{e.t:g}s {e.replicas}/{e.ready}")
                last = (e.replicas, e.ready)
        lines.append("  replicas/ready: " + ", ".join(changes))
    return "\n".join(lines)
