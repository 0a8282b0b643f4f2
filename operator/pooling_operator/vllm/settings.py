"""Operator-wide settings that validation and building depend on (``pooling-operator run`` flags), and the env
names the operator treats as secrets."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """Operator-wide settings that validation and building depend on."""

    allow_trust_remote_code: bool = False
    hub_endpoint: str | None = None  # the Hugging Face endpoint a ModelCache's fill uses (a mirror); None: the Hub


SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # VLLM_API_KEY: refused in any form (vllm/confinement.py)
