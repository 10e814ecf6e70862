"""The short write paths of issue 25, on three databases.

A device profile is created by its insert alone (the unique indexes say a name is
taken; the answer is the row as written, not read back) and deleted by one statement
unless an ARQ uses it. A bind of one ARQ starts and ends in one compare-and-set, whose
WHERE also looks again at the device once the handle is taken: when that look finds
the device changed, the bind fails with the reason and releases its handle, as the
separate look did (exosuit/db/arqs.py ``_ENDS``).
"""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from exosuit import exceptions
from exosuit.db import arqs, models
from exosuit.db import device_profiles as profiles
from tests.helpers.inventory import fpga, snapshot

HOST = "write-host"
GROUPS = [{"resources:FPGA": "1"}]


def test_profile_create_answers_what_is_stored(database):
    made = database.write(profiles.create, name="p-stored", groups=GROUPS, description="é ü")
    assert made == database.read(profiles.get, made["uuid"])
    chosen = str(uuid.uuid4())
    made = database.write(profiles.create, name="p-chosen", groups=GROUPS, uuid=chosen)
    assert made == database.read(profiles.get, chosen)


def test_profile_taken_name_or_uuid_is_named(database):
    first = database.write(profiles.create, name="p-taken", groups=GROUPS)
    with pytest.raises(exceptions.DeviceProfileExists, match="name"):
        database.write(profiles.create, name="p-taken", groups=GROUPS)
    with pytest.raises(exceptions.DeviceProfileExists, match=first["uuid"]):
        database.write(profiles.create, name="p-other", groups=GROUPS, uuid=first["uuid"])
    assert [p["name"] for p in database.read(profiles.list_profiles)] == ["p-taken"]


def test_profile_delete_refuses_a_used_or_missing_profile(database):
    profile = database.write(profiles.create, name="p-used", groups=GROUPS)
    (arq,) = database.write(
        arqs.create, profile_name="p-used", project_id=None, handles_per_unit={}
    )
    with pytest.raises(exceptions.DeviceProfileInUse, match="used by 1 "):
        database.write(profiles.delete_by_uuid, profile["uuid"])
    assert database.read(profiles.get, profile["uuid"])["name"] == "p-used"
    database.write(arqs.delete_by_uuids, [arq["uuid"]], arqs.Scope(None))
    database.write(profiles.delete_by_uuid, profile["uuid"])
    with pytest.raises(exceptions.DeviceProfileNotFound):
        database.write(profiles.delete_by_uuid, profile["uuid"])
    audit = database.read(
        lambda conn: (
            conn.execute(
                sa.select(models.audit_events.c.action).where(
                    models.audit_events.c.object_uuid == profile["uuid"]
                )
            )
            .scalars()
            .all()
        )
    )
    assert sorted(audit) == ["create", "delete"]


@pytest.fixture
def rp_uuid(api) -> str:
    r = api.put(f"/agent/v1/hosts/{HOST}/inventory", snapshot(HOST, [fpga("0000:0c:00.0")]))
    assert r.status_code == 200, r.text
    (deployable,) = api.get("/v2/deployables").json["deployables"]
    r = api.post("/v2/device_profiles", [{"name": "p-bind", "groups": GROUPS}])
    assert r.status_code == 201, r.text
    return deployable["rp_uuid"]


def _bind_one(database, rp_uuid: str) -> tuple[dict, arqs.BindResult]:
    (arq,) = database.write(
        arqs.create, profile_name="p-bind", project_id=None, handles_per_unit={}
    )
    binding = arqs.Binding(arq["uuid"], HOST, rp_uuid, str(uuid.uuid4()), project_id="p-new")
    (result,) = database.write(
        arqs.bind, [binding], arqs.Scope(None), skip_locked=database.supports_skip_locked
    )
    return database.read(arqs.get, arq["uuid"], arqs.Scope(None)), result


def _held(database) -> int:
    return database.read(
        lambda conn: conn.execute(
            sa.select(sa.func.count()).where(models.attach_handles.c.in_use.is_(True))
        ).scalar()
    )


