"""A private 3-node MariaDB Galera cluster for the tests, started once per run.

``galera`` (session scope) starts bench/galera.py's ``GaleraCluster`` in the run's temporary
folder (three ``mariadbd`` on loopback ports of their own: nothing touches the machine's
MariaDB on 3306) and makes one database on it, migrated to head. Every test that uses it
goes to one pytest-xdist worker (``ONE_WORKER_FIXTURES`` in tests/conftest.py), so the
cluster starts once per run. Without Debian's ``mariadb-server``/``galera-4``/``rsync``
the tests skip with the reason, except under CI=true, where they fail.

``node_databases`` gives a test one ``Database`` per node, the tables emptied; reads
wait for the cluster's latest commit (``wsrep_sync_wait = 1``, doc/deploy-galera.md), so
that what a test checks on one node includes what was written on another. ``SpreadApi``
serves the API once per node (cheroot, as ``exosuit serve`` runs it) and sends each call
to the next node in turn: the writers of a storm are spread over the three.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from cheroot import wsgi as cheroot_wsgi

from bench.galera import GaleraCluster, galera_missing
from exosuit.api.deploy import loadapp
from exosuit.db import migration
from exosuit.db.api import Database
from tests.conftest import empty_database, require

__all__ = ["Galera", "SpreadApi", "node_databases", "galera_fixture", "sync_wait_url"]


def sync_wait_url(url: str) -> str:
    """``url`` whose connections wait, before each read, for every commit the cluster
    has certified (``SET SESSION wsrep_sync_wait = 1`` at connect)."""
    command = quote("SET SESSION wsrep_sync_wait = 1")
    return f"{url}?init_command={command}"


class Galera:
    """The running cluster and the URLs (one per node) of the suite's database on it."""

    def __init__(self, cluster: GaleraCluster, urls: list[str]) -> None:
        self.cluster = cluster
        self.urls = urls


@pytest.fixture(scope="session", name="galera")
def galera_fixture(tmp_path_factory) -> Iterator[Galera]:
    """The cluster, started once (register it in tests/conftest.py only)."""
    missing = galera_missing()
    require(missing is None, f"no Galera cluster here: {missing}")
    cluster = GaleraCluster(str(tmp_path_factory.mktemp("galera")))
    try:
        cluster.start()
        urls = cluster.create_database(f"exosuit_test_{uuid.uuid4().hex[:8]}")
        db = Database(urls[0])
        try:
            migration.upgrade(db)
        finally:
            db.dispose()
        yield Galera(cluster, urls)
    finally:
        cluster.stop()


def node_databases(galera: Galera) -> Iterator[list[Database]]:
    """One Database per node, the tables emptied (on node 1; the others see it): a test
    module's fixture ``yield from`` it."""
    galera.cluster.wait_synced()  # a test that stopped a node has started it again
    databases = [Database(sync_wait_url(url)) for url in galera.urls]
    empty_database(databases[0])
    try:
        yield databases
    finally:
        for db in databases:
            db.dispose()


class SpreadApi:
    """The tests' ``HttpApi`` (``call`` and ``ok``), each call sent to the next node's API."""

    def __init__(self, apis: list) -> None:
        self.apis = apis
        self._next = itertools.cycle(apis)
        self._lock = threading.Lock()

    def _api(self):  # noqa: ANN202 - an HttpApi (tests/db/test_bind_concurrency.py)
        with self._lock:
            return next(self._next)

    def call(self, method: str, path: str, body=None, version: str | None = None):
        return self._api().call(method, path, body, version=version)

    def ok(self, method: str, path: str, body=None, expect: int = 200):
        return self._api().ok(method, path, body, expect=expect)


def serve_each(
    conf, databases: list[Database], http_api_class, threads: int
) -> Iterator[SpreadApi]:
    """The API over HTTP once per database (cheroot), as one ``SpreadApi``."""
    servers = []
    try:
        for db in databases:
            server = cheroot_wsgi.Server(
                ("127.0.0.1", 0),
                loadapp(conf, db),
                numthreads=threads,
                server_name="exosuit-galera-test",
                request_queue_size=threads * 2,
            )
            server.prepare()
            thread = threading.Thread(target=server.serve, name="cheroot", daemon=True)
            thread.start()
            servers.append((server, thread))
        yield SpreadApi([http_api_class(server.bind_addr[1]) for server, _ in servers])
    finally:
        for server, thread in servers:
            server.stop()
            thread.join(timeout=10)
