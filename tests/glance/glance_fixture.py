"""A real OpenStack Glance on loopback, behind the real Keystone of the tests.

``Glance.start()`` writes a glance-api.conf into a temporary folder (SQLite, the file
store, keystonemiddleware against the Keystone of ``keystone_fixture``), runs
``glance-manage db_sync``, serves Glance's own WSGI application
(``glance.common.wsgi_app.init_app``, as uWSGI would) with cheroot in a child process,
and registers it in Keystone's catalog as service type ``image``. Keystone users made
for it, through the identity API as the bootstrap admin:

* ``glance`` (role service on project service): Glance's own, validates tokens;
* ``exosuit-glance`` (role admin on project service): the service user Exosuit's
  ``[glance]`` reads images as; Glance shows an admin every image, so Exosuit applies
  Glance's visibility rules for its caller itself.

``stop()`` terminates the process. The ``glance`` fixture (session scope) does both,
and skips, or fails under CI=true, when the ``glance`` package is not installed
(``pip install -e '.[test]'``).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import require
from tests.helpers.keystone_fixture import REGION, Keystone, _free_port, _script

__all__ = ["Glance", "GlanceUser", "glance_fixture"]

STARTUP_TIMEOUT = 180.0

# The child process: Glance's WSGI application under cheroot. sys.argv is emptied
# first: Glance's oslo.config reads the command line.
_SERVE = """
import sys
port = int(sys.argv[1])
del sys.argv[1:]
from cheroot import wsgi
from glance.common import wsgi_app
server = wsgi.Server(("127.0.0.1", port), wsgi_app.init_app(), numthreads=8)
server.safe_start()
"""


def _paste_ini() -> Path | None:
    """glance-api-paste.ini as the glance wheel installs it (under the prefix's etc/)."""
    for base in (sys.prefix, sysconfig.get_path("data")):
        candidate = Path(base) / "etc" / "glance" / "glance-api-paste.ini"
        if candidate.exists():
            return candidate
    return None


class GlanceUser:
    def __init__(self, name: str, user_id: str, password: str) -> None:
        self.name = name
        self.id = user_id
        self.password = password


class GlanceError(RuntimeError):
    """Glance did not start."""


class Glance:
    """One Glance process on a loopback port (start once, stop once)."""

    def __init__(self, workdir: Path, keystone: Keystone) -> None:
        self.workdir = Path(workdir)
        self.keystone = keystone
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.store = self.workdir / "images"  # the file store: <store>/<image uuid>
        self.process: subprocess.Popen | None = None
        self.users: dict[str, GlanceUser] = {}
        self._log = self.workdir / "glance.log"

    def start(self) -> Glance:
        paste = _paste_ini()
        if paste is None:
            raise GlanceError("glance-api-paste.ini is not installed with the glance package")
        self.users["glance"] = self._user("glance", "service")
        self.users["exosuit-glance"] = self._user("exosuit-glance", "admin")
        etc = self.workdir / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "glance-api-paste.ini").write_text(paste.read_text())
        self._config = etc / "glance-api.conf"
        self._write_config(self._config, etc / "glance-api-paste.ini")
        env = {**os.environ, "OS_GLANCE_CONFIG_DIR": str(etc)}
        with self._log.open("ab") as log:
            result = subprocess.run(
                [_script("glance-manage"), "--config-file", str(self._config), "db_sync"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                timeout=300,
                check=False,
            )
            if result.returncode != 0:
                raise GlanceError(
                    f"glance-manage db_sync exited {result.returncode}:\n{self.log_tail()}"
                )
            self.process = subprocess.Popen(
                [sys.executable, "-c", _SERVE, str(self.port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        self._wait_until_up()
        self.keystone.register_service("image", "glance", self.url)
        return self

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self._log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _user(self, name: str, role: str) -> GlanceUser:
        keystone = self.keystone
        password = secrets.token_hex(8)
        project = keystone.projects["service"]
        r = keystone.admin.post(
            f"{keystone.auth_url}/users",
            json={
                "user": {
                    "name": name,
                    "password": password,
                    "domain_id": "default",
                    "default_project_id": project,
                }
            },
        )
        user_id = r.json()["user"]["id"]
        keystone.admin.put(
            f"{keystone.auth_url}/projects/{project}/users/{user_id}/roles/{keystone.roles[role]}"
        )
        return GlanceUser(name, user_id, password)

    def _write_config(self, path: Path, paste: Path) -> None:
        glance = self.users["glance"]
        path.write_text(f"""\
[DEFAULT]
enabled_backends = fs:file
worker_self_reference_url = {self.url}
use_stderr = true
[database]
connection = sqlite:///{self.workdir}/glance.sqlite
[glance_store]
default_backend = fs
[fs]
filesystem_store_datadir = {self.store}
[os_glance_staging_store]
filesystem_store_datadir = {self.workdir}/staging
[os_glance_tasks_store]
filesystem_store_datadir = {self.workdir}/tasks
[paste_deploy]
flavor = keystone
config_file = {paste}
[keystone_authtoken]
www_authenticate_uri = {self.keystone.url}
auth_url = {self.keystone.url}
auth_type = password
username = {glance.name}
password = {glance.password}
project_name = service
user_domain_name = Default
project_domain_name = Default
region_name = {REGION}
token_cache_time = 600
""")

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            try:
                if requests.get(f"{self.url}/healthcheck", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise GlanceError("Glance did not start:\n" + self.log_tail())
            time.sleep(0.2)


@pytest.fixture(scope="session", name="glance")
def glance_fixture(keystone, tmp_path_factory):
    """The running Glance (its catalog entry in the session's Keystone)."""
    import importlib.util

    require(
        importlib.util.find_spec("glance") is not None,
        "the glance package is not installed (pip install -e '.[test]')",
    )
    server = Glance(tmp_path_factory.mktemp("glance"), keystone)
    try:
        server.start()
        yield server
    finally:
        server.stop()
