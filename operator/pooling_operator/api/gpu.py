"""GPUs per replica (`spec.resources`): whole GPUs under an extended resource, or a share of one GPU placed by
time-slicing, a MIG slice or a DRA claim (docs/gpu-sharing.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints

from pooling_operator.api import messages as M
from pooling_operator.api.cel import cel, validations
from pooling_operator.api.schema import Name, Quantity, Spec

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


class GpuShareSpec(Spec):
    """A share of one GPU instead of whole ones: the memory this server may use and how the share is placed."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("self.via != 'mig' || has(self.migProfile)", M.SHARE_MIG_PROFILE),
            cel("self.via != 'dra' || has(self.deviceClassName)", M.SHARE_DRA_CLASS),
            cel("self.via == 'timeSlicing' || !has(self.resourceName)", M.SHARE_RESOURCE_NAME_TIME_SLICING),
            cel("self.via == 'mig' || !has(self.migProfile)", M.SHARE_MIG_PROFILE_ONLY),
            cel("self.via == 'dra' || !has(self.deviceClassName)", M.SHARE_DRA_CLASS_ONLY),
        )
    )

    memory: Quantity = Field(
        description="GPU memory this server may use, e.g. 6Gi. Rendered as vLLM's --gpu-memory-utilization: this "
        "over the memory the process sees as its device (the product's for timeSlicing and dra, the MIG slice's "
        "for mig). Checked against the minimum the model needs (weights, activations at maxNumBatchedTokens, "
        "what vLLM reserves, and for a decoder one maxModelLen request of KV cache); `pooling-operator validate` "
        "prints it."
    )
    via: Literal["timeSlicing", "mig", "dra"] = Field(
        description="How the share is placed: timeSlicing (the device plugin's shared resource; memory is not "
        "isolated, vLLM's bound is the only guard), mig (a MIG slice, nvidia.com/mig-<profile> as the plugin's "
        "mixed strategy names it) or dra (a ResourceClaimTemplate for a DRA device class)."
    )
    resource_name: Annotated[str, StringConstraints(pattern=r"^([a-z0-9.-]+/)?[a-zA-Z0-9_.-]+$", max_length=253)] | None = (
        Field(default=None, description="via timeSlicing: the device plugin's shared resource. Default nvidia.com/gpu.shared.")
    )
    mig_profile: Annotated[str, StringConstraints(pattern=r"^[1-9]g\.[0-9]+gb(\+me)?$", max_length=32)] | None = Field(
        default=None,
        description="via mig: the MIG profile, e.g. 1g.10gb; requests one nvidia.com/mig-<profile>. The slice must "
        "hold `memory`.",
    )
    device_class_name: Name | None = Field(
        default=None, description="via dra: the DeviceClass a ResourceClaimTemplate requests one device of, e.g. gpu.nvidia.com."
    )


class GpuSpec(Spec):
    """GPUs per replica: whole ones (count) or a share of one."""

    model_config = ConfigDict(json_schema_extra=validations(cel("!has(self.share) || !has(self.count)", M.SHARE_NOT_COUNT),
                                                            cel("!has(self.share) || !has(self.resourceName)", M.SHARE_NOT_RESOURCE_NAME)))

    count: int | None = Field(default=None, ge=0, le=64, description="GPUs per replica (the resource limit). Default 1; not with share.")
    resource_name: Annotated[str, StringConstraints(pattern=r"^([a-z0-9.-]+/)?[a-zA-Z0-9_.-]+$", max_length=253)] | None = (
        Field(default=None, description="Extended resource name. Default nvidia.com/gpu; not with share "
              "(share.resourceName names a time-sliced resource).")
    )
    product: str | None = Field(
        default=None,
        max_length=63,
        pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
        description="GPU product, e.g. NVIDIA-H100-80GB-HBM3; becomes a nodeSelector on "
        "nvidia.com/gpu.product. With share, it gives the device's memory (the operator's table) unless "
        "memory is set. Under the device plugin's single MIG strategy, name the MIG product label here "
        "(e.g. NVIDIA-H100-80GB-HBM3-MIG-1g.10gb) and use count instead of share.",
    )
    memory: Quantity | None = Field(
        default=None,
        description="The device's memory as NVML reports it (the node's nvidia.com/gpu.memory label, in Mi: e.g. "
        "81559Mi for an H100 80GB HBM3), for a product the operator's table lacks; used with share.",
    )
    @property
    def whole(self) -> int:
        """Whole GPUs per replica: count, default 1 (0 with a share)."""
        return self.count if self.count is not None else (0 if self.share is not None else 1)

    @property
    def whole_resource(self) -> str:
        return self.resource_name or DEFAULT_GPU_RESOURCE

    share: GpuShareSpec | None = Field(
        default=None,
        description="A share of one GPU instead of count whole GPUs (PoolingService, ScoringService, PoolingJob); sets vLLM's "
        "memory bound, so engine.gpuMemoryUtilization and tensorParallelSize > 1 are refused with it.",
    )


class ResourcesSpec(Spec):
    """Compute resources per replica."""

    gpu: GpuSpec | None = Field(default=None, description="GPUs per replica. Default 1 nvidia.com/gpu.")
    cpu: Quantity | None = Field(default=None, description="CPU request, e.g. '8'.")
    memory: Quantity | None = Field(default=None, description="Memory request and limit, e.g. 64Gi.")
