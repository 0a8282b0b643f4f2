"""Co-tenants in the simulator: a namespace of services whose pods share time-sliced GPUs. Pure, like simulate.py.

Every service runs its own policy over its own trace (`simulate.ServiceRun`), and all advance in lockstep on one
clock. What they share:
- **Placement.** The namespace's pool has `pool` devices of `device_memory` bytes (a time-sliced node pool). A
  pod goes to the least-allocated device with room for its memory (the scheduler's default scoring,
  NodeResourcesFit LeastAllocated: it spreads); where none has room a device is added to the pool, as a
  cluster autoscaler would. A pod of whole GPUs needs an empty device. A pod holds its device's memory from
  the moment it is added until it is gone (loading and draining included), as `simulate` counts GPU-minutes.
- **Throughput.** Time-slicing gives each process on a device its turn (the NVIDIA device plugin's
  time-slicing: no memory or compute isolation, contexts take turns). A device's busy tenants share its time:
  every `REFRESH_SECONDS` each replica's steps are set to take (busy tenants, counting itself) times as long as
  alone. That is the model's assumption, not a measurement: a small pooling model's step may use a fraction of
  the device's compute, so real co-tenants may slow each other less. `contention=False` drops it (shares
  with no throughput cost) to show its share of the figure.

Per service the result is `simulate.Result` (GPU-minutes are what chargeback counts: pod-minutes x the share's
fraction, `vllm.memory.gpus_held`); for the namespace, `device_minutes`: minutes each device held at
least one pod, what the cluster pays for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from pooling_operator.api.resources import Service
from pooling_operator.autoscaling.simulator.servicemodel import Replica
from pooling_operator.autoscaling.simulator.simulate import Operator, Placed, Result, ServiceRun, Setup
from pooling_operator.autoscaling.simulator.trace import InputError, Trace
from pooling_operator.vllm import memory

REFRESH_SECONDS = 0.1  # how often the busy tenants of each device are counted (a step takes 8-40 ms)


@dataclass(frozen=True)
class Tenant:
    """One service of the namespace: its setup (`gpus_per_replica` the share's fraction, or whole GPUs), its trace,
    and the memory one pod's share holds (None: whole GPUs, a device per pod)."""

    name: str
    setup: Setup
    trace: Trace
    share_bytes: int | None
    whole: int = 1  # devices one pod of whole GPUs takes (resources.gpu.count)


def tenant_for(resource: Service, setup: Setup, trace: Trace) -> tuple[Tenant, int | None]:
    """The tenant of a service and the memory of the device it shares (None: whole GPUs); InputError naming the
    field where it cannot share a time-sliced device: a MIG slice is isolated in hardware (it shares nothing: simulate
    it alone), and a share needs the device's memory."""
    name = f"{resource.kind}/{resource.metadata.name}"
    gpu = resource.spec.resources.gpu if resource.spec.resources else None
    if gpu is None or gpu.share is None:
        return Tenant(name, setup, trace, None, max(1, math.ceil(memory.gpus_held(resource.spec.resources)))), None
    if gpu.share.via == "mig":
        raise InputError(f"{name}: spec.resources.gpu.share.via is mig: a MIG slice shares no throughput with its "
                         "co-tenants; simulate it alone")
    device = memory.product_memory(gpu)
    if device is None:
        raise InputError(f"{name}: spec.resources.gpu: the device's memory is not known: set product to one of the "
                         "table's or memory")
    return Tenant(name, setup, trace, memory.share_bytes(gpu)), device


@dataclass
class _Device:
    memory: int
    used: int = 0
    tenants: list[Replica] = field(default_factory=list)
    held: list[tuple[float, float | None]] = field(default_factory=list)  # (placed, freed) of every pod


class Devices:
    """The namespace's pool: `count` devices of `memory` bytes to start with, more as pods need them."""

    def __init__(self, memory: int, count: int = 0) -> None:
        self.memory = memory
        self.devices = [_Device(memory) for _ in range(count)]

    def place(self, t: float, replica: Replica, share: int | None, whole: int = 1) -> Placed:
        """The device(s) of a new pod: a share on the least-allocated device with room; whole GPUs on `whole`
        empty devices. Devices are added where none fits."""
        if share is not None and share > self.memory:
            raise ValueError(f"a share of {share} bytes does not fit a device of {self.memory}")
        need = self.memory if share is None else share
        taken = []
        for _ in range(1 if share is not None else whole):
            room = [(d.used, i) for i, d in enumerate(self.devices) if d.used + need <= self.memory and i not in taken]
            if room:
                index = min(room)[1]  # least allocated; the first such device on a tie
            else:
                index = len(self.devices)
                self.devices.append(_Device(self.memory))
            d = self.devices[index]
            d.used += need
            d.tenants.append(replica)
            d.held.append((t, None))
            taken.append(index)
        return [(i, len(self.devices[i].held) - 1, need, replica) for i in taken]

    def free(self, t: float, where: Placed) -> None:
        for index, slot, need, replica in where:
            d = self.devices[index]
            d.used -= need
            d.tenants.remove(replica)
            d.held[slot] = (d.held[slot][0], t)

    def refresh(self) -> None:
        """Each tenant's steps take as many times as long as the device has busy tenants, itself included."""
        for d in self.devices:
            if len(d.tenants) < 2:
                for r in d.tenants:
                    r.slowdown = 1.0
                continue
            busy = sum(r.in_flight > 0 for r in d.tenants)
            for r in d.tenants:
                r.slowdown = float(max(1, busy + (r.in_flight == 0)))

    def device_minutes(self, end: float) -> float:
        """Minutes each device held at least one pod, up to `end`."""
        total = 0.0
        for d in self.devices:
            spans = sorted((a, min(end, b if b is not None else end)) for a, b in d.held)
            reach = None
            for a, b in spans:
                if reach is None or a > reach:
                    total += max(0.0, b - a)
                    reach = b
                elif b > reach:
                    total += b - reach
                    reach = b
        return total / 60


class _Tenancy:
    """The `simulate.Placement` of one tenant: its share on the namespace's devices."""

    def __init__(self, devices: Devices, share: int | None, whole: int = 1) -> None:
        self.devices, self.share, self.whole = devices, share, whole

    def place(self, t: float, replica: Replica) -> Placed:
        return self.devices.place(t, replica, self.share, self.whole)

    def free(self, t: float, where: Placed) -> None:
        self.devices.free(t, where)


@dataclass(frozen=True)
class NamespaceResult:
    services: dict[str, Result]
    device_minutes: float  # minutes each device held at least one pod
    devices: int  # the pool's devices at the end: those it started with and those added

    @property
    def slo_minutes_missed(self) -> int:
        return sum(r.slo_minutes_missed for r in self.services.values())

    @property
    def gpu_minutes(self) -> float:
        return sum(r.gpu_minutes for r in self.services.values())


def run_namespace(tenants: Sequence[Tenant], device_memory: int, *, pool: int = 0, contention: bool = True) -> NamespaceResult:
    """The operator's autoscaler on every tenant, all in one world (see the module's docstring)."""
    if len({t.name for t in tenants}) != len(tenants):
        raise ValueError("tenant names must be unique")
    devices = Devices(device_memory, pool)
    runs = [ServiceRun(t.setup, t.trace, Operator(t.setup), _Tenancy(devices, t.share_bytes, t.whole)) for t in tenants]
    next_refresh = 0.0
    while True:
        live = [r for r in runs if not r.done]
        if not live:
            break
        t = min([r.next_time() for r in live] + ([next_refresh] if contention else []))
        for r in live:
            r.step(t)
        if contention and t >= next_refresh:
            devices.refresh()
            next_refresh += REFRESH_SECONDS
    end = max(tenant.trace.end for tenant in tenants)
    results = {tenant.name: r.result() for tenant, r in zip(tenants, runs, strict=True)}
    return NamespaceResult(results, devices.device_minutes(end), len(devices.devices))
