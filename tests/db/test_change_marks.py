"""Every write transaction that changes what the API caches says so, on SQLite,
PostgreSQL and MariaDB (exosuit/db/changes.py: ``mark``; the watch that checks it is
tests/helpers/change_marks.py, and lives only in the tests).

The write paths of the stories (tests/gabbits/, which run under the same watch) one
after another through the API, as operators and agents make them: a new host's report,
an unchanged one, changed ones (a trait more, a device gone, a device unhealthy), an
operator's attributes, binds and releases, drain, health, services and drivers reported,
a partition layout, activation, a discovery, a driver installed, a desired-state bump,
the health sweep and a lost device deleted at its release. After each: no transaction
changed a counter's data without bumping it, none bumped one whose data it left alone,
and the step changed what it is expected to change (so that the watch saw the writes it
is there for)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from exosuit.db import bulk, changes, cyborg_import, desired_state, health, models
from exosuit.db.api import Database
from tests.api.gabbi_fixtures import load_snapshot
from tests.conftest import ApiClient
from tests.helpers import change_marks

D, H = changes.DEPLOYABLES, changes.HOST_REPORTS
dep = models.deployables
attr = models.attributes
HOST = "host1"  # the host of the stories' snapshots
V = "2.9"


@pytest.fixture
def watch(database):
    """The database's write transactions, watched from now on (tests/helpers/change_marks)."""
    seen = change_marks.watch(database.engine)
    yield seen
    seen.close()  # what it found stays here, not in another module's check


@dataclasses.dataclass
class Story:
    api: ApiClient
    database: Database

    def call(self, method: str, path: str, body: object = None, status: int = 200) -> dict:
        response = self.api.request(method, path, body, version=V)
        assert response.status_code == status, f"{method} {path}: {response.text}"
        return response.json if response.body else {}

    def report(self, name: str) -> dict:
        return self.call("PUT", f"/agent/v1/hosts/{HOST}/inventory", load_snapshot(name))

    def device(self, kind: str) -> str:
        (device,) = self.call("GET", f"/v2/devices?type={kind}")["devices"]
        return str(device["uuid"])


def _first_report(story: Story) -> None:
    story.report("host1.json")


def _unchanged_report(story: Story) -> None:
    quiet = {"schema_version": 1, "hash": load_snapshot("host1.json")["hash"], "hostname": HOST}
    assert story.call("PUT", f"/agent/v1/hosts/{HOST}/inventory", quiet)["changed"] is False


def _a_trait_more(story: Story) -> None:
    story.report("host1-more-traits.json")


def _a_device_gone_and_back(story: Story) -> None:
    story.report("host1-fpga-only.json")
    story.report("host1.json")


def _an_operators_attribute(story: Story) -> None:
    deployable_id = story.database.read(
        lambda conn: conn.execute(sa.select(sa.func.min(dep.c.id))).scalar_one()
    )
    body = {"deployable_id": deployable_id, "key": "owner", "value": "team-a"}
    created = story.call("POST", "/v2/attributes", body, status=201)
    story.call("DELETE", f"/v2/attributes/{created['uuid']}", status=204)


def _profiles(story: Story) -> None:
    for name, resource in (("one-gpu", "PGPU"), ("one-fpga", "FPGA")):
        body = [{"name": name, "groups": [{f"resources:{resource}": "1"}]}]
        story.call("POST", "/v2/device_profiles", body, status=201)


def _a_claim_and_its_release(story: Story) -> None:
    body = {"device_profile_name": "one-fpga", "consumer": "c1"}
    claim = story.call("POST", "/v2/claims", body, status=201)
    story.call("DELETE", f"/v2/claims/{claim['uuid']}", status=204)


def _drain_and_undrain(story: Story) -> None:
    gpu = story.device("GPU")
    story.call("POST", f"/v2/devices/{gpu}/drain")
    story.call("POST", f"/v2/devices/{gpu}/undrain")
    story.call("POST", f"/v2/hosts/{HOST}/drain")
    story.call("POST", f"/v2/hosts/{HOST}/undrain")


