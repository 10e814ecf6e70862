"""The fleet views (microversion 2.5) in the states no API request leads to: a failed
job retried, a host the conductor synced to Placement. On every database.

The gabbi stories (tests/gabbits/{hosts,attach-handles,jobs,summary}.yaml) cover the
rest; here the conductor's part is played through its own functions in exosuit/db
(claim and record a failure; record a sync's outcome).
"""

from __future__ import annotations

import datetime as dt
import json

import sqlalchemy as sa

from exosuit.db import changes, jobs, models, placement
from tests.conftest import ApiClient
from tests.helpers.inventory import fpga, snapshot

HOST = "host1"
V2_5 = "2.5"
WORKER = "fleet-test"


def _report(api: ApiClient) -> None:
    r = api.put(f"/agent/v1/hosts/{HOST}/inventory", snapshot(HOST, [fpga("0000:0c:00.0")]))
    assert r.status_code == 200, r.text


def _fail_the_sync(api: ApiClient) -> int:
    """Fail the host's Placement sync as a conductor would: claim it, record a failure."""
    db = api.app.application.db
    claimed = db.write(
        jobs.claim, WORKER, lease_seconds=60, max_attempts=5, skip_locked=db.supports_skip_locked
    )
    assert isinstance(claimed, jobs.ClaimedJob), claimed
    db.write(jobs.record, claimed.id, WORKER, jobs.FAILED, attempts=3, error="Placement said no")
    return claimed.id


def _code(response) -> str:
    return json.loads(response.json["error_message"])["code"]


def test_a_failed_job_is_retried_once(api):
    _report(api)
    job_id = _fail_the_sync(api)

    r = api.get("/v2/jobs?state=failed", version=V2_5)
    assert [(j["id"], j["attempts"], j["last_error"]) for j in r.json["jobs"]] == [
        (job_id, 3, "Placement said no")
    ]
    assert api.get("/v2/summary", version=V2_5).json["jobs"]["by_state"]["failed"] == 1

    r = api.post(f"/v2/jobs/{job_id}/retry", version=V2_5)
    assert r.status_code == 200, r.text
    job = r.json
    assert (job["id"], job["state"], job["attempts"]) == (job_id, "pending", 0)
    assert (job["worker"], job["lease_expires_at"]) == (None, None)
    # Due now, and the reason of the failure is kept for the operator.
    assert dt.datetime.fromisoformat(job["run_after"]) <= dt.datetime.now(dt.UTC)
    assert job["last_error"] == "Placement said no"
    assert api.get(f"/v2/jobs/{job_id}", version=V2_5).json == job

    r = api.post(f"/v2/jobs/{job_id}/retry", version=V2_5)
    assert r.status_code == 409, r.text
    assert _code(r) == "exosuit.job.not_failed"
    assert api.get("/v2/jobs?state=failed", version=V2_5).json == {"jobs": []}


def test_a_periodic_job_has_a_negative_id_that_reads_and_pages(api):
    db = api.app.application.db
    job_id = jobs.periodic_job_id("fleet-test")
    db.write(jobs.insert_periodic, job_id, "fleet-test")
    _report(api)

    r = api.get(f"/v2/jobs/{job_id}", version=V2_5)
    assert r.status_code == 200 and r.json["key"] == "periodic:fleet-test", r.text
    r = api.get("/v2/jobs?limit=1", version=V2_5)
    assert r.json["next"].endswith("marker=" + str(r.json["jobs"][0]["id"]))
    (last,) = api.get(r.json["next"].split("localhost", 1)[1], version=V2_5).json["jobs"]
    assert last["id"] == job_id


def test_a_synced_host_shows_its_placement_state(api):
    _report(api)
    db = api.app.application.db
    common = {"records": {}, "compute_rp_uuid": "c0ffee00-0000-4000-8000-000000000001"}
    db.write(placement.write_outcome, HOST, **common, error=None, verified=True, counts={})

    r = api.get(f"/v2/hosts/{HOST}", version=V2_5)
    state = r.json["placement"]
    assert state["compute_rp_uuid"] == common["compute_rp_uuid"]
    assert (state["failures"], state["last_error"]) == (0, None)
    assert state["synced_at"] is not None and state["verified_at"] is not None

    db.write(placement.write_outcome, HOST, **common, error="409", verified=False, counts={})
    (host,) = api.get("/v2/hosts", version=V2_5).json["hosts"]
    assert (host["placement"]["failures"], host["placement"]["last_error"]) == (1, "409")


