"""Shared fixtures: databases (SQLite, PostgreSQL, MariaDB), the API app, personas.

PostgreSQL and MariaDB are real servers; their admin URLs come from
EXOSUIT_TEST_POSTGRESQL_URL and EXOSUIT_TEST_MYSQL_URL (defaults: this
machine's servers). A test whose server is absent is skipped with the reason,
except under CI=true, where it fails.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
import sqlalchemy as sa
import webob

from exosuit.api.deploy import loadapp
from exosuit.conf import make_conf
from exosuit.db import changes, migration, models
from exosuit.db.api import Database

POSTGRESQL_URL = os.environ.get(
    "EXOSUIT_TEST_POSTGRESQL_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)
MYSQL_URL = os.environ.get("EXOSUIT_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/")
BACKENDS = ("sqlite", "postgresql", "mariadb")


def require(condition: bool, reason: str) -> None:
    """Skip (or, under CI=true, fail) when a real service the test needs is absent."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"required service absent under CI: {reason}")
    pytest.skip(reason)


class _Server:
    """A database server on which the suite creates (and drops) its own databases."""

    def __init__(self, backend: str, admin_url: str) -> None:
        self.backend = backend
        self.admin_url = sa.make_url(admin_url)
        self.error: str | None = None
        self.created: list[str] = []
        try:
            engine = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
            self.engine = engine
        except Exception as error:  # the server is absent or refuses us
            self.engine = None
            self.error = f"{backend} at {self.admin_url} unavailable: {error}".splitlines()[0]

    def create(self) -> str:
        name = f"exosuit_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with self.engine.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        self.created.append(name)
        return self.admin_url.set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        if self.engine is None:
            return
        with self.engine.connect() as conn:
            for name in self.created:
                if self.backend == "postgresql":
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                else:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        self.engine.dispose()


@pytest.fixture(scope="session")
def db_servers():
    servers = {
        "postgresql": _Server("postgresql", POSTGRESQL_URL),
        "mariadb": _Server("mariadb", MYSQL_URL),
    }
    yield servers
    for server in servers.values():
        server.drop_all()


