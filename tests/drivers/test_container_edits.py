"""Container edits (exosuit.drivers.base.ContainerDevice) of every shipped driver, on the
recorded trees of tests/fixtures: the device nodes a container needs for an attach handle
as the kernel names them (vfio groups, DRM render and accel nodes, NVMe, QAT, FPGA and
NVIDIA nodes), the environment, and the refusals an operator reads."""

from __future__ import annotations

import os
import shutil

import pytest

from exosuit.agent.record import record
from exosuit.drivers import (
    AttachHandle,
    ContainerDevice,
    ContainerEdits,
    Device,
    DeviceNode,
    DriverContext,
    load_driver,
    pci_cpid,
)
from exosuit.drivers.runner import RecordedRunner
from exosuit.drivers.xilinx_fpga import xrt_device_id
from tests.drivers.test_record import tree

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")
SHIPPED = [
    "pci",
    "nvme",
    "sriov_nic",
    "nvidia_gpu",
    "intel_qat",
    "intel_fpga",
    "xilinx_fpga",
    "simulated",
]
EVERYTHING = '{"vendor_id": "*"}'
VGPUS = {"0000:af:00.0": "nvidia-223", "0000:81:00.0": "nvidia-471"}


def settings(name: str, host: str) -> dict:
    return {
        "pci": {"device_spec": [EVERYTHING]},
        "sriov_nic": {"physical_device_mappings": ["physnet1:ens1f0"]},
        "nvidia_gpu": {"vgpu_types": VGPUS if host == "nvidia-gpu-host" else {}},
    }.get(name, {})


def driver(name: str, host: str, root: str | None = None):
    root = root or os.path.join(FIXTURES, host)
    runner = RecordedRunner.from_file(os.path.join(root, "commands.json"))
    context = DriverContext(
        hostname="compute-7", sysfs_root=root, runner=runner, settings=settings(name, host)
    )
    return load_driver(name, context)


def handles(driver) -> list[tuple[Device, AttachHandle]]:
    return [
        (device, handle)
        for device in driver.discover()
        for deployable in device.deployables
        for handle in deployable.attach_handles
    ]


def edits_by_handle(name: str, host: str, root: str | None = None) -> dict[str, object]:
    """Every handle's edits (or the refusal's message), keyed by type and info."""
    found = driver(name, host, root)
    result: dict[str, object] = {}
    for device, handle in handles(found):
        key = f"{handle.attach_type} {sorted(handle.attach_info.items())}"
        try:
            result[key] = found.container_edits(device, handle)
        except ValueError as error:
            result[key] = f"refused: {error}"
    return result


def edits(name: str, host: str, address: str, attach_type: str = "PCI", **info: str):
    """The edits of the handle of ``address`` (and ``info``) among the driver's devices."""
    found = driver(name, host)
    for device, handle in handles(found):
        wanted = {**pci_cpid(address), **info}
        if handle.attach_type == attach_type and all(
            handle.attach_info.get(k) == v for k, v in wanted.items()
        ):
            return found.container_edits(device, handle)
    raise AssertionError(f"no {attach_type} handle {address} {info} on {host}")


def paths(result: ContainerEdits) -> list[str]:
    return [node.path for node in result.device_nodes]


def test_every_shipped_driver_hands_devices_to_containers():
    for name in SHIPPED:
        found = driver(name, "nvme-host")
        assert isinstance(found, ContainerDevice), name


# -- vfio ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "host", "address", "group"),
    [
        ("pci", "nvme-host", "0000:d8:00.0", "21"),
        ("nvme", "nvme-host", "0000:d8:00.0", "21"),
        ("sriov_nic", "sriov-nic-host", "0000:af:00.2", "17"),
        ("sriov_nic", "sriov-nic-host", "0000:5e:00.0", "13"),
        ("intel_qat", "intel-qat-host", "0000:6b:00.1", "2"),
        ("intel_qat", "intel-qat-c62x-host", "0000:3d:01.0", "1"),
        ("intel_fpga", "fpga-dfl-host", "0000:b1:00.2", "10"),
        ("xilinx_fpga", "fpga-alveo-host", "0000:d8:00.1", "13"),
    ],
)
def test_a_function_bound_to_vfio_pci_gives_its_iommu_group(name, host, address, group):
    result = edits(name, host, address)
    assert paths(result) == ["/dev/vfio/vfio", f"/dev/vfio/{group}"]
    device_dir = os.path.realpath(
        os.path.join(FIXTURES, host, "sys", "bus", "pci", "devices", address)
    )
    assert os.path.basename(os.readlink(os.path.join(device_dir, "iommu_group"))) == group
    assert result.env["PCI_ADDRESS"] == address


