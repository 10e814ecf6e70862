"""Install steps (``Installable``) on writable copies of the recorded trees.

Each test copies a fixture tree (links kept), gives the driver a ``Kernel``
(tests/drivers/kernel.py) that acts on the copy as the kernel acts on sysfs writes, and
asserts the writes the kernel saw, then what discovery finds in the tree afterwards.
"""

from __future__ import annotations

import errno
import os
import uuid

import pytest

from exosuit.drivers import DriverContext, Installable, InstallError, RecordedRunner, Sysfs
from exosuit.drivers.container import handle_address
from exosuit.drivers.intel_fpga import IntelFpgaDriver
from exosuit.drivers.intel_qat import IntelQatDriver
from exosuit.drivers.nvidia_gpu import MDEVS_FILE, NvidiaGpuDriver
from exosuit.drivers.nvml import RecordedNvml
from exosuit.drivers.pci import PciDriver
from exosuit.drivers.sriov_nic import SriovNicDriver
from exosuit.drivers.state import read_state
from exosuit.drivers.xilinx_fpga import XilinxFpgaDriver
from tests.drivers.fpga_tools import writable_copy
from tests.drivers.kernel import Kernel

T4 = "0000:3b:00.0"
AF = "0000:af:00.0"
T4_TYPES = f"bus/pci/devices/{T4}/mdev_supported_types"
AF_TYPES = f"bus/pci/devices/{AF}/mdev_supported_types"
VFIO = {"bind_driver": "vfio-pci"}


def driver_of(kernel: Kernel, address: str) -> str | None:
    return kernel.link_name("bus", "pci", "devices", address, "driver")


def pci(kernel: Kernel, spec: str) -> PciDriver:
    context = DriverContext(
        hostname="compute-1",
        sysfs_root=kernel.root,
        sysfs=kernel,
        settings={"device_spec": [spec]},
    )
    return PciDriver(context)


@pytest.fixture
def nvme_host(tmp_path) -> str:
    return writable_copy("nvme-host", tmp_path)


# -- Sysfs.write ---------------------------------------------------------------------------


def test_a_write_replaces_an_attribute_and_never_creates_one(nvme_host):
    sysfs = Sysfs(nvme_host)
    sysfs.write("bus", "pci", "devices", T4, "driver_override", value="vfio-pci")
    assert sysfs.read("bus", "pci", "devices", T4, "driver_override") == "vfio-pci"
    with pytest.raises(FileNotFoundError):
        sysfs.write("bus", "pci", "devices", T4, "no_such_attribute", value="1")
    assert not os.path.lexists(sysfs.path("bus", "pci", "devices", T4, "no_such_attribute"))


