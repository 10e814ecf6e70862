"""A vGPU host for the partition tests: a GPU offered as mdevs of one type, reported as
its agent would (exosuit/drivers/nvidia_gpu.py's shape), through the in-process API."""

from __future__ import annotations

import uuid

from exosuit.db import inventory
from exosuit.drivers.base import AttachHandle, Deployable, Device, Service, pci_cpid
from exosuit.schemas import device_identity
from tests.helpers.devices import report

HOST = "part-host"
GPU = "0000:3b:00.0"
V2_9 = "2.9"
VGPU_TYPE = "nvidia-222"
# The vGPU types the GPU lists (services of kind vgpu, as nvidia_gpu reports them): the
# layouts the API accepts for it name these.
VGPU_TYPES = (VGPU_TYPE, "nvidia-223")


def mdev_uuid(index: int, vgpu_type: str = VGPU_TYPE) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{HOST}/{GPU}/{vgpu_type}/{index}"))


def gpu(mdevs: int = 2, vgpu_type: str = VGPU_TYPE, address: str = GPU) -> Device:
    """A GPU offered as ``mdevs`` vGPUs of ``vgpu_type`` (one MDEV handle each)."""
    handles = tuple(
        AttachHandle(
            "MDEV",
            {
                **pci_cpid(address),
                "asked_type": vgpu_type,
                "vgpu_mark": f"{vgpu_type}_{i}",
                "mdev_uuid": mdev_uuid(i, vgpu_type),
            },
        )
        for i in range(mdevs)
    )
    return Device(
        type="GPU",
        vendor="10de",
        model="Tesla T4",
        driver_name="nvidia_gpu",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        services=tuple(
            Service("vgpu", name, name == vgpu_type, {"available_instances": "16"})
            for name in sorted({*VGPU_TYPES, vgpu_type})
        ),
        deployables=(
            Deployable(
                name=f"{HOST}_{address}",
                num_accelerators=mdevs,
                resource_class="VGPU",
                traits=("OWNER_CYBORG",),
                attach_handles=handles,
                driver_name="nvidia_gpu",
            ),
        ),
    )


def report_gpu(api, mdevs: int = 2, vgpu_type: str = VGPU_TYPE) -> str:
    """Report the host with its GPU; the GPU's device uuid."""
    report(api, HOST, [gpu(mdevs, vgpu_type)])
    r = api.get(f"/v2/devices?hostname={HOST}", version=V2_9)
    assert r.status_code == 200, r.text
    (found,) = r.json["devices"]
    return found["uuid"]


def rp_uuid(address: str = GPU) -> str:
    identity = device_identity(gpu(1, address=address).to_snapshot()["controlpath_id"])
    return inventory.rp_uuid(HOST, identity, f"{HOST}_{address}")


def bind_vgpu(api) -> str:
    """A one-vGPU ARQ bound on the GPU's provider; its uuid."""
    name = f"v{uuid.uuid4().hex[:8]}"
    r = api.post("/v2/device_profiles", [{"name": name, "groups": [{"resources:VGPU": "1"}]}])
    assert r.status_code == 201, r.text
    r = api.post("/v2/accelerator_requests", {"device_profile_name": name})
    assert r.status_code == 201, r.text
    arq = r.json["arqs"][0]["uuid"]
    ops = [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid()},
        {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
    ]
    r = api.patch("/v2/accelerator_requests", {arq: ops})
    assert r.status_code == 202, r.text
    assert api.get(f"/v2/accelerator_requests/{arq}").json["state"] == "Bound"
    return arq


def partitions(api, device: str, expect: int = 200) -> dict:
    r = api.get(f"/v2/devices/{device}/partitions", version=V2_9)
    assert r.status_code == expect, r.text
    return r.json


def set_layout(api, device: str, layout: dict, expect: int = 202) -> dict:
    r = api.put(f"/v2/devices/{device}/partitions", layout, version=V2_9)
    assert r.status_code == expect, r.text
    return r.json


def outcome(api, device: str, expect: int = 200, **body) -> dict:
    r = api.put(f"/agent/v1/hosts/{HOST}/partitions/{device}", body)
    assert r.status_code == expect, r.text
    return r.json


def nvidia_on_kernel(tmp_path, hostname: str, state: str = "state/drivers/nvidia_gpu"):
    """(the test kernel, the nvidia_gpu driver on it): a writable copy of
    tests/fixtures/nvidia-gpu-host that acts on mdev ``create`` and ``remove``."""
    from exosuit.drivers import DriverContext
    from exosuit.drivers.nvidia_gpu import NvidiaGpuDriver
    from exosuit.drivers.runner import RecordedRunner
    from tests.drivers.fpga_tools import writable_copy
    from tests.drivers.kernel import Kernel

    kernel = Kernel(writable_copy("nvidia-gpu-host", tmp_path))
    driver = NvidiaGpuDriver(
        DriverContext(
            hostname=hostname,
            sysfs_root=kernel.root,
            sysfs=kernel,
            runner=RecordedRunner.from_file(f"{kernel.root}/commands.json"),
            settings={"vgpu_types": {}},
            state_dir=str(tmp_path / state),
        )
    )
    return kernel, driver
