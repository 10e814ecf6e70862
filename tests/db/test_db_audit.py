"""The audit trail's database layer (exosuit/db/audit.py) on SQLite, PostgreSQL and
MariaDB: a record is part of its change's transaction (a change rolled back leaves
none), who acts comes from the context, the marks for the bus and the coalesced publish
job, reading with filters and pages, and the retention sweep (exosuit/conductor/audit.py
through the real worker), which never deletes a record still to be published.
"""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from exosuit.conductor import kinds
from exosuit.conductor.worker import Services, Settings, Worker
from exosuit.db import audit, device_profiles, jobs, models
from exosuit.db.api import Database
from exosuit.db.pagination import Page
from tests.conftest import make_test_conf

events = models.audit_events
GROUPS = [{"resources:FPGA": "1"}]


class Boom(Exception):
    pass


def all_events(db: Database) -> list[dict]:
    return db.read(lambda conn: audit.page_events(conn, filters={}))


def publish_jobs(db: Database) -> list:
    return db.read(
        lambda conn: conn.execute(
            sa.select(models.jobs.c.id).where(models.jobs.c.kind == audit.PUBLISH)
        ).all()
    )


def test_a_change_and_its_record_commit_together(database):
    with audit.acting(audit.Actor("user:u1", "u1", "p1", "req-1")):
        database.write(device_profiles.create, name="together", groups=GROUPS)
    (event,) = all_events(database)
    assert event["action"] == "create" and event["object_type"] == "device_profile"
    assert (event["actor"], event["user_id"], event["project_id"]) == ("user:u1", "u1", "p1")
    assert event["request_id"] == "req-1"
    assert event["before"] is None and event["after"]["name"] == "together"
    assert event["notify_pending"] is False  # no bus configured
    assert publish_jobs(database) == []


def test_a_change_rolled_back_leaves_no_record(database):
    def create_then_fail(conn):
        device_profiles.create(conn, name="rolled-back", groups=GROUPS)
        assert conn.execute(sa.select(sa.func.count()).select_from(events)).scalar() == 1
        raise Boom

    with pytest.raises(Boom):
        database.write(create_then_fail)
    assert all_events(database) == []
    assert database.read(device_profiles.list_profiles) == []


def test_outside_a_request_or_job_the_actor_is_system(database):
    database.write(device_profiles.create, name="by-system", groups=GROUPS)
    (event,) = all_events(database)
    assert event["actor"] == "system" and event["user_id"] is None


def test_with_notifications_records_are_marked_and_one_publish_job_queued(database):
    noisy = Database(database.url.render_as_string(hide_password=False), notifications=True)
    try:
        for name in ("n1", "n2", "n3"):
            noisy.write(device_profiles.create, name=name, groups=GROUPS)
        assert len(noisy.read(audit.pending)) == 3
        assert len(publish_jobs(noisy)) == 1  # coalesced
        with pytest.raises(Boom):
            noisy.write(_create_and_fail)
        assert len(noisy.read(audit.pending)) == 3
    finally:
        noisy.dispose()


def _create_and_fail(conn):
    device_profiles.create(conn, name="never", groups=GROUPS)
    raise Boom


def _record(conn, n: int, **kw) -> None:
    audit.record(conn, "update", kw.pop("object_type", "device"), f"uuid-{n}", **kw)


def test_reading_filters_and_pages_newest_first(database):
    with audit.acting(audit.Actor("user:a", "a", "pa")):
        database.write(lambda conn: [_record(conn, n, host="h1") for n in range(5)])
    with audit.acting(audit.Actor("host:h2")):
        database.write(lambda conn: [_record(conn, n, object_type="deployable") for n in range(3)])
    everything = all_events(database)
    ids = [e["id"] for e in everything]
    assert len(ids) == 8
    read = database.read
    assert len(read(lambda c: audit.page_events(c, filters={"host": "h1"}))) == 5
    assert len(read(lambda c: audit.page_events(c, filters={"actor": "host:h2"}))) == 3
    assert len(read(lambda c: audit.page_events(c, filters={"object_type": "deployable"}))) == 3
    assert read(
        lambda c: audit.page_events(c, filters={"project_id": "pa", "object_uuid": "uuid-2"})
    )
    page = Page(limit=3, sort_key="id", sort_dir="desc", marker=None)
    first = read(lambda c: audit.page_events(c, filters={}, page=page))
    assert [e["id"] for e in first] == sorted(ids, reverse=True)[:4]  # one more: more remain
    page = Page(limit=3, sort_key="id", sort_dir="desc", marker=str(first[2]["id"]))
    second = read(lambda c: audit.page_events(c, filters={}, page=page))
    assert [e["id"] for e in second] == sorted(ids, reverse=True)[3:7]
    later = models.utcnow() + dt.timedelta(seconds=60)
    assert read(lambda c: audit.page_events(c, filters={}, since=later)) == []
    assert len(read(lambda c: audit.page_events(c, filters={}, until=later))) == 8


def _age(db: Database, ids: list[int], seconds: float) -> None:
    when = models.utcnow() - dt.timedelta(seconds=seconds)
    db.write(
        lambda conn: conn.execute(
            sa.update(events).where(events.c.id.in_(ids)).values(created_at=when)
        )
    )


def test_the_sweep_purges_past_retention_but_never_a_pending_record(database):
    database.write(lambda conn: [_record(conn, n) for n in range(4)])
    ids = [e["id"] for e in sorted(all_events(database), key=lambda e: e["id"])]
    old, old_pending, fresh = ids[:2], ids[2], ids[3]
    _age(database, [*old, old_pending], 7200)
    database.write(
        lambda conn: conn.execute(
            sa.update(events).where(events.c.id == old_pending).values(notify_pending=True)
        )
    )
    conf = make_test_conf(**{"audit.retention": 3600})
    registry = kinds.load(conf)
    worker = Worker(
        conf,
        database,
        settings=Settings(poll_interval=0.05),
        handlers=registry.handlers,
        services=Services(conf, registry.services),
    )
    database.write(jobs.enqueue, audit.SWEEP, {})
    outcome = worker.run_once()
    assert outcome is not None and outcome.kind == audit.SWEEP and outcome.state == jobs.SUCCEEDED
    assert sorted(e["id"] for e in all_events(database)) == [old_pending, fresh]
    # The pending one is still to be sent: the sweep queued its publish again.
    assert len(publish_jobs(database)) == 1


def test_retention_zero_keeps_everything(database):
    database.write(lambda conn: _record(conn, 1))
    _age(database, [e["id"] for e in all_events(database)], 10**8)
    assert database.write(audit.purge, 3600, limit=10) == 1
    database.write(lambda conn: _record(conn, 2))
    _age(database, [e["id"] for e in all_events(database)], 10**8)
    conf = make_test_conf(**{"audit.retention": 0})
    registry = kinds.load(conf)
    worker = Worker(conf, database, handlers=registry.handlers, services=Services(conf, {}))
    database.write(jobs.enqueue, audit.SWEEP, {})
    outcome = worker.run_once()
    assert outcome is not None and outcome.state == jobs.SUCCEEDED
    assert len(all_events(database)) == 1