def test_a_write_outside_the_trees_sys_is_refused_before_anything_is_opened(nvme_host, tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("untouched\n")
    os.symlink(outside, os.path.join(nvme_host, "sys", "escape"))
    (tmp_path / "nvme-host" / "not-sys").write_text("untouched\n")
    sysfs = Sysfs(nvme_host)
    for parts in (("escape",), ("..", "not-sys"), ("bus", "..", "..", "not-sys")):
        with pytest.raises(PermissionError, match="refusing to write outside"):
            sysfs.write(*parts, value="x")
    assert outside.read_text() == "untouched\n"
    assert (tmp_path / "nvme-host" / "not-sys").read_text() == "untouched\n"


def test_a_context_refuses_a_sysfs_of_another_root(nvme_host, tmp_path):
    with pytest.raises(ValueError, match="sysfs is under"):
        DriverContext(hostname="h", sysfs_root=str(tmp_path), sysfs=Sysfs(nvme_host))
    assert DriverContext(hostname="h", sysfs_root=nvme_host).open_sysfs().root == nvme_host


# -- binding PCI functions (pci; nvidia_gpu, intel_fpga, xilinx_fpga share it) ---------------


def test_pci_binds_the_function_to_the_configured_driver_and_gives_it_back(nvme_host):
    kernel = Kernel(nvme_host, modules=["vfio-pci"])
    driver = pci(kernel, '{"address": "0000:3b:00.0"}')
    assert isinstance(driver, Installable)
    (device,) = driver.discover()
    assert not driver.installed(device, VFIO)

    driver.install(device, VFIO)
    assert kernel.written == [
        (f"bus/pci/devices/{T4}/driver_override", "vfio-pci"),
        ("bus/pci/drivers/nvidia/unbind", T4),
        ("bus/pci/drivers_probe", T4),
    ]
    assert driver_of(kernel, T4) == "vfio-pci"
    (again,) = driver.discover()
    assert again == device  # the pci driver reports the function alike on either driver
    assert driver.installed(again, VFIO)

    kernel.written.clear()
    driver.install(again, VFIO)  # idempotent: nothing more written
    assert kernel.written == []

    driver.uninstall(again, VFIO)
    assert kernel.written == [
        (f"bus/pci/devices/{T4}/driver_override", "\n"),
        ("bus/pci/drivers/vfio-pci/unbind", T4),
        ("bus/pci/drivers_probe", T4),
    ]
    assert driver_of(kernel, T4) == "nvidia"
    assert kernel.read("bus", "pci", "devices", T4, "driver_override") == "(null)"
    assert not driver.installed(driver.discover()[0], VFIO)
    kernel.written.clear()
    driver.uninstall(device, VFIO)  # idempotent too
    assert kernel.written == []


def test_a_bind_to_a_driver_that_is_not_loaded_fails_and_leaves_the_function_as_it_was(
    nvme_host,
):
    kernel = Kernel(nvme_host)  # vfio-pci is loaded (d8:00.0 is on it), pci-stub is not
    driver = pci(kernel, '{"address": "0000:3b:00.0"}')
    (device,) = driver.discover()
    stub = {"bind_driver": "pci-stub"}
    with pytest.raises(InstallError, match="not bound to pci-stub after drivers_probe .*no driver"):
        driver.install(device, stub)
    assert driver_of(kernel, T4) == "nvidia"
    assert kernel.read("bus", "pci", "devices", T4, "driver_override") == "(null)"
    assert kernel.written[-2:] == [
        (f"bus/pci/devices/{T4}/driver_override", "\n"),
        ("bus/pci/drivers_probe", T4),
    ]
    assert not driver.installed(device, stub)


@pytest.mark.parametrize(
    ("settings", "installed"),
    [({}, True), ({"bind_driver": ""}, True), ({"bind_driver": "  "}, True)],
    ids=["absent", "empty", "blank"],
)
def test_without_a_bind_driver_there_is_nothing_to_install(nvme_host, settings, installed):
    kernel = Kernel(nvme_host, modules=["vfio-pci"])
    driver = pci(kernel, '{"address": "0000:3b:00.0"}')
    (device,) = driver.discover()
    driver.install(device, settings)
    driver.uninstall(device, settings)
    assert driver.installed(device, settings) is installed
    assert kernel.written == []
    assert driver_of(kernel, T4) == "nvidia"


def test_a_bind_driver_that_is_not_a_driver_name_is_refused(nvme_host):
    kernel = Kernel(nvme_host, modules=["vfio-pci"])
    driver = pci(kernel, '{"address": "0000:3b:00.0"}')
    (device,) = driver.discover()
    for name in ("vfio pci", "../../x"):
        with pytest.raises(InstallError, match="not a kernel driver name"):
            driver.install(device, {"bind_driver": name})
    assert kernel.written == []


def test_an_override_left_by_another_tool_is_not_undone(nvme_host):
    kernel = Kernel(nvme_host, modules=["vfio-pci", "pci-stub"])
    kernel.write("bus", "pci", "devices", T4, "driver_override", value="pci-stub")
    kernel.written.clear()
    driver = pci(kernel, '{"address": "0000:3b:00.0"}')
    (device,) = driver.discover()
    driver.uninstall(device, VFIO)
    assert kernel.written == []
    assert kernel.read("bus", "pci", "devices", T4, "driver_override") == "pci-stub"


# -- sriov_nic: VFs through sriov_numvfs ------------------------------------------------------


def sriov(kernel: Kernel) -> SriovNicDriver:
    context = DriverContext(
        hostname="compute-4",
        sysfs_root=kernel.root,
        sysfs=kernel,
        runner=RecordedRunner.from_file(os.path.join(kernel.root, "commands.json")),
        settings={"physical_device_mappings": ["physnet1:ens1f0", "physnet2:ens1f1"]},
    )
    return SriovNicDriver(context)


def nic(driver: SriovNicDriver, address: str):
    return next(d for d in driver.discover() if d.pci_address == address)


def vf_units(device) -> list[tuple[str, str]]:
    return [(d.name.split("_")[-1], d.traits[0]) for d in device.deployables]


@pytest.mark.parametrize(
    ("pf", "before", "writes", "vfs"),
    [
        (
            "0000:3b:00.1",  # port 1: no VFs, offered whole (mapped)
            [("0000:3b:00.1", "CUSTOM_PF")],
            ["3"],
            ["0000:3b:11.0", "0000:3b:11.1", "0000:3b:11.2"],
        ),
        (
            "0000:3b:00.0",  # port 0: 2 VFs; the kernel wants 0 before another count
            [("0000:3b:01.0", "CUSTOM_VF"), ("0000:3b:01.1", "CUSTOM_VF")],
            ["0", "3"],
            ["0000:3b:01.0", "0000:3b:01.1", "0000:3b:01.2"],
        ),
    ],
    ids=["no-vfs-before", "two-vfs-before"],
)
def test_sriov_nic_creates_the_configured_vfs_and_removes_them(tmp_path, pf, before, writes, vfs):
    kernel = Kernel(writable_copy("sriov-nic-host", tmp_path))
    driver = sriov(kernel)
    settings = {"num_vfs": 3}
    device = nic(driver, pf)
    assert vf_units(device) == before
    assert not driver.installed(device, settings)

    driver.install(device, settings)
    assert kernel.written == [(f"bus/pci/devices/{pf}/sriov_numvfs", w) for w in writes]
    after = nic(driver, pf)
    assert vf_units(after) == [(vf, "CUSTOM_VF") for vf in vfs]
    assert [driver_of(kernel, vf) for vf in vfs] == ["iavf"] * 3
    assert after.services[0].details["current"] == "3"
    assert after.services[0].enabled
    assert driver.installed(after, settings)
    kernel.written.clear()
    driver.install(after, settings)
    assert kernel.written == []

    driver.uninstall(after, settings)
    assert kernel.written == [(f"bus/pci/devices/{pf}/sriov_numvfs", "0")]
    gone = nic(driver, pf)
    assert gone.services[0].details["current"] == "0"
    assert not gone.services[0].enabled
    assert not any(os.path.lexists(kernel.path("bus", "pci", "devices", vf)) for vf in vfs)
    assert set(vfs).isdisjoint(kernel.listdir("bus", "pci", "drivers", "iavf"))
    kernel.written.clear()
    driver.uninstall(gone, settings)
    assert kernel.written == []


def test_sriov_nic_refuses_more_vfs_than_the_pf_has_and_reports_the_kernels_refusal(tmp_path):
    kernel = Kernel(writable_copy("sriov-nic-host", tmp_path))
    driver = sriov(kernel)
    device = nic(driver, "0000:3b:00.1")
    with pytest.raises(InstallError, match="has at most 128 VFs, not 129"):
        driver.install(device, {"num_vfs": 129})
    assert kernel.written == []
    # A PF without a driver cannot configure SR-IOV: the kernel answers ENOENT.
    kernel.write("bus", "pci", "drivers", "ice", "unbind", value="0000:3b:00.1")
    kernel.written.clear()
    with pytest.raises(InstallError, match="writing 2 to sriov_numvfs: .*No such file"):
        driver.install(device, {"num_vfs": 2})
    assert kernel.written == [("bus/pci/devices/0000:3b:00.1/sriov_numvfs", "2")]
    with pytest.raises(InstallError, match="not a number"):
        driver.install(device, {"num_vfs": "many"})


def test_sriov_nic_without_num_vfs_manages_no_vfs(tmp_path):
    kernel = Kernel(writable_copy("sriov-nic-host", tmp_path))
    driver = sriov(kernel)
    device = nic(driver, "0000:3b:00.0")
    for settings in ({}, {"num_vfs": 0}):
        driver.install(device, settings)
        driver.uninstall(device, settings)
        assert driver.installed(device, settings)
    assert kernel.written == []
    assert len(nic(driver, "0000:3b:00.0").deployables) == 2


# -- intel_qat: services through qat/state and qat/cfg_services ---------------------------


def qat(kernel: Kernel, state_dir) -> IntelQatDriver:
    context = DriverContext(
        hostname="qat-1", sysfs_root=kernel.root, sysfs=kernel, state_dir=str(state_dir)
    )
    return IntelQatDriver(context)


def qat_pf(driver: IntelQatDriver, address: str):
    return next(d for d in driver.discover() if d.pci_address == address)


def enabled(device) -> list[str]:
    return [s.name for s in device.services if s.enabled]


QAT_WRITES = {
    "up-other-services": [("state", "down"), ("cfg_services", "asym"), ("state", "up")],
    "down-same-services": [("state", "up")],
    "down-other-services": [("cfg_services", "sym;dc"), ("state", "up")],
}


@pytest.mark.parametrize(
    ("pf", "services", "case", "traits"),
    [
        ("0000:6b:00.0", "asym", "up-other-services", ["CUSTOM_QAT_ASYM"]),
        ("0000:70:00.0", "dc;asym", "down-same-services", ["CUSTOM_QAT_ASYM", "CUSTOM_QAT_DC"]),
        ("0000:70:00.0", "sym;dc", "down-other-services", ["CUSTOM_QAT_DC", "CUSTOM_QAT_SYM"]),
    ],
    ids=list(QAT_WRITES),
)
def test_intel_qat_enables_the_configured_services_and_restores_the_ones_before(
    tmp_path, pf, services, case, traits
):
    kernel = Kernel(writable_copy("intel-qat-host", tmp_path))
    driver = qat(kernel, tmp_path / "state")
    settings = {"services": services}
    device = qat_pf(driver, pf)
    before = (
        kernel.read("bus", "pci", "devices", pf, "qat", "cfg_services"),
        kernel.read("bus", "pci", "devices", pf, "qat", "state"),
    )
    assert not driver.installed(device, settings)

    driver.install(device, settings)
    assert kernel.written == [
        (f"bus/pci/devices/{pf}/qat/{name}", value) for name, value in QAT_WRITES[case]
    ]
    after = qat_pf(driver, pf)
    assert sorted(enabled(after)) == sorted(services.split(";"))
    assert list(after.deployables[0].traits[1:]) == traits
    assert after.vendor_board_info["state"] == "up"
    assert driver.installed(after, settings)
    kernel.written.clear()
    driver.install(after, settings)
    assert kernel.written == []

    driver.uninstall(after, settings)
    restored = (
        kernel.read("bus", "pci", "devices", pf, "qat", "cfg_services"),
        kernel.read("bus", "pci", "devices", pf, "qat", "state"),
    )
    assert restored == before
    assert qat_pf(driver, pf) == device
    kernel.written.clear()
    driver.uninstall(device, settings)  # nothing remembered any more: nothing to undo
    assert kernel.written == []


def test_intel_qat_remembers_the_first_before_across_installs_and_restarts(tmp_path):
    kernel = Kernel(writable_copy("intel-qat-host", tmp_path))
    pf = "0000:6b:00.0"
    qat(kernel, tmp_path / "state").install(qat_pf(qat(kernel, tmp_path), pf), {"services": "dc"})
    # Reconfigured, then undone by a new process (another driver object, same folder).
    again = qat(kernel, tmp_path / "state")
    again.install(qat_pf(again, pf), {"services": "asym"})
    qat(kernel, tmp_path / "state").uninstall(qat_pf(again, pf), {"services": "asym"})
    assert kernel.read("bus", "pci", "devices", pf, "qat", "cfg_services") == "sym;dc"
    assert kernel.read("bus", "pci", "devices", pf, "qat", "state") == "up"


def test_intel_qat_refusals_are_install_errors(tmp_path):
    kernel = Kernel(writable_copy("intel-qat-host", tmp_path))
    driver = qat(kernel, tmp_path / "state")
    device = qat_pf(driver, "0000:6b:00.0")
    with pytest.raises(InstallError, match="cy2 is not a QAT service"):
        driver.install(device, {"services": "sym;cy2"})
    with pytest.raises(ValueError, match="not a QAT service"):
        IntelQatDriver(
            DriverContext(hostname="h", sysfs_root=kernel.root, settings={"services": "x"})
        )
    assert kernel.written == []
    # The kernel refuses services on a device that is up: why the driver goes down first.
    with pytest.raises(OSError, match="Invalid argument"):
        kernel.write("bus", "pci", "devices", "0000:6b:00.0", "qat", "cfg_services", value="dc")
    assert kernel.read("bus", "pci", "devices", "0000:6b:00.0", "qat", "cfg_services") == "sym;dc"


def test_intel_qat_without_cfg_services_cannot_set_services(tmp_path):
    kernel = Kernel(writable_copy("intel-qat-c62x-host", tmp_path))
    driver = qat(kernel, tmp_path / "state")
    device = qat_pf(driver, "0000:3d:00.0")
    with pytest.raises(InstallError, match="has no qat/cfg_services"):
        driver.install(device, {"services": "sym"})
    assert not driver.installed(device, {"services": "sym"})
    assert driver.installed(device, {})
    driver.uninstall(device, {"services": "sym"})
    assert kernel.written == []


# -- FPGA cards handed out whole: intel_fpga, xilinx_fpga ---------------------------------


def bind_writes(address: str, override: str, unbind_from: str) -> list:
    """What moving ``address`` writes: ``override``, unbind from ``unbind_from``, probe."""
    return [
        (f"bus/pci/devices/{address}/driver_override", override),
        (f"bus/pci/drivers/{unbind_from}/unbind", address),
        ("bus/pci/drivers_probe", address),
    ]


FPGA_CARDS = {
    # The D5005's one PF, on dfl-pci.
    "intel-d5005": (
        "fpga-dfl-host",
        IntelFpgaDriver,
        "0000:3b:00.0",
        {"0000:3b:00.0": "dfl-pci"},
    ),
    # The N3000's VFs: VF0 on dfl-pci by an override, VF1 already on vfio-pci (left alone).
    "intel-n3000-vfs": (
        "fpga-dfl-host",
        IntelFpgaDriver,
        "0000:b1:00.0",
        {"0000:b1:00.1": "dfl-pci", "0000:b1:00.2": "vfio-pci"},
    ),
    # An Alveo's management and user PFs, which a VM needs together.
    "xilinx-u250": (
        "fpga-alveo-host",
        XilinxFpgaDriver,
        "0000:3b:00.0",
        {"0000:3b:00.0": "xclmgmt", "0000:3b:00.1": "xocl"},
    ),
}


@pytest.mark.parametrize(("host", "cls", "card", "drivers"), FPGA_CARDS.values(), ids=FPGA_CARDS)
def test_fpga_cards_are_bound_for_passthrough_and_given_back_to_the_drivers_they_were_on(
    tmp_path, host, cls, card, drivers
):
    kernel = Kernel(writable_copy(host, tmp_path))
    context = DriverContext(
        hostname="compute-1",
        sysfs_root=kernel.root,
        sysfs=kernel,
        runner=RecordedRunner.from_file(os.path.join(kernel.root, "commands.json")),
        state_dir=str(tmp_path / "state"),
    )
    driver = cls(context)
    device = next(d for d in driver.discover() if d.pci_address == card)
    overrides = {a: kernel.read("bus", "pci", "devices", a, "driver_override") for a in drivers}
    moved = [a for a, d in drivers.items() if d != "vfio-pci"]

    driver.install(device, VFIO)
    assert kernel.written == [w for a in moved for w in bind_writes(a, "vfio-pci", drivers[a])]
    assert {a: driver_of(kernel, a) for a in drivers} == dict.fromkeys(drivers, "vfio-pci")
    again = next(d for d in driver.discover() if d.pci_address == card)
    assert driver.installed(again, VFIO)

    kernel.written.clear()
    cls(context).uninstall(again, VFIO)  # another process: what to undo is in state_dir
    # Each function gets back the override it had (none: an empty line).
    assert kernel.written == [
        w for a in moved for w in bind_writes(a, _former(overrides[a]), "vfio-pci")
    ]
    assert {a: driver_of(kernel, a) for a in drivers} == drivers
    assert {
        a: kernel.read("bus", "pci", "devices", a, "driver_override") for a in drivers
    } == overrides
    assert next(d for d in driver.discover() if d.pci_address == card) == device
    kernel.written.clear()
    driver.uninstall(device, VFIO)
    assert kernel.written == []


def _former(override: str | None) -> str:
    return "\n" if override in (None, "(null)") else override


# -- nvidia_gpu: whole GPUs for passthrough; vGPU and MIG GPUs have no function to bind -----


def test_nvidia_gpu_binds_only_the_gpus_it_offers_whole(tmp_path):
    kernel = Kernel(writable_copy("nvidia-gpu-host", tmp_path), modules=["vfio-pci"])
    root = kernel.root
    context = DriverContext(
        hostname="nvidia-gpu-host",
        sysfs_root=root,
        sysfs=kernel,
        runner=RecordedRunner.from_file(os.path.join(root, "commands.json")),
        settings={"vgpu_types": {"0000:af:00.0": "nvidia-223"}},
        state_dir=str(tmp_path / "state"),
    )
    driver = NvidiaGpuDriver(context, nvml=RecordedNvml.from_file(os.path.join(root, "nvml.json")))
    gpus = {d.pci_address: d for d in driver.discover()}
    for address in ("0000:41:00.0", "0000:af:00.0"):  # MIG instances; vGPUs
        driver.install(gpus[address], VFIO)
        assert driver.installed(gpus[address], VFIO)
    assert kernel.written == []

    driver.install(gpus["0000:3b:00.0"], VFIO)
    assert kernel.written == [
        ("bus/pci/devices/0000:3b:00.0/driver_override", "vfio-pci"),
        ("bus/pci/drivers/nvidia/unbind", "0000:3b:00.0"),
        ("bus/pci/drivers_probe", "0000:3b:00.0"),
    ]
    again = {d.pci_address: d for d in driver.discover()}
    assert driver.installed(again["0000:3b:00.0"], VFIO)
    # Its mdev types are still listed: binding changes what the GPU is on, not what it is.
    assert again["0000:3b:00.0"].services == gpus["0000:3b:00.0"].services
    driver.uninstall(again["0000:3b:00.0"], VFIO)
    assert driver_of(kernel, "0000:3b:00.0") == "nvidia"


# -- nvidia_gpu: the configured mdevs of a GPU offered as vGPUs ----------------------------

GPU_HOST = "nvidia-gpu-host"
VGPU_TYPES = {
    "0000:3b:00.0": "nvidia-223",  # a T4, no mdev
    "0000:af:00.0": "nvidia-223",  # a T4 with one mdev made outside Exosuit
    "0000:81:00.0": "nvidia-471",  # an A100: mdevs on its VFs; VF .5 holds one (slot 0)
}
FOREIGN = "4b20d080-1b54-4048-85b3-a6a62d165c01"  # on 0000:af:00.0, made outside Exosuit
A100_SLOT0 = "39365e94-6198-5a03-b6be-c65392a8f286"  # on 0000:81:00.5, there before
# doc/drivers/nvidia_gpu.md: the slot UUIDs, uuid5 of "<hostname>/<parent>/<type>/<slot>".
MDEV_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_DNS, "mdev.exosuit.dev")


