"""Gabbi fixtures: a fresh database and app per YAML file, optionally with inventory.

Gabbi builds its HTTP clients when the tests are collected, long before a
fixture runs, so the intercepted app is a small ``LazyApp`` that forwards to
whatever app the running fixture built for its backend. Each backend gets
its own namespace of fixture classes (``fixtures_for``), so one YAML file
runs unchanged on SQLite, PostgreSQL and MariaDB.

``APIFixture`` exports RANDOM_UUID, INSTANCE_A, INSTANCE_B, INSTANCE_C and
INSTANCE_C_UPPER (INSTANCE_C in upper case) as environment variables for
``$ENVIRON[...]``; new devices start ready there, as before activation existed
(``InactiveAPIFixture``: inactive, as deployed). ``InventoryFixture`` applies the agent snapshot
``tests/gabbits/snapshots/host1.json`` (a fake FPGA with 16 attach handles and
a GPU on host ``host1``), as the agent API would, and exports more:

    HOSTNAME            host1
    HOST1_HASH          the hash of the snapshot applied
    FPGA_RP_UUID        resource provider of the FPGA's deployable
    FPGA_DEPLOYABLE_UUID, FPGA_DEPLOYABLE_ID
    FPGA_DEVICE_UUID, FPGA_DEVICE_UUID_UPPER (the same, in upper case)
    GPU_RP_UUID, GPU_RP_UUID_UPPER, GPU_DEPLOYABLE_UUID, GPU_DEPLOYABLE_ID,
    GPU_DEVICE_UUID

The snapshot files are wire-format fixtures (schema v1) that YAML stories also
send with ``data: <@snapshots/...``. They are written by
``python -m tests.api.gabbi_fixtures`` from the devices in ``SNAPSHOTS``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import tempfile
import types
import unittest
import uuid

import sqlalchemy as sa
from gabbi import fixture

from exosuit import schemas
from exosuit.api.deploy import loadapp
from exosuit.conf import make_conf
from exosuit.db import arqs, device_profiles, inventory, migration, models
from exosuit.db.api import Database
from exosuit.drivers.base import AttachHandle, Deployable, Device, Service, pci_cpid
from tests.conftest import MYSQL_URL, POSTGRESQL_URL, _Server
from tests.helpers import change_marks
from tests.helpers.inventory import fpga, snapshot

__all__ = ["HOSTNAME", "SNAPSHOTS", "LazyApp", "drop_databases", "fixtures_for", "write_snapshots"]

HOSTNAME = "host1"
FPGA_ADDRESS = "0000:0c:00.0"
GPU_ADDRESS = "0000:3b:00.0"
SNAPSHOT_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "gabbits", "snapshots")

# backend → the app (and database) of the fixture running now.
_APPS: dict[str, object] = {}
_DATABASES: dict[str, Database] = {}
_SERVERS: dict[str, _Server] = {}
_TMPDIRS: list[tempfile.TemporaryDirectory] = []
_ENVIRON_KEYS: set[str] = set()


class LazyApp:
    """The WSGI app gabbi intercepts: the app of the current fixture for ``backend``."""

    def __init__(self, backend: str) -> None:
        self.backend = backend

    def __call__(self, environ, start_response):
        app = _APPS.get(self.backend)
        if app is None:
            raise RuntimeError(f"no gabbi fixture is running for {self.backend}")
        return app(environ, start_response)


def _server(backend: str) -> _Server:
    if backend not in _SERVERS:
        url = POSTGRESQL_URL if backend == "postgresql" else MYSQL_URL
        _SERVERS[backend] = _Server(backend, url)
    return _SERVERS[backend]


def _new_database(backend: str) -> Database:
    """A new, empty database on ``backend``, migrated to head.

    A missing server skips the file, except under CI=true where it fails.
    """
    if backend == "sqlite":
        tmp = tempfile.TemporaryDirectory(prefix="exosuit-gabbi-")
        _TMPDIRS.append(tmp)
        url = f"sqlite:///{tmp.name}/exosuit.sqlite"
    else:
        server = _server(backend)
        if server.engine is None:
            if os.environ.get("CI") == "true":
                raise RuntimeError(f"required service absent under CI: {server.error}")
            raise unittest.SkipTest(server.error)
        url = server.create()
    db = Database(url)
    migration.upgrade(db)
    # Every write transaction of the story is held to exosuit/db/changes.py's rule
    # (test_gabbits.py checks after each test).
    change_marks.watch(db.engine)
    return db


def drop_databases() -> None:
    """Drop every database the fixtures created (end of the test module)."""
    for server in _SERVERS.values():
        server.drop_all()
    _SERVERS.clear()
    for tmp in _TMPDIRS:
        tmp.cleanup()
    _TMPDIRS.clear()


def _set_environ(**values) -> None:
    for key, value in values.items():
        os.environ[key] = str(value)
        _ENVIRON_KEYS.add(key)


def gpu(address: str) -> Device:
    """A whole NVIDIA GPU for PCI passthrough, one attach handle."""
    return Device(
        type="GPU",
        vendor="10de",
        model="Tesla T4",
        driver_name="nvidia_gpu",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=1,
        firmware_version="94.02.5C",
        deployables=(
            Deployable(
                name=f"{HOSTNAME}_{address}",
                num_accelerators=1,
                resource_class="PGPU",
                traits=("OWNER_CYBORG", "CUSTOM_NVIDIA_1EB8"),
                driver_name="nvidia_gpu",
                attach_handles=(AttachHandle("PCI", pci_cpid(address)),),
            ),
        ),
    )


def with_services(device: Device, *services: Service) -> Device:
    return dataclasses.replace(device, services=services)


# The drivers host1's agent reports in host1-services.json (doc/devices.md).
HOST1_DRIVERS = [
    {
        "name": "fake",
        "version": "1.0",
        "enabled": True,
        "config_digest": "sha256:" + "a" * 64,
        "found": 1,
        "error": None,
    },
    {
        "name": "nvidia_gpu",
        "version": "1.0",
        "enabled": True,
        "config_digest": "sha256:" + "b" * 64,
        "found": 1,
        "error": None,
    },
    {"name": "nvme", "version": "1.0", "enabled": False, "found": 0, "error": None},
]

# file name → what host1's agent reports in it.
SNAPSHOTS = {
    "host1.json": lambda: [fpga(FPGA_ADDRESS), gpu(GPU_ADDRESS)],
    # The same devices; the FPGA has a second trait.
    "host1-more-traits.json": lambda: [
        fpga(FPGA_ADDRESS, traits=("CUSTOM_FAKE_DEVICE", "CUSTOM_FAKE_EXTRA")),
        gpu(GPU_ADDRESS),
    ],
    # The GPU is gone.
    "host1-fpga-only.json": lambda: [fpga(FPGA_ADDRESS)],
    # The same devices; the GPU unhealthy, then in warning (WITH_HEALTH).
    "host1-gpu-unhealthy.json": lambda: [fpga(FPGA_ADDRESS), gpu(GPU_ADDRESS)],
    "host1-gpu-warning.json": lambda: [fpga(FPGA_ADDRESS), gpu(GPU_ADDRESS)],
    # The same devices with their services (a T4 not set up for vGPU lists its mdev
    # types), and the drivers (HOST1_DRIVERS).
    "host1-services.json": lambda: [
        with_services(fpga(FPGA_ADDRESS), Service("fpga_function", "f0f0", True, {"region": "0"})),
        with_services(
            gpu(GPU_ADDRESS),
            Service(
                "vgpu", "nvidia-222", False, {"description": "T4-1B", "available_instances": "16"}
            ),
            Service(
                "vgpu", "nvidia-223", False, {"description": "T4-2B", "available_instances": "8"}
            ),
        ),
    ],
}
# Files whose snapshot carries the drivers' report (hashed with it).
WITH_DRIVERS = {"host1-services.json": HOST1_DRIVERS}
# Files whose devices carry a health (PCI address → health, as a HealthReader driver's
# devices do in the agent's snapshot; hashed with them).
WITH_HEALTH = {
    "host1-gpu-unhealthy.json": {
        GPU_ADDRESS: {"state": "unhealthy", "reason": "NVIDIA XID 79 within 3600 s"}
    },
    "host1-gpu-warning.json": {
        GPU_ADDRESS: {"state": "warning", "reason": "PCIe link x8, below its maximum x16"}
    },
}


def write_snapshots() -> None:
    """(Re)write the snapshot files from ``SNAPSHOTS``."""
    os.makedirs(SNAPSHOT_DIR, exist_ok=True)
    for name, devices in SNAPSHOTS.items():
        body = snapshot(HOSTNAME, devices())
        body["agent_version"] = "gabbi"
        if name in WITH_DRIVERS:
            body["drivers"] = WITH_DRIVERS[name]
            body["hash"] = schemas.snapshot_hash(
                body["devices"], body["driver_errors"], body["drivers"]
            )
        if name in WITH_HEALTH:
            for device in body["devices"]:
                if device["pci_address"] in WITH_HEALTH[name]:
                    device["health"] = WITH_HEALTH[name][device["pci_address"]]
            body["hash"] = schemas.snapshot_hash(
                body["devices"], body["driver_errors"], body.get("drivers")
            )
        with open(os.path.join(SNAPSHOT_DIR, name), "w") as f:
            json.dump(body, f, indent=1, sort_keys=True)
            f.write("\n")


def load_snapshot(name: str) -> dict:
    with open(os.path.join(SNAPSHOT_DIR, name)) as f:
        return json.load(f)


def seed_inventory(db: Database) -> dict[str, str]:
    """Apply host1's snapshot (FPGA + GPU); return the identifiers the stories use."""
    db.write(inventory.apply_snapshot, HOSTNAME, load_snapshot("host1.json"))
    dep, dev = models.deployables, models.devices

    def _ids(conn):
        rows = conn.execute(
            sa.select(
                dev.c.type, dev.c.uuid.label("device_uuid"), dep.c.uuid, dep.c.id, dep.c.rp_uuid
            ).select_from(dep.join(dev, dep.c.device_id == dev.c.id))
        ).all()
        return {row.type: row for row in rows}

    rows = db.read(_ids)
    values = {"HOSTNAME": HOSTNAME, "HOST1_HASH": load_snapshot("host1.json")["hash"]}
    for kind, row in (("FPGA", rows["FPGA"]), ("GPU", rows["GPU"])):
        values[f"{kind}_RP_UUID"] = row.rp_uuid
        values[f"{kind}_DEPLOYABLE_UUID"] = row.uuid
        values[f"{kind}_DEPLOYABLE_ID"] = row.id
        values[f"{kind}_DEVICE_UUID"] = row.device_uuid
    values["FPGA_DEVICE_UUID_UPPER"] = rows["FPGA"].device_uuid.upper()
    values["GPU_RP_UUID_UPPER"] = rows["GPU"].rp_uuid.upper()
    return values


