"""A real OpenStack Keystone on loopback, with the users and projects of the policy tests.

``Keystone.start()`` writes a keystone.conf into a temporary folder (SQLite,
fernet tokens, bcrypt at its cheapest cost so that password logins are quick),
runs ``keystone-manage`` (``db_sync``, ``fernet_setup``, ``credential_setup``,
``bootstrap`` with RegionOne and identity endpoints at the loopback URL), serves
Keystone's own WSGI application (``keystone.wsgi.api``) with cheroot in a child
process, and then creates, through the identity API and as the system-scoped
bootstrap admin:

* the roles reader, member, manager, admin and service (bootstrap already
  makes them, with admin → manager → member → reader implied);
* the projects ``service``, ``p1`` and ``p2``;
* the users of ``USERS``, each with one role on one project: ``nova`` and
  ``exosuit`` (Exosuit's own service user, which validates tokens) hold
  ``service`` on ``service``; ``p1-reader``, ``p1-member``, ``p1-manager`` and
  ``p1-admin`` hold their role on ``p1``; ``p2-member`` holds member on ``p2``.

``register_service`` adds a catalog entry (public and internal endpoints).
``stop()`` terminates the process. The ``keystone`` fixture (session scope)
does both, and skips, or fails under CI=true, when the ``keystone`` package is
not installed (``pip install -e '.[test]'``).

Keystone's WSGI application is not run under gunicorn: it parses the process's
command line with oslo.config, and refuses gunicorn's arguments.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import grp
import importlib.util
import os
import pwd
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

from tests.conftest import require

__all__ = ["USERS", "Keystone", "User", "keystone_fixture"]

ROLES = ("reader", "member", "manager", "admin", "service")
PROJECTS = ("service", "p1", "p2")
# user name → (project, role)
USERS = {
    "nova": ("service", "service"),
    "exosuit": ("service", "service"),
    "p1-reader": ("p1", "reader"),
    "p1-member": ("p1", "member"),
    "p1-manager": ("p1", "manager"),
    "p1-admin": ("p1", "admin"),
    "p2-member": ("p2", "member"),
}
REGION = "RegionOne"
STARTUP_TIMEOUT = 180.0

# The child process: Keystone's WSGI application under cheroot. sys.argv is
# emptied first because Keystone's oslo.config reads the command line.
_SERVE = """
import sys
port = int(sys.argv[1])
del sys.argv[1:]
from cheroot import wsgi
from keystone.server import wsgi as keystone_wsgi
server = wsgi.Server(("127.0.0.1", port), keystone_wsgi.initialize_public_application(),
                     numthreads=4)
