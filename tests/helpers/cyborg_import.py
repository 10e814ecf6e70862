"""What the import tests share: the command, the target's rows, and the devices the
hosts' Exosuit agents report for what fill_cyborg.py's ``cut-over`` scenario wrote."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from exosuit.cmd import manage
from exosuit.db import models
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from tests.conftest import PERSONAS, ApiClient
from tests.helpers.inventory import snapshot

TABLES = {
    "devices": models.devices,
    "controlpath_ids": models.controlpath_ids,
    "deployables": models.deployables,
    "attributes": models.attributes,
    "attach_handles": models.attach_handles,
    "device_profiles": models.device_profiles,
    "accelerator_requests": models.accelerator_requests,
}
# Everything an import writes: TABLES plus the hosts and the jobs it queues.
WRITTEN = {**TABLES, "hosts": models.hosts, "jobs": models.jobs}

# fill_cyborg.py's project: Nova calls on behalf of its user, with its service token.
CYBORG_PROJECT = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
NOVA = {
    "X-User-Id": "u-member",
    "X-Project-Id": CYBORG_PROJECT,
    "X-Roles": "member,reader",
    "X-Service-Roles": "service",
}


def run(capsys, tmp_path: Path, target_url: str, *args: str) -> tuple[int, str, str]:
    """exosuit-manage import-cyborg, in this process (its output captured)."""
    conf = tmp_path / "exosuit.conf"
    conf.write_text(f"[database]\nconnection = {target_url}\n")
    capsys.readouterr()
    code = manage.main(["--config-file", str(conf), "import-cyborg", *args])
    out, err = capsys.readouterr()
    return code, out, err


def url_of(database) -> str:
    return database.engine.url.render_as_string(hide_password=False)


def rows(database, name: str) -> list[dict]:
    table = WRITTEN[name]
    with database.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(table).order_by(table.c.id))]


def by_uuid(database, name: str) -> dict[str, dict]:
    return {r["uuid"]: r for r in rows(database, name)}


def counts(database) -> dict[str, int]:
    return {name: len(rows(database, name)) for name in TABLES}


def everything(database) -> dict[str, list[dict]]:
    """Every row an import can write, to compare before and after."""
    return {name: rows(database, name) for name in WRITTEN}


def table_lines(out: str) -> dict[str, list[str]]:
    """The report's table: Cyborg table → [rows, new, present, skipped]."""
    return {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}


def report(api: ApiClient, host: str, devices: list[Device]) -> None:
    """The host's Exosuit agent reports ``devices``, through the agent API."""
    r = api.as_(PERSONAS["service"]).put(
        f"/agent/v1/hosts/{host}/inventory", snapshot(host, devices)
    )
    assert r.status_code == 200, r.text


# -- what the hosts' Exosuit agents report -------------------------------------------------


def fake_fpga(host: str) -> Device:
    """Cyborg's fake FPGA as an Exosuit driver reports it: the same control-path id and
    attach infos, its deployable named as Exosuit's drivers name them."""
    return Device(
        type="FPGA",
        vendor="0xABCD",
        model="miss model info",
        driver_name="fake",
        controlpath_id=pci_cpid("0000:0c:00.0"),
        pci_address="0000:0c:00.0",
        deployables=(
            Deployable(
                name=f"{host}_0000:0c:00.0",
                num_accelerators=16,
                resource_class="FPGA",
                traits=("CUSTOM_FAKE_DEVICE",),
                driver_name="fake",
                attach_handles=tuple(
                    AttachHandle(
                        "TEST_PCI",
                        {
                            "domain": "0000",
                            "bus": "0c",
                            "device": str(fn // 8),
                            "function": str(fn % 8),
                        },
                    )
                    for fn in range(1, 17)
                ),
            ),
        ),
    )


def sriov_nic(host: str, vfs=("0000:3b:02.0", "0000:3b:02.1")) -> Device:
    """The NIC as exosuit/drivers/sriov_nic.py reports it with physnet1 mapped."""
    return Device(
        type="NIC",
        vendor="8086",
        model="158b",
        driver_name="sriov_nic",
        controlpath_id=pci_cpid("0000:3b:00.0"),
        pci_address="0000:3b:00.0",
        deployables=tuple(
            Deployable(
                name=f"{host}_{vf}",
                num_accelerators=1,
                resource_class="CUSTOM_NIC",
                traits=("CUSTOM_VF", "CUSTOM_PHYSNET1"),
                driver_name="sriov_nic",
                attach_handles=(
                    AttachHandle("PCI", {**pci_cpid(vf), "physical_network": "physnet1"}),
                ),
            )
            for vf in vfs
        ),
    )


def qat(host: str, pf: str = "0000:5e:00.0", vfs=("0000:5e:01.0", "0000:5e:01.1")) -> Device:
    """A QAT as exosuit/drivers/intel_qat.py reports it: one deployable per VF (the PF
    itself without VFs), named ``<host>_<address>`` as Cyborg's QAT driver names them."""
    return Device(
        type="QAT",
        vendor="0x8086",
        model="Intel QAT C62x",
        driver_name="intel_qat",
        controlpath_id=pci_cpid(pf),
        pci_address=pf,
        deployables=tuple(
            Deployable(
                name=f"{host}_{address}",
                num_accelerators=1,
                resource_class="CUSTOM_QAT",
                traits=("OWNER_CYBORG",),
                driver_name="intel_qat",
                attach_handles=(AttachHandle("PCI", pci_cpid(address)),),
            )
            for address in (vfs or (pf,))
        ),
    )


def legacy_qat(host: str) -> Device:
    """The device fill_cyborg.py's out-of-tree driver keyed by a bare PCI address."""
    return qat(host, "0000:af:00.0", ())


def npu(host: str) -> Device:
    """The device Cyborg keyed by a serial number, as Exosuit's generic PCI driver
    reports it: by its PCI address, which Cyborg's row never said."""
    return Device(
        type="AICHIP",
        vendor="0x19e5",
        model="0xd100",
        driver_name="pci",
        controlpath_id=pci_cpid("0000:d8:00.0"),
        pci_address="0000:d8:00.0",
        deployables=(
            Deployable(
                name=f"{host}_0000:d8:00.0",
                num_accelerators=1,
                resource_class="CUSTOM_AICHIP",
                driver_name="pci",
                attach_handles=(AttachHandle("PCI", pci_cpid("0000:d8:00.0")),),
            ),
        ),
    )


HOST_DEVICES = {
    "compute-a": lambda: [fake_fpga("compute-a"), sriov_nic("compute-a")],
    "compute-b": lambda: [
        fake_fpga("compute-b"),
        qat("compute-b"),
        legacy_qat("compute-b"),
        npu("compute-b"),
    ],
}