class APIFixture(fixture.GabbiFixture):
    """A fresh, empty database and the API (noauth) on it."""

    backend = "sqlite"
    # New devices start ready, as before activation existed (the stories bind what a
    # snapshot reported); ActivationFixture leaves the default (inactive).
    overrides = {"inventory.new_device_activation": "ready"}

    def start_fixture(self):
        self.db = _new_database(self.backend)
        # Local state (the catalogue's image data) in a folder of its own, not the
        # working directory.
        state = tempfile.TemporaryDirectory(prefix="exosuit-gabbi-state-")
        _TMPDIRS.append(state)
        self.conf = make_conf([], state_path=state.name, **self.overrides)
        _DATABASES[self.backend] = self.db
        _APPS[self.backend] = loadapp(self.conf, self.db)
        # Fresh random uuids for stories that need ones nothing has.
        instance_c = str(uuid.uuid4())
        _set_environ(
            RANDOM_UUID=uuid.uuid4(),
            INSTANCE_A=uuid.uuid4(),
            INSTANCE_B=uuid.uuid4(),
            INSTANCE_C=instance_c,
            INSTANCE_C_UPPER=instance_c.upper(),
        )

    def stop_fixture(self):
        _APPS.pop(self.backend, None)
        _DATABASES.pop(self.backend, None)
        for key in _ENVIRON_KEYS:
            os.environ.pop(key, None)
        _ENVIRON_KEYS.clear()
        self.db.dispose()


