"""The driver SDK's public surface: what vendors may import, and nothing by accident.

``exosuit.drivers`` re-exports the SDK (``base``, ``health``, ``runner``, ``sysfs``) next to its own
context and registry; doc/drivers.md lists the same names. Changing this list is an
API change for every out-of-tree driver.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

import exosuit.drivers

SDK_NAMES = [
    "ENTRY_POINT_GROUP",
    "HEALTH_OK",
    "HEALTH_STATES",
    "HEALTH_UNHEALTHY",
    "HEALTH_WARNING",
    "PROGRAM_FORMATS",
    "AttachHandle",
    "CommandFailed",
    "CommandNotRecorded",
    "CommandResult",
    "CommandRunner",
    "ContainerDevice",
    "ContainerEdits",
    "CounterWindow",
    "Deployable",
    "Device",
    "DeviceNode",
    "Driver",
    "DriverContext",
    "Health",
    "HealthReader",
    "HealthSettings",
    "ImageFile",
    "InstallError",
    "Installable",
    "LoadedImage",
    "Mount",
    "OnDemandSlices",
    "PartitionError",
    "Partitionable",
    "PciFunction",
    "PciHealth",
    "ProgramError",
    "Programmable",
    "RecordedRunner",
    "Service",
    "SubprocessRunner",
    "Sysfs",
    "UsageReader",
    "available_drivers",
    "driver_class",
    "hwmon_health",
    "load_driver",
    "normalize_id",
    "pci_cpid",
    "trait_suffix",
]

# The modules whose names the package re-exports: a vendor may import from either.
SDK_MODULES = [
    "exosuit.drivers.base",
    "exosuit.drivers.health",
    "exosuit.drivers.runner",
    "exosuit.drivers.sysfs",
]

DRIVER_MODULES = sorted(
    f"exosuit.drivers.{info.name}" for info in pkgutil.iter_modules(exosuit.drivers.__path__)
)


def isort_order(names: list[str]) -> list[str]:
    """Ruff's RUF022 order: CONSTANTS, then Classes, then functions, each alphabetical."""

    def key(name: str) -> tuple[int, str]:
        if name.isupper():
            return (0, name)
        return (1 if name[:1].isupper() else 2, name)

    return sorted(names, key=key)


def public_definitions(module: ModuleType) -> list[str]:
    """Public classes and functions defined in ``module`` itself (not imported into it)."""
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    )


def test_the_sdk_is_exactly_the_promised_names() -> None:
    assert exosuit.drivers.__all__ == SDK_NAMES
    assert isort_order(SDK_NAMES) == SDK_NAMES


def test_a_star_import_gives_exactly_the_sdk() -> None:
    namespace: dict[str, object] = {}
    exec("from exosuit.drivers import *", namespace)
    namespace.pop("__builtins__")
    assert sorted(namespace) == sorted(SDK_NAMES)