def slot_uuid(parent: str, vgpu_type: str, index: int) -> str:
    return str(uuid.uuid5(MDEV_NAMESPACE, f"{GPU_HOST}/{parent}/{vgpu_type}/{index}"))


def gpu_driver(kernel: Kernel, state_dir, **settings) -> NvidiaGpuDriver:
    context = DriverContext(
        hostname=GPU_HOST,
        sysfs_root=kernel.root,
        sysfs=kernel,
        runner=RecordedRunner.from_file(os.path.join(kernel.root, "commands.json")),
        settings={"vgpu_types": VGPU_TYPES, **settings},
        state_dir=None if state_dir is None else str(state_dir),
    )
    return NvidiaGpuDriver(context)


def gpu(driver: NvidiaGpuDriver, address: str):
    return next(d for d in driver.discover() if d.pci_address == address)


def mdev_handles(device) -> list[tuple[str, str, str]]:
    """(parent, vgpu_mark, mdev UUID) of the device's MDEV handles, in order."""
    (deployable,) = device.deployables
    assert deployable.resource_class == "VGPU"
    assert deployable.num_accelerators == len(deployable.attach_handles)
    return [
        (handle_address(h), h.attach_info["vgpu_mark"], h.attach_info["mdev_uuid"])
        for h in deployable.attach_handles
    ]