class InactiveAPIFixture(APIFixture):
    """APIFixture as deployed: new devices start inactive (doc/devices.md)."""

    overrides: dict[str, str] = {}


class InventoryFixture(APIFixture):
    """APIFixture plus host1's inventory, applied as an agent snapshot."""

    def start_fixture(self):
        super().start_fixture()
        _set_environ(**seed_inventory(self.db))


class BindInProgressFixture(fixture.GabbiFixture):
    """After InventoryFixture: a bind of instance C that has started and not finished.

    The API binds synchronously, so no request sequence leaves an ARQ in
    BindStarted; an asynchronous bind (FPGA programming) would. The profile
    ``async-fpga`` holds one FPGA; its ARQ (IN_PROGRESS_ARQ) is BindStarted
    on host1's FPGA for INSTANCE_C.
    """

    backend = "sqlite"

    def start_fixture(self):
        db = _DATABASES[self.backend]
        db.write(device_profiles.create, name="async-fpga", groups=[{"resources:FPGA": "1"}])
        (arq,) = db.write(
            arqs.create, profile_name="async-fpga", project_id="admin", handles_per_unit={}
        )
        table = models.accelerator_requests
        db.write(
            lambda conn: conn.execute(
                sa.update(table)
                .where(table.c.uuid == arq["uuid"])
                .values(
                    state=arqs.BIND_STARTED,
                    hostname=HOSTNAME,
                    device_rp_uuid=os.environ["FPGA_RP_UUID"],
                    instance_uuid=os.environ["INSTANCE_C"],
                )
            )
        )
        _set_environ(IN_PROGRESS_ARQ=arq["uuid"])


def _nic(address: str, numa_node: int) -> Device:
    """A NIC (CUSTOM_NIC), one attach handle."""
    return Device(
        type="NIC",
        vendor="15b3",
        model="ConnectX-6",
        driver_name="static",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=numa_node,
        deployables=(
            Deployable(
                name=f"nic_{address}",
                num_accelerators=1,
                resource_class="CUSTOM_NIC",
                traits=(),
                driver_name="static",
                attach_handles=(AttachHandle("PCI", pci_cpid(address)),),
            ),
        ),
    )


