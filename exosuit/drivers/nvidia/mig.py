"""nvidia_gpu's MIG: a GPU in MIG mode is offered as its MIG instances, never whole.

One deployable per GPU-instance profile (resource class ``CUSTOM_NVIDIA_MIG_<profile>``,
traits and attributes as exosuit/drivers/gpu_naming.py names a MIG slice),
one ``MIG`` attach handle per instance, as NVML lists them (exosuit/drivers/nvml.py);
every profile NVML says the GPU supports is a service (kind ``mig``). The operator's MIG
layouts are exosuit/drivers/nvidia_partitions.py's; a container's MIG capability nodes
exosuit/drivers/nvidia/cdi.py's.
"""

from __future__ import annotations

from exosuit.drivers.base import AttachHandle, Deployable, Service, pci_cpid
from exosuit.drivers.gpu_naming import mig_slice
from exosuit.drivers.nvml import MigInstance, NvmlGpu
from exosuit.drivers.sysfs import PciFunction

__all__ = ["MigInstances"]


class MigInstances:
    """The MIG deployables and services of a GPU. Mixed into ``NvidiaGpuDriver``, which
    sets these attributes."""

    name: str
    hostname: str

    def _mig(self, gpu: PciFunction, instances: tuple[MigInstance, ...]) -> tuple[Deployable, ...]:
        profiles: dict[str, list[MigInstance]] = {}
        for instance in instances:
            profiles.setdefault(instance.profile, []).append(instance)
        return tuple(
            Deployable(
                name=f"{self.hostname}_{gpu.address}_mig_{profile}",
                num_accelerators=len(members),
                resource_class=mig_slice(gpu.device_id, profile).resource_class,
                traits=mig_slice(gpu.device_id, profile).traits,
                attach_handles=tuple(
                    AttachHandle(
                        "MIG",
                        {
                            **pci_cpid(gpu.address),
                            "mig_uuid": m.uuid,
                            "profile": profile,
                            "gpu_instance_id": str(m.gpu_instance_id),
                            "compute_instance_id": str(m.compute_instance_id),
                        },
                    )
                    for m in members
                ),
                driver_name=self.name,
                extra_attributes=mig_slice(gpu.device_id, profile).attributes,
            )
            for profile, members in sorted(profiles.items())
        )

    @staticmethod
    def _mig_services(nvml: NvmlGpu | None) -> tuple[Service, ...]:
        """Every GPU-instance profile NVML says the GPU supports, and the profiles of its MIG
        instances; enabled where instances of it exist."""
        if nvml is None:
            return ()
        counts: dict[str, int] = {}
        for instance in nvml.mig_instances:
            counts[instance.profile] = counts.get(instance.profile, 0) + 1
        services = []
        for profile in nvml.mig_profiles:
            details = {
                "instances": str(counts.pop(profile.name, 0)),
                "max_instances": str(profile.max_instances),
            }
            if profile.available is not None:
                details["available"] = str(profile.available)
            if profile.memory_mib is not None:
                details["memory_mib"] = str(profile.memory_mib)
            services.append(Service("mig", profile.name, details["instances"] != "0", details))
        for name, count in sorted(counts.items()):  # instances of a profile NVML did not list
            services.append(Service("mig", name, True, {"instances": str(count)}))
        return tuple(services)
