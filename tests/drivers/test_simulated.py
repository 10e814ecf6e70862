"""The simulated driver as a programmable driver: its fake FPGA loads ``simulated`` images
into a state file, and discovery reports what is loaded."""

from __future__ import annotations

import json
import os

import pytest

from exosuit.drivers import (
    PROGRAM_FORMATS,
    DriverContext,
    ImageFile,
    Installable,
    InstallError,
    LoadedImage,
    ProgramError,
    Programmable,
    UsageReader,
    load_driver,
)
from exosuit.drivers.simulated import INSTALLED_FILE, STATE_FILE, SimulatedDriver

FUNCTION = "5f2b2d8e-3b4c-4f5a-9d6e-7a8b9c0d1e2f"


def driver(state_dir, hostname: str = "sim-1") -> SimulatedDriver:
    return SimulatedDriver(
        DriverContext(
            hostname=hostname,
            settings={"devices": {"fake_fpga": "1", "nvidia_gpu": "1"}},
            state_dir=None if state_dir is None else str(state_dir),
        )
    )


def fpga_of(sim: SimulatedDriver):
    device = next(d for d in sim.discover() if d.type == "FPGA")
    return device, device.deployables[0]


def image(tmp_path, name: str = "a", content: bytes = b"simulated bitstream\n", **kw) -> ImageFile:
    path = tmp_path / f"{name}.img"
    path.write_bytes(content)
    values = {"uuid": f"{name}-uuid", "sha256": "0" * 64, "format": "simulated"}
    values.update(kw)
    return ImageFile(path=str(path), **values)


def test_the_fake_fpga_says_it_loads_simulated_images_and_the_gpu_nothing(tmp_path):
    sim = driver(tmp_path / "state")
    assert isinstance(sim, Programmable)
    fpga = next(d for d in sim.discover() if d.type == "FPGA")
    gpu = next(d for d in sim.discover() if d.type == "GPU")
    assert fpga.deployables[0].to_snapshot()["attributes"][-1] == {
        "key": PROGRAM_FORMATS,
        "value": "simulated",
    }
    assert all(a["key"] != PROGRAM_FORMATS for a in gpu.deployables[0].to_snapshot()["attributes"])
    assert sim.loaded(fpga, fpga.deployables[0]) is None


def test_programming_records_the_image_and_discovery_reports_its_function(tmp_path):
    sim = driver(tmp_path / "state")
    device, deployable = fpga_of(sim)
    before = device.to_snapshot()
    sim.program(device, deployable, image(tmp_path, function_id=FUNCTION, interface_id="if-1"))
    assert sim.loaded(device, deployable) == LoadedImage(FUNCTION, "if-1", "a-uuid")
    after, _ = fpga_of(sim)
    assert after.deployables[0].traits == (
        "CUSTOM_FAKE_DEVICE",
        "CUSTOM_FPGA_FUNCTION_ID_FAKE_5F2B2D8E3B4C4F5A9D6E7A8B9C0D1E2F",
    )
    assert after.vendor_board_info["bitstream_id"] == "a-uuid"
    assert after.vendor_board_info["function_id"] == FUNCTION
    # Nothing else changes: the same device, the same deployable, the same handles.
    assert after.to_snapshot()["controlpath_id"] == before["controlpath_id"]
    assert after.deployables[0].attach_handles == deployable.attach_handles
    # A restarted agent (a new driver on the same state folder) sees the same.
    again = driver(tmp_path / "state")
    assert fpga_of(again)[0] == after
    with open(tmp_path / "state" / STATE_FILE) as f:
        assert json.load(f)["loaded"][deployable.name]["image_uuid"] == "a-uuid"


def test_a_second_image_replaces_the_first(tmp_path):
    sim = driver(tmp_path / "state")
    device, deployable = fpga_of(sim)
    sim.program(device, deployable, image(tmp_path, "a", function_id="f-a"))
    sim.program(device, deployable, image(tmp_path, "b", function_id="f-b"))
    after, _ = fpga_of(sim)
    assert after.deployables[0].traits[-1] == "CUSTOM_FPGA_FUNCTION_ID_FAKE_F_B"
    assert after.vendor_board_info["bitstream_id"] == "b-uuid"