def test_a_vf_carries_its_pf_and_its_index():
    first = edits("sriov_nic", "sriov-nic-host", "0000:af:00.2")
    second = edits("sriov_nic", "sriov-nic-host", "0000:af:00.3")
    assert (first.env["PF_PCI_ADDRESS"], first.env["VF_INDEX"]) == ("0000:af:00.0", "0")
    assert (second.env["PF_PCI_ADDRESS"], second.env["VF_INDEX"]) == ("0000:af:00.0", "1")
    whole = edits("sriov_nic", "sriov-nic-host", "0000:5e:00.0")
    assert "VF_INDEX" not in whole.env and "PF_PCI_ADDRESS" not in whole.env


def test_without_an_iommu_group_vfio_is_refused_with_the_reason(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(os.path.join(FIXTURES, "nvme-host"), root, symlinks=True)
    device = os.path.realpath(root / "sys" / "bus" / "pci" / "devices" / "0000:d8:00.0")
    os.unlink(os.path.join(device, "iommu_group"))
    found = driver("pci", "nvme-host", str(root))
    (vfio,) = [(d, h) for d, h in handles(found) if d.pci_address == "0000:d8:00.0"]
    with pytest.raises(ValueError, match="no IOMMU group.*intel_iommu=on"):
        found.container_edits(*vfio)


# -- DRM, accel, NVMe ------------------------------------------------------------------


def test_render_and_accel_nodes_come_from_the_functions_class_directories():
    assert paths(edits("pci", "nvme-host", "0000:3b:00.0")) == ["/dev/dri/renderD128"]
    assert paths(edits("pci", "nvme-host", "0000:86:00.0")) == ["/dev/accel/accel0"]
    # The ASPEED VGA has a card (modesetting) but no render node: nothing for a container.
    with pytest.raises(ValueError, match="0000:06:00.0 is bound to ast, which gives"):
        edits("pci", "nvme-host", "0000:06:00.0")
    with pytest.raises(ValueError, match="bound to igb.*bind it to vfio-pci"):
        edits("pci", "nvme-host", "0000:07:00.0")


def test_an_nvme_drive_gives_its_controller_namespaces_and_partitions():
    free = edits("nvme", "nvme-host", "0000:04:00.0")
    assert paths(free) == ["/dev/nvme1", "/dev/nvme1n1", "/dev/nvme1n1p1"]
    assert free.env == {"PCI_ADDRESS": "0000:04:00.0", "NVME_CONTROLLER": "nvme1"}
    # A multipath namespace is its head's block device, not the hidden path's (the drive
    # is the host's swap, so not offered: its handle is asked for by hand).
    nvme = driver("nvme", "nvme-host")
    device = nvme.discover()[0]
    swap = nvme.container_edits(device, AttachHandle("PCI", pci_cpid("0000:5e:00.0")))
    assert paths(swap) == ["/dev/nvme2", "/dev/nvme2n1"]


def test_a_nic_function_with_an_interface_gives_its_environment_only():
    result = edits("sriov_nic", "sriov-nic-host", "0000:3b:01.1")
    assert result.device_nodes == ()
    assert result.env == {
        "PCI_ADDRESS": "0000:3b:01.1",
        "PF_PCI_ADDRESS": "0000:3b:00.0",
        "VF_INDEX": "1",
        "NET_INTERFACE": "ens1f0v1",
        "PHYSICAL_NETWORK": "physnet1",
    }


# -- QAT -------------------------------------------------------------------------------


def test_qat_functions_on_a_qat_kernel_driver_give_the_control_node():
    pf = edits("intel_qat", "intel-qat-host", "0000:70:00.0")
    assert paths(pf) == ["/dev/qat_adf_ctl"]
    assert pf.env == {"PCI_ADDRESS": "0000:70:00.0", "QAT_SERVICES": "asym;dc"}
    vf = edits("intel_qat", "intel-qat-c62x-host", "0000:3d:01.1")
    assert paths(vf) == ["/dev/qat_adf_ctl"]
    assert vf.env["VF_INDEX"] == "1"
    vfio = edits("intel_qat", "intel-qat-host", "0000:6b:00.4")
    assert vfio.env["QAT_SERVICES"] == "sym;dc"  # its PF's services


# -- FPGAs -----------------------------------------------------------------------------


def test_a_dfl_card_gives_its_port_and_fme_with_the_loaded_function():
    d5005 = edits("intel_fpga", "fpga-dfl-host", "0000:3b:00.0")
    assert paths(d5005) == ["/dev/dfl-port.0", "/dev/dfl-fme.0"]
    assert d5005.env == {
        "PCI_ADDRESS": "0000:3b:00.0",
        "FPGA_FUNCTION": "d8424dc4a4a3c413f89e433683f9040b",
        "FPGA_INTERFACE": "9346116d5a1d4ea9ac1e2c60f1f8a4b1",
    }
    # An N3000 VF holds a port; the FME stays on the PF, which the container does not get.
    vf = edits("intel_fpga", "fpga-dfl-host", "0000:b1:00.1")
    assert paths(vf) == ["/dev/dfl-port.1"]
    assert vf.env["FPGA_FUNCTION"] == "e1f6c5ad0fce4c5e9b5a9d0e0a9a37a1"
    assert vf.env["FPGA_INTERFACE"] == "a6a3e44cd6e5573fa2e38e5a0cbd1cc8"  # the card's


def test_an_intel_fpga_layout_card_gives_its_intel_fpga_nodes():
    assert paths(edits("intel_fpga", "fpga-opae-host", "0000:5e:00.0")) == [
        "/dev/intel-fpga-port.0",
        "/dev/intel-fpga-fme.0",
    ]
    assert paths(edits("intel_fpga", "fpga-opae-host", "0000:d8:00.1")) == [
        "/dev/intel-fpga-port.1"
    ]


def test_an_alveo_gives_xclmgmt_for_management_and_a_render_node_for_the_user_pf():
    assert xrt_device_id("0000:60:00.0") == 24576  # XRT's name: /dev/xclmgmt24576
    mgmt = edits("xilinx_fpga", "fpga-alveo-host", "0000:3b:00.0")
    assert paths(mgmt) == [f"/dev/xclmgmt{0x3B00}"]
    user = edits("xilinx_fpga", "fpga-alveo-host", "0000:3b:00.1")
    assert paths(user) == ["/dev/dri/renderD128"]
    assert user.env["FPGA_FUNCTION"] == mgmt.env["FPGA_FUNCTION"]
    assert user.env["FPGA_FUNCTION"] == "4e2b2f6c-1a2b-4c3d-8e4f-5a6b7c8d9e0f"


# -- NVIDIA ----------------------------------------------------------------------------


def test_a_gpu_on_the_nvidia_driver_gives_its_minor_from_the_drivers_proc_file():
    t4 = edits("nvidia_gpu", "nvidia-gpu-host", "0000:3b:00.0")
    assert paths(t4) == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert t4.env == {
        "PCI_ADDRESS": "0000:3b:00.0",
        "GPU_UUID": "GPU-5c1a0f3e-7b2d-4f0e-9a51-2f0c6d7e8a11",
    }


def test_a_mig_instance_gives_its_gpu_and_its_two_capability_nodes():
    mig = edits(
        "nvidia_gpu",
        "nvidia-gpu-host",
        "0000:41:00.0",
        "MIG",
        mig_uuid="MIG-1f6b3a2c-9e4d-5b7a-8c0f-2d3e4f5a6b7c",
    )
    # gi2/access and gi2/ci0/access of gpu1 (the A100's device minor is 1).
    assert paths(mig) == [
        "/dev/nvidia1",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-caps/nvidia-cap156",
        "/dev/nvidia-caps/nvidia-cap157",
    ]
    assert mig.env["MIG_UUID"] == "MIG-1f6b3a2c-9e4d-5b7a-8c0f-2d3e4f5a6b7c"


def test_a_vgpu_gives_the_vfio_group_of_its_mdev():
    vgpu = edits(
        "nvidia_gpu",
        "nvidia-gpu-host",
        "0000:af:00.0",
        "MDEV",
        mdev_uuid="4b20d080-1b54-4048-85b3-a6a62d165c01",
    )
    assert paths(vgpu) == ["/dev/vfio/vfio", "/dev/vfio/14"]
    assert vgpu.env == {
        "PCI_ADDRESS": "0000:af:00.0",
        "MDEV_UUID": "4b20d080-1b54-4048-85b3-a6a62d165c01",
        "VGPU_TYPE": "nvidia-223",
    }


def test_nvidia_refusals_say_what_is_missing(tmp_path):
    found = driver("nvidia_gpu", "nvidia-gpu-host")
    (t4, handle) = next((d, h) for d, h in handles(found) if d.pci_address == "0000:3b:00.0")
    missing = AttachHandle(
        "MDEV", {**pci_cpid("0000:af:00.0"), "mdev_uuid": "00000000-0000-4000-8000-000000000000"}
    )
    with pytest.raises(ValueError, match="mdev 00000000-.* does not exist"):
        found.container_edits(t4, missing)
    root = tmp_path / "host"
    shutil.copytree(os.path.join(FIXTURES, "nvidia-gpu-host"), root, symlinks=True)
    shutil.rmtree(root / "proc")
    unloaded = driver("nvidia_gpu", "nvidia-gpu-host", str(root))
    with pytest.raises(ValueError, match="does not say the device minor of 0000:3b:00.0"):
        unloaded.container_edits(t4, handle)
    vga = AttachHandle("PCI", pci_cpid("0000:03:00.0"))
    with pytest.raises(ValueError, match="bound to ast, not nvidia"):
        found.container_edits(t4, vga)


# -- simulated -------------------------------------------------------------------------


def test_simulated_handles_are_nodes_of_their_own_backed_by_dev_null(tmp_path):
    context = DriverContext(hostname="compute-7", state_dir=str(tmp_path))
    simulated = load_driver("simulated", context)
    found = handles(simulated)
    results = [simulated.container_edits(d, h) for d, h in found]
    assert len({r.device_nodes for r in results}) == len(found) == 17
    fpga = results[0]
    assert fpga.device_nodes == (
        DeviceNode("/dev/exosuit-simulated/fpga-0000-0c-00-1", host_path="/dev/null"),
    )
    assert fpga.env == {"PCI_ADDRESS": "0000:0c:00.1", "SIMULATED": "true"}
    assert all(n.host_path == "/dev/null" for r in results for n in r.device_nodes)
    other = AttachHandle("TEST_PCI", pci_cpid("0000:0d:00.1"))
    with pytest.raises(ValueError, match="is not an attach handle of 0000:0c:00.0"):
        simulated.container_edits(found[0][0], other)


# -- no side effects, recorded alike ---------------------------------------------------

HOSTS = sorted(h for h in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, h, "sys")))


@pytest.mark.parametrize("host", HOSTS)
def test_container_edits_change_nothing_and_answer_alike_each_time(host):
    before = tree(os.path.join(FIXTURES, host))
    for name in SHIPPED[:-1]:
        first = edits_by_handle(name, host)
        assert edits_by_handle(name, host) == first
    assert tree(os.path.join(FIXTURES, host)) == before


@pytest.mark.parametrize("host", HOSTS)
def test_a_re_recorded_host_gives_the_same_container_edits(tmp_path, host):
    source = os.path.join(FIXTURES, host)
    output = str(tmp_path / host)
    record(source, output)
    for name in os.listdir(source):
        if os.path.isfile(os.path.join(source, name)) and name.endswith(".json"):
            shutil.copy(os.path.join(source, name), output)
    for name in SHIPPED[:-1]:
        assert edits_by_handle(name, host, output) == edits_by_handle(name, host), name
