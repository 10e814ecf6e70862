"""Writes the recorded-style sysfs trees tests/fixtures/sriov-nic-host and nvme-host.

The trees are checked in; this script is how they were made and how to change them
(edit, then ``python tests/drivers/build_fixture_hosts.py``). test_record.py checks that
the checked-in trees equal what this script writes.

Shapes follow the kernel's documented ABI: Documentation/ABI/testing/sysfs-bus-pci
(vendor, device, class, numa_node, sriov_*, virtfnN/physfn links, driver link),
sysfs-class-net, sysfs-class-nvme (model, serial, firmware_rev), sysfs-block (dev,
partition, holders/slaves), sysfs-kernel-iommu_groups (each device's ``iommu_group``
link and ``/sys/kernel/iommu_groups/<n>/devices/``), the DRM and accel classes
(``drm/renderD<n>``, ``accel/accel<n>`` below the PCI function, their ``dev``), with
/sys/bus/pci/devices/<address> and /sys/class/*/<name> as relative links into
/sys/devices, as the kernel makes them. Ids are those of real products; serial numbers
and MAC addresses are made up.

``Tree(root).iommu_groups()`` is also how the hand-written trees got their IOMMU groups
(their READMEs say so): one group per PCI function and per mdev, numbered in address
order, as a host whose every port has ACS would show them.
"""

from __future__ import annotations

import os
import shutil
import sys

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "fixtures")


# The error kinds of the AER counters, as drivers/pci/pcie/aer.c prints them.
AER_CORRECTABLE = (
    "RxErr",
    "BadTLP",
    "BadDLLP",
    "Rollover",
    "Timeout",
    "NonFatalErr",
    "CorrIntErr",
    "HeaderOF",
)
AER_UNCORRECTABLE = (
    "Undefined",
    "DLP",
    "SDES",
    "TLP",
    "FCP",
    "CmpltTO",
    "CmpltAbrt",
    "UnxCmplt",
    "RxOF",
    "MalfTLP",
    "ECRC",
    "UnsupReq",
    "ACSViol",
    "UncorrIntErr",
    "BlockedTLP",
    "AtomicOpBlocked",
    "TLPBlockedErr",
    "PoisonTLPBlocked",
)


