"""pooling-operator: validate | render | crds (offline), run (the operator), hidden-states run (the Job driver),
pooling-job run|preflight (a PoolingJob's driver), model-cache fill (a ModelCache's fill Job), compile-cache restore|save (a service pod's compile cache)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pooling_operator import GROUP, OPERATOR_IMAGE, __version__
from pooling_operator.api import AutoscalingPolicy, ModelCache
from pooling_operator.api.crd import all_crds
from pooling_operator.api.policy import policy_for
from pooling_operator.api.resources import GpuSharer, Service
from pooling_operator.autoscaling.simulator.cli import add_parser as add_simulate_parser
from pooling_operator.builders import BuildContext, CacheMount, plan
from pooling_operator.builders.caches import build_cache, claim_name
from pooling_operator.builders.caches import revision as cache_revision
from pooling_operator.checks import check, report_json, report_text, summary_line
from pooling_operator.manifests import ManifestError, dump_all
from pooling_operator.pods.compile_cache.cli import add_parser as add_compile_cache_parser
from pooling_operator.pods.hidden_states.cli import add_parser as add_hidden_states_parser
from pooling_operator.pods.model_cache.cli import add_parser as add_model_cache_parser
from pooling_operator.pods.vectors.cli import add_parser as add_pooling_job_parser
from pooling_operator.status.services import share_status
from pooling_operator.vllm.settings import KEDA_HTTP_INTERCEPTOR, KEDA_HTTP_SCALER, Settings
from pooling_operator.vllm.validate import Result, problem_line

EXIT_OK, EXIT_INVALID, EXIT_INPUT = 0, 1, 2
API_SERVER_MAX_NESTING = 10_000  # what kube-apiserver's JSON decoder accepts


def _shard(text: str) -> Any:
    from pooling_operator.runtime.shards import parse

    try:
        return parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(allow_trust_remote_code=args.allow_trust_remote_code, hub_endpoint=args.hub_endpoint,
                    keda_http_interceptor=args.keda_http_interceptor, keda_http_scaler=args.keda_http_scaler)


def _share_note(where: str, result: Result, out: Any) -> None:
    share = share_status(result.resource, result.workload) if isinstance(result.resource, GpuSharer) and result.workload else None
    if share:
        print(
            f"{where}: {result.kind}/{result.name}: spec.resources.gpu.share: note: {share['memory']} for a minimum of "
            f"{share['basis']}; --gpu-memory-utilization {share.get('gpuMemoryUtilization')}, {share['gpus']} GPU",
            file=out,
        )


def cmd_validate(args: argparse.Namespace) -> int:
    checked = check(args.paths, _settings(args), strict_kinds=args.strict_kinds)
    if not checked.results and not checked.skipped:
        print("no documents found", file=sys.stderr)
        return EXIT_INPUT
    if args.output == "json":
        report_json(checked, sys.stdout)
    else:
        report_text(checked, sys.stdout, sys.stderr, share_note=_share_note)
    return EXIT_OK if checked.ok else EXIT_INVALID


def cmd_render(args: argparse.Namespace) -> int:
    settings = _settings(args)
    checked = check(args.paths, settings, strict_kinds=args.strict_kinds)
    results = [(doc.where, result) for doc, result in checked.results]
    policies = {r.resource.metadata.name: r.resource.spec for _, r in results if isinstance(r.resource, AutoscalingPolicy) and r.ok}
    caches = {(r.resource.metadata.namespace or "default", r.resource.metadata.name): r.resource
              for _, r in results if isinstance(r.resource, ModelCache) and r.ok}
    status = EXIT_OK
    objects: list[dict[str, Any]] = []
    lines: list[str] = []
    for file, result in results:
        if not result.ok:
            for problem in result.problems:
                print(f"{file}: {problem_line(result, problem)}", file=sys.stderr)
            status = EXIT_INVALID
            continue
        resource = result.resource
        if resource is None or isinstance(resource, AutoscalingPolicy):
            continue
        if isinstance(resource, ModelCache):
            objects += [] if args.vllm_args else build_cache(resource, args.operator_image, args.hub_endpoint)
            continue
        assert result.contract is not None  # a valid resource has a supported version
        source = resource.spec.model.source
        mount = None
        if source is not None and source.cache is not None:
            # Offline there is no status: the cache must be rendered with it, and its spec's revision stands in
            # for the commit it will hold.
            cache = caches.get((resource.metadata.namespace or "default", source.cache.name))
            if cache is None:
                print(f"{file}: {result.kind}/{result.name}: spec.model.source.cache.name: ModelCache "
                      f"{source.cache.name!r} is not among the files rendered; render them together", file=sys.stderr)
                status = EXIT_INVALID
                continue
            mount = CacheMount(claim_name(cache), cache_revision(cache))
        ctx = BuildContext(operator_image=args.operator_image, policy=policy_for(resource.spec.autoscaling if isinstance(resource, Service) else None, policies),
                           model_cache=mount, settings=settings)
        p = plan(resource, result.contract, ctx, result.workload)  # the reconcile's path
        if args.vllm_args:
            lines.append(f"{resource.kind}/{resource.metadata.namespace or 'default'}/{resource.metadata.name}:")
            lines.append(shlex.join(p.argv))
        else:
            objects += p.objects
    if args.vllm_args:
        if lines:
            print("\n".join(lines))
    elif objects:
        sys.stdout.write(dump_all(objects))
    if checked.skipped:
        print(summary_line(checked), file=sys.stderr)
    return status


def cmd_crds(args: argparse.Namespace) -> int:
    crds = all_crds()
    if args.output_dir:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for crd in crds:
            plural = crd["spec"]["names"]["plural"]
            (out / f"{GROUP}_{plural}.yaml").write_text(dump_all([crd]), encoding="utf-8")
    else:
        sys.stdout.write(dump_all(crds))
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """The operator: kopf (standalone in every replica) with our handlers, a Lease deciding which replica
    acts, a metrics port and a health endpoint."""
    import asyncio
    import logging
    import os
    import random
    import socket

    import kopf
    from prometheus_client import start_http_server

    import pooling_operator.handlers

    if args.webhook_port:
        import pooling_operator.handlers.admission  # noqa: F401  (registers the validating webhook)
    from pooling_operator.k8s.api import Kube
    from pooling_operator.k8s.cache import Cache
    from pooling_operator.reconcile import Context
    from pooling_operator.runtime import Leadership, Runtime
    from pooling_operator.runtime.shards import Sharding

    # The API server stores objects nested up to 10,000 levels deep; kopf reads every watched object with
    # Python's json, which gives up at the recursion limit (1,000 by default), and a watcher that fails stops
    # the operator: one such object in any namespace would stop it for everyone, at every restart. With the
    # limit raised it is read, then refused by validation (MAX_NESTING) with SpecValid=False.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * API_SERVER_MAX_NESTING))
    level = logging.DEBUG if args.verbose else getattr(logging, args.log_level.upper())
    handler = logging.StreamHandler()
    if args.log_format == "json":  # one JSON object a line, for log pipelines (python-json-logger, kopf's own dependency)
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s",
                                           rename_fields={"asctime": "time", "levelname": "level", "name": "logger"}))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    if level > logging.DEBUG:
        # kopf logs every handler call at INFO ("Handler ... succeeded"): thousands of lines a minute at scale,
        # saying nothing our own log lines (writes, refusals, retries) do not.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=args.bind)
    identity = f"{socket.gethostname()}/{os.getpid()}/{random.SystemRandom().getrandbits(32):08x}"
    kube = Kube()
    ctx = Context(kube=kube, cache=Cache(), settings=_settings(args), operator_image=args.operator_image)
    sharding: Sharding = args.shard
    leadership = None if args.standalone else Leadership(kube, sharding.lease_name(args.lease_name), args.lease_namespace, identity)
    if sharding.sharded:
        logging.getLogger(__name__).info("Shard %s: the namespaces whose sha256 mod %d is %d; Lease %s", sharding,
                                         sharding.count, sharding.index, sharding.lease_name(args.lease_name))
    runtime = Runtime(ctx, leadership, namespaces=list(args.namespace or []), watch=True, sharding=sharding)
    memo = kopf.Memo(ctx=ctx, runtime=runtime, webhook=None)
    if args.webhook_port:
        cert_dir = Path(args.webhook_cert_dir)
        memo.webhook = {"addr": args.webhook_bind, "port": args.webhook_port, "file_check_interval": 10.0,
                        "certfile": str(cert_dir / "tls.crt"), "pkeyfile": str(cert_dir / "tls.key")}  # fmt: skip
        if args.webhook_secret:
            from pooling_operator.runtime.webhook_certs import WebhookCertificate

            runtime.webhook_cert = WebhookCertificate(
                kube, args.lease_namespace, args.webhook_secret, list(args.webhook_cert_name or []), cert_dir,
                configuration=args.webhook_configuration, manage=not args.webhook_cert_manager,
            )
    if args.readiness_port:
        runtime.readiness = (args.bind, args.readiness_port)
    if args.pod_addresses_from:  # a test harness's pods listen on loopback ports (e2e/podrunner), not on their IPs
        from pooling_operator.runtime.space_gate import runner_records

        runtime.pod_address = runner_records(Path(args.pod_addresses_from))
    liveness = f"http://{args.bind}:{args.health_port}/healthz" if args.health_port else None
    asyncio.run(
        kopf.operator(
            clusterwide=not args.namespace,
            namespaces=args.namespace or (),
            standalone=True,  # kopf's own peering is not used: the Lease decides who acts
            identity=identity,  # type: ignore[arg-type]
            liveness_endpoint=liveness,
            memo=memo,
        )
    )
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pooling-operator", description=__doc__)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def settings_flags(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--allow-trust-remote-code",
            action="store_true",
            help="accept model.trustRemoteCode: true, and extraArgs/env that load code not part of vLLM (the operator's setting of the same name)",
        )
        sp.add_argument(
            "--hub-endpoint", default=None, metavar="URL",
            help="the Hugging Face endpoint a ModelCache's fill Job downloads from, e.g. a mirror (default: huggingface.co)",
        )
        sp.add_argument(
            "--keda-http-interceptor", default=KEDA_HTTP_INTERCEPTOR, metavar="URL",
            help="the KEDA HTTP add-on's interceptor proxy, published as status.endpoint of a service it fronts "
            f"(autoscaling.front.kedaHttpAddOn; default {KEDA_HTTP_INTERCEPTOR})",
        )
        sp.add_argument(
            "--keda-http-scaler", default=KEDA_HTTP_SCALER, metavar="HOST:PORT",
            help=f"the add-on's external scaler, named by a keda backend's external-push trigger (default {KEDA_HTTP_SCALER})",
        )

    v = sub.add_parser("validate", help="validate resources offline; one line per problem, then a summary")
    v.add_argument("paths", nargs="+", metavar="PATH", help="YAML files or folders (their *.yaml/*.yml, recursively)")
    v.add_argument("-o", "--output", choices=("text", "json"), default="text",
                   help="text lines (default), or one JSON document: every problem and notice, and the summary")
    v.add_argument("--strict-kinds", action="store_true",
                   help="refuse documents of other API groups (default: skip and count them, as a GitOps folder holds them)")
    settings_flags(v)
    v.set_defaults(func=cmd_validate)

    r = sub.add_parser("render", help="print the objects the operator would create")
    r.add_argument("paths", nargs="+", metavar="PATH")
    r.add_argument("--vllm-args", action="store_true", help="print each resource's vLLM command line instead")
    r.add_argument("--strict-kinds", action="store_true",
                   help="refuse documents of other API groups (default: skip and count them)")
    r.add_argument("--operator-image", default=OPERATOR_IMAGE, help=f"image of the hidden-state driver and the ModelCache fill (default {OPERATOR_IMAGE})")
    settings_flags(r)
    r.set_defaults(func=cmd_render)

    o = sub.add_parser("run", help="run the operator (kopf) against the cluster of KUBECONFIG or in-cluster config")
    o.add_argument("-n", "--namespace", action="append", help="watch only this namespace (repeatable); default: all")
    o.add_argument("--metrics-port", type=int, default=8080, help="Prometheus metrics port (0: off; default 8080)")
    o.add_argument("--health-port", type=int, default=8081, help="liveness endpoint /healthz port (0: off; default 8081)")
    o.add_argument("--bind", default="0.0.0.0", help="address of the metrics and health endpoints")
    o.add_argument("--lease-name", default="vllm-pooling-operator", help="the coordination.k8s.io Lease replicas compete for")
    o.add_argument(
        "--lease-namespace", default=os.environ.get("POD_NAMESPACE") or "default",
        help="namespace of the Lease (default: $POD_NAMESPACE, else default)",
    )
    o.add_argument("--shard", type=_shard, default="0/1", metavar="I/N",
                   help="run as shard I of N: reconcile only the namespaces whose sha256 mod N is I, with a Lease of its "
                   "own (<lease-name>-shard-I-of-N); shard 0 writes the AutoscalingPolicies' status (default 0/1: one "
                   "operator for every namespace)")
    o.add_argument("--standalone", action="store_true", help="no Lease: act at once (a single replica or local runs)")
    o.add_argument("--operator-image", default=OPERATOR_IMAGE, help="image of the hidden-state driver and the ModelCache fill")
    o.add_argument(
        "--webhook-port", type=int, default=0,
        help="serve the validating admission webhook over HTTPS on this port (0: off; the Helm chart uses 9443)",
    )
    o.add_argument("--webhook-bind", default="0.0.0.0", help="address of the webhook server")
    o.add_argument(
        "--webhook-cert-dir", default="/etc/vllm-pooling-operator/webhook",
        help="folder of the webhook's serving certificate tls.crt and key tls.key (re-read when they change); with "
        "--webhook-secret the operator writes them there",
    )
    o.add_argument(
        "--webhook-secret", metavar="NAME",
        help="the Secret (in --lease-namespace) that keeps the webhook's serving certificate: filled by the first replica "
        "up, renewed by the leader before it expires, loaded by every replica (the Helm chart renders it empty)",
    )
    o.add_argument(
        "--webhook-cert-name", action="append", metavar="NAME",
        help="a DNS name or IP address the serving certificate is for (repeatable; the webhook Service's names)",
    )
    o.add_argument("--webhook-configuration", metavar="NAME",
                   help="the ValidatingWebhookConfiguration whose caBundle the leader keeps to the certificate's CA")
    o.add_argument("--webhook-cert-manager", action="store_true",
                   help="cert-manager writes --webhook-secret and injects the CA: only read it")
    o.add_argument("--readiness-port", type=int, default=0,
                   help="readiness endpoint /readyz port (0: off): ready once the webhook's certificate is loaded")
    o.add_argument("--pod-addresses-from", metavar="DIR",
                   help="test harness only: reach pods at the loopback ports the test pod runner records in DIR/pods/ "
                   "(e2e/podrunner) instead of their pod IPs (the space gate's canaries)")
    o.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info", help="default info")
    o.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="text lines, or one JSON object a line (time, level, logger, message)")
    o.add_argument("-v", "--verbose", action="store_true", help="the same as --log-level debug")
    settings_flags(o)
    o.set_defaults(func=cmd_run)

    add_hidden_states_parser(sub)
    add_pooling_job_parser(sub)
    add_model_cache_parser(sub)
    add_compile_cache_parser(sub)
    add_simulate_parser(sub)

    c = sub.add_parser("crds", help="print the CustomResourceDefinitions")
    c.add_argument("--output-dir", help="write one file per CRD into this folder instead")
    c.set_defaults(func=cmd_crds)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:  # pragma: no cover - e.g. `| head`
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
