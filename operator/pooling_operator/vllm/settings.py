"""Operator-wide settings that validation and building depend on (``pooling-operator run`` flags), and the env
names the operator treats as secrets."""

from __future__ import annotations

from dataclasses import dataclass

KEDA_HTTP_INTERCEPTOR = "http://keda-add-ons-http-interceptor-proxy.keda:8080"
KEDA_HTTP_SCALER = "keda-add-ons-http-external-scaler.keda:9090"


@dataclass(frozen=True)
class Settings:
    """Operator-wide settings that validation and building depend on."""

    allow_trust_remote_code: bool = False
    hub_endpoint: str | None = None  # the Hugging Face endpoint a ModelCache's fill uses (a mirror); None: the Hub
    # Where the KEDA HTTP add-on runs (autoscaling.front.kedaHttpAddOn): the interceptor's proxy, which clients
    # send to, and the external scaler a ScaledObject's external-push trigger names. The add-on's Helm chart's
    # names in its namespace keda (kedacore/http-add-on test/helpers/env.go 36-43).
    keda_http_interceptor: str = KEDA_HTTP_INTERCEPTOR
    keda_http_scaler: str = KEDA_HTTP_SCALER

    @property
    def keda_http_namespace(self) -> str | None:
        """The interceptor's namespace, from its in-cluster name (<service>.<namespace>[.svc...]): a fronted
        service's NetworkPolicy lets it in. None where the URL names no namespace."""
        return service_namespace(self.keda_http_interceptor)


def service_namespace(url: str) -> str | None:
    """The namespace of an in-cluster Service URL (http://name.namespace[.svc[.cluster.local]][:port]), or None."""
    host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    labels = host.split(".")
    if len(labels) < 2 or (len(labels) > 2 and labels[2] != "svc") or not labels[1]:
        return None
    return labels[1]


SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # VLLM_API_KEY: refused in any form (vllm/confinement.py)