def available(kernel: Kernel, parent: str, vgpu_type: str) -> int:
    types = ("bus", "pci", "devices", parent, "mdev_supported_types", vgpu_type)
    return int(kernel.read(*types, "available_instances") or "")


def creates(*made: tuple[str, str, str]) -> list[tuple[str, str]]:
    return [
        (f"bus/pci/devices/{parent}/mdev_supported_types/{vgpu_type}/create", mdev)
        for parent, vgpu_type, mdev in made
    ]


def removes(*mdevs: str) -> list[tuple[str, str]]:
    return [(f"bus/mdev/devices/{mdev}/remove", "1") for mdev in mdevs]


def ours(parent: str, vgpu_type: str, index: int) -> tuple[str, str, str]:
    """The handle of an mdev Exosuit made in slot ``index``: (parent, mark, UUID)."""
    return (parent, f"{vgpu_type}_{index}", slot_uuid(parent, vgpu_type, index))


MDEV_CASES = {
    # The plain T4: four mdevs on the GPU itself, slots 0-3.
    "t4": (
        "0000:3b:00.0",
        "nvidia-223:4",
        [],
        [ours("0000:3b:00.0", "nvidia-223", i) for i in range(4)],
    ),
    # The T4 with an mdev made elsewhere: it counts, three more are made (slots first).
    "t4-with-a-foreign-mdev": (
        AF,
        "nvidia-223:4",
        [(AF, f"nvidia-223_{FOREIGN}", FOREIGN)],
        [*(ours(AF, "nvidia-223", i) for i in range(3)), (AF, f"nvidia-223_{FOREIGN}", FOREIGN)],
    ),
    # The A100: one mdev per VF, on the VFs that have none (VF .5 holds its slot 0 already).
    "a100-vfs": (
        "0000:81:00.0",
        "nvidia-471:4",
        [ours("0000:81:00.5", "nvidia-471", 0)],
        [ours(f"0000:81:00.{f}", "nvidia-471", 0) for f in range(4, 8)],
    ),
}


