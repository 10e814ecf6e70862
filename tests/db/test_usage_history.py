"""The usage and allocation history (exosuit/db/usage_history.py) on SQLite, PostgreSQL and
MariaDB: a bucket is recorded once, a stale host leaves a gap, the recent buckets are
averaged into older ones, and however many samples go in, each device keeps at most
``Retention.max_rows()`` rows; the conductor's ``usage_history`` job does it on its
schedule."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import sqlalchemy as sa

from exosuit.conductor import kinds
from exosuit.conductor import usage_history as job
from exosuit.conductor.worker import Worker, schedule_periodic
from exosuit.db import inventory, models
from exosuit.db import usage_history as db
from tests.conftest import make_test_conf
from tests.helpers.inventory import fpga, snapshot

HOST = "history-host"
T0 = dt.datetime(2026, 11, 29, 12, 0, 0)
# Small buckets so that a test walks days of history in a few thousand steps.
SHAPE = db.Retention(resolution=60, recent=600, coarse_resolution=300, retention=3600)


def seed(database, *addresses: str, handles: int = 4) -> dict[str, str]:
    """HOST reports an FPGA at each address; PCI address → device uuid."""
    devices = [fpga(a, handles=handles) for a in addresses]
    database.write(inventory.apply_snapshot, HOST, snapshot(HOST, devices))
    dev = models.devices
    rows = database.read(lambda conn: conn.execute(sa.select(dev.c.pci_address, dev.c.uuid)).all())
    return dict(rows)


def report_usage(database, figures: dict[str, dict[str, float]], at: dt.datetime) -> None:
    """HOST's kept usage, as its last report left it: PCI address → figures, at ``at``."""
    dev, hosts = models.devices, models.hosts

    def write(conn):
        identity = dict(conn.execute(sa.select(dev.c.pci_address, dev.c.identity)).all())
        usage = {identity[address]: values for address, values in figures.items()}
        conn.execute(
            sa.update(hosts)
            .where(hosts.c.hostname == HOST)
            .values(usage=json.dumps(usage), usage_at=at)
        )

    database.write(write)


def rows(database, table=db.usage) -> list[dict]:
    return database.read(
        lambda conn: [dict(r._mapping) for r in conn.execute(sa.select(table).order_by(table.c.at))]
    )


def run(database, now: dt.datetime) -> int:
    """What one run of the job does at ``now``."""
    written = database.write(db.sample, SHAPE, stale_after=300, now=now)
    while database.write(db.roll_up, SHAPE, now=now):
        pass
    database.write(db.prune, SHAPE, now=now, gone_devices=bool(written))
    return written


def test_a_bucket_is_recorded_once_with_the_fresh_usage_and_the_allocation(database):
    uuids = seed(database, "0000:5e:00.0", "0000:5f:00.0")
    report_usage(
        database, {"0000:5e:00.0": {"utilization_percent": 40, "memory_used_bytes": 2**30}}, T0
    )
    written = database.write(db.sample, SHAPE, stale_after=300, now=T0 + dt.timedelta(seconds=5))
    assert written == 2  # one device's usage (the other reported none), one model
    again = database.write(db.sample, SHAPE, stale_after=300, now=T0 + dt.timedelta(seconds=50))
    assert again == 0  # the same bucket
    (usage,) = rows(database)
    assert usage["device_uuid"] == uuids["0000:5e:00.0"] and usage["at"] == T0
    assert json.loads(usage["figures"]) == {
        "utilization_percent": 40.0,
        "memory_used_bytes": 2.0**30,
    }
    history = database.read(db.device_history, uuids["0000:5e:00.0"], T0)
    assert history == {"utilization_percent": [(T0, 40.0)], "memory_used_bytes": [(T0, 2.0**30)]}
    assert database.read(db.device_history, uuids["0000:5f:00.0"], T0) == {}
    (model,) = database.read(db.allocation_history, T0)
    assert (model.type, model.vendor, model.model) == ("FPGA", "0xABCD", "Fake FPGA")
    assert model.points == [(T0, 0.0, 8.0)]


def test_held_handles_are_counted_held(database):
    seed(database, "0000:5e:00.0", handles=4)
    ah = models.attach_handles
    ids = database.read(lambda conn: list(conn.execute(sa.select(ah.c.id).limit(3)).scalars()))
    database.write(
        lambda conn: conn.execute(sa.update(ah).where(ah.c.id.in_(ids)).values(in_use=True))
    )
    run(database, T0)
    (model,) = database.read(db.allocation_history, T0)
    assert model.points == [(T0, 3.0, 1.0)]


def test_a_host_whose_usage_is_stale_leaves_a_gap(database):
    uuids = seed(database, "0000:5e:00.0")
    report_usage(database, {"0000:5e:00.0": {"utilization_percent": 10}}, T0)
    run(database, T0)
    run(database, T0 + dt.timedelta(seconds=60))
    # No report for ten minutes: its kept usage is older than stale_after.
    run(database, T0 + dt.timedelta(seconds=600))
    history = database.read(db.device_history, uuids["0000:5e:00.0"], T0)
    assert [at for at, _ in history["utilization_percent"]] == [
        T0,
        T0 + dt.timedelta(seconds=60),
    ]


