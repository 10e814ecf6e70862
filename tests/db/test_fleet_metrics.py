"""/metrics on a seeded fleet, in-process on SQLite, PostgreSQL and MariaDB: every device
with its states, attach handles and holders (a VM's ARQ, a standalone claim), its live
figures; each host's report age; the job queue; Placement's sync lag."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from exosuit.db import jobs as jobs_db
from exosuit.db import models
from exosuit.db import placement as placement_db
from tests.helpers.metrics import (
    DEVICE_LABELS,
    FPGA_A,
    FPGA_B,
    GPU_A,
    HOST,
    OTHER,
    scrape,
    seed,
)


@pytest.fixture
def fleet(database, tmp_path):
    return seed(database, tmp_path)


def _labels(device: dict) -> dict[str, str]:
    return {
        "hostname": device["hostname"],
        "device_uuid": device["uuid"],
        "type": device["type"],
        "vendor": device["vendor"],
        "model": device["model"],
        "pci_address": device["pci_address"],
    }


def test_every_device_is_there_with_its_states(fleet):
    found = scrape(fleet.world.admin)
    assert found.types["exosuit_device_info"] == "gauge"
    info = found.of("exosuit_device_info")
    assert len(info) == 3
    for address, device in fleet.devices.items():
        (sample,) = found.of("exosuit_device_info", pci_address=address)
        assert sample.value == 1.0
        assert sample.labels == {
            **_labels(device),
            "driver": device["driver_name"],
            "status": "enabled",
            "activation": "ready",
            "presence": "present",
            "health": "ok",
            "health_offered": "true",
        }
    gpu = fleet.devices[GPU_A]
    assert found.of("exosuit_device_info", device_uuid=gpu["uuid"])[0].labels["type"] == "GPU"


def test_attach_handles_are_counted_free_and_in_use_per_device(fleet):
    found = scrape(fleet.world.admin)
    expected = {FPGA_A: (1, 1), GPU_A: (0, 1), FPGA_B: (4, 0)}  # (free, in use)
    for address, (free, in_use) in expected.items():
        labels = _labels(fleet.devices[address])
        assert found.value("exosuit_device_attach_handles", state="free", **labels) == free
        assert found.value("exosuit_device_attach_handles", state="in_use", **labels) == in_use
    assert len(found.of("exosuit_device_attach_handles")) == 6


def test_holders_name_the_arq_and_the_instance_or_the_claim(fleet):
    found = scrape(fleet.world.admin)
    holders = found.of("exosuit_device_holder")
    assert len(holders) == 2
    (vm,) = found.of("exosuit_device_holder", pci_address=GPU_A)
    assert vm.labels == {
        **_labels(fleet.devices[GPU_A]),
        "arq_uuid": fleet.arq_uuid,
        "instance_uuid": fleet.instance,
        "claim_uuid": "",
        "project_id": fleet.world.nova.headers["X-Project-Id"],
    }
    (claimed,) = found.of("exosuit_device_holder", pci_address=FPGA_A)
    (held,) = fleet.claim["devices"]
    assert claimed.labels == {
        **_labels(fleet.devices[FPGA_A]),
        "arq_uuid": held["arq_uuid"],
        "instance_uuid": "",
        "claim_uuid": fleet.claim["uuid"],
        "project_id": fleet.claim["project_id"],
    }
    # Released, the claim holds nothing: its handle is free again, its holder gone.
    fleet.world.release(fleet.claim["uuid"])
    after = scrape(fleet.world.admin)
    assert [h.labels["arq_uuid"] for h in after.of("exosuit_device_holder")] == [fleet.arq_uuid]
    labels = _labels(fleet.devices[FPGA_A])
    assert after.value("exosuit_device_attach_handles", state="free", **labels) == 2


def test_live_figures_are_gauges_labelled_with_the_device(fleet):
    found = scrape(fleet.world.admin)
    gpu = _labels(fleet.devices[GPU_A])
    assert found.value("exosuit_device_utilization_percent", **gpu) == 42
    assert found.value("exosuit_device_memory_total_bytes", **gpu) == 4096
    assert found.value("exosuit_device_errors_total", **_labels(fleet.devices[FPGA_A])) == 1
    assert found.types["exosuit_device_utilization_percent"] == "gauge"
    for sample in found.of("exosuit_device_utilization_percent"):
        assert tuple(sample.labels) == tuple(sorted(DEVICE_LABELS))


def test_a_figure_named_like_a_fixed_family_is_left_out(fleet):
    # Host B's FPGA reported figures named info, holder and attach_handles (seed).
    found = scrape(fleet.world.admin)
    assert [s.value for s in found.of("exosuit_device_info")] == [1.0, 1.0, 1.0]
    assert len(found.of("exosuit_device_holder")) == 2
    assert all("state" in s.labels for s in found.of("exosuit_device_attach_handles"))
    assert found.text.count("# TYPE exosuit_device_info gauge") == 1


def test_report_age_per_host(fleet):
    old = models.utcnow() - dt.timedelta(seconds=600)
    fleet.world.database.write(
        lambda conn: conn.execute(
            sa.update(models.hosts)
            .where(models.hosts.c.hostname == OTHER)
            .values(last_report_at=old)
        )
    )
    found = scrape(fleet.world.admin)
    assert {s.labels["hostname"] for s in found.of("exosuit_host_report_age_seconds")} == {
        HOST,
        OTHER,
    }
    assert found.value("exosuit_host_report_age_seconds", hostname=OTHER) >= 600
    assert found.value("exosuit_host_report_age_seconds", hostname=HOST) < 600


def test_job_queue_depth_and_oldest_age_per_kind(fleet):
    def enqueue(conn):
        jobs_db.enqueue(conn, "test_kind", {}, key="a")
        jobs_db.enqueue(conn, "test_kind", {}, key="b", delay=3600)  # not due yet
        old = models.utcnow() - dt.timedelta(seconds=300)
        conn.execute(sa.update(models.jobs).where(models.jobs.c.key == "a").values(run_after=old))

    fleet.world.database.write(enqueue)
    found = scrape(fleet.world.admin)
    assert found.value("exosuit_jobs", kind="test_kind", state="pending") == 2
    assert found.value("exosuit_jobs", kind="test_kind", state="failed") == 0
    assert found.value("exosuit_job_queue_depth", kind="test_kind") == 1
    assert found.value("exosuit_job_queue_oldest_age_seconds", kind="test_kind") >= 300


def test_sync_lag_is_the_age_of_the_oldest_pending_sync(fleet):
    def clear(conn):
        conn.execute(sa.delete(models.jobs).where(models.jobs.c.kind == placement_db.SYNC))

    fleet.world.database.write(clear)
    assert scrape(fleet.world.admin).value("exosuit_placement_sync_lag_seconds") == 0

    def change(conn):
        placement_db.enqueue_sync(conn, HOST)
        old = models.utcnow() - dt.timedelta(seconds=120)
        conn.execute(
            sa.update(models.jobs)
            .where(models.jobs.c.kind == placement_db.SYNC)
            .values(created_at=old)
        )

    fleet.world.database.write(change)
    assert scrape(fleet.world.admin).value("exosuit_placement_sync_lag_seconds") >= 120
