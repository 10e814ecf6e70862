"""Fixtures for the Nova integration: a fake Nova over HTTP, a cloud to bind in.

``fake_nova`` accepts two static tokens: Exosuit's own (``[nova]``, role
``service``) and its service token (``[service_user]``), and requires both, as
a Nova with ``[keystone_authtoken] service_token_roles_required`` would. Exosuit
reaches it through keystoneauth's ``admin_token`` plugin, configured in an INI
file like any deployment's. The tests with real Keystone tokens are in
test_nova_flow.py.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from exosuit.api.deploy import loadapp
from exosuit.conductor.worker import Settings, Worker
from exosuit.conf import make_conf
from exosuit.db import models
from tests.conftest import PERSONAS, ApiClient
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.programs import programmable_fpga
from tests.nova.fake_nova import FakeNova, static_tokens
from tests.nova.real_nova import (  # noqa: F401 (the real Nova's fixtures and summary)
    cloud,
    nova_cloud,
    pytest_terminal_summary,
)

EXOSUIT_TOKEN = "exosuit-service-user-token"
SERVICE_TOKEN = "exosuit-service-token"
HOST = "compute-1"
ARQS = "/v2/accelerator_requests"
FAST = Settings(
    poll_interval=0.05, lease_seconds=30, max_attempts=6, backoff_base=0.05, backoff_max=0.2
)


@pytest.fixture
def fake_nova():
    nova = FakeNova(
        static_tokens({EXOSUIT_TOKEN: {"service"}, SERVICE_TOKEN: {"service"}}),
        require_service_token=True,
    ).start()
    yield nova
    nova.stop()


def write_nova_conf(
    path: Path,
    nova_url: str,
    *,
    bind_timeout: int = 60,
    service_token: bool = True,
    extra: str = "",
):
    """An exosuit.conf whose [nova] points at ``nova_url`` (admin_token plugin)."""
    text = f"""\
[DEFAULT]
bind_timeout = {bind_timeout}
state_path = {path.parent / (path.stem + "-state")}

[nova]
auth_type = admin_token
token = {EXOSUIT_TOKEN}
endpoint = {nova_url}
endpoint_override = {nova_url}

[service_user]
send_service_user_token = {str(service_token).lower()}
auth_type = admin_token
token = {SERVICE_TOKEN}

# The tests bind what a snapshot reports, as before devices started inactive.
[inventory]
new_device_activation = ready
{extra}"""
    path.write_text(text)
    return make_conf([str(path)])


class Cloud:
    """Exosuit's API in-process (as Nova and the agents call it) and a real conductor
    worker, on one database."""

    def __init__(self, conf, db) -> None:
        self.conf = conf
        self.db = db
        self.api = ApiClient(loadapp(conf, db))
        self.nova = self.api.as_(PERSONAS["nova"])
        self.admin = self.api.as_(PERSONAS["admin"])
        self.agent = self.api.as_(PERSONAS["service"])
        self.worker = Worker(conf, db, name="nova-test", settings=FAST)

    def report(
        self, host: str = HOST, addresses=("0000:0c:00.0",), *, programmable: bool = False
    ) -> dict[str, str]:
        """The host's agent reports FPGAs (4 attach handles each; ``programmable``: their
        driver loads ``simulated`` images); their resource provider uuids by PCI address."""
        if programmable:
            devices = [programmable_fpga(a, hostname=host) for a in addresses]
        else:
            devices = [fpga(a, handles=4, name=f"{host}_{a}") for a in addresses]
        r = self.agent.put(f"/agent/v1/hosts/{host}/inventory", snapshot(host, devices))
        assert r.status_code == 200, r.text
        return self.providers(host)

    def providers(self, host: str = HOST) -> dict[str, str]:
        return {
            d["name"].removeprefix(f"{host}_"): d["rp_uuid"]
            for d in self.admin.get("/v2/deployables").json["deployables"]
            if d["name"].startswith(f"{host}_")
        }

    def profile(self, name: str, groups: list[dict]) -> None:
        r = self.admin.post("/v2/device_profiles", [{"name": name, "groups": groups}])
        assert r.status_code == 201, r.text

    def create_arqs(self, profile: str) -> list[dict]:
        r = self.nova.post(ARQS, {"device_profile_name": profile})
        assert r.status_code == 201, r.text
        return r.json["arqs"]

    def bind(self, binds: list[tuple[str, str, str]], host: str = HOST):
        """One PATCH: (arq uuid, provider uuid, instance uuid) each."""
        body = {
            arq: [
                {"op": "add", "path": "/hostname", "value": host},
                {"op": "add", "path": "/device_rp_uuid", "value": rp},
                {"op": "add", "path": "/instance_uuid", "value": instance},
            ]
            for arq, rp, instance in binds
        }
        return self.nova.patch(ARQS, body)

    def state(self, arq: str) -> str | None:
        r = self.admin.get(f"{ARQS}/{arq}")
        return None if r.status_code == 404 else r.json["state"]

    def nova_jobs(self) -> list[dict]:
        jobs = models.jobs
        with self.db.engine.connect() as conn:
            rows = (
                conn.execute(
                    sa.select(jobs).where(jobs.c.kind == "nova_notify").order_by(jobs.c.id)
                )
                .mappings()
                .all()
            )
        return [{**r, "payload": json.loads(r["payload"])} for r in rows]

    def drain(self, timeout: float = 10.0) -> None:
        """Run due jobs until none is due and no nova_notify job waits for a retry
        (delayed ones, waiting for a host or a deadline, stay pending)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.worker.run_once() is not None:
                continue
            retrying = [
                j for j in self.nova_jobs() if j["state"] == "pending" and j["attempts"] > 0
            ]
            if not retrying:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"nova_notify jobs still retrying: {retrying}")
            time.sleep(0.02)


@pytest.fixture
def cloud_factory(tmp_path, fake_nova):
    """``cloud_factory(db, **conf)`` → a Cloud whose [nova] is ``fake_nova``."""
    made = []

    def make(db, **kwargs) -> Cloud:
        conf = write_nova_conf(tmp_path / f"exosuit-{len(made)}.conf", fake_nova.url, **kwargs)
        made.append(Cloud(conf, db))
        return made[-1]

    return make


def new_instance() -> str:
    return str(uuid.uuid4())
