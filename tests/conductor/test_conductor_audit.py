"""The audit trail's jobs (exosuit/conductor/audit.py) with the real conductor worker.

``audit_publish`` against the RabbitMQ of this machine (guest/guest on 127.0.0.1:5672;
skipped with the reason when it is absent, failed under CI=true): a change made
through the API arrives on the bus as an oslo notification (messagingv2 envelope); a
bus that is down leaves the records pending, and they go out once it is back. The bus
"goes down" through a TCP relay of this test's own in front of the broker (the broker
is shared: it is never stopped). ``audit_sweep`` purges past ``[audit] retention``,
never a record still to be published.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from exosuit import notifications
from exosuit.api.deploy import loadapp
from exosuit.conductor import kinds
from exosuit.conductor.worker import Services, Settings, Worker
from exosuit.db import audit, jobs, migration, models
from exosuit.db.api import Database, notifications_configured
from tests.conftest import PERSONAS, ApiClient, make_test_conf

RABBIT = ("127.0.0.1", 5672)
FAST = Settings(poll_interval=0.05, lease_seconds=60, max_attempts=50, backoff_base=1)
DEADLINE = 60.0


def _rabbit_up() -> bool:
    with contextlib.suppress(OSError), socket.create_connection(RABBIT, timeout=2):
        return True
    return False


@pytest.fixture(scope="module")
def rabbit():
    if not _rabbit_up():
        if os.environ.get("CI") == "true":
            pytest.fail("RabbitMQ is not listening on 127.0.0.1:5672")
        pytest.skip("RabbitMQ is not listening on 127.0.0.1:5672 (guest/guest)")
    kombu = pytest.importorskip("kombu")
    return kombu


class Relay:
    """A TCP relay to the broker on a port of its own, which the test stops (the bus is
    down: connections refused, those open cut) and starts again."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._server: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(16)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(RABBIT)
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._sockets = []


@contextlib.contextmanager
def queue(kombu, topic: str) -> Iterator:
    """The queue oslo.messaging's rabbit driver sends ``<topic>.info`` notifications to,
    declared first (so nothing sent before the consumer looks is lost), deleted after."""
    with kombu.Connection("amqp://guest:guest@127.0.0.1:5672//") as conn:
        exchange = kombu.Exchange("openstack", type="topic", durable=False)
        q = kombu.Queue(f"{topic}.info", exchange, routing_key=f"{topic}.info", durable=False)
        q(conn.default_channel).declare()
        try:
            yield conn, q
        finally:
            q(conn.default_channel).delete()


def received(conn, q, count: int) -> list[dict]:
    """``count`` messages of the queue (the oslo envelope opened), within the deadline."""
    messages: list[dict] = []
    bound = q(conn.default_channel)
    deadline = time.monotonic() + DEADLINE
    while len(messages) < count and time.monotonic() < deadline:
        message = bound.get(no_ack=True)
        if message is None:
            time.sleep(0.1)
            continue
        messages.append(json.loads(message.body))
    return messages


def setup(tmp_path, port: int, topic: str):
    conf = make_test_conf(
        **{
            "oslo_messaging_notifications.driver": ["messagingv2"],
            "oslo_messaging_notifications.transport_url": f"rabbit://guest:guest@127.0.0.1:{port}/",
            "oslo_messaging_notifications.topics": [topic],
            "oslo_messaging_notifications.retry": 1,
        }
    )
    db = Database(
        f"sqlite:///{tmp_path / 'audit.db'}", notifications=notifications_configured(conf)
    )
    migration.upgrade(db)
    assert db.notifications is True  # [oslo_messaging_notifications] driver is set
    registry = kinds.load(conf)
    services = Services(conf, registry.services)
    worker = Worker(conf, db, settings=FAST, handlers=registry.handlers, services=services)
    return conf, db, worker, services


def pending_count(db: Database) -> int:
    return db.read(lambda conn: len(audit.pending(conn, limit=1000)))


def make_due(db: Database) -> None:
    db.write(
        lambda conn: conn.execute(
            sa.update(models.jobs)
            .where(models.jobs.c.state == jobs.PENDING)
            .values(run_after=models.utcnow() - dt.timedelta(seconds=1))
        )
    )


def create_profile(client: ApiClient, name: str) -> None:
    body = [{"name": name, "groups": [{"resources:FPGA": "1"}]}]
    response = client.post("/v2/device_profiles", body)
    assert response.status_code == 201, response.text


def test_a_change_through_the_api_arrives_on_the_bus(rabbit, tmp_path):
    topic = f"exosuit-test-{uuid.uuid4().hex[:8]}"
    conf, db, worker, services = setup(tmp_path, RABBIT[1], topic)
    client = ApiClient(loadapp(conf, db), PERSONAS["admin"])
    try:
        with queue(rabbit, topic) as (conn, q):
            create_profile(client, "on-the-bus")
            assert pending_count(db) == 1
            outcome = worker.run_once()
            assert outcome is not None and outcome.kind == audit.PUBLISH, outcome
            assert outcome.state == jobs.SUCCEEDED, outcome
            (envelope,) = received(conn, q, 1)
    finally:
        services[notifications.SERVICE].close()
        db.dispose()
    assert envelope["oslo.version"] == "2.0"
    message = json.loads(envelope["oslo.message"])
    assert message["event_type"] == "exosuit.device_profile.create"
    assert message["priority"] == "INFO"
    assert message["publisher_id"] == f"exosuit.{conf.host}"
    assert uuid.UUID(message["message_id"])
    payload = message["payload"]
    assert payload["action"] == "create" and payload["object_type"] == "device_profile"
    assert payload["actor"] == "user:u-admin"
    assert payload["user_id"] == "u-admin"
    assert payload["project_id"] == PERSONAS["admin"]["X-Project-Id"]
    assert payload["request_id"].startswith("req-")
    assert payload["after"]["name"] == "on-the-bus"
    assert message["_context_request_id"] == payload["request_id"]
    assert pending_count(db) == 0


def test_a_bus_that_is_down_keeps_records_pending_until_it_is_back(rabbit, tmp_path):
    topic = f"exosuit-test-{uuid.uuid4().hex[:8]}"
    relay = Relay()  # not started: the bus is down
    conf, db, worker, services = setup(tmp_path, relay.port, topic)
    client = ApiClient(loadapp(conf, db), PERSONAS["admin"])
    try:
        with queue(rabbit, topic) as (conn, q):
            create_profile(client, "while-down-1")
            create_profile(client, "while-down-2")
            outcome = worker.run_once()
            assert outcome is not None and outcome.kind == audit.PUBLISH, outcome
            assert outcome.state == jobs.PENDING and outcome.error, outcome  # to retry
            assert pending_count(db) == 2
            assert received(conn, q, 0) == [] and q(conn.default_channel).get() is None

            relay.start()  # the bus is back
            make_due(db)
            outcome = worker.run_once()
            assert outcome is not None and outcome.state == jobs.SUCCEEDED, outcome
            messages = received(conn, q, 2)
    finally:
        relay.stop()
        services[notifications.SERVICE].close()
        db.dispose()
    payloads = [json.loads(m["oslo.message"])["payload"] for m in messages]
    assert [p["after"]["name"] for p in payloads] == ["while-down-1", "while-down-2"]
    assert pending_count(db) == 0
