"""PCI class codes: their names (as lspci prints them) and the device type Exosuit reports.

The class code is the kernel's ``class`` attribute (Documentation/ABI/testing/sysfs-bus-pci):
base class, subclass and programming interface, e.g. ``010802`` for an NVMe controller.
"""

from __future__ import annotations

__all__ = ["CLASS_NAMES", "class_name", "device_type"]

# Subclass names from the PCI Code and ID Assignment specification (lspci's wording).
CLASS_NAMES = {
    "0000": "Non-VGA unclassified device",
    "0001": "VGA compatible unclassified device",
    "0100": "SCSI storage controller",
    "0101": "IDE interface",
    "0104": "RAID bus controller",
    "0105": "ATA controller",
    "0106": "SATA controller",
    "0107": "Serial Attached SCSI controller",
    "0108": "Non-Volatile memory controller",
    "0180": "Mass storage controller",
    "0200": "Ethernet controller",
    "0207": "Infiniband controller",
    "0280": "Network controller",
    "0300": "VGA compatible controller",
    "0302": "3D controller",
    "0380": "Display controller",
    "0400": "Multimedia video controller",
    "0401": "Multimedia audio controller",
    "0403": "Audio device",
    "0480": "Multimedia controller",
    "0500": "RAM memory",
    "0580": "Memory controller",
    "0600": "Host bridge",
    "0601": "ISA bridge",
    "0604": "PCI bridge",
    "0680": "Bridge",
    "0700": "Serial controller",
    "0780": "Communication controller",
    "0800": "PIC",
    "0806": "IOMMU",
    "0880": "System peripheral",
    "0b40": "Co-processor",
    "0c03": "USB controller",
    "0c05": "SMBus",
    "0c80": "Serial bus controller",
    "1000": "Network and computing encryption device",
    "1080": "Encryption controller",
    "1180": "Signal processing controller",
    "1200": "Processing accelerators",
    "ff00": "Unassigned class",
}

_BASE_CLASS_NAMES = {
    "00": "Unclassified device",
    "01": "Mass storage controller",
    "02": "Network controller",
    "03": "Display controller",
    "04": "Multimedia controller",
    "05": "Memory controller",
    "06": "Bridge",
    "07": "Communication controller",
    "08": "Generic system peripheral",
    "09": "Input device controller",
    "0b": "Processor",
    "0c": "Serial bus controller",
    "0d": "Wireless controller",
    "10": "Encryption controller",
    "11": "Signal processing controller",
    "12": "Processing accelerators",
    "ff": "Unassigned class",
}

# Device types by class (base class + subclass first, then base class). Cyborg's own
# types (GPU, NIC, SSD) are used where the class says so; anything else is PCI.
_TYPES = {
    "0108": "SSD",
    "01": "STORAGE",
    "02": "NIC",
    "03": "GPU",
    "04": "MULTIMEDIA",
    "0b40": "COPROCESSOR",
    "10": "CRYPTO",
    "12": "ACCELERATOR",
}


def class_name(class_code: str) -> str:
    """``030200`` → ``3D controller``; an unknown subclass gets its base class's name."""
    code = class_code.lower().rjust(6, "0")
    return CLASS_NAMES.get(code[:4]) or _BASE_CLASS_NAMES.get(code[:2]) or f"Class {code[:4]}"


def device_type(class_code: str) -> str:
    """The device type for a class code: SSD, STORAGE, NIC, GPU, MULTIMEDIA, COPROCESSOR,
    CRYPTO, ACCELERATOR, or PCI for everything else."""
    code = class_code.lower().rjust(6, "0")
    return _TYPES.get(code[:4]) or _TYPES.get(code[:2]) or "PCI"