def test_a_load_failure_leaves_the_region_empty_and_says_why(tmp_path):
    sim = driver(tmp_path / "state")
    device, deployable = fpga_of(sim)
    sim.program(device, deployable, image(tmp_path, "good", function_id="f-good"))
    bad = image(tmp_path, "bad", b"#exosuit-simulated fail=load\nrest", function_id="f-bad")
    with pytest.raises(ProgramError, match="refused image bad-uuid"):
        sim.program(device, deployable, bad)
    assert sim.loaded(device, deployable) is None
    assert fpga_of(sim)[0].deployables[0].traits == ("CUSTOM_FAKE_DEVICE",)


def test_a_verify_failure_loads_another_function(tmp_path):
    sim = driver(tmp_path / "state")
    device, deployable = fpga_of(sim)
    sim.program(
        device,
        deployable,
        image(tmp_path, content=b"#exosuit-simulated fail=verify\n", function_id="f"),
    )
    loaded = sim.loaded(device, deployable)
    assert loaded is not None and loaded.function_id != "f"


@pytest.mark.parametrize(
    "case, message",
    [("gpu", "not a programmable"), ("format", "not 'gbs'"), ("no state", "no state folder")],
)
def test_what_it_refuses(tmp_path, case, message):
    sim = driver(None if case == "no state" else tmp_path / "state")
    device, deployable = fpga_of(sim)
    kw = {}
    if case == "gpu":
        device = next(d for d in sim.discover() if d.type == "GPU")
        deployable = device.deployables[0]
    if case == "format":
        kw["format"] = "gbs"
    with pytest.raises(ProgramError, match=message):
        sim.program(device, deployable, image(tmp_path, **kw))
    assert not os.path.exists(tmp_path / "state" / STATE_FILE)


def test_an_unreadable_image_is_a_program_error(tmp_path):
    sim = driver(tmp_path / "state")
    device, deployable = fpga_of(sim)
    missing = ImageFile(str(tmp_path / "gone"), "u", "0" * 64, "simulated")
    with pytest.raises(ProgramError, match="cannot read the image"):
        sim.program(device, deployable, missing)


def test_the_installed_entry_point_keeps_its_state_where_the_context_says(tmp_path):
    sim = load_driver("simulated", DriverContext(hostname="h", state_dir=str(tmp_path / "s")))
    assert isinstance(sim, Programmable)
    device = next(d for d in sim.discover() if d.type == "FPGA")
    sim.program(device, device.deployables[0], image(tmp_path))
    assert os.path.exists(tmp_path / "s" / STATE_FILE)


# -- services, install step and usage (what exosuit serve shows with no hardware) ----------


def gpus(hostname: str, count: int = 8) -> list:
    sim = SimulatedDriver(
        DriverContext(hostname=hostname, settings={"devices": {"nvidia_gpu": str(count)}})
    )
    return sim.discover()


def test_simulated_gpus_list_their_models_vgpu_types_and_mig_profiles_none_configured():
    found = {d.model: d for d in gpus("sim-services")}
    assert set(found) == {"Tesla T4", "A100-SXM4-40GB", "H100-SXM5-80GB", "L40S"}
    kinds = {m: [(s.kind, s.name) for s in d.services] for m, d in found.items()}
    assert kinds["Tesla T4"] == [
        ("vgpu", t) for t in ("nvidia-223", "nvidia-224", "nvidia-230", "nvidia-232", "nvidia-234")
    ]
    assert kinds["A100-SXM4-40GB"][:3] == [
        ("vgpu", "nvidia-471"),
        ("vgpu", "nvidia-472"),
        ("vgpu", "nvidia-474"),
    ]
    assert [n for k, n in kinds["H100-SXM5-80GB"] if k == "mig"][-1] == "7g.80gb"
    assert kinds["L40S"] == []
    assert not any(s.enabled for d in found.values() for s in d.services)


