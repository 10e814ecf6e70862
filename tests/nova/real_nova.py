"""A real Nova (PyPI ``nova``, in .venv-nova) next to Exosuit, started once per test run.

``nova_cloud`` (session scope) brings up, on loopback:

* the real Keystone of the other tests (tests/helpers/keystone_fixture.py), whose
  catalog gets ``compute`` (this Nova) and ``accelerator`` (this Exosuit);
* a real Placement (tests/placement/conftest.py, its own process and SQLite);
* Exosuit: its WSGI application served over HTTP (cheroot) with keystonemiddleware, as
  the ``exosuit`` service user, and a conductor (Placement sync, Nova events) on a
  SQLite database of its own;
* Nova 34: ``nova-api`` (its WSGI application, tests/nova/serve_nova_api.py),
  ``nova-conductor``, ``nova-scheduler`` and two ``nova-compute`` on the fake virt
  driver, hosts ``compute-1`` and ``compute-2`` (the second is where evacuations go;
  ``FakeDriverWithoutFakeNodes``: one node named after the host, its identity kept in
  ``state_path`` as a real driver keeps it, so that a compute can be restarted), on
  three new databases of this machine's MariaDB (``nova_api``, ``nova``, ``nova_cell0``,
  one cell) and a new RabbitMQ virtual host (guest/guest);
* the real Glance of the other tests (tests/glance/glance_fixture.py), with one public
  image uploaded by an admin;
* a stand-in for Neutron (tests/nova/standins.py: why, and what it answers).

Exosuit's hosts are Nova's compute nodes: each host's devices are reported through the
agent API under the compute node's name, and Exosuit puts their providers under the
compute node provider nova-compute created. Nova reaches Exosuit through the catalog
with the user's token and its service token, exactly as it reaches Cyborg.

Without the nova venv (no package index), MariaDB or RabbitMQ the tests skip with the
reason, except under CI=true. The start-up time is printed at the end of the run.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from cheroot import wsgi as cheroot_wsgi
from keystoneauth1 import adapter as ksa_adapter
from keystoneauth1 import exceptions as ks_exceptions

from exosuit.api.deploy import loadapp
from exosuit.conductor.worker import Conductor, Settings
from exosuit.conf import make_conf
from exosuit.db.api import Database
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid
from exosuit.placement.client import use_placement_url
from tests.conftest import new_database_url, require
from tests.helpers import venvs
from tests.helpers.inventory import fpga, snapshot
from tests.helpers.keystone_fixture import REGION, Keystone
from tests.nova.standins import PHYSNET, NeutronStandIn
from tests.placement.conftest import PlacementAPI

HERE = Path(__file__).parent
HOSTS = ("compute-1", "compute-2")
FPGA_ADDRESS = "0000:0c:00.0"
NIC_PF = "0000:3b:00.0"
NIC_VFS = ("0000:3b:02.0", "0000:3b:02.1")
COMPUTE_VERSION = "2.90"
STARTUP_TIMEOUT = 300.0
CONDUCTOR = Settings(
    poll_interval=0.1, lease_seconds=30, max_attempts=8, backoff_base=0.2, backoff_max=2.0
)
STARTUP_TIMES: dict[str, float] = {}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def wait_for(what: str, check, timeout: float = 120.0, interval: float = 0.5):
    """Poll ``check()`` until it returns something true; its value. A service not
    listening yet counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except ks_exceptions.ConnectFailure:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def nic(host: str) -> Device:
    """An SR-IOV NIC as exosuit/drivers/sriov_nic.py reports it, PF mapped to physnet1."""
    return Device(
        type="NIC",
        vendor="8086",
        model="158b",
        driver_name="sriov_nic",
        controlpath_id=pci_cpid(NIC_PF),
        pci_address=NIC_PF,
        deployables=tuple(
            Deployable(
                name=f"{host}_{vf}",
                num_accelerators=1,
                resource_class="CUSTOM_NIC",
                traits=("CUSTOM_VF", "CUSTOM_PHYSNET1"),
                driver_name="sriov_nic",
                attach_handles=(
                    AttachHandle("PCI", {**pci_cpid(vf), "physical_network": PHYSNET}),
                ),
            )
            for vf in NIC_VFS
        ),
    )


