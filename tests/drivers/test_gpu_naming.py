"""One naming scheme for GPUs and their slices (exosuit/drivers/gpu_naming.py): the
simulated driver names a whole GPU, a MIG slice and a vGPU exactly as nvidia_gpu names the
same model, profile and type on the recorded host, so that a device profile that works on
``exosuit serve`` works on a real GPU."""

from __future__ import annotations

import os

from exosuit.drivers import DriverContext, RecordedRunner
from exosuit.drivers.base import Deployable, Device
from exosuit.drivers.gpu_naming import mig_slice, vgpu, whole_gpu
from exosuit.drivers.nvidia_gpu import NvidiaGpuDriver
from exosuit.drivers.nvml import RecordedNvml
from exosuit.drivers.simulated import SimulatedDriver

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
HOST = os.path.join(FIXTURES, "nvidia-gpu-host")
# A simulated host whose two GPUs are an A100-SXM4-40GB and a Tesla T4 (seeded by name).
SIMULATED_HOST = "sim-8"

Naming = tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]


def naming(deployable: Deployable) -> Naming:
    return deployable.resource_class, deployable.traits, deployable.extra_attributes


def nvidia(**settings) -> dict[str, Device]:
    context = DriverContext(
        hostname="nvidia-gpu-host",
        sysfs_root=HOST,
        runner=RecordedRunner.from_file(os.path.join(HOST, "commands.json")),
        settings=settings,
    )
    nvml = RecordedNvml.from_file(os.path.join(HOST, "nvml.json"))
    return {d.pci_address or "": d for d in NvidiaGpuDriver(context, nvml=nvml).discover()}


def simulated(layouts: dict[str, dict]) -> dict[str, Device]:
    """The simulated GPUs by model, each partitioned as ``layouts`` (by model) says."""
    driver = SimulatedDriver(
        DriverContext(hostname=SIMULATED_HOST, settings={"devices": {"nvidia_gpu": "2"}})
    )
    for device in driver.discover():
        if device.model in layouts:
            driver.partition(device, layouts[device.model])
    return {d.model: d for d in driver.discover()}


def by_name(devices: dict[str, Device], key: str) -> dict[str, Naming]:
    """Each deployable's naming by the MIG profile or vGPU type it offers ("" whole)."""
    found = {}
    for deployable in devices[key].deployables:
        attributes = dict(deployable.extra_attributes)
        found[attributes.get("mig_profile") or attributes.get("vgpu_type") or ""] = naming(
            deployable
        )
    return found


def test_simulated_host_has_the_models_of_the_recorded_host():
    assert set(simulated({})) == {"Tesla T4", "A100-SXM4-40GB"}


def test_a_whole_gpu_is_named_alike():
    real = nvidia(vgpu_types={})
    sim = simulated({})
    t4 = ("PGPU", ("OWNER_CYBORG", "CUSTOM_NVIDIA_1EB8"), ())
    a100 = ("PGPU", ("OWNER_CYBORG", "CUSTOM_NVIDIA_20B0", "CUSTOM_NVIDIA_MIG_CAPABLE"), ())
    assert by_name(real, "0000:3b:00.0") == by_name(sim, "Tesla T4") == {"": t4}
    # 81:00.0: an A100 with MIG disabled.
    assert by_name(real, "0000:81:00.0") == by_name(sim, "A100-SXM4-40GB") == {"": a100}


def test_mig_slices_are_named_alike():
    # 41:00.0 on the recorded host runs two 1g.5gb and one 3g.20gb MIG instances.
    real = by_name(nvidia(vgpu_types={}), "0000:41:00.0")
    sim = by_name(
        simulated({"A100-SXM4-40GB": {"mig": {"1g.5gb": 2, "3g.20gb": 1}}}), "A100-SXM4-40GB"
    )
    traits = ("OWNER_CYBORG", "CUSTOM_NVIDIA_20B0", "CUSTOM_NVIDIA_MIG_CAPABLE")
    assert (
        real
        == sim
        == {
            "1g.5gb": ("CUSTOM_NVIDIA_MIG_1G_5GB", traits, (("mig_profile", "1g.5gb"),)),
            "3g.20gb": ("CUSTOM_NVIDIA_MIG_3G_20GB", traits, (("mig_profile", "3g.20gb"),)),
        }
    )


def test_vgpus_are_named_alike():
    real = nvidia(vgpu_types={"0000:af:00.0": "nvidia-223", "0000:81:00.0": "nvidia-471"})
    sim = simulated(
        {"Tesla T4": {"mdev": {"nvidia-223": 2}}, "A100-SXM4-40GB": {"mdev": {"nvidia-471": 2}}}
    )
    assert (
        by_name(real, "0000:af:00.0")
        == by_name(sim, "Tesla T4")
        == {
            "nvidia-223": (
                "VGPU",
                ("OWNER_CYBORG", "CUSTOM_NVIDIA_1EB8_T4_1B"),
                (("vgpu_type", "nvidia-223"), ("vgpu_type_name", "GRID T4-1B")),
            )
        }
    )
    assert (
        by_name(real, "0000:81:00.0")
        == by_name(sim, "A100-SXM4-40GB")
        == {
            "nvidia-471": (
                "VGPU",
                ("OWNER_CYBORG", "CUSTOM_NVIDIA_20B0_A100_4C", "CUSTOM_NVIDIA_MIG_CAPABLE"),
                (("vgpu_type", "nvidia-471"), ("vgpu_type_name", "GRID A100-4C")),
            )
        }
    )


def test_the_naming_functions_are_what_both_drivers_use():
    assert whole_gpu("1eb8", False).traits == ("OWNER_CYBORG", "CUSTOM_NVIDIA_1EB8")
    assert mig_slice("2330", "1g.10gb").resource_class == "CUSTOM_NVIDIA_MIG_1G_10GB"
    # A type name of one word: the whole name is the suffix.
    assert vgpu("1eb8", "nvidia-9", "T4-8C", False).traits[1] == "CUSTOM_NVIDIA_1EB8_T4_8C"