class Tree:
    """A sysfs tree under ``root`` (``root/sys/...``), written like the kernel lays it out."""

    def __init__(self, root: str) -> None:
        self.root = root

    def file(self, rel: str, content: str) -> None:
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(content + "\n")

    def link(self, rel: str, target: str) -> None:
        """A relative link at ``rel`` to ``target`` (both relative to the tree's root)."""
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(os.path.relpath(os.path.join(self.root, target), os.path.dirname(path)), path)

    def pci(
        self,
        parent: str,
        address: str,
        vendor: str,
        device: str,
        cls: str,
        *,
        driver: str | None = None,
        numa: int = 0,
        subsystem: tuple[str, str] | None = None,
        revision: str = "00",
    ) -> str:
        """A PCI function under ``parent`` (a root complex or bridge directory)."""
        path = f"{parent}/{address}"
        sub_vendor, sub_device = subsystem or (vendor, device)
        attrs = {
            "vendor": f"0x{vendor}",
            "device": f"0x{device}",
            "class": f"0x{cls}",
            "subsystem_vendor": f"0x{sub_vendor}",
            "subsystem_device": f"0x{sub_device}",
            "revision": f"0x{revision}",
            "numa_node": str(numa),
            "enable": "1",
            "local_cpulist": "0-23,48-71" if numa == 0 else "24-47,72-95",
            "driver_override": "(null)",
        }
        for name, value in attrs.items():
            self.file(f"{path}/{name}", value)
        uevent = ([f"DRIVER={driver}"] if driver else []) + [
            f"PCI_CLASS={int(cls, 16):X}",
            f"PCI_ID={vendor.upper()}:{device.upper()}",
            f"PCI_SUBSYS_ID={sub_vendor.upper()}:{sub_device.upper()}",
            f"PCI_SLOT_NAME={address}",
            f"MODALIAS=pci:v0000{vendor.upper()}d0000{device.upper()}sv0000{sub_vendor.upper()}"
            f"sd0000{sub_device.upper()}bc{cls[:2].upper()}sc{cls[2:4].upper()}i{cls[4:].upper()}",
        ]
        self.file(f"{path}/uevent", "\n".join(uevent))
        if driver:
            self.link(f"{path}/driver", f"sys/bus/pci/drivers/{driver}")
        self.link(f"{path}/subsystem", "sys/bus/pci")
        self.link(f"sys/bus/pci/devices/{address}", path)
        return path

    def bridge(
        self,
        parent: str,
        address: str,
        vendor: str = "8086",
        device: str = "2030",
        *,
        numa: int = 0,
    ) -> str:
        return self.pci(parent, address, vendor, device, "060400", driver="pcieport", numa=numa)

    def sriov(
        self, pf: str, vfs: list[str], *, total: int, vf_device: str, offset: int = 8
    ) -> None:
        """SR-IOV capability of the PF at ``pf``; ``vfs`` are the enabled VFs' directories.
        ``offset`` (routing ids from the PF to its first VF; stride 1) places the VFs the
        kernel creates when sriov_numvfs is written (tests/drivers/kernel.py)."""
        self.file(f"{pf}/sriov_totalvfs", str(total))
        self.file(f"{pf}/sriov_numvfs", str(len(vfs)))
        self.file(f"{pf}/sriov_offset", str(offset))
        self.file(f"{pf}/sriov_stride", "1")
        self.file(f"{pf}/sriov_vf_device", vf_device)
        self.file(f"{pf}/sriov_drivers_autoprobe", "1")
        for index, vf in enumerate(vfs):
            self.link(f"{pf}/virtfn{index}", vf)
            self.link(f"{vf}/physfn", pf)

    def net(self, device: str, ifname: str, mac: str, *, operstate: str = "up") -> None:
        path = f"{device}/net/{ifname}"
        self.file(f"{path}/address", mac)
        self.file(f"{path}/operstate", operstate)
        self.file(f"{path}/mtu", "1500")
        self.file(f"{path}/type", "1")
        self.file(f"{path}/uevent", f"INTERFACE={ifname}")
        self.link(f"{path}/device", device)
        self.link(f"sys/class/net/{ifname}", path)

    def block(
        self, path: str, name: str, devnum: str, size: int, *, partition: int | None = None
    ) -> str:
        path = f"{path}/{name}"
        self.file(f"{path}/dev", devnum)
        self.file(f"{path}/size", str(size))
        self.file(f"{path}/ro", "0")
        self.file(
            f"{path}/uevent",
            f"MAJOR={devnum.split(':')[0]}\nMINOR={devnum.split(':')[1]}"
            f"\nDEVNAME={name}\nDEVTYPE={'partition' if partition else 'disk'}",
        )
        if partition is not None:
            self.file(f"{path}/partition", str(partition))
        self.link(f"sys/class/block/{name}", path)
        return path

    def nvme(
        self, device: str, name: str, model: str, serial: str, firmware: str, address: str
    ) -> str:
        path = f"{device}/nvme/{name}"
        for attr, value in {
            "model": model.ljust(40),
            "serial": serial.ljust(20),
            "firmware_rev": firmware.ljust(8),
            "address": address,
            "transport": "pcie",
            "state": "live",
            "cntlid": "1",
            "dev": f"240:{name[4:]}",
        }.items():
            self.file(f"{path}/{attr}", value)
        self.link(f"{path}/device", device)
        self.link(f"sys/class/nvme/{name}", path)
        return path

    def char_device(self, device: str, subsystem: str, name: str, devnum: str) -> str:
        """A class device ``<device>/<subsystem>/<name>`` with its ``dev`` (``major:minor``),
        linked from /sys/class/<subsystem>/ (drm, accel: Documentation/gpu/drm-uapi.rst,
        Documentation/accel/introduction.rst)."""
        path = f"{device}/{subsystem}/{name}"
        major, minor = devnum.split(":")
        devname = f"dri/{name}" if subsystem == "drm" else f"{subsystem}/{name}"
        self.file(f"{path}/dev", devnum)
        self.file(f"{path}/uevent", f"MAJOR={major}\nMINOR={minor}\nDEVNAME={devname}")
        self.link(f"{path}/device", device)
        self.link(f"sys/class/{subsystem}/{name}", path)
        return path

    def iommu_groups(self, first: int = 0) -> None:
        """One IOMMU group per PCI function, then per mdev, numbered from ``first`` in
        address order (sysfs-kernel-iommu_groups): the device's ``iommu_group`` link and
        the group's ``devices/`` link back. Call it last: it walks what is there."""
        members = []
        for bus in ("pci", "mdev"):
            listing = os.path.join(self.root, "sys", "bus", bus, "devices")
            names = sorted(os.listdir(listing)) if os.path.isdir(listing) else []
            for name in names:
                target = os.path.realpath(os.path.join(listing, name))
                members.append((name, os.path.relpath(target, self.root)))
        for number, (name, path) in enumerate(members, start=first):
            group = f"sys/kernel/iommu_groups/{number}"
            self.link(f"{path}/iommu_group", group)
            self.link(f"{group}/devices/{name}", path)

    def pcie(
        self,
        path: str,
        *,
        width: int,
        speed: str,
        max_width: int | None = None,
        max_speed: str | None = None,
        correctable: dict[str, int] | None = None,
        nonfatal: dict[str, int] | None = None,
        fatal: dict[str, int] | None = None,
    ) -> None:
        """A PCIe function's link (``current_link_*`` against ``max_link_*``, speeds as the
        kernel prints them: ``16.0 GT/s PCIe``) and AER counters (``aer_dev_*``:
        Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats, one ``<kind> <count>``
        line per error kind drivers/pci/pcie/aer.c names, then the total)."""
        self.file(f"{path}/current_link_width", str(width))
        self.file(f"{path}/max_link_width", str(max_width or width))
        self.file(f"{path}/current_link_speed", f"{speed} GT/s PCIe")
        self.file(f"{path}/max_link_speed", f"{max_speed or speed} GT/s PCIe")
        for name, kinds, total, counts in (
            ("aer_dev_correctable", AER_CORRECTABLE, "TOTAL_ERR_COR", correctable),
            ("aer_dev_nonfatal", AER_UNCORRECTABLE, "TOTAL_ERR_NONFATAL", nonfatal),
            ("aer_dev_fatal", AER_UNCORRECTABLE, "TOTAL_ERR_FATAL", fatal),
        ):
            counts = counts or {}
            lines = [f"{kind} {counts.get(kind, 0)}" for kind in kinds]
            self.file(f"{path}/{name}", "\n".join([*lines, f"{total} {sum(counts.values())}"]))

    def hwmon(
        self, device: str, name: str, number: int, sensors: dict[str, str], *, glue: bool = False
    ) -> str:
        """An hwmon device below ``device`` (Documentation/hwmon/sysfs-interface.rst):
        ``hwmon<number>`` with its ``name`` and sensor files (``temp1_input`` …), directly
        below a class device (an NVMe controller), or in the ``hwmon/`` directory the kernel
        puts between it and a bus device (``glue``: a platform device such as a BMC's),
        linked from /sys/class/hwmon."""
        path = f"{device}/hwmon/hwmon{number}" if glue else f"{device}/hwmon{number}"
        self.file(f"{path}/name", name)
        for attr, value in sensors.items():
            self.file(f"{path}/{attr}", value)
        self.link(f"sys/class/hwmon/hwmon{number}", path)
        return path

    def holder(self, lower: str, upper: str) -> None:
        """``upper`` (dm-N, mdN) is built on ``lower``: holders/ and slaves/ links."""
        self.link(f"{lower}/holders/{os.path.basename(upper)}", upper)
        self.link(f"{upper}/slaves/{os.path.basename(lower)}", lower)

    def dm(self, name: str, devnum: str, dm_name: str, size: int) -> str:
        path = self.block("sys/devices/virtual/block", name, devnum, size)
        self.file(f"{path}/dm/name", dm_name)
        self.file(f"{path}/dm/uuid", f"LVM-{dm_name.replace('-', '')}0000000000000000")
        return path


