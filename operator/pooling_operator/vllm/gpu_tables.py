"""GPU facts a share is sized with: each product's memory and each MIG profile's, every row with its source. Data.

Which total: vLLM requests ``ceil(total x gpu_memory_utilization)`` of the total CUDA reports
(``torch.accelerator.get_memory_info``, vllm/utils/mem_utils.py), which is NVML's total (nvidia-smi's "Total",
GPU Feature Discovery's ``nvidia.com/gpu.memory`` label) less the driver's reserve (e.g. 594 MiB on an H100 NVL,
763 MiB on an A100 SXM4 80GB: the ``nvidia-smi -q`` captures of github.com/thamada/nvidia-smi). The table holds
NVML's total: a utilization of share / NVML total makes vLLM request share x (CUDA total / NVML total), a little
less than the share and never more, whatever the driver reserves. ``resources.gpu.memory`` takes the same figure
(the node's ``nvidia.com/gpu.memory`` label, in Mi) for a product missing here.

``PRODUCTS`` is keyed by GPU Feature Discovery's ``nvidia.com/gpu.product`` (the NVML name, characters outside
``[A-Za-z0-9-_. ]`` dropped and words joined with ``-``: NVIDIA/k8s-device-plugin internal/lm/resource.go).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Product:
    mib: int | None  # NVML's total, MiB (nvidia-smi "Total"); None where no capture was found
    mig: str | None  # the MIG family of MIG_PROFILES, None when the product has no MIG
    source: str


@dataclass(frozen=True)
class MigProfile:
    eighths: int  # memory as a fraction of the product's: the MIG user guide's "Fraction of Memory", in 1/8
    mib: int | None  # the slice's memory as `nvidia-smi mig -lgip` lists it, where a capture was found
    source: str


GUIDE = "docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html"
# fmt: off
PRODUCTS: dict[str, Product] = {
    "NVIDIA-H100-80GB-HBM3": Product(81559, "80gb", "github.com/wilicc/gpu-burn/issues/114 (nvidia-smi: 81559MiB)"),
    "NVIDIA-H100-NVL": Product(95830, "94gb", "github.com/thamada/nvidia-smi nvsim/H100NVLx2_smi.py:13 (95830MiB)"),
    "NVIDIA-A100-SXM4-80GB": Product(81920, "80gb", "github.com/thamada/nvidia-smi gls/A100SXMx4_smi.py:13 (81920MiB)"),
    "NVIDIA-A100-SXM4-40GB": Product(40960, "40gb", "github.com/bottlerocket-os/bottlerocket/pull/3873 (40960MiB)"),
    "NVIDIA-L4": Product(23034, None, "github.com/speaches-ai/speaches/pull/438 (23034MiB)"),
    "NVIDIA-L40S": Product(46068, None, "github.com/akash-network/provider-configs/pull/99 (46068MiB)"),
    "NVIDIA-A10G": Product(23028, None, "github.com/NVIDIA/DCGM/issues/232 (23028MiB)"),
    "NVIDIA-A10": Product(23028, None, "github.com/mayooot/detect-gpu/issues/3 (23028MiB)"),
    "Tesla-T4": Product(15360, None, "github.com/modal-labs/modal-client/pull/2797 (15360MiB)"),
    "NVIDIA-B200": Product(183359, None, "github.com/NVIDIA/TensorRT-LLM/issues/10278 (183359MiB)"),
    # MIG families known, totals not (no citable capture): time-slicing and DRA need resources.gpu.memory
    "NVIDIA-H100-PCIe": Product(None, "80gb", "name: github.com/zzc0721/torch-performance-test-data/issues/95"),
    "NVIDIA-H200": Product(None, "141gb", "name: github.com/NVIDIA/mig-parted/issues/120"),
}

# MIG profiles per product memory. Fractions: the guide's tables (its A100 table: 1g.5gb 1/8, 2g.10gb 2/8,
# 3g.20gb 4/8; "for A100-SXM4-80GB, the profile names will change according to the memory proportion"); the
# doubled-memory 1g profiles (1g.10gb on a 40GB part, 1g.20gb on 80GB) hold 2/8 as their names say.
MIG_PROFILES: dict[str, dict[str, MigProfile]] = {
    "40gb": {
        "1g.5gb": MigProfile(1, None, GUIDE), "1g.10gb": MigProfile(2, None, GUIDE),
        "2g.10gb": MigProfile(2, None, GUIDE), "3g.20gb": MigProfile(4, None, GUIDE),
        "4g.20gb": MigProfile(4, None, GUIDE), "7g.40gb": MigProfile(8, None, GUIDE),
    },
    "80gb": {
        "1g.10gb": MigProfile(1, None, GUIDE), "1g.20gb": MigProfile(2, None, GUIDE),
        "2g.20gb": MigProfile(2, None, GUIDE), "3g.40gb": MigProfile(4, None, GUIDE),
        "4g.40gb": MigProfile(4, None, GUIDE), "7g.80gb": MigProfile(8, None, GUIDE),
    },
    "94gb": {  # nvidia-smi mig -lgip of an H100 NVL: github.com/NVIDIA/gpu-operator/pull/900
        "1g.12gb": MigProfile(1, 11008, "github.com/NVIDIA/gpu-operator/pull/900 (10.75GiB)"),
        "1g.24gb": MigProfile(2, 22139, "github.com/NVIDIA/gpu-operator/pull/900 (21.62GiB)"),
        "2g.24gb": MigProfile(2, 22139, "github.com/NVIDIA/gpu-operator/pull/900 (21.62GiB)"),
        "3g.47gb": MigProfile(4, 47493, "github.com/NVIDIA/gpu-operator/pull/900 (46.38GiB)"),
        "4g.47gb": MigProfile(4, None, GUIDE), "7g.94gb": MigProfile(8, None, GUIDE),
    },
    "141gb": {  # nvidia-smi mig -lgip of an H200: github.com/NVIDIA/mig-parted/issues/120
        "1g.18gb": MigProfile(1, 16384, "github.com/NVIDIA/mig-parted/issues/120 (16.00GiB)"),
        "1g.35gb": MigProfile(2, 33024, "github.com/NVIDIA/mig-parted/issues/120 (32.25GiB)"),
        "2g.35gb": MigProfile(2, 33024, "github.com/NVIDIA/mig-parted/issues/120 (32.25GiB)"),
        "3g.71gb": MigProfile(4, 71168, "github.com/NVIDIA/mig-parted/issues/120 (69.50GiB)"),
        "4g.71gb": MigProfile(4, 71168, "github.com/NVIDIA/mig-parted/issues/120 (69.50GiB)"),
        "7g.141gb": MigProfile(8, 143104, "github.com/NVIDIA/mig-parted/issues/120 (139.75GiB)"),
    },
}
# fmt: on


def mig_family(product: str | None) -> str | None:
    row = PRODUCTS.get(product or "")
    return row.mig if row else None


def mig_profile(product: str | None, profile: str | None) -> MigProfile | None:
    family = mig_family(product)
    if family is None or profile is None:
        return None
    return MIG_PROFILES[family].get(profile.removesuffix("+me"))
