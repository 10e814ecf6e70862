"""The unpaged deployable list answered from the API's response cache: never older than
the database, on SQLite, PostgreSQL and MariaDB (exosuit/db/changes.py,
exosuit/api/response_cache.py)."""

from __future__ import annotations

import contextlib
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from exosuit.api.deploy import loadapp
from exosuit.db import changes, deployables, inventory, models
from exosuit.db.api import Database
from tests.conftest import ApiClient
from tests.helpers.inventory import fpga, snapshot

HOST = "cache-host"
OTHER = "cache-other"
dep = models.deployables


def report(database, addresses, hostname: str = HOST) -> None:
    devices = [fpga(address, handles=2) for address in addresses]
    database.write(inventory.apply_snapshot, hostname, snapshot(hostname, devices))


def listed(api: ApiClient) -> bytes:
    response = api.get("/v2/deployables")
    assert response.status_code == 200, response.text
    return response.body


@contextlib.contextmanager
def statements(engine):
    """The SQL statements run on ``engine`` meanwhile."""
    seen: list[str] = []

    def _record(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", _record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", _record)


def fresh(conf, database) -> bytes:
    """The list as an app that never answered it reads it from the database."""
    return listed(ApiClient(loadapp(conf, database)))


def test_a_list_answered_again_is_the_same_body_for_one_small_query(api, conf, database):
    report(database, ["0000:10:00.0", "0000:11:00.0"])
    first = listed(api)
    engine = database._read_engine
    with statements(engine) as seen:
        again = listed(api)
    assert again == first == fresh(conf, database)
    queries = [s for s in seen if s.lstrip().upper().startswith("SELECT")]
    assert len(queries) == 1 and "metric_counters" in queries[0]


def _new_device(api, database):
    report(database, ["0000:10:00.0", "0000:11:00.0", "0000:12:00.0"])


def _device_gone(api, database):
    report(database, ["0000:10:00.0"])


def _attribute_added(api, database):
    deployable_id = database.read(
        lambda conn: conn.execute(sa.select(sa.func.min(dep.c.id))).scalar_one()
    )
    body = {"deployable_id": deployable_id, "key": "owner", "value": "team-a"}
    assert api.post("/v2/attributes", body).status_code == 201


def _attribute_deleted(api, database):
    attributes = api.get("/v2/attributes").json["attributes"]
    assert api.delete(f"/v2/attributes/{attributes[0]['uuid']}").status_code == 204


# A write outside Exosuit's write functions says what it changed, as they do
# (exosuit/db/changes.py: ``mark``).
def _renamed_in_sqlalchemy(api, database):
    def _write(conn):
        conn.execute(sa.update(dep).values(bitstream_id=str(uuid.uuid4())))
        changes.mark(conn, changes.DEPLOYABLES)

    database.write(_write)


def _renamed_in_raw_sql(api, database):
    def _write(conn):
        conn.exec_driver_sql("UPDATE deployables SET name = 'renamed'")
        changes.mark(conn, changes.DEPLOYABLES)

    database.write(_write)


def _other_host_reports(api, database):
    report(database, ["0000:20:00.0"], hostname=OTHER)


