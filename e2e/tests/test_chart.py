"""The Helm chart (charts/vllm-pooling-operator) with a real helm built from the Go module proxy (e2e/kube/build.py
TOOLS): lint, templates per mode, the values schema, and the facts that must have one source."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.kube import build

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "vllm-pooling-operator"
RELEASE, NAMESPACE = "vllm-pooling-operator", "vllm-pooling-operator"
KUBE = "1.35.4"  # the control plane e2e/cluster/k8s builds
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.fixture(scope="module")
def helm() -> Path:
    return build.tool("helm")


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)


def template(helm: Path, *sets: str) -> list[dict[str, Any]]:
    res = run_helm(helm, "template", RELEASE, str(CHART), "-n", NAMESPACE, "--kube-version", KUBE, *[a for s in sets for a in ("--set", s)])
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def rbac_manifest(docs: list[dict[str, Any]]) -> str:
    """deploy/rbac.yaml: the chart's RBAC for the default release, plus the namespace it lives in."""
    head = (
        "# Least-privilege RBAC for the operator, rendered from charts/vllm-pooling-operator (the one source):\n"
        "#   helm template vllm-pooling-operator charts/vllm-pooling-operator -n vllm-pooling-operator (RBAC kinds)\n"
        "# `make deploy` rewrites it; e2e/tests/test_chart.py fails when it drifts. The operator-tier tests run the\n"
        "# operator with exactly this ServiceAccount's token, so a missing permission fails a test.\n"
    )
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    picked = [ns] + [d for d in docs if d["kind"] in RBAC_KINDS]
    return head + yaml.safe_dump_all(picked, sort_keys=False)


def test_lint_strict_in_every_mode(helm: Path) -> None:
    for sets in ([], ["watchNamespaces={search,research}"], ["webhook.enabled=false,crds.install=false"],
                 ["metrics.serviceMonitor.enabled=true,defaultPolicy.enabled=true,replicaCount=2,alerts.enabled=true,dashboards.enabled=true"],
                 ["webhook.certManager.enabled=true"], ["replicas=3"]):  # fmt: skip
        res = run_helm(helm, "lint", "--strict", str(CHART), *[a for s in sets for a in ("--set", s)])
        assert res.returncode == 0, (sets, res.stdout, res.stderr)


def test_crds_in_the_chart_are_the_repository_crds(helm: Path) -> None:
    files = sorted((CHART / "files" / "crds").glob("*.yaml"))
    assert [f.name for f in files] == sorted(f.name for f in (REPO / "crds").glob("*.yaml"))
    for f in files:
        assert f.read_bytes() == (REPO / "crds" / f.name).read_bytes(), f"{f.name}: copy crds/ into the chart"
    rendered = {d["metadata"]["name"]: d for d in template(helm) if d["kind"] == "CustomResourceDefinition"}
    for f in files:
        src = yaml.safe_load(f.read_text())
        got = rendered[src["metadata"]["name"]]
        assert got["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert got["spec"] == src["spec"]


def test_every_label_and_annotation_renders_as_a_string(helm: Path) -> None:
    """A value rendered bare that YAML reads as a number or a boolean (a hash of digits, `true`) is refused by the
    API server in a label or annotation."""
    res = run_helm(helm, "template", RELEASE, str(CHART), "-n", NAMESPACE, "--kube-version", KUBE, "--set", "shards=2")
    assert res.returncode == 0, res.stderr
    for doc in (d for d in yaml.safe_load_all(res.stdout) if d):
        for meta in (doc["metadata"], ((doc.get("spec") or {}).get("template") or {}).get("metadata") or {}):
            for key in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in (meta.get(key) or {}).values()), (doc["kind"], key, meta.get(key))


VALUE_SETS = ([], ["webhook.certManager.enabled=true"], ["webhook.url=https://127.0.0.1:9443"], ["shards=3", "replicaCount=2"],
              ["watchNamespaces={search,research}"], ["webhook.enabled=false"])


@pytest.mark.parametrize("sets", VALUE_SETS, ids=lambda s: ",".join(s) or "defaults")
def test_helm_template_gives_the_same_bytes_every_time_and_no_key_material(helm: Path, sets: list[str]) -> None:
    """Argo CD renders with `helm template` and compares: a chart that generates a certificate in a template is
    OutOfSync for ever and rotates it on every sync. Two runs, the same bytes; nothing a key or CA could be."""
    args = ["template", RELEASE, str(CHART), "-n", NAMESPACE, "--kube-version", KUBE, *[a for s in sets for a in ("--set", s)]]
    first, second = run_helm(helm, *args), run_helm(helm, *args)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert "BEGIN" not in first.stdout and "caBundle" not in first.stdout and "checksum/" not in first.stdout
    for doc in (d for d in yaml.safe_load_all(first.stdout) if d):
        if doc["kind"] == "Secret":
            assert not doc.get("data") and not doc.get("stringData"), doc  # filled by the operator at run time