def sriov_nic_host(root: str) -> None:
    t = Tree(root)
    d0 = "sys/devices/pci0000:00"
    t.pci(d0, "0000:00:00.0", "8086", "2020", "060000", revision="04")  # host bridge
    t.pci(d0, "0000:00:17.0", "8086", "a182", "010601", driver="ahci", revision="09")
    vga_port = t.bridge(d0, "0000:00:1c.5", "8086", "a195")
    t.pci(
        vga_port,
        "0000:03:00.0",
        "102b",
        "0536",
        "030000",
        driver="mgag200",
        subsystem=("1028", "0738"),
        revision="04",
    )  # Matrox G200eW3 (iDRAC console)
    lom_port = t.bridge(d0, "0000:00:1c.0", "8086", "a190")
    for function, ifname, mac in (
        ("0", "eno1", "02:00:5e:10:00:01"),
        ("1", "eno2", "02:00:5e:10:00:02"),
    ):
        lom = t.pci(
            lom_port,
            f"0000:04:00.{function}",
            "14e4",
            "165f",
            "020000",
            driver="tg3",
            subsystem=("1028", "04f7"),
        )  # BCM5720: no SR-IOV
        t.net(lom, ifname, mac)

    # Intel E810-XXV: port 0 with two VFs, port 1 SR-IOV capable without VFs.
    p3a = t.bridge("sys/devices/pci0000:3a", "0000:3a:00.0")
    e810 = t.pci(
        p3a,
        "0000:3b:00.0",
        "8086",
        "159b",
        "020000",
        driver="ice",
        subsystem=("8086", "0003"),
        revision="02",
    )
    vfs = []
    for index in range(2):
        vf = t.pci(
            p3a,
            f"0000:3b:01.{index}",
            "8086",
            "1889",
            "020000",
            driver="iavf",
            subsystem=("8086", "0000"),
            revision="02",
        )
        t.net(vf, f"ens1f0v{index}", f"02:00:5e:3b:01:0{index}")
        vfs.append(vf)
    t.sriov(e810, vfs, total=128, vf_device="1889")
    t.net(e810, "ens1f0", "02:00:5e:3b:00:00")
    e810_1 = t.pci(
        p3a,
        "0000:3b:00.1",
        "8086",
        "159b",
        "020000",
        driver="ice",
        subsystem=("8086", "0003"),
        revision="02",
    )
    t.sriov(e810_1, [], total=128, vf_device="1889", offset=135)  # VFs from 3b:11.0
    # The E810's links and AER counters: port 0 has seen a few correctable errors.
    t.pcie(e810, width=16, speed="16.0", correctable={"BadTLP": 2, "Timeout": 1})
    t.pcie(e810_1, width=16, speed="16.0")
    t.net(e810_1, "ens1f1", "02:00:5e:3b:00:01")

    # Intel X710 bound to vfio-pci: SR-IOV capable, no VFs, no interface on the host.
    p5d = t.bridge("sys/devices/pci0000:5d", "0000:5d:00.0")
    x710 = t.pci(
        p5d,
        "0000:5e:00.0",
        "8086",
        "1572",
        "020000",
        driver="vfio-pci",
        subsystem=("8086", "0006"),
        revision="02",
    )
    t.sriov(x710, [], total=64, vf_device="154c", offset=16)  # VFs from 5e:02.0
    t.pcie(x710, width=8, speed="8.0")

    # Mellanox ConnectX-6 Dx on NUMA node 1: port 0 with two VFs (one given to vfio-pci).
    pae = t.bridge("sys/devices/pci0000:ae", "0000:ae:00.0", numa=1)
    cx6 = t.pci(
        pae,
        "0000:af:00.0",
        "15b3",
        "101d",
        "020000",
        driver="mlx5_core",
        numa=1,
        subsystem=("15b3", "0016"),
    )
    vf2 = t.pci(
        pae,
        "0000:af:00.2",
        "15b3",
        "101e",
        "020000",
        driver="vfio-pci",
        numa=1,
        subsystem=("15b3", "0016"),
    )
    vf3 = t.pci(
        pae,
        "0000:af:00.3",
        "15b3",
        "101e",
        "020000",
        driver="mlx5_core",
        numa=1,
        subsystem=("15b3", "0016"),
    )
    t.net(vf3, "ens4f0v1", "02:00:5e:af:00:03")
    t.sriov(cx6, [vf2, vf3], total=8, vf_device="101e", offset=2)
    t.net(cx6, "ens4f0np0", "02:00:5e:af:00:00")
    t.pcie(cx6, width=16, speed="16.0")
    cx6_1 = t.pci(
        pae,
        "0000:af:00.1",
        "15b3",
        "101d",
        "020000",
        driver="mlx5_core",
        numa=1,
        subsystem=("15b3", "0016"),
    )
    t.sriov(cx6_1, [], total=8, vf_device="101e", offset=9)  # VFs from af:01.2
    t.net(cx6_1, "ens4f1np1", "02:00:5e:af:00:01")

    t.file(
        "proc/self/mountinfo",
        "\n".join(
            [
                "22 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw",
                "23 22 8:1 / /boot/efi rw,relatime shared:2 - vfat /dev/sda1 rw,fmask=0077",
                "24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:3 - sysfs sysfs rw",
                "25 22 0:5 / /proc rw,nosuid,nodev,noexec,relatime shared:4 - proc proc rw",
            ]
        ),
    )
    t.file("proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority")
    t.iommu_groups()