def new_database_url(backend: str, db_servers, tmp_path_factory) -> str:
    """A new, empty database on ``backend``, migrated to head."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('db')}/exosuit.sqlite"
    else:
        server = db_servers[backend]
        require(server.engine is not None, server.error or "")
        url = server.create()
    db = Database(url)
    migration.upgrade(db)
    db.dispose()
    return url


@pytest.fixture(scope="session")
def _shared_urls(db_servers, tmp_path_factory):
    """One migrated database per backend, shared by the session (emptied per test)."""
    urls: dict[str, str] = {}

    def get(backend: str) -> str:
        if backend not in urls:
            urls[backend] = new_database_url(backend, db_servers, tmp_path_factory)
        return urls[backend]

    return get


def empty_database(db: Database) -> None:
    """Delete every row, but the deployable list's version (exosuit/db/changes.py): it
    only ever grows, and the API's response cache relies on that. Deleting the rows
    is a change of what both counters count, marked as such, so the version moves."""
    with db.writer() as conn:
        changes.mark(conn, changes.DEPLOYABLES)
        changes.mark(conn, changes.HOST_REPORTS)
        for table in reversed(models.Base.metadata.sorted_tables):
            if table is models.metric_counters:
                conn.execute(sa.delete(table).where(table.c.name != changes.DEPLOYABLES))
            else:
                conn.execute(sa.delete(table))


@pytest.fixture(params=BACKENDS)
def database(request, _shared_urls):
    """A Database on each backend in turn (SQLite, PostgreSQL, MariaDB), empty."""
    db = Database(_shared_urls(request.param))
    empty_database(db)
    yield db
    db.dispose()


@pytest.fixture
def sqlite_database(_shared_urls):
    db = Database(_shared_urls("sqlite"))
    empty_database(db)
    yield db
    db.dispose()


def make_test_conf(**overrides):
    """The configuration of in-process API tests: as deployed, but that new devices start
    ready (as before activation existed: most tests bind what a snapshot reported); the
    tests of activation set ``inventory.new_device_activation`` themselves."""
    overrides = {"inventory.new_device_activation": "ready", **overrides}
    return make_conf([], **overrides)


class ApiClient:
    """Calls the WSGI app in-process with webob: request in, webob.Response out."""

    def __init__(self, app, headers: dict[str, str] | None = None) -> None:
        self.app = app
        self.headers = dict(headers or {})

    def as_(self, headers: dict[str, str]) -> ApiClient:
        return ApiClient(self.app, headers)

    def request(
        self, method: str, path: str, body=None, headers=None, version: str | None = None
    ) -> webob.Response:
        req = webob.Request.blank(path, method=method)
        for key, value in {**self.headers, **(headers or {})}.items():
            req.headers[key] = value
        if version is not None:
            req.headers["OpenStack-API-Version"] = f"accelerator {version}"
        if body is not None:
            req.body = body if isinstance(body, bytes) else json.dumps(body).encode()
            req.content_type = "application/json"
        return req.get_response(self.app)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body, **kw)

    def patch(self, path, body=None, **kw):
        return self.request("PATCH", path, body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)


@pytest.fixture
def conf():
    return make_test_conf()


@pytest.fixture
def api(conf, database):
    """An in-process API client (admin by default under noauth) on each backend."""
    app = loadapp(conf, database)
    return ApiClient(app)


@pytest.fixture
def sqlite_api(conf, sqlite_database):
    return ApiClient(loadapp(conf, sqlite_database))


# Personas, as keystonemiddleware would set their headers.
PROJECT = "p1" + "0" * 30
OTHER_PROJECT = "p2" + "0" * 30
SERVICE_PROJECT = "sv" + "0" * 30
PERSONAS = {
    "admin": {
        "X-User-Id": "u-admin",
        "X-Project-Id": "admin" + "0" * 27,
        "X-Roles": "admin,manager,member,reader",
    },
    "member": {"X-User-Id": "u-member", "X-Project-Id": PROJECT, "X-Roles": "member,reader"},
    "other_member": {
        "X-User-Id": "u-other",
        "X-Project-Id": OTHER_PROJECT,
        "X-Roles": "member,reader",
    },
    "reader": {"X-User-Id": "u-reader", "X-Project-Id": PROJECT, "X-Roles": "reader"},
    "service": {
        "X-User-Id": "u-nova",
        "X-Project-Id": SERVICE_PROJECT,
        "X-Roles": "service",
        "X-Service-Roles": "service",
    },
    # What Nova sends: the user's token plus a service token.
    "nova": {
        "X-User-Id": "u-member",
        "X-Project-Id": PROJECT,
        "X-Roles": "member,reader",
        "X-Service-Roles": "service",
    },
}


# One real Keystone, Placement and Glance for the whole session, whichever modules use
# them (imported last: the fixture modules use ``require`` from here). A session fixture
# must be registered here only: imported into another conftest or test module as well,
# it is a second fixture there, and starts a second server.
from tests.glance.glance_fixture import glance_fixture  # noqa: E402,F401
from tests.helpers.galera import galera_fixture  # noqa: E402,F401
from tests.helpers.keystone_fixture import keystone_fixture  # noqa: E402,F401
from tests.placement.placement_fixture import placement_fixture  # noqa: E402,F401

# Fixtures that start a process (a server, a browser, agents): the tests that use one,
# directly or through another fixture, are "slow", and `make test-quick` leaves them out.
PROCESS_FIXTURES = frozenset(
    {
        "agents",
        "browser",
        "galera",
        "glance",
        "keystone",
        "nova_cloud",
        "placement",
        "processes",
        "server",
        "servers",
    }
)


# Tests that need Glance or the real Nova (which authenticate at Keystone and keep their
# catalog entries in it) go to one pytest-xdist worker, which starts Keystone, Glance and
# Nova once per run; the tests that need Keystone alone go to another, which starts a
# Keystone of its own (about 30 s), so that the two groups run side by side: as one group
# they were the run's long pole (doc/benchmarks.md, "The test suite"). Placement, small and
# started in seconds, runs once per worker that needs it. The tests on the private Galera
# cluster (tests/helpers/galera.py) share one worker too, so that its three servers start
# once per run. The first fixture a test needs, in this order, names its group.
ONE_WORKER_FIXTURES = {
    "nova_cloud": "nova",
    "glance": "nova",
    "keystone": "keystone",
    "galera": "galera",
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        # `make test` runs the suite on several pytest-xdist workers with --dist
        # loadgroup: the tests of one module go to one worker (a module's fixtures, often
        # a server, start once), and the tests that need a fixture of ONE_WORKER_FIXTURES
        # (directly or through another fixture) go to one worker together.
        needs = [g for f, g in ONE_WORKER_FIXTURES.items() if f in item.fixturenames]
        if not any(item.iter_markers("xdist_group")):
            group = needs[0] if needs else str(item.path.relative_to(config.rootpath))
            item.add_marker(pytest.mark.xdist_group(group))
        if needs and getattr(config.option, "loadgroup", False):  # a worker of loadgroup
            _suffix_group(item, needs[0])


def _suffix_group(item, group: str) -> None:
    """The group of a test that needs a ONE_WORKER_FIXTURES fixture as its node id's
    ``@group`` suffix, which is what pytest-xdist's scheduler groups by.

    NOTE: pytest-xdist 3.8 appends it by setting ``item._nodeid``, which pytest 9.2 no
    longer reads (a node id is ``item._id`` now), so each test was a group of its own and
    the Keystone and Galera tests ran on every worker, each starting its own servers. It
    is set here where pytest reads it, for those groups only: the modules' groups stay
    as the suite was measured with (doc/benchmarks.md), one test at a time. A no-op once
    the suffix is there."""
    if "@" in item.nodeid.rpartition("]")[2] or not hasattr(item, "_id"):
        return
    from _pytest.nodeid import NodeId

    item._id = NodeId.parse(f"{item.nodeid}@{group}")