def test_cert_manager_with_no_issuer_gets_a_self_signed_one(helm: Path) -> None:
    docs = template(helm, "webhook.certManager.enabled=true", "webhook.url=https://127.0.0.1:9443")
    [issuer] = [d for d in docs if d["kind"] == "Issuer"]
    [cert] = [d for d in docs if d["kind"] == "Certificate"]
    assert issuer["spec"] == {"selfSigned": {}} and cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}
    assert cert["spec"]["ipAddresses"] == ["127.0.0.1"] and all(n.endswith((".svc", ".svc.cluster.local")) for n in cert["spec"]["dnsNames"])
    assert not [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == cert["spec"]["secretName"]]  # cert-manager's
    [dep] = [d for d in docs if d["kind"] == "Deployment"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--webhook-cert-manager" in args and not any(a.startswith("--webhook-configuration") for a in args)
    given = template(helm, "webhook.certManager.enabled=true", "webhook.certManager.issuerRef.name=corp-ca",
                     "webhook.certManager.issuerRef.kind=ClusterIssuer")
    assert not [d for d in given if d["kind"] == "Issuer"]
    assert next(d for d in given if d["kind"] == "Certificate")["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}


def test_values_production_asks_for(helm: Path) -> None:
    docs = template(helm, "replicaCount=3", "priorityClassName=system-cluster-critical", "fullnameOverride=vpo",
                    "topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
                    "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway", "extraEnv[0].name=HTTPS_PROXY",
                    "extraEnv[0].value=http://proxy:3128", "extraEnvFrom[0].secretRef.name=proxy", "logFormat=json",
                    "logLevel=debug", "image.digest=sha256:" + "a" * 64, "global.imageRegistry=mirror.example")
    [dep] = [d for d in docs if d["kind"] == "Deployment"]
    [pdb] = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    pod = dep["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert dep["metadata"]["name"] == "vpo" and dep["spec"]["replicas"] == 3 and pod["priorityClassName"] == "system-cluster-critical"
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    [spread] = pod["topologySpreadConstraints"]
    assert spread["labelSelector"] == {"matchLabels": dep["spec"]["selector"]["matchLabels"]}
    assert {"name": "HTTPS_PROXY", "value": "http://proxy:3128"} in c["env"] and c["envFrom"] == [{"secretRef": {"name": "proxy"}}]
    assert {"--log-format=json", "--log-level=debug"} <= set(c["args"])
    assert c["image"] == "ghcr.io/vllm-pooling-operator/vllm-pooling-operator@sha256:" + "a" * 64
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    rules = yaml.safe_load((CHART / "values.yaml").read_text())["alerts"]["runbookURL"]
    assert rules.startswith("https://github.com/vllm-pooling-operator/vllm-pooling-operator/")


def test_the_chart_works_as_a_subchart(helm: Path, tmp_path: Path) -> None:
    """A parent chart passes `global` to every subchart (helm/helm#10392): the schema must accept it."""
    parent = tmp_path / "platform"
    (parent / "charts").mkdir(parents=True)
    (parent / "Chart.yaml").write_text("apiVersion: v2\nname: platform\nversion: 1.0.0\n")
    (parent / "values.yaml").write_text("global: {imageRegistry: mirror.example}\nvllm-pooling-operator: {replicaCount: 2}\n")
    import shutil

    shutil.copytree(CHART, parent / "charts" / "vllm-pooling-operator")
    res = run_helm(helm, "template", "p", str(parent), "--kube-version", KUBE)
    assert res.returncode == 0, res.stderr
    [dep] = [d for d in yaml.safe_load_all(res.stdout) if d and d["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 2


def test_operator_pod_is_restricted_and_probed(helm: Path) -> None:
    [dep] = [d for d in template(helm) if d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] and isinstance(pod["securityContext"]["runAsUser"], int)
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert "--webhook-port=9443" in c["args"]


def test_shards_are_one_deployment_each_with_its_own_selector_and_shard_flag(helm: Path) -> None:
    [one] = [d for d in template(helm) if d["kind"] == "Deployment"]
    assert not any(a.startswith("--shard") for a in one["spec"]["template"]["spec"]["containers"][0]["args"])
    deps = [d for d in template(helm, "shards=3", "replicaCount=2") if d["kind"] == "Deployment"]
    assert [d["metadata"]["name"] for d in deps] == [f"{one['metadata']['name']}-shard-{i}" for i in range(3)]
    for i, d in enumerate(deps):
        selector = d["spec"]["selector"]["matchLabels"]
        assert selector["vllm-pooling.io/shard"] == str(i) and d["spec"]["replicas"] == 2
        assert selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        assert f"--shard={i}/3" in d["spec"]["template"]["spec"]["containers"][0]["args"]


def test_rbac_has_no_wildcards_and_namespaced_mode_writes_nothing_cluster_wide(helm: Path) -> None:
    for docs in (template(helm), template(helm, "watchNamespaces={search,research}")):
        for d in docs:
            for rule in d.get("rules") or []:
                assert "*" not in json.dumps(rule), (d["kind"], rule)
    namespaced = template(helm, "watchNamespaces={search,research}")
    [cluster_role] = [d for d in namespaced if d["kind"] == "ClusterRole"]
    writes = [r for r in cluster_role["rules"] if {"create", "update", "patch", "delete"} & set(r["verbs"])]
    own_webhook = {"resources": ["validatingwebhookconfigurations"], "resourceNames": [f"{RELEASE}"], "verbs": ["get", "patch"],
                   "apiGroups": ["admissionregistration.k8s.io"]}  # its caBundle, on the operator's own object only
    assert all(r["resources"] == ["autoscalingpolicies/status"] or r == own_webhook for r in writes), writes
    roles = {d["metadata"]["namespace"] for d in namespaced if d["kind"] == "Role" and not d["metadata"]["name"].endswith("-self")}
    assert roles == {"search", "research"}
    [dep] = [d for d in namespaced if d["kind"] == "Deployment"]
    assert {"--namespace=search", "--namespace=research"} <= set(dep["spec"]["template"]["spec"]["containers"][0]["args"])


# What the operator does with each role of api/kinds.py's table (the one list of kinds): a kind added there without
# the chart's permission fails here, not in a cluster.
ROLE_VERBS = {
    "owner": {"get", "list", "watch"},
    "policy": {"get", "list", "watch"},
    "child": {"get", "list", "watch", "create", "patch", "update", "delete"},
    "pod": {"get", "list", "watch"},
    "queue": {"get", "list", "watch"},
    "namespace": {"get", "list", "watch"},
    "read": {"get"},  # a Secret a policy names, in the operator's own namespace
}
STATUS_ROLES = ("owner", "policy")  # their status subresource is written: get, patch, update


@pytest.mark.parametrize("sets", [(), ("watchNamespaces={team-a}",)], ids=["cluster-wide", "namespaced"])
def test_rbac_grants_what_every_kind_of_the_kinds_table_needs(helm: Path, sets: tuple[str, ...]) -> None:
    from pooling_operator.api.kinds import KINDS

    docs = template(helm, *sets)
    granted: dict[tuple[str, str], set[str]] = {}
    for d in docs:
        if d.get("kind") in ("ClusterRole", "Role"):
            for rule in d.get("rules") or []:
                for group in rule.get("apiGroups") or []:
                    for resource in rule.get("resources") or []:
                        granted.setdefault((group, resource), set()).update(rule.get("verbs") or [])
    missing = []
    for kind in KINDS.values():
        group = kind.api_version.rsplit("/", 1)[0] if "/" in kind.api_version else ""
        wants = {kind.plural: ROLE_VERBS.get(kind.role or "", set())}
        if kind.role in STATUS_ROLES:
            wants[f"{kind.plural}/status"] = {"get", "patch", "update"}
        if kind.kind == "Event":
            wants[kind.plural] = {"create"}
        for resource, verbs in wants.items():
            if lacking := verbs - granted.get((group, resource), set()):
                missing.append(f"{kind.kind}: {group or 'core'}/{resource} {sorted(lacking)}")
    assert not missing, "the chart's RBAC lacks: " + "; ".join(missing)


def test_deploy_rbac_is_rendered_from_the_chart(helm: Path) -> None:
    want = rbac_manifest(template(helm))
    path = REPO / "deploy" / "rbac.yaml"
    if path.read_text() != want and __import__("os").environ.get("UPDATE_DEPLOY"):
        path.write_text(want)
    assert path.read_text() == want, "deploy/rbac.yaml drifted from the chart: run `make deploy`"


@pytest.mark.parametrize(
    ("sets", "field"),
    [("replicaCount=0", "replicaCount"), ("replicas=0", "replicas"), ("shards=0", "shards"),
     ("image.digest=latest", "digest"), ("logFormat=xml", "logFormat"), ("alerts.runbookURL=docs/alerts.md", "runbookURL"), ("webhook.failurePolicy=Sometimes", "failurePolicy"),
     ("watchNamespaces[0]=Not_A_Namespace", "watchNamespaces"), ("nosuchvalue=1", "nosuchvalue")],
)  # fmt: skip
def test_bad_values_fail_with_the_field_named(helm: Path, sets: str, field: str) -> None:
    res = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE, "--set", sets)
    assert res.returncode != 0
    assert "values don't meet the specifications of the schema" in res.stderr and field in res.stderr, res.stderr


def test_chart_readme_lists_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def flat(prefix: str, v: Any) -> list[str]:
        if isinstance(v, dict) and v:
            return [k for key, x in v.items() for k in flat(f"{prefix}.{key}" if prefix else key, x)]
        return [prefix]

    keys = [k for key, v in values.items() for k in flat(key, v)]
    readme = (CHART / "README.md").read_text()
    table = [line.split("`")[1] for line in readme.splitlines() if line.startswith("| `")]
    assert table == keys


def test_chart_registers_every_path_the_operator_serves(helm: Path) -> None:
    """Every kind of ours (the chart reads them from the CRDs it ships), at its path and in its scope."""
    from pooling_operator.api.resources import KINDS
    from pooling_operator.handlers.admission import WEBHOOK_PATHS

    scopes = {info.plural: "Namespaced" if info.namespaced else "Cluster" for info in KINDS.values()}
    for sets, key in (([], "service"), (["webhook.url=https://127.0.0.1:9443"], "url")):
        [cfg] = [d for d in template(helm, *sets) if d["kind"] == "ValidatingWebhookConfiguration"]
        got = {}
        for hook in cfg["webhooks"]:
            [rule] = hook["rules"]
            where = hook["clientConfig"][key]
            got[rule["resources"][0]] = where["path"] if key == "service" else where.removeprefix("https://127.0.0.1:9443")
            assert rule["scope"] == scopes[rule["resources"][0]], rule
        assert got == WEBHOOK_PATHS and set(got) == set(scopes)


def test_the_image_tag_default_is_the_one_render_uses_and_the_docs_say_so(helm: Path) -> None:
    """values.yaml once said the tag defaults to the appVersion (0.1.0) while the chart rendered v0.1.0: the
    rendered image, `render`'s default and both docs name the same tag."""
    from pooling_operator import OPERATOR_IMAGE

    [dep] = [d for d in template(helm) if d["kind"] == "Deployment"]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == OPERATOR_IMAGE
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert OPERATOR_IMAGE.endswith(f":v{app_version}")
    assert "defaults to v<appVersion>" in (CHART / "values.yaml").read_text()
    assert "`v<appVersion>`" in (CHART / "README.md").read_text()
    url = [d for d in template(helm, "webhook.url=https://hooks.example:9443/") if d["kind"] == "ValidatingWebhookConfiguration"]
    paths = {h["clientConfig"]["url"] for h in url[0]["webhooks"]}
    assert "https://hooks.example:9443/validate-poolingservices" in paths  # the base URL, each kind's path appended
    assert "/validate-<plural>" in (CHART / "values.yaml").read_text() and "/validate-<plural>" in (CHART / "README.md").read_text()


def test_alert_rules_are_the_rules_file_with_the_runbook_url_and_off_by_default(helm: Path) -> None:
    """The PrometheusRule holds charts/.../files/alerts.yaml as written (tested by promtool in tests/test_alerts.py),
    each runbook_url pointing at the value given; the ServiceMonitor keeps the resources' own namespace label."""
    assert not [d for d in template(helm) if d["kind"] == "PrometheusRule"]
    url = "https://git.example.com/platform/vpo/blob/main/docs/alerts.md"
    [rule] = [d for d in template(helm, "alerts.enabled=true", f"alerts.runbookURL={url}", "alerts.labels.release=kube-prom")
              if d["kind"] == "PrometheusRule"]  # fmt: skip
    written = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text().replace("@RUNBOOK@", url))
    assert rule["spec"] == {"groups": written["groups"]} and rule["metadata"]["labels"]["release"] == "kube-prom"
    assert all(r["annotations"]["runbook_url"].startswith(url + "#") for g in rule["spec"]["groups"] for r in g["rules"])
    [monitor] = [d for d in template(helm, "metrics.serviceMonitor.enabled=true") if d["kind"] == "ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_dashboards_are_the_generated_files_in_configmaps_the_grafana_sidecar_finds(helm: Path) -> None:
    assert not [d for d in template(helm) if d["kind"] == "ConfigMap" and "dashboard" in d["metadata"]["name"]]
    maps = [d for d in template(helm, "dashboards.enabled=true", "dashboards.namespace=monitoring") if d["kind"] == "ConfigMap"]
    files = {p.name: p.read_text() for p in (CHART / "files" / "dashboards").glob("*.json")}
    assert len(maps) == len(files) == 4
    for m in maps:
        [(key, text)] = m["data"].items()
        assert text == files[key.removeprefix("vllm-pooling-")] and m["metadata"]["namespace"] == "monitoring"
        assert m["metadata"]["labels"]["grafana_dashboard"] == "1"