def _health_by_hand(story: Story) -> None:
    fpga = story.device("FPGA")
    story.call("POST", f"/v2/devices/{fpga}/health", {"hold": True, "reason": "burn-in"})
    story.call("POST", f"/v2/devices/{fpga}/health", {"clear": True})


def _health_reported(story: Story) -> None:
    story.report("host1-gpu-unhealthy.json")
    story.report("host1-gpu-warning.json")


def _health_sweep(story: Story) -> None:
    story.database.write(health.recover, 0.0)


def _services_reported(story: Story) -> None:
    # The GPU's vGPU types (a layout names one of them) and the host's drivers.
    story.report("host1-services.json")


def _partition_layout(story: Story) -> None:
    gpu = story.device("GPU")
    layout = {"mdev": {"nvidia-222": 4}, "on_demand": True}
    generation = story.call("PUT", f"/v2/devices/{gpu}/partitions", layout, status=202)[
        "generation"
    ]
    outcome = {"generation": generation, "state": "applied"}
    story.call("PUT", f"/agent/v1/hosts/{HOST}/partitions/{gpu}", outcome)


def _activation(story: Story) -> None:
    story.call("POST", "/v2/device_activations", {"state": "inactive", "type": "FPGA"}, 202)
    story.call("POST", "/v2/device_activations", {"state": "ready", "type": "FPGA"}, 202)


def _discovery(story: Story) -> None:
    story.call("POST", "/v2/discoveries", {}, status=202)


def _driver_installed(story: Story) -> None:
    body = {"hostnames": [HOST], "config": {"poll_interval": "5"}}
    story.call("POST", "/v2/drivers/nvme/install", body, status=202)


def _desired_state_bump(story: Story) -> None:
    story.database.write(desired_state.bump, None)
    story.database.write(desired_state.bump, [HOST])


def _a_lost_device_released(story: Story) -> None:
    body = {"device_profile_name": "one-gpu", "consumer": "c2"}
    claim = story.call("POST", "/v2/claims", body, status=201)
    story.report("host1-fpga-only.json")  # the GPU is held: kept, lost
    story.call("DELETE", f"/v2/claims/{claim['uuid']}", status=204)  # deleted now


# (what happens, the counters it changes)
STEPS: list[tuple[str, Callable[[Story], None], set[str]]] = [
    ("a new host's first report", _first_report, {D, H}),
    ("an unchanged report", _unchanged_report, set()),
    ("a report with a trait more", _a_trait_more, {D, H}),
    ("a device gone from a report, and back", _a_device_gone_and_back, {D, H}),
    ("an operator's attribute added and deleted", _an_operators_attribute, {D}),
    ("device profiles", _profiles, set()),
    ("a claim bound and released", _a_claim_and_its_release, set()),
    ("a device and the host drained and undrained", _drain_and_undrain, set()),
    ("a device held back by hand and cleared", _health_by_hand, set()),
    ("a device reported unhealthy, then in warning", _health_reported, {H}),
    ("the health sweep", _health_sweep, set()),
    ("a report with services and drivers", _services_reported, {H}),
    ("a partition layout set and applied", _partition_layout, {H}),
    ("devices deactivated and made ready", _activation, {H}),
    ("a discovery", _discovery, {H}),
    ("a driver installed", _driver_installed, {H}),
    ("the desired state bumped", _desired_state_bump, {H}),
    ("a lost device deleted at its release", _a_lost_device_released, {D, H}),
]


def test_every_write_of_the_stories_marks_what_it_changed(api, database, watch):
    story = Story(api, database)
    seen: dict[str, set[str]] = {}
    for name, step, _ in STEPS:
        watch.clear()
        step(story)
        assert not watch.missed, f"{name}: a mark forgotten\n" + "\n".join(map(str, watch.missed))
        assert not watch.unneeded, f"{name}: a mark without a change\n" + "\n".join(
            map(str, watch.unneeded)
        )
        seen[name] = set().union(*(t.needed for t in watch.committed))
    assert seen == {name: expected for name, _, expected in STEPS}