CHANGES = {
    "a new device reported": _new_device,
    "a device no longer reported": _device_gone,
    "an attribute added": _attribute_added,
    "an attribute deleted": _attribute_deleted,
    "a column written with SQLAlchemy": _renamed_in_sqlalchemy,
    "a column written in raw SQL": _renamed_in_raw_sql,
    "another host's first report": _other_host_reports,
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_every_change_shows_in_the_next_list(api, conf, database, change):
    report(database, ["0000:10:00.0", "0000:11:00.0"])
    before = listed(api)
    assert listed(api) == before  # kept
    CHANGES[change](api, database)
    after = listed(api)
    assert after != before
    assert after == fresh(conf, database)


def test_a_change_made_by_another_process_shows_at_once(conf, database):
    """Two API processes: each has its own cache and its own engine."""
    report(database, ["0000:10:00.0"])
    other_db = Database(str(database.url.render_as_string(hide_password=False)))
    try:
        here, there = ApiClient(loadapp(conf, database)), ApiClient(loadapp(conf, other_db))
        before = listed(here)
        assert listed(there) == before
        report(other_db, ["0000:10:00.0", "0000:11:00.0"])
        assert listed(here) != before
        assert listed(here) == listed(there) == fresh(conf, database)
    finally:
        other_db.dispose()


def test_a_change_committed_between_version_and_list_is_read_again(database):
    """The version is read before the list: a change that commits between the two reads
    leaves the version older than the list, so the next call reads the list again."""
    report(database, ["0000:10:00.0"])
    engine = database._read_engine
    done: list[bool] = []

    def _commit_a_change(conn, cursor, statement, parameters, context, executemany):
        # After the read's first query, whichever it is.
        if statement.lstrip().upper().startswith("SELECT") and not done:
            done.append(True)
            report(database, ["0000:10:00.0", "0000:11:00.0"])

    known = database.read(changes.version)
    event.listen(engine, "after_cursor_execute", _commit_a_change)
    try:
        version, rows = database.read(deployables.list_all_unless, None)
    finally:
        event.remove(engine, "after_cursor_execute", _commit_a_change)
    assert done and version == known  # read before the change committed
    assert rows is not None
    again, rows_again = database.read(deployables.list_all_unless, version)
    assert again > version
    assert rows_again is not None and len(rows_again) == 2


def test_binds_leave_the_version_alone(api, database):
    """The ARQ cycle does not write deployables: the list stays cached through binds."""
    report(database, ["0000:10:00.0"])
    assert (
        api.post(
            "/v2/device_profiles", [{"name": "p", "groups": [{"resources:FPGA": "1"}]}]
        ).status_code
        == 201
    )
    version = database.read(changes.version)
    (arq,) = api.post("/v2/accelerator_requests", {"device_profile_name": "p"}).json["arqs"]
    rp = api.get("/v2/deployables").json["deployables"][0]["rp_uuid"]
    instance = str(uuid.uuid4())
    ops = [
        {"op": "add", "path": "/hostname", "value": HOST},
        {"op": "add", "path": "/device_rp_uuid", "value": rp},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]
    assert api.patch("/v2/accelerator_requests", {arq["uuid"]: ops}).status_code == 202
    assert api.delete(f"/v2/accelerator_requests?instance={instance}").status_code == 204
    assert database.read(changes.version) == version


def _bind(api, hostname: str, rp: str) -> str:
    """An ARQ of profile ``p`` bound to the deployable of provider ``rp``: its instance."""
    (arq,) = api.post("/v2/accelerator_requests", {"device_profile_name": "p"}).json["arqs"]
    instance = str(uuid.uuid4())
    ops = [
        {"op": "add", "path": "/hostname", "value": hostname},
        {"op": "add", "path": "/device_rp_uuid", "value": rp},
        {"op": "add", "path": "/instance_uuid", "value": instance},
    ]
    assert api.patch("/v2/accelerator_requests", {arq["uuid"]: ops}).status_code == 202
    return instance


def test_a_lost_device_deleted_at_its_release_shows_in_the_next_list(api, conf, database):
    """A device gone from its host's report while held is kept (lost) until its holder
    releases it; the release deletes it (exosuit/db/arqs.py), not a report."""
    report(database, ["0000:10:00.0", "0000:11:00.0"])
    profile = [{"name": "p", "groups": [{"resources:FPGA": "1"}]}]
    assert api.post("/v2/device_profiles", profile).status_code == 201
    (held,) = [
        d for d in api.get("/v2/deployables").json["deployables"] if "0000:11:00.0" in d["name"]
    ]
    instance = _bind(api, HOST, held["rp_uuid"])
    report(database, ["0000:10:00.0"])  # the held device stays, lost
    before = listed(api)
    assert before == fresh(conf, database)
    assert held["uuid"] in before.decode()
    assert api.delete(f"/v2/accelerator_requests?instance={instance}").status_code == 204
    after = listed(api)
    assert held["uuid"] not in after.decode()
    assert after == fresh(conf, database)


def test_a_failed_write_does_not_count(database):
    report(database, ["0000:10:00.0"])
    version = database.read(changes.version)

    def _fails(conn):
        conn.execute(sa.update(dep).values(name="never"))
        changes.mark(conn, changes.DEPLOYABLES)
        raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        database.write(_fails)
    database.write(lambda conn: conn.execute(sa.select(dep.c.id)).all())  # same connection
    assert database.read(changes.version) == version


def test_the_version_is_on_metrics(api, database):
    report(database, ["0000:10:00.0"])
    report(database, ["0000:10:00.0", "0000:11:00.0"])
    text = api.get("/metrics").text
    series = [line for line in text.splitlines() if line.startswith(changes.DEPLOYABLES)]
    assert series and all('slot="' in line for line in series)
    assert sum(float(line.rsplit(" ", 1)[1]) for line in series) == database.read(changes.version)
