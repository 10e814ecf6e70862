"""End to end with real processes: ``exosuit-agent run`` reports a recorded host to
``exosuit-api`` (gunicorn), on SQLite and on PostgreSQL.

The host is a copy of a recorded sysfs tree (tests/fixtures/nvidia-gpu-host, four GPUs,
driver nvidia_gpu) that the tests change under the running agent: a device unplugged,
a NUMA node moved. What the API shows is compared with what the driver finds in the
copy; the database is read directly where the API does not show something (snapshot
hash, update times, attach handles).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid as uuidlib
from pathlib import Path

import pytest
import sqlalchemy as sa

from exosuit import schemas
from exosuit.agent import snapshot as snapshot_module
from exosuit.agent.cache import AgentCache, AgentState
from exosuit.agent.plugins import DriverSet
from exosuit.conf import make_conf
from exosuit.db import inventory, models
from exosuit.db.api import Database
from tests.conftest import new_database_url, require
from tests.helpers.agent_processes import (
    BIN,
    AgentProcess,
    ApiProcess,
    Relay,
    call,
    wait_for,
)

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-gpu-host"
T4 = "0000:3b:00.0"  # Tesla T4, NUMA node 0, whole GPU (PGPU)
T4_B = "0000:af:00.0"  # Tesla T4, NUMA node 1
FOREIGN_MDEV = "4b20d080-1b54-4048-85b3-a6a62d165c01"  # on T4_B, made outside Exosuit
A100 = "0000:81:00.0"  # A100 without MIG, NUMA node 1
A100_MIG = "0000:41:00.0"  # A100 in MIG mode: one deployable per MIG profile


# -- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database_url(request, db_servers, tmp_path_factory):
    """A new migrated database on each backend (PostgreSQL absent: skipped, or failed
    under CI=true)."""
    return new_database_url(request.param, db_servers, tmp_path_factory)


@pytest.fixture(scope="module")
def api(database_url, tmp_path_factory):
    """One exosuit-api process per backend; the tests use distinct host names."""
    process = ApiProcess(database_url, tmp_path_factory.mktemp("api"))
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def db(database_url):
    database = Database(database_url)
    yield database
    database.dispose()


@pytest.fixture
def host(tmp_path) -> Path:
    """A copy of the recorded host that the test may change."""
    root = tmp_path / "host"
    shutil.copytree(FIXTURE, root, symlinks=True)
    return root


@pytest.fixture
def hostname() -> str:
    return f"e2e-{uuidlib.uuid4().hex[:8]}"


@pytest.fixture
def agents(tmp_path):
    """Make agent processes; every one still running at teardown is stopped."""
    made: list[AgentProcess] = []

    def make(*args, **kwargs) -> AgentProcess:
        agent = AgentProcess(tmp_path, *args, **kwargs)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.kill()


# -- helpers ---------------------------------------------------------------------------


def discover(root: Path, hostname: str) -> dict:
    """What the nvidia_gpu driver finds in ``root``: the snapshot the agent should
    report, with the report of the installed drivers (nvidia_gpu alone enabled, with
    its default options) that the agent hashes with it."""
    conf = make_conf(**{"agent.enabled_drivers": ["nvidia_gpu"]})
    plugins = DriverSet.from_conf(conf, hostname, str(root))
    found = snapshot_module.discover(plugins.drivers)
    snapshot = snapshot_module.make_snapshot(
        hostname, found, plugins.report(found.found, found.failed)
    )
    assert not snapshot["driver_errors"]
    return snapshot


def devices(url: str, hostname: str, version: str = "2.4") -> dict[str, dict]:
    status, body = call(url, "GET", f"/v2/devices?hostname={hostname}", version=version)
    assert status == 200, body
    return {d.get("pci_address") or d["uuid"]: d for d in body["devices"]}


def deployables(url: str) -> list[dict]:
    status, body = call(url, "GET", "/v2/deployables?limit=1000")
    assert status == 200, body
    return body["deployables"]


def unplug(root: Path, address: str) -> None:
    """Remove a PCI function from the copy, as the kernel does on hot removal."""
    link = root / "sys" / "bus" / "pci" / "devices" / address
    target = Path(os.path.realpath(link))
    assert root.resolve() in target.parents
    link.unlink()
    shutil.rmtree(target)


def replug(root: Path, address: str) -> None:
    """Put a PCI function back from the recording."""
    link = FIXTURE / "sys" / "bus" / "pci" / "devices" / address
    relative = os.path.realpath(link)[len(str(FIXTURE.resolve())) + 1 :]
    shutil.copytree(FIXTURE / relative, root / relative, symlinks=True)
    (root / "sys" / "bus" / "pci" / "devices" / address).symlink_to(os.readlink(link))


def set_numa_node(root: Path, address: str, node: int) -> None:
    path = root / "sys" / "bus" / "pci" / "devices" / address / "numa_node"
    path.write_text(f"{node}\n")


def host_row(db: Database, hostname: str):
    return db.read(
        lambda conn: conn.execute(
            sa.select(models.hosts).where(models.hosts.c.hostname == hostname)
        ).first()
    )


def stored(db: Database, hostname: str) -> dict:
    """The host's rows: devices by identity (uuid, updated_at), deployables, handles."""
    dev, dep, ah = models.devices, models.deployables, models.attach_handles

    def read(conn):
        rows = conn.execute(
            sa.select(dev.c.identity, dev.c.uuid, dev.c.updated_at).where(
                dev.c.hostname == hostname
            )
        ).all()
        deployable_names = (
            conn.execute(
                sa.select(dep.c.name)
                .select_from(dep.join(dev, dep.c.device_id == dev.c.id))
                .where(dev.c.hostname == hostname)
            )
            .scalars()
            .all()
        )
        handles = (
            conn.execute(
                sa.select(ah.c.attach_info)
                .select_from(
                    ah.join(dep, ah.c.deployable_id == dep.c.id).join(
                        dev, dep.c.device_id == dev.c.id
                    )
                )
                .where(dev.c.hostname == hostname)
            )
            .scalars()
            .all()
        )
        return rows, deployable_names, handles

    rows, names, handles = db.read(read)
    assert len({r.identity for r in rows}) == len(rows)
    return {
        "devices": {r.identity: (r.uuid, r.updated_at) for r in rows},
        "deployables": sorted(names),
        "handles": sorted(handles),
    }