# The hosts of the dry-run story (claims-dry-run.yaml), one reason each: host → devices.
DRY_RUN_HOSTS = {
    "a-silent": lambda: [gpu("0000:3b:00.0")],
    "b-drained": lambda: [gpu("0000:3b:00.0")],
    "c-unhealthy": lambda: [gpu("0000:3b:00.0")],
    "d-inactive": lambda: [gpu("0000:3b:00.0")],
    "e-nic": lambda: [_nic("0000:5e:00.0", 1)],
    "f-a100": lambda: [
        dataclasses.replace(
            gpu("0000:3b:00.0"),
            deployables=(
                dataclasses.replace(
                    gpu("0000:3b:00.0").deployables[0], traits=("CUSTOM_NVIDIA_20B0",)
                ),
            ),
        )
    ],
    "g-node0": lambda: [dataclasses.replace(gpu("0000:3b:00.0"), numa_node=0)],
    "h-held": lambda: [gpu("0000:3b:00.0")],
    "i-free": lambda: [gpu("0000:3b:00.0"), _nic("0000:5e:00.0", 0)],
    "j-unlabelled": lambda: [gpu("0000:3b:00.0")],
}
# Labelled team=ml: every GPU but j-unlabelled's.
_UNLABELLED = ("j-unlabelled",)


class DryRunFixture(APIFixture):
    """APIFixture plus the hosts of DRY_RUN_HOSTS, each reported by its agent; a-silent
    last reported a day ago; the GPUs labelled team=ml but j-unlabelled's. Sets
    ``DEV_<HOST>`` (a-silent → DEV_A_SILENT) to the uuid of each host's first device."""

    def start_fixture(self):
        super().start_fixture()
        for hostname, devices in DRY_RUN_HOSTS.items():
            self.db.write(inventory.apply_snapshot, hostname, snapshot(hostname, devices()))
        dev, hosts = models.devices, models.hosts

        def _arrange(conn):
            conn.execute(
                sa.update(hosts)
                .where(hosts.c.hostname == "a-silent")
                .values(last_report_at=models.utcnow() - dt.timedelta(days=1))
            )
            conn.execute(
                sa.update(dev)
                .where(dev.c.type == "GPU", dev.c.hostname.not_in(_UNLABELLED))
                .values(labels=json.dumps({"team": "ml"}))
            )
            rows = conn.execute(
                sa.select(dev.c.hostname, dev.c.uuid).order_by(dev.c.hostname, dev.c.id)
            )
            found: dict[str, str] = {}
            for row in rows:
                found.setdefault(row.hostname, row.uuid)
            return found

        for hostname, device in self.db.write(_arrange).items():
            _set_environ(**{"DEV_" + hostname.upper().replace("-", "_"): device})


class UsageHistoryFixture(InventoryFixture):
    """InventoryFixture plus a history: host1's usage (its GPU 25 % busy, 4 of 16 GiB
    used; its FPGA 0 errors) recorded as the conductor's usage_history job records it,
    in the three buckets of [dashboard] history_resolution (300 s) ending now."""

    def start_fixture(self):
        super().start_fixture()
        from exosuit.db import usage_history

        dev, hosts = models.devices, models.hosts
        now = models.utcnow()

        def _usage(conn):
            identity = dict(conn.execute(sa.select(dev.c.type, dev.c.identity)).all())
            usage = {
                identity["GPU"]: {
                    "utilization_percent": 25,
                    "memory_used_bytes": 4 * 2**30,
                    "memory_total_bytes": 16 * 2**30,
                },
                identity["FPGA"]: {"errors_total": 0},
            }
            conn.execute(
                sa.update(hosts)
                .where(hosts.c.hostname == HOSTNAME)
                .values(usage=json.dumps(usage), usage_at=now)
            )

        self.db.write(_usage)
        shape = usage_history.Retention(300, 21600, 3600, 172800)
        for minutes in (10, 5, 0):
            at = now - dt.timedelta(minutes=minutes)
            self.db.write(usage_history.sample, shape, stale_after=3600, now=at)


def fixtures_for(backend: str) -> types.SimpleNamespace:
    """The fixture classes YAML files name, bound to ``backend``."""
    return types.SimpleNamespace(
        **{
            cls.__name__: type(cls.__name__, (cls,), {"backend": backend})
            for cls in (
                APIFixture,
                InactiveAPIFixture,
                InventoryFixture,
                BindInProgressFixture,
                DryRunFixture,
                UsageHistoryFixture,
            )
        }
    )


if __name__ == "__main__":
    write_snapshots()