@pytest.mark.parametrize(
    ("address", "mdevs", "before", "after"), MDEV_CASES.values(), ids=MDEV_CASES
)
def test_nvidia_gpu_creates_the_configured_mdevs_and_removes_only_its_own(
    tmp_path, address, mdevs, before, after
):
    kernel = Kernel(writable_copy(GPU_HOST, tmp_path))
    settings = {"mdevs": [mdevs]}
    vgpu_type = mdevs.split(":")[0]
    driver = gpu_driver(kernel, tmp_path / "state", **settings)
    device = gpu(driver, address)
    assert mdev_handles(device) == before
    assert not driver.installed(device, settings)
    made = [
        (parent, vgpu_type, mdev)
        for parent, mark, mdev in after
        if (parent, mark, mdev) not in before
    ]
    free = {parent: available(kernel, parent, vgpu_type) for parent, _, _ in after}

    driver.install(device, settings)
    assert kernel.written == creates(*made)
    for parent, _, mdev in made:
        on_bus = kernel.path("bus", "mdev", "devices", mdev)
        assert os.path.realpath(on_bus) == os.path.join(
            os.path.realpath(kernel.path("bus", "pci", "devices", parent)), mdev
        )
        assert kernel.link_name("bus", "mdev", "devices", mdev, "mdev_type") == vgpu_type
        assert kernel.link_name("bus", "mdev", "devices", mdev, "driver") == "nvidia-vgpu-vfio"
    for parent, count in free.items():
        assert available(kernel, parent, vgpu_type) == count - sum(p == parent for p, _, _ in made)
    # Discovery offers exactly the mdevs there are now, as VGPU inventory.
    installed = gpu(driver, address)
    assert mdev_handles(installed) == after
    assert installed.deployables[0].num_accelerators == 4
    (service,) = [s for s in installed.services if s.enabled]
    assert service.details["instances"] == "4"
    assert driver.installed(installed, settings)
    # A created mdev can be given to a container: its own IOMMU group.
    handle = next(
        h
        for h in installed.deployables[0].attach_handles
        if h.attach_info["mdev_uuid"] == made[0][2]
    )
    group = kernel.link_name("bus", "mdev", "devices", made[0][2], "iommu_group")
    edits = driver.container_edits(installed, handle)
    assert edits.device_nodes[-1].path == f"/dev/vfio/{group}"
    assert edits.env["MDEV_UUID"] == made[0][2]

    kernel.written.clear()
    driver.install(installed, settings)  # idempotent: the mdevs there are counted
    assert kernel.written == []

    driver.uninstall(installed, settings)
    assert kernel.written == removes(*sorted(m for _, _, m in made))
    for _, _, mdev in made:
        assert not os.path.lexists(kernel.path("bus", "mdev", "devices", mdev))
    assert {parent: available(kernel, parent, vgpu_type) for parent in free} == free
    again = gpu(driver, address)
    assert again == device  # the mdevs there were before are still there, offered as before
    assert not driver.installed(again, settings)
    kernel.written.clear()
    driver.uninstall(again, settings)  # nothing of ours left: nothing written
    assert kernel.written == []
    assert read_state(str(tmp_path / "state"), MDEVS_FILE) == {"version": 1, "created": {}}