def nvme_host(root: str) -> None:
    t = Tree(root)
    d0 = "sys/devices/pci0000:00"
    t.pci(d0, "0000:00:00.0", "8086", "2020", "060000", revision="04")  # host bridge
    t.pci(d0, "0000:00:14.0", "8086", "a1af", "0c0330", driver="xhci_hcd", revision="09")
    t.pci(d0, "0000:00:17.0", "8086", "a182", "010601", driver="ahci", revision="09")

    # Samsung PM9A3: the boot drive. /boot/efi, /boot, and an LVM PV holding / (dm-0).
    port = t.bridge(d0, "0000:00:1c.0", "8086", "a190")
    samsung = t.pci(
        port, "0000:02:00.0", "144d", "a80a", "010802", driver="nvme", subsystem=("144d", "a813")
    )
    ctrl = t.nvme(
        samsung, "nvme0", "SAMSUNG MZQL2960HCJR-00A07", "S64FNE0R700001", "GDC5602Q", "0000:02:00.0"
    )
    disk = t.block(ctrl, "nvme0n1", "259:0", 1875385008)
    t.block(disk, "nvme0n1p1", "259:1", 1228800, partition=1)
    t.block(disk, "nvme0n1p2", "259:2", 2097152, partition=2)
    pv = t.block(disk, "nvme0n1p3", "259:3", 1872056320, partition=3)
    root_lv = t.dm("dm-0", "253:0", "vg0-root", 209715200)
    t.holder(pv, root_lv)

    # Intel D7-P5510: a free drive (one partition, not mounted).
    port = t.bridge(d0, "0000:00:1c.4", "8086", "a194")
    intel = t.pci(
        port, "0000:04:00.0", "8086", "0b60", "010802", driver="nvme", subsystem=("8086", "8008")
    )
    ctrl = t.nvme(
        intel, "nvme1", "INTEL SSDPF2KX038TZ", "PHAX2100000A3P8CGN", "JCV10100", "0000:04:00.0"
    )
    disk = t.block(ctrl, "nvme1n1", "259:4", 7501476528)
    t.block(disk, "nvme1n1p1", "259:5", 7501474480, partition=1)
    # Its link and AER counters (a few old correctable errors), and the nvme driver's hwmon
    # (composite temperature 38.85 °C; warning and critical thresholds; the SMART
    # critical warning's temperature bit as temp1_alarm).
    t.pcie(intel, width=4, speed="16.0", correctable={"RxErr": 3})
    t.hwmon(
        ctrl,
        "nvme",
        1,
        {
            "temp1_label": "Composite",
            "temp1_input": "38850",
            "temp1_max": "70850",
            "temp1_crit": "80850",
            "temp1_min": "-273150",
            "temp1_alarm": "0",
        },
    )

    # The BMC's VGA console and a plain NIC: not accelerators.
    port = t.bridge(d0, "0000:00:1c.5", "8086", "a195")
    aspeed = t.pci(port, "0000:05:00.0", "1a03", "1150", "060400")
    vga = t.pci(aspeed, "0000:06:00.0", "1a03", "2000", "030000", driver="ast", revision="41")
    t.char_device(vga, "drm", "card0", "226:0")  # KMS only: no render node
    port = t.bridge(d0, "0000:00:1c.6", "8086", "a196")
    i210 = t.pci(port, "0000:07:00.0", "8086", "1533", "020000", driver="igb", revision="03")
    t.net(i210, "eno1", "02:00:5e:07:00:00")

    # NVIDIA T4 (for the pci driver's specs), with nvidia-drm's card and render node.
    p3a = t.bridge("sys/devices/pci0000:3a", "0000:3a:00.0")
    t4 = t.pci(
        p3a,
        "0000:3b:00.0",
        "10de",
        "1eb8",
        "030200",
        driver="nvidia",
        subsystem=("10de", "12a2"),
        revision="a1",
    )
    t.char_device(t4, "drm", "card1", "226:1")
    t.char_device(t4, "drm", "renderD128", "226:128")

    # Habana Gaudi2 (class 1200: processing accelerator) under the accel subsystem.
    p85 = t.bridge("sys/devices/pci0000:85", "0000:85:00.0", numa=1)
    gaudi = t.pci(
        p85,
        "0000:86:00.0",
        "1da3",
        "1020",
        "120000",
        driver="habanalabs",
        numa=1,
        subsystem=("1da3", "1020"),
        revision="01",
    )
    t.char_device(gaudi, "accel", "accel0", "261:0")

    # KIOXIA CM6 with native NVMe multipath: the namespace is the head nvme2n1 of
    # subsystem nvme-subsys2 (path nvme2c2n1 under the controller), used as swap.
    p5d = t.bridge("sys/devices/pci0000:5d", "0000:5d:00.0")
    kioxia = t.pci(
        p5d,
        "0000:5e:00.0",
        "1e0f",
        "0007",
        "010802",
        driver="nvme",
        subsystem=("1e0f", "0001"),
        revision="01",
    )
    ctrl = t.nvme(kioxia, "nvme2", "KCM61VUL3T20", "X0S0A00ATD0A", "0105", "0000:5e:00.0")
    t.file(f"{ctrl}/nvme2c2n1/nsid", "1")
    subsys = "sys/devices/virtual/nvme-subsystem/nvme-subsys2"
    t.file(f"{subsys}/subsysnqn", "nqn.2019-10.com.kioxia:KCM61VUL3T20:X0S0A00ATD0A")
    t.file(f"{subsys}/iopolicy", "numa")
    t.link(f"{subsys}/nvme2", ctrl)
    t.link("sys/class/nvme-subsystem/nvme-subsys2", subsys)
    t.block(subsys, "nvme2n1", "259:6", 6251233968)

    # Micron 7450: an LVM PV of a volume group that is active but not mounted (dm-1).
    port = t.bridge("sys/devices/pci0000:5d", "0000:5d:02.0")
    micron = t.pci(
        port,
        "0000:5f:00.0",
        "1344",
        "51c3",
        "010802",
        driver="nvme",
        subsystem=("1344", "2100"),
        revision="01",
    )
    ctrl = t.nvme(
        micron, "nvme3", "Micron_7450_MTFDKCC3T8TFR", "22203A000001", "E2MU200", "0000:5f:00.0"
    )
    disk = t.block(ctrl, "nvme3n1", "259:7", 7501476528)
    t.holder(disk, t.dm("dm-1", "253:1", "vg1-cache", 7499999232))

    # Micron 7450 on NUMA node 1, bound to vfio-pci (no nvme controller on the host); its
    # link trained at x2 of its x4 (a slot or riser fault: a warning by default), idle at
    # 2.5 GT/s (ignored by default).
    pd7 = t.bridge("sys/devices/pci0000:d7", "0000:d7:00.0", numa=1)
    micron_vfio = t.pci(
        pd7,
        "0000:d8:00.0",
        "1344",
        "51c3",
        "010802",
        driver="vfio-pci",
        numa=1,
        subsystem=("1344", "2100"),
        revision="01",
    )
    t.pcie(micron_vfio, width=2, max_width=4, speed="2.5", max_speed="16.0")

    t.file(
        "proc/self/mountinfo",
        "\n".join(
            [
                "22 1 253:0 / / rw,relatime shared:1 - xfs /dev/mapper/vg0-root rw,attr2,inode64",
                "23 22 259:2 / /boot rw,relatime shared:2 - xfs /dev/nvme0n1p2 rw,attr2,inode64",
                "24 23 259:1 / /boot/efi rw,relatime shared:3 - vfat /dev/nvme0n1p1 rw,fmask=0077",
                "25 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:4 - sysfs sysfs rw",
                "26 22 0:5 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw",
                "27 22 0:45 / /var/lib/nova/instances rw,relatime shared:6 - nfs4 "
                "nfs:/instances rw",
            ]
        ),
    )
    t.file(
        "proc/swaps",
        "\n".join(
            [
                "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority",
                "/dev/nvme2n1                            partition\t16777212\t0\t\t-2",
            ]
        ),
    )
    t.iommu_groups()


HOSTS = {"sriov-nic-host": sriov_nic_host, "nvme-host": nvme_host}


def build(name: str, root: str) -> None:
    """Write host ``name``'s tree (its sys/ and proc/) under ``root``."""
    HOSTS[name](root)


if __name__ == "__main__":
    for host in sys.argv[1:] or sorted(HOSTS):
        target = os.path.join(FIXTURES, host)
        for part in ("sys", "proc"):
            shutil.rmtree(os.path.join(target, part), ignore_errors=True)
        build(host, target)
        print(f"wrote {os.path.normpath(target)}")