def host_devices(host: str) -> list[Device]:
    return [fpga(FPGA_ADDRESS, handles=4, name=f"{host}_{FPGA_ADDRESS}"), nic(host)]


# -- Exosuit ---------------------------------------------------------------------------------


class Exosuit:
    """Exosuit's API over HTTP and its conductor, on one database."""

    def __init__(self, workdir: Path, keystone: Keystone, db_url: str, placement_url: str):
        self.keystone = keystone
        self.db = Database(db_url)
        user = keystone.users["exosuit"]
        credentials = (
            f"auth_type = password\nauth_url = {keystone.auth_url}\nusername = {user.name}\n"
            f"password = {user.password}\nuser_domain_name = Default\n"
            "project_name = service\nproject_domain_name = Default\n"
        )
        path = workdir / "exosuit.conf"
        path.write_text(
            "[DEFAULT]\nbind_timeout = 60\n"
            "[api]\nauth_strategy = keystone\n"
            f"[database]\nconnection = {db_url}\n"
            f"[keystone_authtoken]\nwww_authenticate_uri = {keystone.url}\n"
            f"region_name = {REGION}\nservice_token_roles = service\n"
            f"service_token_roles_required = true\ntoken_cache_time = 600\n{credentials}"
            "[placement]\nmanage_compute_providers = false\nretry_interval = 1\n"
            "max_retry_interval = 2\n"
            f"[nova]\nregion_name = {REGION}\nvalid_interfaces = internal,public\n{credentials}"
            f"[service_user]\nsend_service_user_token = true\n{credentials}"
            "[conductor]\nreconcile_interval = 5\n"
            # New devices ready, as before activation existed: Nova binds them.
            "[inventory]\nnew_device_activation = ready\n"
        )
        self.conf = make_conf([str(path)])
        use_placement_url(self.conf, placement_url)
        self.server = cheroot_wsgi.Server(
            ("127.0.0.1", 0), loadapp(self.conf, self.db), numthreads=8, server_name="exosuit"
        )
        self.server.prepare()
        self.url = f"http://127.0.0.1:{self.server.bind_addr[1]}"
        self._thread = threading.Thread(target=self.server.serve, name="exosuit", daemon=True)
        self._thread.start()
        self.conductor: Conductor | None = None
        self.start_conductor()
        self.admin = self._adapter(keystone.password("p1-admin"))
        self.agent = self._adapter(keystone.password("exosuit"))

    def _adapter(self, auth) -> ksa_adapter.Adapter:
        return ksa_adapter.Adapter(
            self.keystone.session(auth), endpoint_override=f"{self.url}/v2", raise_exc=False
        )

    def start_conductor(self) -> None:
        self.conductor = Conductor(self.conf, self.db, workers=2, settings=CONDUCTOR)
        self.conductor.start()

    def stop_conductor(self) -> None:
        if self.conductor is not None:
            self.conductor.stop(timeout=30)
            self.conductor = None

    def stop(self) -> None:
        self.stop_conductor()
        self.server.stop()
        self._thread.join(10)
        self.db.dispose()

    def report(self, host: str) -> None:
        r = self.agent.put(
            f"{self.url}/agent/v1/hosts/{host}/inventory", json=snapshot(host, host_devices(host))
        )
        assert r.status_code == 200, r.text

    def get(self, path: str) -> dict:
        r = self.admin.get(path)
        assert r.status_code == 200, r.text
        return r.json()

    def arqs(self, instance: str) -> list[dict]:
        return self.get(f"/accelerator_requests?instance={instance}")["arqs"]

    def all_arqs(self) -> list[dict]:
        return self.get("/accelerator_requests")["arqs"]

    def deployables(self) -> dict[str, dict]:
        return {d["name"]: d for d in self.get("/deployables")["deployables"]}

    def device(self, host: str, device_type: str) -> dict:
        [device] = [
            d for d in self.get(f"/devices?hostname={host}")["devices"] if d["type"] == device_type
        ]
        return device

    def profile(self, name: str, groups: list[dict]) -> None:
        r = self.admin.post("/device_profiles", json=[{"name": name, "groups": groups}])
        assert r.status_code == 201, r.text


# -- Nova ------------------------------------------------------------------------------------