@pytest.mark.parametrize(
    ("address", "mdevs", "message"),
    [
        (
            "0000:af:00.0",
            "nvidia-223:17",
            "GPU 0000:af:00.0: [nvidia_gpu] mdevs asks 17 mdevs of nvidia-223; 1 exist and "
            "available_instances allows 15 more, so at most 16 are possible",
        ),
        (
            "0000:81:00.0",
            "nvidia-471:5",
            "GPU 0000:81:00.0: [nvidia_gpu] mdevs asks 5 mdevs of nvidia-471; 1 exist and "
            "available_instances allows 3 more, so at most 4 are possible",
        ),
    ],
    ids=["t4", "a100-vfs"],
)
def test_nvidia_gpu_refuses_more_mdevs_than_the_gpu_can_hold_before_writing(
    tmp_path, address, mdevs, message
):
    kernel = Kernel(writable_copy(GPU_HOST, tmp_path))
    settings = {"mdevs": [mdevs]}
    driver = gpu_driver(kernel, tmp_path / "state", **settings)
    device = gpu(driver, address)
    with pytest.raises(InstallError) as refused:
        driver.install(device, settings)
    assert str(refused.value) == message
    assert kernel.written == []
    assert not os.path.exists(tmp_path / "state" / MDEVS_FILE)
    assert gpu(driver, address) == device
    assert not driver.installed(device, settings)