@pytest.mark.parametrize("name", SDK_NAMES)
def test_each_sdk_name_is_importable(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from exosuit.drivers import {name}", namespace)
    assert namespace[name] is getattr(exosuit.drivers, name)


@pytest.mark.parametrize("module_name", SDK_MODULES)
def test_the_package_reexports_each_sdk_module_whole(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in module.__all__:
        assert name in SDK_NAMES, f"{module_name}.{name} is not re-exported"
        assert getattr(exosuit.drivers, name) is getattr(module, name)


@pytest.mark.parametrize("module_name", ["exosuit.drivers", *SDK_MODULES])
def test_sdk_modules_declare_every_public_definition(module_name: str) -> None:
    module = importlib.import_module(module_name)
    missing = set(public_definitions(module)) - set(module.__all__)
    assert not missing, f"{module_name} defines public names outside __all__: {missing}"


@pytest.mark.parametrize("module_name", ["exosuit.drivers", *DRIVER_MODULES])
def test_each_all_is_sorted_and_names_only_what_exists(module_name: str) -> None:
    module = importlib.import_module(module_name)
    names = module.__all__
    assert names == isort_order(names)
    assert len(set(names)) == len(names)
    assert [name for name in names if not hasattr(module, name)] == []


def test_a_programmable_driver_is_recognised_by_its_two_methods() -> None:
    from exosuit.drivers import Deployable, Device, ImageFile, LoadedImage, Programmable

    class Loader:
        name = "loader"

        def discover(self) -> list[Device]:
            return []

        def program(self, device: Device, deployable: Deployable, image: ImageFile) -> None:
            pass

        def loaded(self, device: Device, deployable: Deployable) -> LoadedImage | None:
            return None

    class Finder:
        name = "finder"

        def discover(self) -> list[Device]:
            return []

    assert isinstance(Loader(), Programmable)
    assert isinstance(Loader(), exosuit.drivers.Driver)
    assert not isinstance(Finder(), Programmable)


def test_a_recording_may_stand_for_any_one_argument_with_a_star() -> None:
    from exosuit.drivers import CommandNotRecorded, RecordedRunner

    runner = RecordedRunner(
        {
            "fpgaconf --bus 0x3b *": {"returncode": 0, "stdout": "any file"},
            "fpgaconf --bus 0x3b exact.gbs": {"returncode": 2, "stdout": "this one"},
        }
    )
    assert runner.run(["fpgaconf", "--bus", "0x3b", "/tmp/a b.gbs"]).stdout == "any file"
    assert runner.run(["fpgaconf", "--bus", "0x3b", "exact.gbs"]).returncode == 2
    with pytest.raises(CommandNotRecorded):
        runner.run(["fpgaconf", "--bus", "0x3c", "x.gbs"])
    with pytest.raises(CommandNotRecorded):
        runner.run(["fpgaconf", "--bus", "0x3b"])


def test_installable_and_usage_reader_are_recognised_by_their_methods() -> None:
    from collections.abc import Mapping
    from typing import Any

    from exosuit.drivers import Device, Installable, UsageReader

    class Binder:
        name = "binder"

        def discover(self) -> list[Device]:
            return []

        def install(self, device: Device, settings: Mapping[str, Any]) -> None:
            pass

        def uninstall(self, device: Device, settings: Mapping[str, Any]) -> None:
            pass

        def installed(self, device: Device, settings: Mapping[str, Any]) -> bool:
            return True

    class Meter:
        name = "meter"

        def discover(self) -> list[Device]:
            return []

        def usage(self, device: Device) -> Mapping[str, float]:
            return {}

    assert isinstance(Binder(), Installable) and not isinstance(Binder(), UsageReader)
    assert isinstance(Meter(), UsageReader) and not isinstance(Meter(), Installable)


def test_a_context_gives_its_drivers_a_sysfs_under_its_root(tmp_path) -> None:
    from exosuit.drivers import DriverContext, Sysfs

    plain = DriverContext(hostname="h", sysfs_root=str(tmp_path)).open_sysfs()
    assert isinstance(plain, Sysfs) and plain.root == str(tmp_path)
    given = Sysfs(str(tmp_path))
    assert DriverContext(hostname="h", sysfs_root=str(tmp_path), sysfs=given).open_sysfs() is given


def test_a_container_device_is_recognised_by_its_method() -> None:
    from exosuit.drivers import AttachHandle, ContainerDevice, ContainerEdits, Device, DeviceNode

    class Giver:
        name = "giver"

        def discover(self) -> list[Device]:
            return []

        def container_edits(self, device: Device, attach_handle: AttachHandle) -> ContainerEdits:
            return ContainerEdits(device_nodes=(DeviceNode("/dev/giver0"),))

    class Finder:
        name = "finder"

        def discover(self) -> list[Device]:
            return []

    assert isinstance(Giver(), ContainerDevice)
    assert not isinstance(Finder(), ContainerDevice)


def test_container_edits_refuse_what_a_cdi_spec_cannot_carry() -> None:
    from exosuit.drivers import ContainerEdits, DeviceNode, Mount

    assert DeviceNode("/dev/x", "/dev/null", "rw").permissions == "rw"
    with pytest.raises(ValueError, match="absolute"):
        DeviceNode("dev/x")
    with pytest.raises(ValueError, match="absolute"):
        DeviceNode("/dev/x", host_path="null")
    with pytest.raises(ValueError, match="r, w and m"):
        DeviceNode("/dev/x", permissions="rx")
    with pytest.raises(ValueError, match="r, w and m"):
        DeviceNode("/dev/x", permissions="")
    with pytest.raises(ValueError, match="absolute"):
        Mount("relative", "/opt/x")
    with pytest.raises(ValueError, match="upper-case"):
        ContainerEdits(env={"pci-address": "0000:3b:00.0"})
    with pytest.raises(ValueError, match="upper-case"):
        ContainerEdits(env={"1ST": "x"})
    edits = ContainerEdits(env={"PCI_ADDRESS": "0000:3b:00.0", "VF_INDEX": "0"})
    assert dict(edits.env) == {"PCI_ADDRESS": "0000:3b:00.0", "VF_INDEX": "0"}