server.safe_start()
"""


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    id: str
    password: str
    project: str
    project_id: str
    role: str


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _script(name: str) -> str:
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def authtoken_section(
    keystone: Keystone,
    *,
    cache_time: int | None = 600,
    service_tokens: bool = True,
    www_authenticate_uri: str | None = None,
) -> str:
    """Exosuit's ``[keystone_authtoken]`` section for this Keystone, its ``exosuit``
    service user authenticating: ``cache_time`` seconds a validated token is kept (-1:
    every token validated by Keystone, so a revoked role counts at once; None: the
    default); ``service_tokens``: service tokens need the ``service`` role (as Nova
    sends them)."""
    user = keystone.users["exosuit"]
    lines = [
        "[keystone_authtoken]",
        f"www_authenticate_uri = {www_authenticate_uri or keystone.url}",
        f"auth_url = {keystone.url}",
        "auth_type = password",
        f"username = {user.name}",
        f"password = {user.password}",
        "project_name = service",
        "user_domain_name = Default",
        "project_domain_name = Default",
        f"region_name = {REGION}",
    ]
    if service_tokens:
        lines += ["service_token_roles = service", "service_token_roles_required = true"]
    if cache_time is not None:
        lines.append(f"token_cache_time = {cache_time}")
    return "\n".join(lines) + "\n"


class KeystoneError(RuntimeError):
    """Keystone did not start or did not answer as expected."""


class Keystone:
    """One Keystone process on a loopback port (start once, stop once)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.auth_url = f"{self.url}/v3"
        self.admin_password = secrets.token_hex(8)
        self.process: subprocess.Popen | None = None
        self.projects: dict[str, str] = {}
        self.users: dict[str, User] = {}
        self.roles: dict[str, str] = {}
        self._http = ks_session.Session()
        self._admin: ks_session.Session | None = None
        self._log = self.workdir / "keystone.log"

    # -- process ------------------------------------------------------------------------

    def start(self) -> Keystone:
        config_dir = self.workdir / "etc"
        config_dir.mkdir(parents=True, exist_ok=True)
        self._config = config_dir / "keystone.conf"
        self._write_config(self._config)
        # keystone-manage reads --config-file; the WSGI application reads this variable.
        self._env = {**os.environ, "OS_KEYSTONE_CONFIG_DIR": str(config_dir)}
        user = pwd.getpwuid(os.getuid()).pw_name
        group = grp.getgrgid(os.getgid()).gr_name
        owner = ["--keystone-user", user, "--keystone-group", group]
        # The schema and the two key repositories do not depend on each other.
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            list(
                pool.map(
                    self._manage,
                    [["db_sync"], ["fernet_setup", *owner], ["credential_setup", *owner]],
                )
            )
        with self._log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _SERVE, str(self.port)],
                env=self._env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        # The server starts while bootstrap fills the database.
        self._manage(
            [
                "bootstrap",
                "--bootstrap-password",
                self.admin_password,
                "--bootstrap-region-id",
                REGION,
                "--bootstrap-public-url",
                self.auth_url,
                "--bootstrap-internal-url",
                self.auth_url,
            ]
        )
        self._wait_until_up()
        self._admin = self.session(
            v3.Password(
                auth_url=self.auth_url,
                username="admin",
                password=self.admin_password,
                user_domain_id="default",
                system_scope="all",
            )
        )
        self._populate()
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

    def _write_config(self, path: Path) -> None:
        path.write_text(f"""\
[DEFAULT]
use_stderr = true
[database]
connection = sqlite:///{self.workdir}/keystone.sqlite
[token]
provider = fernet
[fernet_tokens]
key_repository = {self.workdir}/fernet-keys
[fernet_receipts]
key_repository = {self.workdir}/fernet-keys
[credential]
key_repository = {self.workdir}/credential-keys
[identity]
# bcrypt's lowest cost: logins are in every test's path, strength is not.
password_hash_rounds = 4
""")

    def _manage(self, args: list[str]) -> None:
        with self._log.open("ab") as log:
            result = subprocess.run(
                [_script("keystone-manage"), "--config-file", str(self._config), *args],
                env=self._env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                timeout=180,
                check=False,
            )
        if result.returncode != 0:
            raise KeystoneError(
                f"keystone-manage {args[0]} exited with {result.returncode}:\n" + self.log_tail()
            )

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            try:
                if requests.get(self.auth_url, timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise KeystoneError("Keystone did not start:\n" + self.log_tail())
            time.sleep(0.2)

    # -- identity data ------------------------------------------------------------------

    def _populate(self) -> None:
        existing = {
            r["name"]: r["id"] for r in self.admin.get(f"{self.auth_url}/roles").json()["roles"]
        }
        for name in ROLES:
            if name not in existing:
                existing[name] = self.admin.post(
                    f"{self.auth_url}/roles", json={"role": {"name": name}}
                ).json()["role"]["id"]
        self.roles = existing
        for name in PROJECTS:
            self.projects[name] = self.admin.post(
                f"{self.auth_url}/projects",
                json={"project": {"name": name, "domain_id": "default"}},
            ).json()["project"]["id"]
        for name, (project, role) in USERS.items():
            password = secrets.token_hex(8)
            user_id = self.admin.post(
                f"{self.auth_url}/users",
                json={
                    "user": {
                        "name": name,
                        "password": password,
                        "domain_id": "default",
                        "default_project_id": self.projects[project],
                    }
                },
            ).json()["user"]["id"]
            self.admin.put(
                f"{self.auth_url}/projects/{self.projects[project]}/users/"
                f"{user_id}/roles/{self.roles[role]}"
            )
            self.users[name] = User(name, user_id, password, project, self.projects[project], role)

    def register_service(self, service_type: str, name: str, url: str) -> str:
        """The catalog entry of ``service_type``: the service and its public and internal
        endpoints. It is the only one of its type: Keystone is shared by the whole run, and
        an entry that an earlier module registered (its server stopped since) is removed, or
        a client would be free to pick the dead one."""
        existing = self.admin.get(f"{self.auth_url}/services?type={service_type}")
        for old in existing.json()["services"]:
            self.admin.delete(f"{self.auth_url}/services/{old['id']}")
        service = self.admin.post(
            f"{self.auth_url}/services", json={"service": {"type": service_type, "name": name}}
        ).json()["service"]
        for interface in ("public", "internal"):
            self.admin.post(
                f"{self.auth_url}/endpoints",
                json={
                    "endpoint": {
                        "service_id": service["id"],
                        "interface": interface,
                        "url": url,
                        "region_id": REGION,
                    }
                },
            )
        return service["id"]

    # -- tokens -------------------------------------------------------------------------

    @property
    def admin(self) -> ks_session.Session:
        """A session as the bootstrap admin, system-scoped."""
        assert self._admin is not None, "Keystone is not started"
        return self._admin

    def session(self, auth) -> ks_session.Session:
        return ks_session.Session(auth=auth)

    def password(self, name: str, *, system: bool = False) -> v3.Password:
        """The auth plugin of a user of USERS: scoped to its project, or to the system."""
        user = self.users[name]
        scope = {"system_scope": "all"} if system else {"project_id": user.project_id}
        return v3.Password(
            auth_url=self.auth_url,
            username=name,
            password=user.password,
            user_domain_id="default",
            **scope,
        )

    def token(self, name: str) -> str:
        """A new project-scoped token of a user of USERS."""
        return self.password(name).get_token(self._http)

    def system_admin_token(self) -> str:
        """A new token of the bootstrap admin, scoped to the system (role admin)."""
        return v3.Password(
            auth_url=self.auth_url,
            username="admin",
            password=self.admin_password,
            user_domain_id="default",
            system_scope="all",
        ).get_token(self._http)

    def revoke(self, token: str) -> None:
        r = self.admin.delete(f"{self.auth_url}/auth/tokens", headers={"X-Subject-Token": token})
        assert r.status_code == 204, r.text

    def token_data(self, token: str) -> dict:
        """Keystone's own view of a token (its roles, implied ones included)."""
        return self.admin.get(
            f"{self.auth_url}/auth/tokens", headers={"X-Subject-Token": token}
        ).json()["token"]

    def short_lived_token(self, name: str, seconds: float) -> tuple[str, datetime.datetime]:
        """A token of user ``name`` that expires in ``seconds``, and its expiry.

        Keystone caps a token at the expiry of the application credential it was
        issued for, so a credential that expires soon gives a token that really
        expires soon, without changing Keystone's configuration.
        """
        user = self.users[name]
        own = self.session(self.password(name))
        expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
        credential = own.post(
            f"{self.auth_url}/users/{user.id}/application_credentials",
            json={
                "application_credential": {
                    "name": f"short-{secrets.token_hex(4)}",
                    "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%S.%f"),
                }
            },
        ).json()["application_credential"]
        token = v3.ApplicationCredential(
            auth_url=self.auth_url,
            application_credential_id=credential["id"],
            application_credential_secret=credential["secret"],
        ).get_token(self._http)
        expiry = datetime.datetime.fromisoformat(self.token_data(token)["expires_at"])
        return token, expiry


@pytest.fixture(scope="session", name="keystone")
def keystone_fixture(tmp_path_factory):
    """The running Keystone (import this fixture into a test module to use it)."""
    require(
        importlib.util.find_spec("keystone") is not None,
        "the keystone package is not installed (pip install -e '.[test]')",
    )
    server = Keystone(tmp_path_factory.mktemp("keystone"))
    try:
        server.start()
        yield server
    finally:
        server.stop()
