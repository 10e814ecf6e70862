"""Real OpenStack Placement for the Placement sync tests, and the helpers they share.

``placement`` (session scope) runs the openstack-placement package as a real server
process on loopback (tests/placement/placement_server.py), with its own SQLite
database (``placement-manage db sync``) and ``[api] auth_strategy = noauth2``.
It can be stopped and started again on the same port (the outage test). Tests
share it, so each uses hosts of its own (``hostname`` fixture).

Without openstack-placement installed the tests skip, except under CI=true.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa

from exosuit.api.deploy import loadapp
from exosuit.conductor.worker import Services, Worker
from exosuit.db import models
from exosuit.db.metrics import read_counters
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from exosuit.placement.client import use_placement_url
from tests.conftest import ApiClient, make_test_conf
from tests.helpers.inventory import snapshot

RUNNER = Path(__file__).with_name("placement_server.py")
START_TIMEOUT = 120.0
# Nova's view: the latest microversion this Placement speaks.
NOVA_MICROVERSION = "1.39"


def _placement_manage() -> str | None:
    candidate = Path(sys.executable).with_name("placement-manage")
    return str(candidate) if candidate.exists() else shutil.which("placement-manage")


class PlacementServer:
    """openstack-placement served by tests/placement/placement_server.py."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.log = workdir / "placement.log"
        (workdir / "placement.conf").write_text(
            "[DEFAULT]\ndebug = false\n"
            "[api]\nauth_strategy = noauth2\n"
            f"[placement_database]\nconnection = sqlite:///{workdir}/placement.sqlite\n"
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def sync_db(self, manage: str) -> None:
        subprocess.run(
            [manage, "--config-file", str(self.workdir / "placement.conf"), "db", "sync"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        # NOTE: WAL (kept in the file): Placement's readers and its writer do not block
        # each other; with the default journal a GET during a write can make the
        # write fail with "database is locked" (a 500).
        with sqlite3.connect(self.workdir / "placement.sqlite") as db:
            db.execute("PRAGMA journal_mode=WAL")

    def start(self) -> None:
        if not self.port:
            # NOTE: an explicit port, even the first time: cheroot sets SO_REUSEADDR
            # only on explicit ports, and without it the restart of the outage test
            # could not bind while the first run's connections linger.
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
        port_file = self.workdir / "port"
        port_file.unlink(missing_ok=True)
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                # One request at a time: two writers at once on Placement's SQLite
                # can fail with "database is locked" (a 500), and the tests write to
                # it by hand while a conductor writes too.
                [
                    sys.executable,
                    str(RUNNER),
                    str(self.workdir),
                    "--port",
                    str(self.port),
                    "--threads",
                    "1",
                    "--port-file",
                    str(port_file),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Placement exited: {self.log.read_text()[-2000:]}")
            if port_file.exists():
                self.port = int(port_file.read_text())
                try:
                    if requests.get(self.url + "/", timeout=2).status_code == 200:
                        return
                except requests.ConnectionError:
                    pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"Placement did not start in {START_TIMEOUT} s")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.process = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class PlacementAPI:
    """Placement as Nova or an operator sees it (not through Exosuit's client)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers.update(
            {"X-Auth-Token": "admin", "OpenStack-API-Version": f"placement {NOVA_MICROVERSION}"}
        )

    def request(self, method: str, path: str, body=None, expect: int | None = None):
        response = self.session.request(method, self.url + path, json=body, timeout=30)
        if expect is not None:
            assert response.status_code == expect, (method, path, response.text)
        return response

    def get(self, path: str):
        return self.request("GET", path, expect=200).json()

    def provider(self, uuid: str) -> dict | None:
        response = self.request("GET", f"/resource_providers/{uuid}")
        return response.json() if response.status_code == 200 else None

    def providers(self, **query) -> list[dict]:
        from urllib.parse import urlencode

        return self.get("/resource_providers?" + urlencode(query))["resource_providers"]

    def tree(self, hostname: str) -> dict:
        """The host's compute node provider and its children, with inventories and traits."""
        roots = self.providers(name=hostname)
        assert len(roots) == 1, roots
        root = roots[0]
        children = {}
        for rp in self.providers(in_tree=root["uuid"]):
            if rp["uuid"] == root["uuid"]:
                continue
            children[rp["uuid"]] = {
                "name": rp["name"],
                "parent": rp["parent_provider_uuid"],
                "inventories": self.inventories(rp["uuid"]),
                "traits": set(self.traits(rp["uuid"])),
            }
        return {"root": root, "children": children}

    def inventories(self, uuid: str) -> dict:
        return self.get(f"/resource_providers/{uuid}/inventories")["inventories"]

    def traits(self, uuid: str) -> list[str]:
        return self.get(f"/resource_providers/{uuid}/traits")["traits"]

    def allocate(self, consumer: str, provider: str, resources: dict) -> None:
        """PUT /allocations/{consumer}, as Nova's scheduler does."""
        self.request(
            "PUT",
            f"/allocations/{consumer}",
            {
                "allocations": {provider: {"resources": resources}},
                "project_id": uuid.uuid4().hex,
                "user_id": uuid.uuid4().hex,
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            },
            expect=204,
        )

    def deallocate(self, consumer: str) -> None:
        self.request("DELETE", f"/allocations/{consumer}", expect=204)


@pytest.fixture
def placement_api(placement) -> PlacementAPI:
    if not placement.running:  # a test that stopped it failed before starting it again
        placement.start()
    return PlacementAPI(placement.url)


@pytest.fixture
def hostname() -> str:
    return f"host-{uuid.uuid4().hex[:10]}"


def placement_conf(placement: PlacementServer, *, standalone: bool = True, **overrides):
    conf = make_test_conf(
        **{
            "placement.manage_compute_providers": standalone,
            "placement.retry_interval": 1,
            "placement.max_retry_interval": 2,
            "conductor.poll_interval": 0.1,
            "conductor.backoff_base": 0.1,
            **overrides,
        }
    )
    use_placement_url(conf, placement.url)
    return conf


class Stack:
    """The API (in-process, real WSGI app) and a real conductor worker on one database."""

    def __init__(self, conf, db) -> None:
        self.conf = conf
        self.db = db
        self.api = ApiClient(loadapp(conf, db))
        self.worker = Worker(conf, db, services=Services(conf))

    def report(self, hostname: str, devices) -> dict:
        body = snapshot(hostname, devices)
        response = self.api.put(f"/agent/v1/hosts/{hostname}/inventory", body)
        assert response.status_code == 200, response.text
        return response.json

    def run_jobs(self, *, due: bool = False) -> list:
        """Run every due job (``due``: make the waiting ones due first, as if their
        retry delay had passed); the outcomes."""
        if due:
            self.make_due()
        outcomes = []
        while (outcome := self.worker.run_once()) is not None:
            outcomes.append(outcome)
        return outcomes

    def make_due(self) -> None:
        jobs = models.jobs
        self.db.write(
            lambda conn: conn.execute(
                sa.update(jobs)
                .where(jobs.c.state == "pending", jobs.c.id > 0)
                .values(run_after=models.utcnow())
            )
        )

    def pending(self, kind: str = "placement_sync") -> list[dict]:
        jobs = models.jobs
        return [
            dict(r._mapping)
            for r in self.db.read(
                lambda conn: conn.execute(
                    sa.select(jobs).where(jobs.c.state == "pending", jobs.c.kind == kind)
                ).all()
            )
        ]

    def counters(self) -> dict:
        return self.db.read(read_counters)

    def calls(self, job: str | None = None) -> int:
        return sum(
            v
            for (name, labels), v in self.counters().items()
            if name == "exosuit_placement_requests" and (job is None or dict(labels)["job"] == job)
        )

    def counter(self, name: str, **labels) -> int:
        return self.counters().get((name, tuple(sorted(labels.items()))), 0)

    def deployables(self, hostname: str) -> dict[str, str]:
        """deployable name -> rp_uuid for the host."""
        dep, dev = models.deployables, models.devices
        return dict(
            self.db.read(
                lambda conn: conn.execute(
                    sa.select(dep.c.name, dep.c.rp_uuid)
                    .join(dev, dep.c.device_id == dev.c.id)
                    .where(dev.c.hostname == hostname)
                ).all()
            )
        )

    def device_uuid(self, hostname: str, address: str) -> str:
        dev = models.devices
        return self.db.read(
            lambda conn: conn.execute(
                sa.select(dev.c.uuid).where(
                    dev.c.hostname == hostname, dev.c.pci_address == address
                )
            ).scalar_one()
        )


@pytest.fixture
def stack(placement, placement_api, sqlite_database):
    return Stack(placement_conf(placement), sqlite_database)


# -- devices -------------------------------------------------------------------------


def fpga(
    address: str, *, traits=("CUSTOM_FAKE_DEVICE",), functions: int = 4, name: str | None = None
) -> Device:
    """An FPGA with ``functions`` VFs: one deployable of ``functions`` accelerators."""
    bus = address.split(":")[1]
    return Device(
        type="FPGA",
        vendor="0xABCD",
        model="Fake FPGA",
        driver_name="fake",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=0,
        deployables=(
            Deployable(
                name=name or f"fpga_{address}",
                num_accelerators=functions,
                resource_class="FPGA",
                traits=tuple(traits),
                driver_name="fake",
                attach_handles=tuple(
                    AttachHandle(
                        "PCI",
                        {"domain": "0000", "bus": bus, "device": "00", "function": str(i + 1)},
                    )
                    for i in range(functions)
                ),
            ),
        ),
    )


def gpu(address: str, product: str = "20B0") -> Device:
    return Device(
        type="GPU",
        vendor="10de",
        model="A100",
        driver_name="nvidia_gpu",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=0,
        deployables=(
            Deployable(
                name=f"gpu_{address}",
                num_accelerators=1,
                resource_class="PGPU",
                traits=("OWNER_CYBORG", f"CUSTOM_NVIDIA_{product}"),
                driver_name="nvidia_gpu",
                attach_handles=(AttachHandle("PCI", pci_cpid(address)),),
            ),
        ),
    )


def qat(address: str, vfs: int = 2) -> Device:
    """A device whose resource class is custom (CUSTOM_QAT)."""
    bus = address.split(":")[1]
    return Device(
        type="QAT",
        vendor="0x8086",
        model="QAT",
        driver_name="intel_qat",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        deployables=(
            Deployable(
                name=f"qat_{address}",
                num_accelerators=vfs,
                resource_class="CUSTOM_QAT",
                traits=("CUSTOM_QAT_SYM", "CUSTOM_QAT_ASYM"),
                driver_name="intel_qat",
                attach_handles=tuple(
                    AttachHandle(
                        "PCI", {"domain": "0000", "bus": bus, "device": "01", "function": str(i)}
                    )
                    for i in range(vfs)
                ),
            ),
        ),
    )


def inventory(total: int, reserved: int = 0) -> dict:
    return {
        "total": total,
        "reserved": reserved,
        "min_unit": 1,
        "max_unit": total,
        "step_size": 1,
        "allocation_ratio": 1.0,
    }


def dumps(value) -> str:
    return json.dumps(value, indent=1, sort_keys=True, default=sorted)
