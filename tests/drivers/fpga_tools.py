"""Test helpers for programming FPGAs on fixture trees: image files in the vendors' formats,
and a command runner that answers from a tree's ``commands.json`` and, after a recorded
load that succeeded, changes a writable copy of the tree as the card would.

``writable_copy`` copies a fixture tree with its symlinks (sysfs links stay links).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import struct
import uuid as uuidlib
from collections.abc import Sequence

from exosuit.drivers import CommandResult, RecordedRunner, pci_cpid

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")

# A GBS file (OPAE): this GUID ("XeonFPGA·GBSv001"), the metadata's length (uint32, little
# endian), the metadata (JSON), then the bitstream.
GBS_GUID = bytes.fromhex("58656F6E46504741B747425376303031")
# An xclbin (XRT's xclbin.h, struct axlf): the magic, then at fixed offsets the header's
# interface UUID and the xclbin's UUID.
XCLBIN_MAGIC = b"xclbin2\0"
XCLBIN_INTERFACE_OFFSET = 336
XCLBIN_UUID_OFFSET = 416


def writable_copy(host: str, destination) -> str:
    """A copy of ``tests/fixtures/<host>`` under ``destination`` (links kept as links)."""
    target = os.path.join(str(destination), host)
    shutil.copytree(os.path.join(FIXTURES, host), target, symlinks=True)
    return target


def make_gbs(path, afu_id: str, interface_id: str, body: bytes = b"\xa5" * 256) -> bytes:
    metadata = {
        "version": 640,
        "platform-name": "PAC",
        "afu-image": {
            "magic-no": 488605312,
            "interface-uuid": interface_id,
            "accelerator-clusters": [
                {"name": "exosuit-test", "total-contexts": 1, "accelerator-type-uuid": afu_id}
            ],
        },
    }
    raw = json.dumps(metadata).encode()
    data = GBS_GUID + struct.pack("<I", len(raw)) + raw + body
    with open(path, "wb") as f:
        f.write(data)
    return data


def read_gbs(path) -> dict:
    with open(path, "rb") as f:
        data = f.read()
    if data[:16] != GBS_GUID:
        raise ValueError("not a GBS file")
    (length,) = struct.unpack("<I", data[16:20])
    return json.loads(data[20 : 20 + length])


def make_xclbin(path, xclbin_uuid: str, interface_uuid: str) -> bytes:
    data = bytearray(512)
    data[: len(XCLBIN_MAGIC)] = XCLBIN_MAGIC
    interface = uuidlib.UUID(interface_uuid).bytes
    data[XCLBIN_INTERFACE_OFFSET : XCLBIN_INTERFACE_OFFSET + 16] = interface
    data[XCLBIN_UUID_OFFSET : XCLBIN_UUID_OFFSET + 16] = uuidlib.UUID(xclbin_uuid).bytes
    with open(path, "wb") as f:
        f.write(bytes(data))
    return bytes(data)


def read_xclbin_uuid(path) -> str:
    with open(path, "rb") as f:
        data = f.read()
    if data[: len(XCLBIN_MAGIC)] != XCLBIN_MAGIC:
        raise ValueError("not an xclbin")
    return str(uuidlib.UUID(bytes=data[XCLBIN_UUID_OFFSET : XCLBIN_UUID_OFFSET + 16]))


def _hex(value: str) -> str:
    return uuidlib.UUID(value.strip()).hex


class FlashingRunner(RecordedRunner):
    """Answers from ``<root>/commands.json``; a recorded ``fpgaconf`` or ``xbmgmt program``
    that succeeds then writes the loaded ids into the tree at ``root``, as the card would
    show them. ``fpgaconf`` refuses a GBS made for another PR interface (exit 4, nothing
    written), as the real tool does. Each AFU id queued in ``wrong_afus`` is what the card
    shows after the next load instead of the GBS's (a load that went wrong)."""

    def __init__(self, root: str) -> None:
        with open(os.path.join(root, "commands.json")) as f:
            super().__init__(json.load(f))
        self.root = root
        self.wrong_afus: list[str] = []
        self.written: list[str] = []  # the files a load changed

    def run(self, argv: Sequence[str], *, timeout: float = 30.0) -> CommandResult:
        result = super().run(argv, timeout=timeout)
        tool = os.path.basename(argv[0])
        if result.returncode == 0 and tool == "fpgaconf":
            return self._fpgaconf(tuple(argv), result)
        if result.returncode == 0 and tool == "xbmgmt" and argv[1] == "program":
            self._xbmgmt_program(tuple(argv))
        return result

    # -- Intel (OPAE) ----------------------------------------------------------------------

    def _fpgaconf(self, argv: tuple[str, ...], result: CommandResult) -> CommandResult:
        options = dict(zip(argv[1:-1:2], argv[2:-1:2], strict=True))
        address = "{:04x}:{:02x}:{:02x}.{:x}".format(
            *(int(options[f"--{k}"], 0) for k in ("segment", "bus", "device", "function"))
        )
        image = read_gbs(argv[-1])["afu-image"]
        interfaces = [_hex(v) for v in self._card_files(address, ("compat_id", "interface_id"))]
        if _hex(image["interface-uuid"]) not in interfaces:
            return CommandResult(argv, 4, "", "Error: No suitable slots found.\n")
        afu = image["accelerator-clusters"][0]["accelerator-type-uuid"]
        if self.wrong_afus:
            afu = self.wrong_afus.pop(0)
        for path in self._card_paths(address, ("afu_id",)):
            with open(path, "w") as f:
                f.write(_hex(afu) + "\n")
            self.written.append(path)
        return result

    def _card_paths(self, address: str, names: tuple[str, ...]) -> list[str]:
        """Files named ``names`` below the PCI function and its VFs (links not followed)."""
        base = os.path.realpath(os.path.join(self.root, "sys", "bus", "pci", "devices", address))
        tops = [base] + [
            os.path.realpath(os.path.join(base, link))
            for link in os.listdir(base)
            if link.startswith("virtfn")
        ]
        found = []
        for top in tops:
            for directory, _dirs, files in os.walk(top):
                found += [os.path.join(directory, n) for n in files if n in names]
        return sorted(found)

    def _card_files(self, address: str, names: tuple[str, ...]) -> list[str]:
        values = []
        for path in self._card_paths(address, names):
            with open(path) as f:
                values.append(f.read().strip())
        return values

    # -- Xilinx (XRT) ------------------------------------------------------------------

    def _xbmgmt_program(self, argv: tuple[str, ...]) -> None:
        mgmt = argv[argv.index("--device") + 1]
        loaded = read_xclbin_uuid(argv[argv.index("--user") + 1])
        cpid = pci_cpid(mgmt)
        user = f"{cpid['domain']}:{cpid['bus']}:{cpid['device']}.1"
        devices = os.path.join(self.root, "sys", "bus", "pci", "devices")
        for address in (mgmt, user):
            if os.path.isdir(os.path.join(devices, address)):
                path = os.path.join(devices, address, "xclbinuuid")
                with open(path, "w") as f:
                    f.write(loaded + "\n")
                self.written.append(path)
        examine = shlex.join(
            [
                os.path.join(os.path.dirname(argv[0]), "xbutil"),
                "examine",
                "--device",
                user,
                "--report",
                "dynamic-regions",
            ]
        )
        if examine in self.recordings:
            before = self.recordings[examine]["stdout"]
            lines = [
                f"  Xclbin UUID          : {loaded.upper()}" if "Xclbin UUID" in line else line
                for line in before.splitlines()
            ]
            self.recordings[examine] = {**self.recordings[examine], "stdout": "\n".join(lines)}
