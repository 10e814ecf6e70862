"""A kernel for writable copies of the fixture trees: a ``Sysfs`` whose writes act as the
kernel would act on them, so that a driver's install step can be tested on a recorded
tree and the tree then discovered again.

A driver is given it through its context (``DriverContext(sysfs=Kernel(copy), …)``), as
it is given a ``RecordedRunner``; ``written`` lists every write it made, in order, as
``("bus/pci/drivers_probe", "0000:3b:00.0")``. What it does after a write, after the
kernel's documented ABI (Documentation/ABI/testing/sysfs-bus-pci, sysfs-driver-qat) and
code (drivers/base/bus.c, drivers/pci/iov.c, the qat driver's adf_sysfs.c):

* ``driver_override``: kept; an empty line clears it (it reads ``(null)`` again).
* ``drivers/<d>/unbind``: the function leaves ``<d>`` (``ENODEV`` if it is not on it).
* ``drivers/<d>/bind``: the function joins ``<d>`` (``EBUSY`` if bound, ``ENODEV`` if
  its override names another driver).
* ``drivers_probe``: an unbound function is bound to the driver its override names, or
  else to its default driver (the one it was on when the kernel started, or
  ``default_drivers``), if that driver is loaded (its ``drivers/<d>`` directory exists);
  otherwise it stays unbound, silently, as in the kernel.
* ``sriov_numvfs``: more than ``sriov_totalvfs`` is ``ERANGE``; a PF without a driver,
  ``ENOENT``; a new non-zero count while VFs exist, ``EBUSY``; otherwise the VFs are
  created (directories next to the PF at ``sriov_offset``/``sriov_stride``, ``virtfnN``
  and ``physfn`` links, the bus's links, bound to their VF driver when
  ``sriov_drivers_autoprobe`` is 1) or removed.
* ``qat/cfg_services``: ``EINVAL`` while ``qat/state`` is up, or for a word the driver
  does not know; ``qat/state``: ``up`` or ``down`` (``EINVAL`` otherwise).
* ``mdev_supported_types/<type>/create`` (Documentation/driver-api/vfio-mediated-device.rst,
  drivers/vfio/mdev/mdev_sysfs.c and mdev_core.c): anything but a UUID (36 characters,
  and one more allowed, unread) is ``EINVAL``; a UUID an mdev has already, ``EEXIST``; none left in
  ``available_instances``, ``EUSERS`` (mdev_core's answer for a parent whose instances it
  counts). Otherwise the mdev is made: ``<parent>/<uuid>`` with its ``mdev_type`` link,
  ``remove`` and ``uevent``, bound to the mdev bus's driver (when ``bus/mdev/drivers``
  holds exactly one, as ``nvidia-vgpu-vfio`` on an NVIDIA host), an IOMMU group of its own
  (the next number, as vfio-mdev gives each mdev one), the links in the type's ``devices/``
  and ``/sys/bus/mdev/devices/``; ``available_instances`` goes down by one.
* an mdev's ``remove``: not a number is ``EINVAL``; 0 does nothing; any other number
  removes the mdev, its links and its IOMMU group, and gives the instance back
  (``available_instances`` up by one).

A recording never holds the write-only attributes (``bind``, ``unbind``,
``drivers_probe``: ``exosuit-agent record`` cannot read them), and the hand-written trees
lack some the kernel always has (``driver_override``, the ``drivers/<d>`` directories of
the generated trees, an mdev type's ``devices/`` while it is empty, which git does not
keep): the kernel adds them to the copy when it starts. ``modules`` are
more drivers to load (``vfio-pci`` on a host whose tree has none).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Iterable, Mapping

from exosuit.drivers import Sysfs, normalize_id

__all__ = ["VF_DRIVERS", "Kernel"]

# VF device id → the kernel driver that binds it by default.
VF_DRIVERS = {
    "1889": "iavf",  # E810 VF
    "154c": "iavf",  # X710 VF
    "101e": "mlx5_core",  # ConnectX-6 Dx VF
    "4941": "4xxxvf",  # QAT 4xxx VF
    "37c9": "c6xxvf",  # QAT C62x VF
}
QAT_SERVICES = {"sym", "asym", "dc", "dcc", "decomp"}
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
# kstrtoul with base 0: decimal, 0x hex or 0 octal, and one newline after.
_UNSIGNED = re.compile(r"^(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)\n?$")


def _fail(code: int, what: str) -> OSError:
    return OSError(code, os.strerror(code), what)


def _unsigned(value: str) -> int:
    """What kstrtoul(value, 0) reads (``_UNSIGNED`` matched it first)."""
    value = value.strip()
    if value[:2].lower() == "0x":
        return int(value, 16)
    return int(value, 8) if value.startswith("0") else int(value)


class Kernel(Sysfs):
    """Implements the writes of [exosuit.drivers.Sysfs] as the kernel acts on them."""

    def __init__(
        self,
        root: str,
        *,
        modules: Iterable[str] = (),
        default_drivers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(root)
        self.written: list[tuple[str, str]] = []
        self.defaults: dict[str, str] = {}
        for address in self.pci_addresses():
            self._file(self._dev(address, "driver_override"), "(null)", keep=True)
            for vgpu_type in self.listdir("bus", "pci", "devices", address, "mdev_supported_types"):
                types = self._dev(address, "mdev_supported_types", vgpu_type)
                os.makedirs(os.path.join(types, "devices"), exist_ok=True)
            driver = self.link_name("bus", "pci", "devices", address, "driver")
            if driver is not None:
                self._load(driver)
                self._link(self.path("bus", "pci", "drivers", driver, address), self._dev(address))
                if self._override(address) is None:
                    self.defaults[address] = driver
        self.defaults.update(default_drivers or {})
        for module in modules:
            self._load(module)
        self._file(self.path("bus", "pci", "drivers_probe"), "", keep=True)

    # -- what a driver calls -----------------------------------------------------------

    def write(self, *parts: str, value: str) -> None:
        self.written.append(("/".join(parts), value))
        self._refuse(parts, value)
        super().write(*parts, value=value)
        self._act(parts, value.strip())

    # -- the kernel's rules --------------------------------------------------------------

    def _refuse(self, parts: tuple[str, ...], value: str) -> None:
        """Raise the errno the kernel answers a write it refuses with (nothing changes)."""
        name = parts[-1]
        what = "/".join(parts)
        address = value.strip()
        if parts == ("bus", "pci", "drivers_probe") or (
            parts[:3] == ("bus", "pci", "drivers") and name in ("bind", "unbind")
        ):
            if not os.path.isdir(self._dev(address)):
                raise _fail(errno.ENODEV, what)
            bound = self.link_name("bus", "pci", "devices", address, "driver")
            override = self._override(address)
            if name == "unbind" and bound != parts[3]:
                raise _fail(errno.ENODEV, what)
            if name == "bind" and bound is not None:
                raise _fail(errno.EBUSY, what)
            if name == "bind" and override is not None and override != parts[3]:
                raise _fail(errno.ENODEV, what)
        elif name == "sriov_numvfs":
            self._refuse_numvfs(parts, value.strip())
        elif name == "create" and parts[-3:-2] == ("mdev_supported_types",):
            self._refuse_create(parts, value)
        elif name == "remove" and self._is_mdev(parts[:-1]):
            if not _UNSIGNED.match(value):
                raise _fail(errno.EINVAL, what)
        elif parts[-2:] == ("qat", "cfg_services"):
            base = parts[:-2]
            words = {w for w in value.strip().split(";") if w}
            if self.read(*base, "qat", "state") == "up" or not words or words - QAT_SERVICES:
                raise _fail(errno.EINVAL, "/".join(parts))
        elif parts[-2:] == ("qat", "state") and value.strip() not in ("up", "down"):
            raise _fail(errno.EINVAL, "/".join(parts))

    def _refuse_numvfs(self, parts: tuple[str, ...], value: str) -> None:
        what = "/".join(parts)
        base = parts[:-1]
        try:
            wanted = int(value)
        except ValueError:
            raise _fail(errno.EINVAL, what) from None
        current = int(self.read(*base, "sriov_numvfs") or 0)
        if wanted < 0 or wanted > int(self.read(*base, "sriov_totalvfs") or 0):
            raise _fail(errno.ERANGE, what)
        if wanted == current:
            return
        if self.link_name(*base, "driver") is None:
            raise _fail(errno.ENOENT, what)
        if wanted and current:
            raise _fail(errno.EBUSY, what)

    def _refuse_create(self, parts: tuple[str, ...], value: str) -> None:
        what = "/".join(parts)
        # create_store: 36 or 37 bytes, of which guid_parse reads the first 36.
        if len(value) not in (36, 37) or not _UUID.match(value[:36]):
            raise _fail(errno.EINVAL, what)
        if os.path.lexists(self.path("bus", "mdev", "devices", value[:36].lower())):
            raise _fail(errno.EEXIST, what)
        if int(self.read(*parts[:-1], "available_instances") or 0) <= 0:
            raise _fail(errno.EUSERS, what)

    def _is_mdev(self, parts: tuple[str, ...]) -> bool:
        return os.path.islink(self.path(*parts, "mdev_type"))

    def _act(self, parts: tuple[str, ...], value: str) -> None:
        if parts == ("bus", "pci", "drivers_probe"):
            self._probe(value)
        elif parts[:3] == ("bus", "pci", "drivers") and parts[-1] == "unbind":
            self._unbind(parts[3], value)
        elif parts[:3] == ("bus", "pci", "drivers") and parts[-1] == "bind":
            self._attach(value, parts[3])
        elif parts[-1] == "driver_override" and not value:
            self._file(self.path(*parts), "(null)")
        elif parts[-1] == "sriov_numvfs":
            self._numvfs(os.path.realpath(self.path(*parts[:-1])), int(value))
        elif parts[-1] == "create" and parts[-3:-2] == ("mdev_supported_types",):
            self._create_mdev(os.path.realpath(self.path(*parts[:-1])), value[:36].lower())
        elif parts[-1] == "remove" and self._is_mdev(parts[:-1]) and _unsigned(value):
            self._remove_mdev(os.path.realpath(self.path(*parts[:-1])))

    def _probe(self, address: str) -> None:
        if self.link_name("bus", "pci", "devices", address, "driver") is not None:
            return  # drivers_probe only binds unbound functions
        driver = self._override(address) or self.defaults.get(address)
        if driver and os.path.isdir(self.path("bus", "pci", "drivers", driver)):
            self._attach(address, driver)

    def _unbind(self, driver: str, address: str) -> None:
        os.unlink(self.path("bus", "pci", "devices", address, "driver"))
        os.unlink(self.path("bus", "pci", "drivers", driver, address))

    def _numvfs(self, pf: str, wanted: int) -> None:
        address = os.path.basename(pf)
        existing = sorted(
            (int(n[6:]), n) for n in os.listdir(pf) if n.startswith("virtfn") and n[6:].isdigit()
        )
        if wanted == len(existing):
            return
        if wanted == 0:
            for _, link in existing:
                self._remove_vf(os.path.realpath(os.path.join(pf, link)))
                os.unlink(os.path.join(pf, link))
            return
        offset = int(self.read("bus", "pci", "devices", address, "sriov_offset") or 1)
        stride = int(self.read("bus", "pci", "devices", address, "sriov_stride") or 1)
        vf_device = normalize_id(self.read("bus", "pci", "devices", address, "sriov_vf_device"))
        if vf_device is None:
            raise AssertionError(f"{address}: the tree does not say its VF device id")
        domain, bus, rest = address.split(":")
        device, function = rest.split(".")
        rid = (int(bus, 16) << 8) | (int(device, 16) << 3) | int(function)
        autoprobe = (
            self.read("bus", "pci", "devices", address, "sriov_drivers_autoprobe") or "1"
        ) == "1"
        for index in range(wanted):
            vf_rid = rid + offset + index * stride
            vf = f"{domain}:{vf_rid >> 8:02x}:{(vf_rid >> 3) & 0x1F:02x}.{vf_rid & 7}"
            self._create_vf(pf, vf, index, vf_device, autoprobe)

    def _create_vf(self, pf: str, vf: str, index: int, vf_device: str, autoprobe: bool) -> None:
        path = os.path.join(os.path.dirname(pf), vf)
        os.makedirs(path)
        attributes = {"device": f"0x{vf_device}", "driver_override": "(null)", "enable": "0"}
        for name in ("vendor", "class", "subsystem_vendor", "revision", "numa_node"):
            value = self._read_file(os.path.join(pf, name))
            if value is not None:
                attributes[name] = value
        attributes["subsystem_device"] = "0x0000"
        for name, value in attributes.items():
            self._file(os.path.join(path, name), value)
        self._link(os.path.join(path, "physfn"), pf)
        self._link(os.path.join(pf, f"virtfn{index}"), path)
        self._link(self.path("bus", "pci", "devices", vf), path)
        driver = VF_DRIVERS.get(vf_device)
        if autoprobe and driver and os.path.isdir(self.path("bus", "pci", "drivers", driver)):
            self._attach(vf, driver)

    def _remove_vf(self, path: str) -> None:
        address = os.path.basename(path)
        driver = self.link_name("bus", "pci", "devices", address, "driver")
        if driver is not None:
            self._unbind(driver, address)
        # Its class devices go with it (a VF's network interface …).
        for cls in self.listdir("class"):
            for name in self.listdir("class", cls):
                link = self.path("class", cls, name)
                if os.path.realpath(link).startswith(path + os.sep):
                    os.unlink(link)
        shutil.rmtree(path)
        os.unlink(self.path("bus", "pci", "devices", address))

    def _create_mdev(self, type_dir: str, mdev: str) -> None:
        parent = os.path.dirname(os.path.dirname(type_dir))
        path = os.path.join(parent, mdev)
        os.makedirs(path)
        self._link(os.path.join(path, "mdev_type"), type_dir)
        self._file(os.path.join(path, "remove"), "")
        uevent = [f"MDEV_TYPE={os.path.basename(type_dir)}"]
        drivers = self.listdir("bus", "mdev", "drivers")
        if len(drivers) == 1:
            driver = self.path("bus", "mdev", "drivers", drivers[0])
            self._link(os.path.join(path, "driver"), driver)
            self._link(os.path.join(driver, mdev), path)
            uevent.insert(0, f"DRIVER={drivers[0]}")
        self._file(os.path.join(path, "uevent"), "\n".join(uevent))
        groups = self.path("kernel", "iommu_groups")
        if os.path.isdir(groups):
            number = max((int(n) for n in os.listdir(groups) if n.isdigit()), default=-1) + 1
            group = os.path.join(groups, str(number))
            os.makedirs(os.path.join(group, "devices"))
            self._link(os.path.join(group, "devices", mdev), path)
            self._link(os.path.join(path, "iommu_group"), group)
        os.makedirs(os.path.join(type_dir, "devices"), exist_ok=True)
        self._link(os.path.join(type_dir, "devices", mdev), path)
        os.makedirs(self.path("bus", "mdev", "devices"), exist_ok=True)
        self._link(self.path("bus", "mdev", "devices", mdev), path)
        self._count(type_dir, -1)

    def _remove_mdev(self, path: str) -> None:
        mdev = os.path.basename(path)
        type_dir = os.path.realpath(os.path.join(path, "mdev_type"))
        driver = os.path.join(path, "driver")
        if os.path.islink(driver):
            os.unlink(os.path.join(os.path.realpath(driver), mdev))
        group = os.path.join(path, "iommu_group")
        if os.path.islink(group):
            shutil.rmtree(os.path.realpath(group))
        os.unlink(os.path.join(type_dir, "devices", mdev))
        os.unlink(self.path("bus", "mdev", "devices", mdev))
        shutil.rmtree(path)
        self._count(type_dir, +1)

    def _count(self, type_dir: str, change: int) -> None:
        path = os.path.join(type_dir, "available_instances")
        self._file(path, str(int(self._read_file(path) or 0) + change))

    # -- the tree ----------------------------------------------------------------------

    def _dev(self, address: str, *rest: str) -> str:
        return os.path.join(os.path.realpath(self.path("bus", "pci", "devices", address)), *rest)

    def _override(self, address: str) -> str | None:
        value = self.read("bus", "pci", "devices", address, "driver_override")
        return None if value in (None, "", "(null)") else value

    def _attach(self, address: str, driver: str) -> None:
        self._link(self._dev(address, "driver"), self.path("bus", "pci", "drivers", driver))
        self._link(self.path("bus", "pci", "drivers", driver, address), self._dev(address))

    def _load(self, driver: str) -> None:
        os.makedirs(self.path("bus", "pci", "drivers", driver), exist_ok=True)
        for name in ("bind", "unbind"):
            self._file(self.path("bus", "pci", "drivers", driver, name), "", keep=True)

    @staticmethod
    def _read_file(path: str) -> str | None:
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return None

    @staticmethod
    def _file(path: str, value: str, *, keep: bool = False) -> None:
        if keep and os.path.lexists(path):
            return
        with open(path, "w") as f:
            f.write(value + "\n" if value else "")

    @staticmethod
    def _link(path: str, target: str) -> None:
        """A relative link, as the kernel's are (the copy stays movable)."""
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(os.path.relpath(target, os.path.dirname(path)), path)