def expected_rows(snapshot: dict) -> dict:
    return {
        "identities": {schemas.device_identity(d["controlpath_id"]) for d in snapshot["devices"]},
        "deployables": sorted(p["name"] for d in snapshot["devices"] for p in d["deployables"]),
        "handles": sorted(
            schemas.canonical_json(h["attach_info"])
            for d in snapshot["devices"]
            for p in d["deployables"]
            for h in p["attach_handles"]
        ),
    }


def assert_converged(db: Database, hostname: str, root: Path) -> dict:
    """The database holds exactly what the driver finds in ``root``, each thing once."""
    rows = stored(db, hostname)
    want = expected_rows(discover(root, hostname))
    assert set(rows["devices"]) == want["identities"]
    assert rows["deployables"] == want["deployables"]
    assert rows["handles"] == want["handles"]
    return rows


def read_cache(agent: AgentProcess) -> AgentState:
    """The agent's cache file: valid JSON, readable by the agent."""
    with open(agent.cache_path) as f:
        data = json.load(f)
    state = AgentState.from_json(data)
    assert AgentCache(str(agent.state_dir)).load() == state
    return state


def acknowledged(agent: AgentProcess, hash_: str):
    try:
        return read_cache(agent).acknowledged_hash == hash_
    except FileNotFoundError:
        return False


# -- a. devices and their fields -------------------------------------------------------