def test_recent_buckets_are_averaged_into_older_ones(database):
    uuid = seed(database, "0000:5e:00.0")["0000:5e:00.0"]
    # Five minutes of samples (one coarse bucket): 0, 10, 20, 30, 40 percent; memory
    # only in the first two.
    for i in range(5):
        at = T0 + dt.timedelta(seconds=60 * i)
        figures = {"utilization_percent": 10.0 * i}
        if i < 2:
            figures["memory_used_bytes"] = 100.0 * (i + 1)
        report_usage(database, {"0000:5e:00.0": figures}, at)
        run(database, at)
    assert {r["tier"] for r in rows(database)} == {db.RECENT}
    # Once the bucket is older than `recent`, one older row holds the means.
    later = T0 + dt.timedelta(seconds=300 + SHAPE.recent)
    run(database, later)
    older = [r for r in rows(database) if r["tier"] == db.OLDER]
    assert [(r["at"], r["samples"]) for r in older] == [(T0, 5)]
    assert json.loads(older[0]["figures"]) == {
        "utilization_percent": 20.0,
        "memory_used_bytes": 150.0,
    }
    assert database.read(db.device_history, uuid, T0)["utilization_percent"] == [(T0, 20.0)]
    (model,) = database.read(db.allocation_history, T0)
    assert model.points[0] == (T0, 0.0, 4.0)


def test_the_history_stays_bounded_however_many_samples_go_in(database):
    uuids = seed(database, "0000:5e:00.0", "0000:5f:00.0")
    bound = SHAPE.max_rows()
    steps = 800  # every 60 s for 13 hours: 800 buckets, about 27 times the bound
    for i in range(steps):
        now = T0 + dt.timedelta(seconds=60 * i)
        report_usage(
            database,
            {a: {"utilization_percent": float(i % 100)} for a in ("0000:5e:00.0", "0000:5f:00.0")},
            now,
        )
        run(database, now)
        if i % 100 == 99:
            per_device = {u: 0 for u in uuids.values()}
            for r in rows(database):
                per_device[r["device_uuid"]] += 1
            assert max(per_device.values()) <= bound, (i, per_device, bound)
            assert len(rows(database, db.allocation)) <= bound
    end = T0 + dt.timedelta(seconds=60 * (steps - 1))
    kept = rows(database)
    assert len(kept) <= 2 * bound
    # Nothing older than the retention; the recent tier covers the last `recent` seconds.
    assert min(r["at"] for r in kept) >= end - dt.timedelta(seconds=SHAPE.retention)
    recent = sorted(
        r["at"]
        for r in kept
        if r["tier"] == db.RECENT and r["device_uuid"] == uuids["0000:5e:00.0"]
    )
    assert recent[-1] == db.bucket(end, SHAPE.resolution)
    assert recent[0] <= end - dt.timedelta(seconds=SHAPE.recent)
    older = [r for r in kept if r["tier"] == db.OLDER]
    assert older and all(r["samples"] == 5 for r in older)  # 5 buckets of 60 s in 300 s


def test_a_gone_devices_rows_are_deleted(database):
    uuids = seed(database, "0000:5e:00.0", "0000:5f:00.0")
    report_usage(database, {a: {"utilization_percent": 1.0} for a in uuids}, T0)
    run(database, T0)
    # The second device is gone from its host.
    database.write(
        inventory.apply_snapshot, HOST, snapshot(HOST, [fpga("0000:5e:00.0", handles=4)])
    )
    report_usage(
        database, {"0000:5e:00.0": {"utilization_percent": 2.0}}, T0 + dt.timedelta(seconds=60)
    )
    run(database, T0 + dt.timedelta(seconds=60))
    assert {r["device_uuid"] for r in rows(database)} == {uuids["0000:5e:00.0"]}


def test_the_job_is_a_periodic_kind_of_every_conductor():
    conf = make_test_conf()
    registry = kinds.load(conf)
    assert registry.handlers[db.JOB] is job.record
    interval = registry.periodic[db.JOB]
    assert interval(conf) == 150
    assert interval(make_test_conf(**{"dashboard.history_resolution": 0})) == 0
    assert job.retention(conf) == db.Retention(300, 21600, 3600, 172800)
    assert job.retention(conf).max_rows() == 72 + 13 + 48 + 1


@pytest.mark.parametrize("resolution", [60])
def test_a_real_conductor_records_the_history(database, resolution):
    uuids = seed(database, "0000:5e:00.0")
    report_usage(database, {"0000:5e:00.0": {"utilization_percent": 55.0}}, models.utcnow())
    conf = make_test_conf(**{"dashboard.history_resolution": resolution})
    registry = kinds.load(conf)
    schedule_periodic(database, conf, registry.periodic, registry.handlers)
    worker = Worker(conf, database)
    outcomes = []
    while (outcome := worker.run_once()) is not None:
        outcomes.append(outcome)
    assert db.JOB in [o.kind for o in outcomes], outcomes
    history = database.read(db.device_history, uuids["0000:5e:00.0"], T0)
    assert [value for _, value in history["utilization_percent"]] == [55.0]