def test_bind_of_one_arq_starts_and_ends_in_one_compare_and_set(database, rp_uuid):
    arq, result = _bind_one(database, rp_uuid)
    assert result.arq == {"uuid": arq["uuid"], "state": "Bound"} and result.error is None
    assert (arq["state"], arq["hostname"], arq["device_rp_uuid"]) == ("Bound", HOST, rp_uuid)
    assert arq["project_id"] == "p-new" and arq["reason"] is None
    assert arq["attach_handle_uuid"] is not None and _held(database) == 1
    database.write(arqs.unbind, [arq["uuid"]], arqs.Scope(None))
    assert _held(database) == 0
    again, result = _bind_one(database, rp_uuid)  # a handle free again, another ARQ
    assert result.arq["state"] == "Bound" and _held(database) == 1


def test_device_changed_after_the_handle_was_taken_fails_the_bind(database, rp_uuid, monkeypatch):
    """The device disabled between the take and the end (what a concurrent operator's
    change, committed before the take's lock was granted, looks like to the bind): the
    end's look again refuses, the bind fails saying why and releases its handle."""
    take = arqs._take_handle

    def take_then_disable(conn, *args, **kwargs):
        taken = take(conn, *args, **kwargs)
        conn.execute(sa.update(models.devices).values(status="disabled"))
        return taken

    monkeypatch.setattr(arqs, "_take_handle", take_then_disable)
    arq, result = _bind_one(database, rp_uuid)
    assert result.arq["state"] == "BindFailed" and "is disabled" in (result.error or "")
    assert arq["state"] == "BindFailed" and arq["reason"] == result.error
    assert arq["attach_handle_id"] is None and arq["hostname"] == HOST
    assert _held(database) == 0


# A profile deleted while an ARQ is made from it. SQLite has one writer at a time, so the
# two cannot overlap there; PostgreSQL and MariaDB let the second wait on the first's row
# lock and then meet the foreign key: each side answers with its domain error, never the
# database's (which was a 500).


def _lock_waits(database) -> int:
    if database.engine.dialect.name == "postgresql":
        query = "SELECT count(*) FROM pg_locks WHERE NOT granted"
    else:
        query = "SELECT count(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'"
    # A connection of its own: the pool's may all be taken by the two transactions.
    engine = sa.create_engine(database.engine.url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(query)).scalar_one())
    finally:
        engine.dispose()


def _run_blocked(database, first, second):
    """Run ``first`` in a transaction left open, then ``second`` (database.write) in a
    thread until it waits on a lock, then commit the first; the second's outcome."""
    import concurrent.futures
    import time

    if database.engine.dialect.name == "sqlite":
        pytest.skip("SQLite has one writer at a time: the two transactions cannot overlap")
    with database.engine.connect() as conn:
        transaction = conn.begin()
        first(conn)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(second)
            deadline = time.monotonic() + 60
            while _lock_waits(database) == 0 and not future.done():
                assert time.monotonic() < deadline, "the second transaction never waited"
                time.sleep(0.05)
            transaction.commit()
            return future.exception(timeout=120)


def test_a_profile_deleted_while_an_arq_is_made_from_it(database):
    profile = database.write(profiles.create, name="p-race-1", groups=GROUPS)
    error = _run_blocked(
        database,
        lambda conn: arqs.create(
            conn, profile_name="p-race-1", project_id=None, handles_per_unit={}
        ),
        lambda: database.write(profiles.delete_by_uuid, profile["uuid"]),
    )
    assert isinstance(error, exceptions.DeviceProfileInUse | exceptions.DeviceProfileInUseMeanwhile)
    assert database.read(profiles.get, profile["uuid"])["name"] == "p-race-1"


def test_an_arq_made_while_its_profile_is_deleted(database):
    profile = database.write(profiles.create, name="p-race-2", groups=GROUPS)
    error = _run_blocked(
        database,
        lambda conn: profiles.delete_by_uuid(conn, profile["uuid"]),
        lambda: database.write(
            arqs.create, profile_name="p-race-2", project_id=None, handles_per_unit={}
        ),
    )
    assert isinstance(error, exceptions.DeviceProfileNotFound), error
    assert (
        database.read(
            lambda conn: conn.execute(
                sa.select(sa.func.count()).select_from(models.accelerator_requests)
            ).scalar_one()
        )
        == 0
    )