def _cyborg_rows() -> dict[str, list[dict]]:
    """A Cyborg database's rows: one FPGA with one deployable, an attribute, a handle."""
    cpid = '{"domain": "0000", "bus": "0c", "device": "00", "function": "0"}'
    return {
        "devices": [
            {
                "id": 1,
                "uuid": "0b7a3f52-9d3e-4a4e-8c55-7d2f6b3c8e01",
                "type": "FPGA",
                "vendor": "0xABCD",
                "model": "Fake FPGA",
                "hostname": "cyborg-host",
            }
        ],
        "controlpath_ids": [
            {
                "id": 1,
                "uuid": "0b7a3f52-9d3e-4a4e-8c55-7d2f6b3c8e02",
                "device_id": 1,
                "cpid_type": "PCI",
                "cpid_info": cpid,
            }
        ],
        "deployables": [
            {
                "id": 1,
                "uuid": "0b7a3f52-9d3e-4a4e-8c55-7d2f6b3c8e03",
                "name": "cyborg-host_fake",
                "num_accelerators": 1,
                "device_id": 1,
                "rp_uuid": "0b7a3f52-9d3e-4a4e-8c55-7d2f6b3c8e04",
                "driver_name": "fake",
            }
        ],
        "attributes": [
            {
                "id": 1,
                "uuid": "0b7a3f52-9d3e-4a4e-8c55-7d2f6b3c8e05",
                "deployable_id": 1,
                "key": "rc",
                "value": "FPGA",
            }
        ],
        "attach_handles": [
            {
                "id": 1,
                "uuid": "0b7a3f52-9d3e-4a4e-8c55-7d2f6b3c8e06",
                "deployable_id": 1,
                "cpid_id": 1,
                "in_use": False,
                "attach_type": "PCI",
                "attach_info": cpid,
            }
        ],
    }


def test_an_import_from_cyborg_marks_what_it_wrote(database, watch):
    """exosuit-manage's import of a Cyborg database (exosuit/db/cyborg_import.py), in
    process: its deployables, attributes and hosts are marked."""
    source = cyborg_import.Source("cyborg", _cyborg_rows())
    report = database.write(cyborg_import.import_into, source, apply=True, merge=False)
    assert report.new["deployables"] == report.new["attributes"] == 1
    assert not watch.missed and not watch.unneeded
    assert set().union(*(t.needed for t in watch.committed)) == {D, H}


def _unmarked_update(conn) -> None:
    conn.execute(sa.update(dep).values(name="renamed"))


def _unmarked_raw_sql(conn) -> None:
    conn.exec_driver_sql("UPDATE hosts SET snapshot_hash = NULL")


def _unmarked_bulk_insert(conn) -> None:
    deployable_id = conn.execute(sa.select(sa.func.min(dep.c.id))).scalar_one()
    row = {"uuid": "6b3e1c3e-2f7a-4a55-9d8e-0c7a1b2c3d4e", "deployable_id": deployable_id}
    bulk.insert_rows(conn, attr, [{**row, "key": "k", "value": "v", "source": "api"}])


def _unmarked_device_delete(conn) -> None:
    conn.execute(sa.delete(models.devices))


@pytest.mark.parametrize(
    ("write", "counter"),
    [
        (_unmarked_update, D),
        (_unmarked_raw_sql, H),
        (_unmarked_bulk_insert, D),
        (_unmarked_device_delete, D),
    ],
    ids=["sqlalchemy update", "raw sql", "bulk insert", "device delete"],
)
def test_the_watch_catches_a_forgotten_mark(api, database, watch, write, counter):
    """The watch itself: a write that changes a counter's data without a mark is
    reported (and the version, unmarked, does not move: what a cache would miss)."""
    Story(api, database).report("host1.json")
    watch.clear()
    before = database.read(changes.version, counter)
    database.write(write)
    assert [t.needed for t in watch.missed] == [{counter}]
    assert database.read(changes.version, counter) == before


def test_the_watch_leaves_out_what_the_caches_do_not_keep(api, database, watch):
    """Writes of a host's report time or a device's status change neither counter."""
    Story(api, database).report("host1.json")
    watch.clear()

    def _write(conn) -> None:
        conn.execute(sa.update(models.hosts).values(last_report_at=None, observed_generation=3))
        conn.execute(sa.update(models.devices).values(status="maintaining"))

    database.write(_write)
    assert watch.committed == []