def test_the_fake_fpga_lists_its_loaded_function_once_programmed(tmp_path):
    sim = driver(tmp_path / "state")
    fpga, deployable = fpga_of(sim)
    assert fpga.services == ()
    sim.program(fpga, deployable, image(tmp_path, function_id=FUNCTION, interface_id="if-1"))
    loaded, _ = fpga_of(sim)
    assert [s.to_snapshot() for s in loaded.services] == [
        {
            "kind": "fpga_function",
            "name": FUNCTION,
            "enabled": True,
            "details": {"region": deployable.name, "image_uuid": "a-uuid", "interface_id": "if-1"},
        }
    ]


def test_install_is_remembered_in_the_state_folder_and_can_be_made_to_fail(tmp_path):
    sim = driver(tmp_path / "state")
    assert isinstance(sim, Installable)
    fpga, _ = fpga_of(sim)
    gpu = next(d for d in sim.discover() if d.type == "GPU")
    assert not sim.installed(fpga, {})
    sim.install(fpga, {})
    sim.install(fpga, {})  # idempotent
    assert sim.installed(fpga, {}) and not sim.installed(gpu, {})
    # Another process (an agent restart) sees the same.
    assert driver(tmp_path / "state").installed(fpga, {})
    with open(tmp_path / "state" / INSTALLED_FILE) as f:
        assert json.load(f)["installed"] == [fpga.pci_address]
    sim.uninstall(fpga, {})
    sim.uninstall(fpga, {})
    assert not sim.installed(fpga, {})
    for failing in (["nvidia_gpu"], [gpu.pci_address]):
        with pytest.raises(InstallError, match="simulated install failure .*fail_install"):
            sim.install(gpu, {"fail_install": failing})
        assert not sim.installed(gpu, {})
    sim.install(fpga, {"fail_install": ["nvidia_gpu"]})  # another shape installs
    with pytest.raises(InstallError, match="no state folder"):
        driver(None).install(fpga, {})


def test_usage_is_seeded_by_host_and_device_and_stays_the_same():
    sim = SimulatedDriver(DriverContext(hostname="sim-usage"))
    assert isinstance(sim, UsageReader)
    first = {d.pci_address: dict(sim.usage(d)) for d in sim.discover()}
    assert first == {d.pci_address: dict(sim.usage(d)) for d in sim.discover()}
    gpu = next(d for d in sim.discover() if d.type == "GPU")
    figures = first[gpu.pci_address]
    assert set(figures) == {"utilization_percent", "memory_used_bytes", "memory_total_bytes"}
    assert 0 <= figures["utilization_percent"] <= 100
    assert 0 <= figures["memory_used_bytes"] <= figures["memory_total_bytes"]
    fpga = next(d for d in sim.discover() if d.type == "FPGA")
    assert set(first[fpga.pci_address]) == {"errors_total"}
    other = SimulatedDriver(DriverContext(hostname="sim-usage-2"))
    assert [dict(other.usage(d)) for d in other.discover()] != list(first.values())


def test_simulated_devices_report_where_they_sit_the_same_every_run():
    """A root port on the bus before the device's own, the IOMMU group after its bus, the
    NUMA node as before (doc/drivers/simulated.md): derived from the bus alone."""
    sim = driver(None, hostname="sim-topology")
    found = {d.pci_address: (d.numa_node, d.pcie_root, d.iommu_group) for d in sim.discover()}
    fpga = found.pop("0000:0c:00.0")
    assert fpga == (0, "0000:0b:00.0", 12)
    ((address, (numa, root, group)),) = found.items()
    bus = int(address.split(":")[1], 16)
    assert (numa, root, group) == (0, f"0000:{bus - 1:02x}:00.0", bus)
    again = driver(None, hostname="sim-topology").discover()
    assert {d.pci_address: (d.numa_node, d.pcie_root, d.iommu_group) for d in again} == {
        "0000:0c:00.0": fpga,
        address: (numa, root, group),
    }