@dataclasses.dataclass
class NovaProcess:
    name: str
    process: subprocess.Popen
    log: Path


class Nova:
    """Nova's services, their configuration, databases and message bus."""

    def __init__(self, workdir: Path, venv, keystone: Keystone, db_servers):
        self.workdir = workdir
        self.venv = venv
        self.keystone = keystone
        self.db_servers = db_servers
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tag = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.vhost = f"exosuit-nova-{self.tag}"
        self.processes: dict[str, NovaProcess] = {}
        self.etc = workdir / "etc"
        self.etc.mkdir(parents=True, exist_ok=True)
        self.databases = {
            name: db_servers["mariadb"].create() for name in ("api", "cell0", "cell1")
        }

    # -- set-up ----------------------------------------------------------------------------
    def configure(
        self, exosuit_url: str, placement_url: str, neutron_url: str, glance_url: str
    ) -> None:
        nova = self.keystone.users["nova"]
        credentials = (
            f"auth_type = password\nauth_url = {self.keystone.auth_url}\n"
            f"username = {nova.name}\npassword = {nova.password}\n"
            "user_domain_name = Default\nproject_name = service\n"
            "project_domain_name = Default\n"
        )
        transport = f"rabbit://guest:guest@127.0.0.1:5672/{self.vhost}"
        paste = Path(self.venv.path) / "etc" / "nova" / "api-paste.ini"
        shutil.copy(paste, self.etc / "api-paste.ini")
        (self.etc / "nova.conf").write_text(f"""\
[DEFAULT]
transport_url = {transport}
compute_driver = fake.FakeDriverWithoutFakeNodes
state_path = {self.workdir}/state
use_stderr = true
debug = false
shelved_offload_time = 0
arq_binding_timeout = 120
heal_instance_info_cache_interval = -1
my_ip = 127.0.0.1
[wsgi]
api_paste_config = {self.etc}/api-paste.ini
[api]
auth_strategy = keystone
[api_database]
connection = {self.databases["api"]}
[database]
connection = {self.databases["cell1"]}
[keystone_authtoken]
www_authenticate_uri = {self.keystone.url}
region_name = {REGION}
service_token_roles_required = true
{credentials}
[service_user]
send_service_user_token = true
{credentials}
[placement]
auth_type = admin_token
endpoint = {placement_url}
token = admin
endpoint_override = {placement_url}
[cyborg]
region_name = {REGION}
valid_interfaces = internal,public
[neutron]
endpoint_override = {neutron_url}
region_name = {REGION}
{credentials}
[glance]
endpoint_override = {glance_url}
region_name = {REGION}
[scheduler]
discover_hosts_in_cells_interval = 2
workers = 1
[conductor]
workers = 1
[oslo_concurrency]
lock_path = {self.workdir}/locks
[oslo_messaging_notifications]
driver = noop
[os_vif_ovs]
ovsdb_connection = tcp:127.0.0.1:1
""")
        for host in HOSTS:
            (self.workdir / host / "instances").mkdir(parents=True, exist_ok=True)
            (self.etc / f"{host}.conf").write_text(
                f"[DEFAULT]\nhost = {host}\nstate_path = {self.workdir}/{host}\n"
                f"instances_path = {self.workdir}/{host}/instances\n"
            )

    def rabbit_vhost(self) -> None:
        for args in (
            ["add_vhost", self.vhost],
            ["set_permissions", "-p", self.vhost, "guest", ".*", ".*", ".*"],
        ):
            subprocess.run(
                ["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=120
            )

    def manage(self, *args: str) -> None:
        result = subprocess.run(
            [
                str(self.venv.bin("nova-manage")),
                "--config-file",
                str(self.etc / "nova.conf"),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, f"nova-manage {' '.join(args)}: {result.stderr[-3000:]}"

    def sync_databases(self) -> None:
        self.manage("api_db", "sync")
        self.manage("cell_v2", "map_cell0", "--database_connection", self.databases["cell0"])
        self.manage("cell_v2", "create_cell", "--name", "cell1")
        self.manage("db", "sync")

    # -- processes -------------------------------------------------------------------------
    def spawn(self, name: str, argv: list[str]) -> None:
        log = self.workdir / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        with open(log, "ab") as out:
            process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
            )
        self.processes[name] = NovaProcess(name, process, log)

    def start(self) -> None:
        conf = str(self.etc / "nova.conf")
        self.spawn(
            "nova-api",
            [str(self.venv.python), str(HERE / "serve_nova_api.py"), str(self.etc), str(self.port)],
        )
        for service in ("nova-conductor", "nova-scheduler"):
            self.spawn(service, [str(self.venv.bin(service)), "--config-file", conf])
        for host in HOSTS:
            self.spawn(
                f"nova-compute-{host}",
                [
                    str(self.venv.bin("nova-compute")),
                    "--config-file",
                    conf,
                    "--config-file",
                    str(self.etc / f"{host}.conf"),
                ],
            )

    def restart_compute(self, host: str) -> None:
        """Stop nova-compute on ``host`` and start it again (after an evacuation Nova
        wants the source restarted: it cleans up there, then it may be forced up)."""
        name = f"nova-compute-{host}"
        old = self.processes.pop(name)
        os.killpg(old.process.pid, signal.SIGTERM)
        try:
            old.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(old.process.pid, signal.SIGKILL)
            old.process.wait(timeout=10)
        conf = str(self.etc / "nova.conf")
        self.spawn(
            name,
            [
                str(self.venv.bin("nova-compute")),
                "--config-file",
                conf,
                "--config-file",
                str(self.etc / f"{host}.conf"),
            ],
        )

    def check_alive(self) -> None:
        for p in self.processes.values():
            code = p.process.poll()
            if code is not None:
                raise AssertionError(f"{p.name} exited with {code}:\n{self.tail(p.name)}")

    def tail(self, name: str, chars: int = 4000) -> str:
        try:
            return self.processes[name].log.read_text(errors="replace")[-chars:]
        except (KeyError, OSError):
            return ""

    def stop(self) -> None:
        for p in self.processes.values():
            if p.process.poll() is None:
                os.killpg(p.process.pid, signal.SIGTERM)
        for p in self.processes.values():
            try:
                p.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.process.pid, signal.SIGKILL)
                p.process.wait(timeout=10)
        subprocess.run(
            ["rabbitmqctl", "-q", "delete_vhost", self.vhost],
            capture_output=True,
            timeout=120,
            check=False,
        )


# -- the cloud -------------------------------------------------------------------------------


class NovaCloud:
    """What the tests drive: Nova's API as a user and as an admin, Exosuit, Placement."""

    def __init__(self, keystone, nova: Nova, exosuit: Exosuit, placement_api, standins):
        self.keystone = keystone
        self.nova = nova
        self.exosuit = exosuit
        self.placement = placement_api
        self.standins = standins
        headers = {"OpenStack-API-Version": f"compute {COMPUTE_VERSION}"}
        self.user = ksa_adapter.Adapter(
            keystone.session(keystone.password("p1-member")),
            endpoint_override=f"{nova.url}/v2.1",
            additional_headers=headers,
            raise_exc=False,
        )
        self.admin = ksa_adapter.Adapter(
            keystone.session(keystone.password("p1-admin")),
            endpoint_override=f"{nova.url}/v2.1",
            additional_headers=headers,
            raise_exc=False,
        )
        self.flavors: dict[str, str] = {}
        self.image = ""

    # -- Nova's API ------------------------------------------------------------------------
    def flavor(self, name: str, device_profile: str | None) -> str:
        if name in self.flavors:
            return self.flavors[name]
        r = self.admin.post(
            "/flavors", json={"flavor": {"name": name, "ram": 64, "vcpus": 1, "disk": 1}}
        )
        assert r.status_code == 200, r.text
        flavor = r.json()["flavor"]["id"]
        if device_profile:
            r = self.admin.post(
                f"/flavors/{flavor}/os-extra_specs",
                json={"extra_specs": {"accel:device_profile": device_profile}},
            )
            assert r.status_code == 200, r.text
        self.flavors[name] = flavor
        return flavor

    def boot(self, flavor: str, *, networks="none", name: str | None = None) -> str:
        body = {
            "server": {
                "name": name or f"vm-{uuid.uuid4().hex[:6]}",
                "imageRef": self.image,
                "flavorRef": flavor,
                "networks": networks,
            }
        }
        r = self.user.post("/servers", json=body)
        assert r.status_code == 202, r.text
        return r.json()["server"]["id"]

    def server(self, server_id: str, *, admin: bool = True) -> dict | None:
        r = (self.admin if admin else self.user).get(f"/servers/{server_id}")
        if r.status_code == 404:
            return None
        assert r.status_code == 200, r.text
        return r.json()["server"]

    def wait_status(self, server_id: str, *statuses: str, timeout: float = 180.0) -> dict:
        seen: dict = {}

        def check():
            self.nova.check_alive()
            server = self.server(server_id)
            seen["server"] = server
            if server is None:
                raise AssertionError(f"server {server_id} is gone")
            if server["status"] in statuses and not server.get("OS-EXT-STS:task_state"):
                return server
            if server["status"] == "ERROR" and "ERROR" not in statuses:
                raise AssertionError(f"server {server_id} in ERROR: {server.get('fault')}")
            return None

        try:
            return wait_for(f"server {server_id} {'/'.join(statuses)}", check, timeout)
        except AssertionError as error:
            raise AssertionError(f"{error}; last seen: {seen.get('server')}") from None

    def wait_gone(self, server_id: str, timeout: float = 120.0) -> None:
        wait_for(f"server {server_id} deleted", lambda: self.server(server_id) is None, timeout)

    def action(self, server_id: str, body: dict, *, admin: bool = False) -> None:
        r = (self.admin if admin else self.user).post(f"/servers/{server_id}/action", json=body)
        assert r.status_code in (200, 202), r.text

    def delete(self, server_id: str) -> None:
        r = self.user.delete(f"/servers/{server_id}")
        assert r.status_code == 204, r.text
        self.wait_gone(server_id)

    def service(self, host: str) -> dict:
        r = self.admin.get(f"/os-services?binary=nova-compute&host={host}")
        assert r.status_code == 200, r.text
        [service] = r.json()["services"]
        return service

    def force_down(self, host: str, down: bool) -> None:
        service = self.service(host)
        r = self.admin.put(f"/os-services/{service['id']}", json={"forced_down": down})
        assert r.status_code == 200, r.text

    def recover(self, host: str) -> None:
        """Bring an evacuated host back as an operator does: restart its nova-compute
        (which cleans up what was evacuated), then unset forced_down, and wait until it
        is up."""
        self.nova.restart_compute(host)
        service = self.service(host)

        def forced_up():
            r = self.admin.put(f"/os-services/{service['id']}", json={"forced_down": False})
            return r.status_code == 200

        wait_for(f"{host} forced up (after its restart)", forced_up, timeout=180, interval=1)
        wait_for(f"{host} up", lambda: self.service(host)["state"] == "up", timeout=180)

    def host_of(self, server: dict) -> str:
        return server["OS-EXT-SRV-ATTR:host"]

    # -- Placement -------------------------------------------------------------------------
    def allocations(self, consumer: str) -> dict:
        return self.placement.get(f"/allocations/{consumer}")["allocations"]


def _register_catalog(keystone: Keystone, nova_url: str, exosuit_url: str) -> list[str]:
    """This Nova and this Exosuit as the only ``compute`` and ``accelerator`` services of
    the catalog (``register_service`` replaces what earlier tests of the run registered).
    Their ids."""
    return [
        keystone.register_service("compute", "nova", f"{nova_url}/v2.1"),
        keystone.register_service("accelerator", "exosuit", f"{exosuit_url}/v2"),
    ]


def _wait_for_computes(cloud: NovaCloud) -> None:
    def computes_up():
        cloud.nova.check_alive()
        r = cloud.admin.get("/os-services?binary=nova-compute")
        if r.status_code != 200:
            return None
        services = {s["host"]: s for s in r.json()["services"]}
        return all(services.get(h, {}).get("state") == "up" for h in HOSTS)

    wait_for("both nova-compute services up", computes_up, STARTUP_TIMEOUT)

    def hypervisors():
        r = cloud.admin.get("/os-hypervisors")
        return r.status_code == 200 and {
            h["hypervisor_hostname"] for h in r.json()["hypervisors"]
        } >= set(HOSTS)

    wait_for("both compute nodes mapped to the cell", hypervisors, STARTUP_TIMEOUT)
    for host in HOSTS:
        wait_for(
            f"compute node provider {host} in Placement",
            lambda host=host: cloud.placement.providers(name=host),
            STARTUP_TIMEOUT,
        )


def _wait_for_device_providers(cloud: NovaCloud) -> None:
    deployables = cloud.exosuit.deployables()

    def synced():
        for host in HOSTS:
            for name in (f"{host}_{FPGA_ADDRESS}", *(f"{host}_{vf}" for vf in NIC_VFS)):
                rp = cloud.placement.provider(deployables[name]["rp_uuid"])
                if rp is None or not cloud.placement.inventories(rp["uuid"]):
                    return False
        return True

    wait_for("Exosuit's device providers in Placement", synced, STARTUP_TIMEOUT)


def _upload_image(keystone: Keystone, glance_url: str) -> str:
    """A public image in the real Glance, uploaded by an admin (the fake driver never
    reads its data)."""
    admin = ksa_adapter.Adapter(
        keystone.session(keystone.password("p1-admin")),
        endpoint_override=glance_url,
        raise_exc=False,
    )
    r = admin.post(
        "/v2/images",
        json={
            "name": "nova-real",
            "disk_format": "raw",
            "container_format": "bare",
            "visibility": "public",
        },
    )
    assert r.status_code == 201, r.text
    image = r.json()["id"]
    r = admin.put(
        f"/v2/images/{image}/file",
        data=b"\0" * 4096,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 204, r.text
    return image


@pytest.fixture(scope="session")
def nova_cloud(request, keystone, placement, glance, db_servers, tmp_path_factory):
    started = time.monotonic()
    require(shutil.which("rabbitmqctl") is not None, "rabbitmqctl (RabbitMQ) is not installed")
    require(_reachable(5672), "RabbitMQ is not listening on 127.0.0.1:5672")
    server = db_servers["mariadb"]
    require(server.engine is not None, server.error or "")
    try:
        venv = venvs.ensure("nova")
    except RuntimeError as error:
        require(False, f"cannot build .venv-nova: {error}")
    STARTUP_TIMES["venv"] = time.monotonic() - started
    workdir = tmp_path_factory.mktemp("nova")
    standins = NeutronStandIn(keystone.projects["p1"]).start()
    exosuit = Exosuit(
        workdir,
        keystone,
        new_database_url("sqlite", db_servers, tmp_path_factory),
        placement.url,
    )
    nova = Nova(workdir, venv, keystone, db_servers)
    cloud = None
    catalog: list[str] = []
    try:
        catalog = _register_catalog(keystone, nova.url, exosuit.url)
        nova.configure(exosuit.url, placement.url, standins.url, glance.url)
        nova.rabbit_vhost()
        t = time.monotonic()
        nova.sync_databases()
        STARTUP_TIMES["databases"] = time.monotonic() - t
        t = time.monotonic()
        nova.start()
        cloud = NovaCloud(keystone, nova, exosuit, PlacementAPI(placement.url), standins)
        cloud.image = _upload_image(keystone, glance.url)
        _wait_for_computes(cloud)
        STARTUP_TIMES["services"] = time.monotonic() - t
        for host in HOSTS:
            exosuit.report(host)
        _wait_for_device_providers(cloud)
        exosuit.profile(
            "nova-fpga", [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]
        )
        exosuit.profile(
            "nova-smartnic", [{"resources:CUSTOM_NIC": "1", "trait:CUSTOM_PHYSNET1": "required"}]
        )
        STARTUP_TIMES["total"] = time.monotonic() - started
        yield cloud
    except BaseException:
        for name in nova.processes:
            print(f"--- {name} ---\n{nova.tail(name)}")
        raise
    finally:
        exosuit.stop()
        nova.stop()
        standins.stop()
        for service in catalog:
            keystone.admin.delete(f"{keystone.auth_url}/services/{service}")


def pytest_terminal_summary(terminalreporter):
    if STARTUP_TIMES:
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in STARTUP_TIMES.items())
        terminalreporter.write_line(f"real Nova fixture start-up: {parts}")


@pytest.fixture
def cloud(nova_cloud) -> NovaCloud:
    nova_cloud.nova.check_alive()
    return nova_cloud