def test_nvidia_gpu_without_mdevs_creates_and_removes_none(tmp_path):
    kernel = Kernel(writable_copy(GPU_HOST, tmp_path))
    driver = gpu_driver(kernel, tmp_path / "state")
    for address in VGPU_TYPES:
        device = gpu(driver, address)
        # No count for the GPU's type (absent, 0, or only another type's): nothing to do.
        for settings in ({}, {"mdevs": []}, {"mdevs": ["nvidia-223:0", "nvidia-471:0"]}):
            driver.install(device, settings)
            assert driver.installed(device, settings)
            driver.uninstall(device, settings)
    assert kernel.written == []
    with pytest.raises(InstallError, match="is not TYPE:COUNT"):
        driver.install(gpu(driver, "0000:3b:00.0"), {"mdevs": ["nvidia-223"]})


def test_nvidia_gpu_remembers_its_mdevs_across_restarts_and_only_in_its_state_folder(tmp_path):
    kernel = Kernel(writable_copy(GPU_HOST, tmp_path))
    settings = {"mdevs": ["nvidia-223:2"]}
    t4 = "0000:3b:00.0"
    gpu_driver(kernel, tmp_path / "state", **settings).install(
        gpu(gpu_driver(kernel, None), t4), settings
    )
    ours = [slot_uuid(t4, "nvidia-223", i) for i in range(2)]
    saved = read_state(str(tmp_path / "state"), MDEVS_FILE)["created"]
    assert saved == {m: {"gpu": t4, "parent": t4, "type": "nvidia-223"} for m in ours}
    # An agent whose state folder lost them removes nothing: they are not known as its own.
    kernel.written.clear()
    stranger = gpu_driver(kernel, tmp_path / "other-state", **settings)
    stranger.uninstall(gpu(stranger, t4), settings)
    assert kernel.written == []
    # Another process with the same folder (the agent restarted) removes exactly them,
    # whatever mdevs says now.
    restarted = gpu_driver(kernel, tmp_path / "state")
    restarted.uninstall(gpu(restarted, t4), {})
    assert kernel.written == removes(*sorted(ours))
    assert mdev_handles(gpu(restarted, t4)) == []


def test_nvidia_gpu_without_a_state_folder_remembers_its_mdevs_in_the_process(tmp_path):
    kernel = Kernel(writable_copy(GPU_HOST, tmp_path))
    settings = {"mdevs": ["nvidia-223:2"]}
    driver = gpu_driver(kernel, None, **settings)
    driver.install(gpu(driver, "0000:af:00.0"), settings)
    assert kernel.written == creates(
        ("0000:af:00.0", "nvidia-223", slot_uuid("0000:af:00.0", "nvidia-223", 0))
    )
    kernel.written.clear()
    driver.uninstall(gpu(driver, "0000:af:00.0"), settings)
    assert kernel.written == removes(slot_uuid("0000:af:00.0", "nvidia-223", 0))
    assert mdev_handles(gpu(driver, "0000:af:00.0")) == [
        ("0000:af:00.0", f"nvidia-223_{FOREIGN}", FOREIGN)
    ]


def test_nvidia_gpu_never_removes_an_mdev_a_vm_uses(tmp_path):
    kernel = Kernel(writable_copy(GPU_HOST, tmp_path))
    settings = {"mdevs": ["nvidia-223:2"]}
    t4 = "0000:3b:00.0"
    driver = gpu_driver(kernel, tmp_path / "state", **settings)
    driver.install(gpu(driver, t4), settings)
    ours = sorted(slot_uuid(t4, "nvidia-223", i) for i in range(2))
    # The NVIDIA vGPU manager names the VM using an mdev in <mdev>/nvidia/vm_name.
    vm_name = os.path.join(kernel.path("bus", "mdev", "devices", ours[1]), "nvidia", "vm_name")
    os.makedirs(os.path.dirname(vm_name))
    with open(vm_name, "w") as f:
        f.write("instance-0000002a\n")
    kernel.written.clear()
    with pytest.raises(InstallError) as refused:
        driver.uninstall(gpu(driver, t4), settings)
    assert str(refused.value) == (
        f"GPU {t4}: its mdevs are in use, so none is removed: {ours[1]} (VM instance-0000002a)"
    )
    assert kernel.written == []
    assert driver.installed(gpu(driver, t4), settings)
    with open(vm_name, "w") as f:
        f.write("\n")  # the VM let it go
    driver.uninstall(gpu(driver, t4), settings)
    assert kernel.written == removes(*ours)