def test_the_devices_of_a_recorded_host_appear_with_their_fields(api, db, host, hostname, agents):
    snapshot = discover(host, hostname)
    agent = agents(hostname, api.url, host)
    agent.start()
    shown = wait_for(
        lambda: (d := devices(api.url, hostname)) and len(d) == 4 and d,
        what="four GPUs in /v2/devices",
    )
    for device in snapshot["devices"]:
        got = shown[device["pci_address"]]
        for field in (
            "type",
            "vendor",
            "model",
            "pci_address",
            "numa_node",
            "driver_name",
            "firmware_version",
        ):
            assert got[field] == device[field], field
        assert got["hostname"] == hostname
        assert got["presence"] == "present" and got["presence_reason"] is None
    # What the recording says, independently of the driver.
    t4 = shown[T4]
    assert (t4["type"], t4["vendor"], t4["model"]) == ("GPU", "10de", "Tesla T4")
    assert (t4["numa_node"], t4["firmware_version"]) == (0, "90.04.96.00.02")
    assert shown[T4_B]["numa_node"] == 1
    # Before 2.4 the Exosuit fields are absent, as in Cyborg.
    old = devices(api.url, hostname, version="2.0")
    assert len(old) == 4
    assert all("pci_address" not in d and "numa_node" not in d for d in old.values())

    by_rp = {d["rp_uuid"]: d for d in deployables(api.url)}
    device_ids = set()
    for device in snapshot["devices"]:
        identity = schemas.device_identity(device["controlpath_id"])
        for deployable in device["deployables"]:
            rp = inventory.rp_uuid(hostname, identity, deployable["name"])
            got = by_rp[rp]
            device_ids.add(got["device_id"])
            assert got["name"] == deployable["name"]
            assert got["num_accelerators"] == deployable["num_accelerators"]
            assert got["driver_name"] == "nvidia_gpu"
            # The driver's attributes, then where the device sits (doc/devices.md).
            topology = [
                {key: str(device[key])}
                for key in ("numa_node", "pcie_root", "iommu_group")
                if device.get(key) is not None
            ]
            assert (
                json.loads(got["attributes_list"])
                == [{a["key"]: a["value"]} for a in deployable["attributes"]] + topology
            )
            assert len(topology) == 3  # the recording has all three
    # T4_B and A100 carry mdevs made outside Exosuit (A100's has the slot UUID of the
    # recorded host's name, not of this one): not offered whole, no deployable.
    assert len(device_ids) == 2
    for address in (T4_B, A100):
        reason = json.loads(shown[address]["vendor_board_info"])["not_offered_reason"]
        assert reason.startswith("not offered whole for passthrough: it carries 1 mdev")
    t4_rp = inventory.rp_uuid(
        hostname,
        schemas.device_identity(
            next(d for d in snapshot["devices"] if d["pci_address"] == T4)["controlpath_id"]
        ),
        f"{hostname}_{T4}",
    )
    attributes = json.loads(by_rp[t4_rp]["attributes_list"])
    assert {"rc": "PGPU"} in attributes
    assert {"trait0": "OWNER_CYBORG"} in attributes
    assert {"trait1": "CUSTOM_NVIDIA_1EB8"} in attributes
    # Attach handles (not shown by the API) are stored once each.
    wait_for(
        lambda: acknowledged(agent, snapshot["hash"]), what="the report acknowledged in the cache"
    )
    assert_converged(db, hostname, host)
    assert host_row(db, hostname).snapshot_hash == snapshot["hash"]
    # `exosuit-agent discover` prints what the agent sent.
    printed = subprocess.run(
        [
            os.path.join(BIN, "exosuit-agent"),
            "discover",
            "--format",
            "json",
            "--config-file",
            str(agent.config),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(printed.stdout)["hash"] == snapshot["hash"]
    assert agent.stop() == 0
    assert "exosuit-agent stopped" in agent.log()


# -- b. removal grace, lost devices ----------------------------------------------------


def bind(url: str, hostname: str, rp_uuid: str) -> dict:
    """A Bound ARQ on the deployable ``rp_uuid``, through the API."""
    profile = f"{hostname}-t4"
    status, body = call(
        url,
        "POST",
        "/v2/device_profiles",
        [
            {
                "name": profile,
                "groups": [{"resources:PGPU": "1", "trait:CUSTOM_NVIDIA_1EB8": "required"}],
            }
        ],
    )
    assert status == 201, body
    status, body = call(url, "POST", "/v2/accelerator_requests", {"device_profile_name": profile})
    assert status == 201, body
    (arq,) = body["arqs"]
    instance = str(uuidlib.uuid4())
    status, body = call(
        url,
        "PATCH",
        "/v2/accelerator_requests",
        {
            arq["uuid"]: [
                {"op": "add", "path": "/hostname", "value": hostname},
                {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
                {"op": "add", "path": "/instance_uuid", "value": instance},
            ]
        },
    )
    assert status == 202, body
    status, arq = call(url, "GET", f"/v2/accelerator_requests/{arq['uuid']}")
    assert status == 200 and arq["state"] == "Bound", arq
    return arq


def rp_of(hostname: str, snapshot: dict, address: str) -> str:
    device = next(d for d in snapshot["devices"] if d["pci_address"] == address)
    return inventory.rp_uuid(
        hostname,
        schemas.device_identity(device["controlpath_id"]),
        device["deployables"][0]["name"],
    )


def test_a_removed_device_is_missing_for_the_grace_then_gone_unless_held(
    api, db, host, hostname, agents
):
    # The grace is long enough for a busy machine to see "missing" before it ends.
    grace, interval = 10, 1
    # T4_B without the mdev made outside Exosuit, so that it is offered whole.
    os.unlink(host / "sys" / "bus" / "mdev" / "devices" / FOREIGN_MDEV)
    snapshot = discover(host, hostname)
    agent = agents(hostname, api.url, host, removal_grace=grace, report_interval=interval)
    agent.start()
    before = wait_for(lambda: (d := devices(api.url, hostname)) and len(d) == 4 and d)
    arq = bind(api.url, hostname, rp_of(hostname, snapshot, T4_B))

    unplug(host, T4)  # free
    unplug(host, T4_B)  # its attach handle is held by the ARQ
    removed = time.monotonic()
    shown = wait_for(
        lambda: (
            (d := devices(api.url, hostname))
            and d[T4]["presence"] == d[T4_B]["presence"] == "missing"
            and d
        ),
        timeout=grace,
        what="both unplugged GPUs missing",
    )
    assert "removal grace" in shown[T4]["presence_reason"]
    assert shown[A100]["presence"] == "present"

    # After the grace: the free one is deleted, the held one is kept as lost.
    shown = wait_for(
        lambda: (d := devices(api.url, hostname)) and T4 not in d and d,
        timeout=grace + 120,
        what="the free GPU deleted after the grace",
    )
    elapsed = time.monotonic() - removed
    assert grace - interval - 0.5 <= elapsed, elapsed  # not before the grace
    shown = wait_for(
        lambda: (d := devices(api.url, hostname)) and d[T4_B]["presence"] == "lost" and d,
        what="the held GPU lost",
    )
    reason = shown[T4_B]["presence_reason"]
    assert arq["uuid"] in reason and arq["instance_uuid"] in reason, reason
    assert set(shown) == {T4_B, A100, A100_MIG}
    status, still = call(api.url, "GET", f"/v2/accelerator_requests/{arq['uuid']}")
    assert still["state"] == "Bound"
    time.sleep(1.5 * interval)  # further reports keep it
    assert devices(api.url, hostname)[T4_B]["presence"] == "lost"

    # Released: the lost device goes at once, and later reports do not bring it back.
    status, _ = call(api.url, "DELETE", f"/v2/accelerator_requests?arqs={arq['uuid']}")
    assert status == 204
    assert set(devices(api.url, hostname)) == {A100, A100_MIG}
    time.sleep(1.5 * interval)
    after = devices(api.url, hostname)
    assert set(after) == {A100, A100_MIG}
    assert {a: d["uuid"] for a, d in after.items()} == {a: before[a]["uuid"] for a in after}
    assert_converged(db, hostname, host)

    # A device plugged back is present again, with the same resource provider.
    replug(host, T4)
    wait_for(lambda: T4 in devices(api.url, hostname), what="the replugged GPU back")
    by_rp = {d["rp_uuid"] for d in deployables(api.url)}
    assert rp_of(hostname, snapshot, T4) in by_rp
    assert agent.stop() == 0


# -- c. the API stopped and restarted ---------------------------------------------------


def test_an_api_outage_costs_nothing(api, db, host, hostname, agents):
    with Relay(api.port) as relay:
        agent = agents(hostname, relay.url, host, max_backoff=1)
        agent.start()
        snapshot = discover(host, hostname)
        wait_for(lambda: acknowledged(agent, snapshot["hash"]), what="first report")
        rows = assert_converged(db, hostname, host)
        wait_for(lambda: relay.reports[-1:] == [("hash", 200, False)], what="an unchanged report")
        # Read after an unchanged report: the first one carries the desired-state
        # generation the agent observed, which the API records once.
        host_before = host_row(db, hostname)

        api.stop()
        try:
            outage, began = len(relay.reports), time.monotonic()
            wait_for(lambda: len(relay.reports) - outage >= 2, timeout=120, what="two retries")
            elapsed = time.monotonic() - began
            assert agent.running
            failed = relay.reports[outage:]
            # Retried with backoff, not in a hot loop: each wait is at least 0.5 s ([agent]
            # max_backoff = 1 s, jittered down to half), so a slow machine sees fewer tries,
            # never more than this.
            assert len(failed) <= 2 + elapsed / 0.5, (failed, elapsed)
            assert all(status is None for _, status, _ in failed)
            assert agent.log().count("retrying with exponential backoff") == 1
        finally:
            api.start()
        wait_for(lambda: "API reachable again" in agent.log(), what="reports resumed")
        assert agent.log().count("API reachable again") == 1
        # Unchanged host: only hashes after the outage; nothing written.
        after = [r for r in relay.reports[outage:] if r[1] is not None]
        assert after and all(r == ("hash", 200, False) for r in after), after
        assert stored(db, hostname) == rows
        assert host_row(db, hostname) == host_before

        # A new agent process resumes from the cache: its first report is a hash too.
        assert agent.stop() == 0
        restarted = len(relay.reports)
        agent.start()
        wait_for(lambda: len(relay.reports) > restarted, what="the new agent's report")
        assert relay.reports[restarted] == ("hash", 200, False)
        assert stored(db, hostname) == rows
        assert host_row(db, hostname) == host_before
        assert devices(api.url, hostname).keys() == {d["pci_address"] for d in snapshot["devices"]}
        assert agent.stop() == 0


# -- d. kill -9 in the middle of a report ----------------------------------------------


@pytest.mark.parametrize("at", ["request", "response"])
def test_kill_9_in_the_middle_of_a_report_loses_nothing(api, db, host, hostname, agents, at):
    """``request``: killed before the API had the report; ``response``: after the API
    applied it, before the agent heard (so its cache still has the previous one)."""
    with Relay(api.port) as relay:
        agent = agents(hostname, relay.url, host, report_interval=3600, removal_grace=0)
        agent.start()
        first = discover(host, hostname)
        wait_for(lambda: acknowledged(agent, first["hash"]), what="first report")
        uuids = {i: u for i, (u, _) in stored(db, hostname)["devices"].items()}

        relay.hold(at)
        set_numa_node(host, T4, 1)
        unplug(host, A100)
        second = discover(host, hostname)
        agent.signal(signal.SIGHUP)
        assert relay.holding.wait(10), agent.log()
        agent.kill()
        relay.release()
        state = read_cache(agent)
        assert state.acknowledged_hash == first["hash"]
        applied = second if at == "response" else first
        assert host_row(db, hostname).snapshot_hash == applied["hash"]
        assert not [n for n in os.listdir(agent.state_dir) if n != "agent-cache.json"]

        sent = len(relay.reports)
        agent.start()
        try:
            wait_for(
                lambda: acknowledged(agent, second["hash"]),
                timeout=30,
                what="the change acknowledged",
            )
        except AssertionError as error:
            raise AssertionError(
                f"{error}; reports {relay.reports}; agent log:\n{agent.log()}"
            ) from None
        # The new process sends the whole snapshot (its cache has the old hash); if the
        # API already applied it, nothing is applied twice.
        assert relay.reports[sent] == ("full", 200, at == "request")
        rows = assert_converged(db, hostname, host)
        assert host_row(db, hostname).snapshot_hash == second["hash"]
        assert {i: u for i, (u, _) in rows["devices"].items()} == {
            i: u for i, u in uuids.items() if i in rows["devices"]
        }
        shown = devices(api.url, hostname)
        assert shown[T4]["numa_node"] == 1
        assert A100 not in shown
        assert agent.stop() == 0


# -- a real kernel uevent wakes the agent ----------------------------------------------


def real_pci_uevent() -> Path:
    """A PCI function of this machine whose ``uevent`` the test may write."""
    found = sorted(Path("/sys/bus/pci/devices").glob("*/uevent"))
    require(bool(found), "this machine has no PCI device in /sys/bus/pci/devices")
    preferred = [p for p in found if p.parent.name == "0000:00:05.0"]
    return (preferred or found)[0]


def test_a_real_uevent_makes_a_change_visible_within_2_s(api, host, hostname, agents):
    uevent = real_pci_uevent()
    agent = agents(hostname, api.url, host, uevents=True, report_interval=3600)
    agent.start()
    wait_for(lambda: len(devices(api.url, hostname)) == 4, what="first report")
    log = agent.log()
    require("watching" in log, f"the agent cannot watch uevents here: {log[-500:]}")
    # report_interval is an hour: only a uevent (or SIGHUP) makes the agent look again.
    set_numa_node(host, T4, 1)
    try:
        uevent.write_text("change")
    except OSError as error:
        require(False, f"writing {uevent} is not permitted: {error}")
    # Well within the hour: the uevent made the agent look (bench/bootstorm.py times it).
    wait_for(
        lambda: devices(api.url, hostname)[T4]["numa_node"] == 1,
        timeout=120,
        interval=0.02,
        what="the change visible in the API",
    )
    assert agent.stop() == 0