def test_a_host_that_never_reported_has_no_age_sorts_first_and_is_stale(api):
    """No request leaves a host row without a report (its first snapshot is applied in
    the transaction that creates it), but the views must not trip on one."""
    _report(api)
    db = api.app.application.db
    db.write(
        lambda conn: conn.execute(
            sa.insert(models.hosts).values(hostname="host0", created_at=models.utcnow())
        )
    )
    r = api.get("/v2/hosts/host0", version=V2_5)
    assert (r.json["last_report_at"], r.json["report_age_seconds"]) == (None, None), r.text

    for sort_dir, order in (("asc", ["host0", HOST]), ("desc", [HOST, "host0"])):
        url = f"/v2/hosts?sort_key=last_report_at&sort_dir={sort_dir}&limit=1"
        first = api.get(url, version=V2_5).json
        second = api.get(first["next"].split("localhost", 1)[1], version=V2_5).json
        assert [first["hosts"][0]["hostname"], second["hosts"][0]["hostname"]] == order
        assert "next" not in second

    hosts = api.get("/v2/summary", version=V2_5).json["hosts"]
    assert hosts == {"total": 2, "reporting": 1, "stale": 1}


def _last_report_at(api: ApiClient) -> dt.datetime:
    hosts = models.hosts
    return api.app.application.db.read(
        lambda conn: conn.execute(
            sa.select(hosts.c.last_report_at).where(hosts.c.hostname == HOST)
        ).scalar_one()
    )


def _age(api: ApiClient, seconds: float) -> None:
    """Make the host's last report ``seconds`` old, as if it had been quiet that long.
    Its hash is set too (to itself), and marked as a change: the API's cache of host
    reports keeps the report time it read, which real time would age but this rewrite
    does not; a write of the hash is a change it hears of (exosuit/db/changes.py)."""
    hosts = models.hosts
    when = models.utcnow() - dt.timedelta(seconds=seconds)

    def _write(conn):
        conn.execute(
            sa.update(hosts)
            .where(hosts.c.hostname == HOST)
            .values(last_report_at=when, snapshot_hash=hosts.c.snapshot_hash)
        )
        changes.mark(conn, changes.HOST_REPORTS)

    api.app.application.db.write(_write)


def test_an_unchanged_report_keeps_a_quiet_host_from_looking_stale(api):
    body = snapshot(HOST, [fpga("0000:0c:00.0")])
    assert api.put(f"/agent/v1/hosts/{HOST}/inventory", body).json["changed"] is True
    unchanged = {"schema_version": 1, "hash": body["hash"], "hostname": HOST}
    resolution = api.app.application.conf.api.report_age_resolution

    # Within the resolution an unchanged report writes nothing.
    _age(api, resolution / 2)
    before = _last_report_at(api)
    r = api.put(f"/agent/v1/hosts/{HOST}/inventory", unchanged)
    assert (r.status_code, r.json["changed"]) == (200, False)
    assert _last_report_at(api) == before

    # Older than that, it moves the host's last report time (and changes nothing else).
    _age(api, 10 * 3600)
    assert api.get("/v2/summary", version=V2_5).json["hosts"]["stale"] == 1
    r = api.put(f"/agent/v1/hosts/{HOST}/inventory", unchanged)
    assert (r.status_code, r.json["changed"]) == (200, False)
    host = api.get(f"/v2/hosts/{HOST}", version=V2_5).json
    assert host["report_age_seconds"] < resolution
    assert host["snapshot_hash"] == body["hash"]
    assert api.get("/v2/summary", version=V2_5).json["hosts"] == {
        "total": 1,
        "reporting": 1,
        "stale": 0,
    }