def test_nvidia_gpu_takes_back_the_mdevs_of_an_install_the_kernel_refused_halfway(tmp_path):
    kernel = Kernel(writable_copy(GPU_HOST, tmp_path))
    settings = {"mdevs": ["nvidia-471:4"]}
    a100 = "0000:81:00.0"
    driver = gpu_driver(kernel, tmp_path / "state", **settings)
    device = gpu(driver, a100)
    # VF .7's type lost its create attribute (the vGPU manager went away meanwhile).
    os.unlink(kernel.path("bus/pci/devices/0000:81:00.7/mdev_supported_types/nvidia-471/create"))
    made = [
        (vf, "nvidia-471", slot_uuid(vf, "nvidia-471", 0))
        for vf in ("0000:81:00.4", "0000:81:00.6", "0000:81:00.7")
    ]
    with pytest.raises(
        InstallError,
        match=r"to 0000:81:00\.7's mdev_supported_types/nvidia-471/create: .*No such file",
    ):
        driver.install(device, settings)
    assert kernel.written == creates(*made) + removes(made[0][2], made[1][2])  # in order
    assert gpu(driver, a100) == device
    assert read_state(str(tmp_path / "state"), MDEVS_FILE)["created"] == {}


# -- the test kernel refuses what Linux refuses ----------------------------------------------


@pytest.mark.parametrize(
    ("host", "parts", "value", "error"),
    [
        ("sriov-nic-host", "bus/pci/devices/0000:3b:00.0/sriov_numvfs", "129", "ERANGE"),
        ("sriov-nic-host", "bus/pci/devices/0000:3b:00.0/sriov_numvfs", "3", "EBUSY"),
        ("sriov-nic-host", "bus/pci/devices/0000:3b:00.0/sriov_numvfs", "x", "EINVAL"),
        ("sriov-nic-host", "bus/pci/drivers/iavf/unbind", "0000:3b:00.0", "ENODEV"),
        ("sriov-nic-host", "bus/pci/drivers_probe", "0000:99:00.0", "ENODEV"),
        ("sriov-nic-host", "bus/pci/drivers/ice/bind", "0000:3b:00.0", "EBUSY"),
        ("intel-qat-host", "bus/pci/devices/0000:6b:00.0/qat/cfg_services", "dc", "EINVAL"),
        ("intel-qat-host", "bus/pci/devices/0000:70:00.0/qat/cfg_services", "zip", "EINVAL"),
        ("intel-qat-host", "bus/pci/devices/0000:70:00.0/qat/state", "sideways", "EINVAL"),
        (GPU_HOST, f"{T4_TYPES}/nvidia-223/create", "not-a-uuid", "EINVAL"),
        (GPU_HOST, f"{T4_TYPES}/nvidia-223/create", FOREIGN[:-1], "EINVAL"),
        (GPU_HOST, f"{T4_TYPES}/nvidia-223/create", f"{FOREIGN}\n\n", "EINVAL"),
        (GPU_HOST, f"{AF_TYPES}/nvidia-223/create", FOREIGN, "EEXIST"),
        (GPU_HOST, f"{T4_TYPES}/nvidia-223/create", FOREIGN.upper(), "EEXIST"),
        (GPU_HOST, f"{AF_TYPES}/nvidia-224/create", slot_uuid(AF, "nvidia-224", 0), "EUSERS"),
        (GPU_HOST, f"bus/mdev/devices/{FOREIGN}/remove", "yes", "EINVAL"),
        (GPU_HOST, f"bus/mdev/devices/{FOREIGN}/remove", "-1", "EINVAL"),
    ],
)
def test_the_test_kernel_refuses_as_linux_does(tmp_path, host, parts, value, error):
    kernel = Kernel(writable_copy(host, tmp_path))
    before = kernel.read(*parts.split("/"))
    with pytest.raises(OSError) as raised:
        kernel.write(*parts.split("/"), value=value)
    assert raised.value.errno == getattr(errno, error)
    assert kernel.read(*parts.split("/")) == before  # refused before anything changed


def test_the_test_kernel_makes_an_mdev_by_its_lower_case_uuid_and_ignores_a_zero_remove(tmp_path):
    kernel = Kernel(writable_copy(GPU_HOST, tmp_path))
    made = "0D7C1B0E-2B8F-4A67-9F1E-7D9A5C3B2E10"
    kernel.write(*f"{T4_TYPES}/nvidia-224/create".split("/"), value=f"{made}\n")
    mdev = ("bus", "mdev", "devices", made.lower())
    assert kernel.link_name(*mdev, "mdev_type") == "nvidia-224"
    assert available(kernel, T4, "nvidia-224") == 7
    kernel.write(*mdev, "remove", value="0")
    assert kernel.link_name(*mdev, "mdev_type") == "nvidia-224"
    kernel.write(*mdev, "remove", value="0x1\n")
    assert not os.path.lexists(kernel.path(*mdev))
    assert available(kernel, T4, "nvidia-224") == 8
