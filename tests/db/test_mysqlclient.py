"""mysqlclient (``mysql+mysqldb://``), MariaDB's recommended driver, next to PyMySQL.

The suite runs MariaDB through PyMySQL (``EXOSUIT_TEST_MYSQL_URL``; set it to a
``mysql+mysqldb://`` URL to run every MariaDB test through mysqlclient). Here, the same
server through mysqlclient: the write paths whose answers depend on the driver (a
compare-and-set's row count is the rows it matched, not those it changed; a deadlock
is retried; RETURNING), a concurrent bind storm that must never hold a handle twice,
and the API's ARQ and device-profile cycles. Skips without the driver (``make
test`` builds it: the Makefile's BUILD_PACKAGES), and fails under CI=true.
"""

from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import exc

from exosuit.api.deploy import loadapp
from exosuit.db import api as db_api
from exosuit.db import arqs, migration, models
from tests.conftest import ApiClient, empty_database, make_test_conf, require
from tests.helpers.inventory import fpga, snapshot

HOST = "mysqlclient-host"


@pytest.fixture(scope="module")
def mysqldb_url(db_servers) -> str:
    try:
        import MySQLdb  # noqa: F401
    except ImportError as error:
        require(False, f"mysqlclient is not installed (pip install -e '.[mysqlclient]'): {error}")
    server = db_servers["mariadb"]
    require(server.engine is not None, server.error or "")
    url = sa.make_url(server.create()).set(drivername="mysql+mysqldb")
    db = db_api.Database(url.render_as_string(hide_password=False))
    migration.upgrade(db)
    db.dispose()
    return url.render_as_string(hide_password=False)


@pytest.fixture
def database(mysqldb_url):
    db = db_api.Database(mysqldb_url)
    assert db.engine.dialect.driver == "mysqldb"
    empty_database(db)
    yield db
    db.dispose()


@pytest.fixture
def api(database) -> ApiClient:
    return ApiClient(loadapp(make_test_conf(), database))


def _seed(api: ApiClient, handles: int) -> str:
    devices = [fpga("0000:0c:00.0", handles=handles)]
    r = api.put(f"/agent/v1/hosts/{HOST}/inventory", snapshot(HOST, devices))
    assert r.status_code == 200, r.text
    r = api.post("/v2/device_profiles", [{"name": "p1", "groups": [{"resources:FPGA": "1"}]}])
    assert r.status_code == 201, r.text
    (deployable,) = api.get("/v2/deployables").json["deployables"]
    return deployable["rp_uuid"]


def test_arq_and_profile_cycles_through_the_api(api):
    rp_uuid = _seed(api, handles=2)
    for _ in range(3):
        r = api.post("/v2/accelerator_requests", {"device_profile_name": "p1"})
        assert r.status_code == 201, r.text
        (arq,) = r.json["arqs"]
        instance = str(uuid.uuid4())
        ops = [
            {"op": "add", "path": "/hostname", "value": HOST},
            {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
            {"op": "add", "path": "/instance_uuid", "value": instance},
        ]
        assert api.patch("/v2/accelerator_requests", {arq["uuid"]: ops}).status_code == 202
        r = api.get(f"/v2/accelerator_requests?instance={instance}&bind_state=resolved")
        assert [a["state"] for a in r.json["arqs"]] == ["Bound"], r.text
        assert r.json["arqs"][0]["attach_handle_uuid"]
        r = api.delete(f"/v2/accelerator_requests?instance={instance}")
        assert r.status_code == 204, r.text
    r = api.post("/v2/device_profiles", [{"name": "p2", "groups": [{"resources:FPGA": "1"}]}])
    assert r.status_code == 201, r.text
    assert api.get(f"/v2/device_profiles/{r.json['uuid']}").json["device_profile"] == r.json
    assert api.delete(f"/v2/device_profiles/{r.json['uuid']}").status_code == 204
    assert api.post("/v2/device_profiles", [{"name": "p1", "groups": []}]).status_code in (
        400,
        409,
    )


def test_bind_storm_holds_no_handle_twice(api, database):
    """16 threads bind 16 ARQs on a deployable of 4 handles: 4 win, 12 fail saying why."""
    rp_uuid = _seed(api, handles=4)
    uuids = []
    for _ in range(16):
        (arq,) = database.write(
            arqs.create, profile_name="p1", project_id=None, handles_per_unit={}
        )
        uuids.append(arq["uuid"])
    barrier = threading.Barrier(len(uuids))
    results: dict[str, arqs.BindResult] = {}

    def bind(arq_uuid: str) -> None:
        binding = arqs.Binding(arq_uuid, HOST, rp_uuid, str(uuid.uuid4()))
        barrier.wait(timeout=60)
        (results[arq_uuid],) = database.write(
            arqs.bind, [binding], arqs.Scope(None), skip_locked=True
        )

    threads = [threading.Thread(target=bind, args=(u,)) for u in uuids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    states = sorted(r.arq["state"] for r in results.values())
    assert states == ["BindFailed"] * 12 + ["Bound"] * 4
    assert all("no free attach handle" in (r.error or "") for r in results.values() if r.error)
    held = database.read(
        lambda conn: (
            conn.execute(
                sa.select(models.accelerator_requests.c.attach_handle_id).where(
                    models.accelerator_requests.c.attach_handle_id.is_not(None)
                )
            )
            .scalars()
            .all()
        )
    )
    assert len(held) == len(set(held)) == 4


def test_a_deadlock_is_retried_and_a_lost_connection_recognised(database):
    import MySQLdb

    deadlock = exc.OperationalError("UPDATE", {}, MySQLdb.OperationalError(1213, "Deadlock"))
    assert db_api._is_retryable(deadlock)
    duplicate = exc.IntegrityError("INSERT", {}, MySQLdb.IntegrityError(1062, "Duplicate"))
    assert not db_api._is_retryable(duplicate)
    assert database.engine.dialect.delete_returning  # MariaDB 10.5+: Nova's delete is one
