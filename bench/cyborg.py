"""Cyborg 17 as a target of bench/api.py (``--target cyborg``): the same client and
scenarios against OpenStack Cyborg, on this machine, in the same run.

``cyborg_target(workdir, workers)`` (a context manager) makes a fresh MariaDB database
(``cyborg-dbsync upgrade`` of .venv-cyborg's openstack-cyborg), seeds the bench's
host into Cyborg's own tables (``DEPLOYABLES`` FPGAs with ``HANDLES`` PCI attach handles
each, a ``rc``/``trait`` attribute each, as Cyborg's conductor stores an agent's
report: Cyborg's agent needs hardware), starts ``cyborg-conductor`` and Cyborg's API
(``cyborg.wsgi.api`` under gunicorn, ``workers`` processes of ``threads`` threads, as
exosuit-api runs: ``cyborg-api``'s own server refuses to run on the threading backend
of Cyborg 17's oslo.service; its paste pipeline without ``authtoken``: noauth, the
client sending the identity headers keystonemiddleware would set, an admin with a
service token as Nova is), on RabbitMQ at ``EXOSUIT_BENCH_RABBIT_URL`` (default
``rabbit://guest:guest@127.0.0.1:5672/``), with a stand-in Nova answering the bind's
``os-server-external-events`` (200, on a thread of this process), and creates the ARQ
profile through the API. It yields a ``CyborgTarget``: the API's address and process,
the deployables' resource provider UUIDs, the database URL and the headers to send.
Everything is stopped and dropped afterwards.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field

import gunicorn
import sqlalchemy as sa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv-cyborg")
RABBIT_URL = os.environ.get("EXOSUIT_BENCH_RABBIT_URL", "rabbit://guest:guest@127.0.0.1:5672/")
PROJECT = "5f0c0a4e8d1b4c6fa3e2b1d0c9e8f7a6"
# What keystonemiddleware sets for Nova's calls: the user's token (an admin here) and
# its service token (role service).
HEADERS = {
    "X-Roles": "admin,member,reader",
    "X-Project-Id": PROJECT,
    "X-User-Id": "bench",
    "X-Service-Roles": "service",
    "X-Identity-Status": "Confirmed",
    "X-Service-Identity-Status": "Confirmed",
}
PASTE = """[pipeline:main]
pipeline = request_id api_v2

[app:api_v2]
paste.app_factory = cyborg.api.app:app_factory

[filter:request_id]
paste.filter_factory = oslo_middleware:RequestId.factory
"""


def cyborg_missing() -> str | None:
    """Why Cyborg cannot run here, or None."""
    for tool in ("cyborg-api", "cyborg-conductor", "cyborg-dbsync"):
        if not os.path.exists(os.path.join(VENV, "bin", tool)):
            return f"{VENV}/bin/{tool} not found (make venvs in the main checkout, then link)"
    return None


@dataclass
class CyborgTarget:
    address: tuple[str, int]
    api: subprocess.Popen
    conductor: subprocess.Popen
    rp_uuids: list[str]
    url: str
    headers: dict[str, str] = field(default_factory=lambda: dict(HEADERS))
    log_dir: str = ""


class _Nova(http.server.BaseHTTPRequestHandler):
    """What Cyborg's conductor asks of Nova and Placement here: their version documents
    (openstacksdk's discovery, at start), and Nova's os-server-external-events, which
    each bind posts, answered 200 (each event accepted)."""

    protocol_version = "HTTP/1.1"

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        path = self.path.rstrip("/")
        if path == "/placement":
            placement = {
                "id": "v1.0", "status": "CURRENT", "min_version": "1.0", "max_version": "1.39",
                "links": [{"rel": "self", "href": f"{base}/placement/"}],
            }  # fmt: skip
            self._answer(200, {"versions": [placement]})
            return
        version = {
            "id": "v2.1", "status": "CURRENT", "version": "2.96", "min_version": "2.1",
            "links": [{"rel": "self", "href": f"{base}/v2.1/"}],
        }  # fmt: skip
        if path == "/v2.1":
            self._answer(200, {"version": version})
        elif path == "":
            self._answer(200, {"versions": [version]})
        else:
            self._answer(404, {})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        events = json.loads(self.rfile.read(length) or b"{}").get("events", [])
        self._answer(200, {"events": [{**e, "code": 200} for e in events]})

    def log_message(self, *args) -> None:
        pass


def _seed(url: str, hostname: str, deployables: int, handles: int) -> list[str]:
    """The bench's host in Cyborg's tables, as its conductor stores a fake driver's
    report; returns the deployables' resource provider UUIDs."""
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    meta.reflect(engine, only=["devices", "deployables", "attributes", "controlpath_ids",
                               "attach_handles"])  # fmt: skip
    t = meta.tables
    now = sa.func.now()
    rp_uuids = []
    with engine.begin() as conn:
        for i in range(deployables):
            address = f"0000:{0x10 + i:02x}:00.0"
            device = conn.execute(
                t["devices"]
                .insert()
                .values(
                    uuid=str(uuid.uuid4()),
                    type="FPGA",
                    vendor="0xABCD",
                    model="bench",
                    std_board_info=json.dumps({"device_id": "0xabcd", "class": "Fake"}),
                    vendor_board_info="",
                    hostname=hostname,
                    status="enabled",
                    created_at=now,
                )  # fmt: skip
            ).inserted_primary_key[0]
            rp_uuid = str(uuid.uuid4())
            rp_uuids.append(rp_uuid)
            deployable = conn.execute(
                t["deployables"]
                .insert()
                .values(
                    uuid=str(uuid.uuid4()),
                    name=f"{hostname}_{address}",
                    num_accelerators=handles,
                    device_id=device,
                    rp_uuid=rp_uuid,
                    driver_name="fake",
                    created_at=now,
                )  # fmt: skip
            ).inserted_primary_key[0]
            for key, value in (("rc", "FPGA"), ("trait0", "CUSTOM_FAKE_DEVICE")):
                conn.execute(
                    t["attributes"]
                    .insert()
                    .values(
                        uuid=str(uuid.uuid4()),
                        deployable_id=deployable,
                        key=key,
                        value=value,
                        created_at=now,
                    )  # fmt: skip
                )
            bus, slot = address.split(":")[1], address.split(":")[2]
            pci = {"domain": "0000", "bus": bus, "device": slot[:2], "function": "0"}
            cpid = conn.execute(
                t["controlpath_ids"]
                .insert()
                .values(
                    uuid=str(uuid.uuid4()),
                    device_id=device,
                    cpid_type="PCI",
                    cpid_info=json.dumps(pci),
                    created_at=now,
                )  # fmt: skip
            ).inserted_primary_key[0]
            for h in range(handles):
                function = {"function": str(h % 8), "device": f"{int(slot[:2], 16) + h // 8:02x}"}
                info = {**pci, **function}
                conn.execute(
                    t["attach_handles"]
                    .insert()
                    .values(
                        uuid=str(uuid.uuid4()),
                        deployable_id=deployable,
                        cpid_id=cpid,
                        in_use=False,
                        attach_type="PCI",
                        attach_info=json.dumps(info),
                        created_at=now,
                    )  # fmt: skip
                )
    engine.dispose()
    return rp_uuids


def _wait_http(url: str, proc: subprocess.Popen, log: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(log) as f:
                    tail = f.read()[-3000:]
                raise RuntimeError(f"{url} did not answer:\n{tail}") from None
            time.sleep(0.3)


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def cyborg_target(
    workdir: str,
    admin_url: str,
    *,
    workers: int = 2,
    threads: int = 4,
    hostname: str,
    deployables: int,
    handles: int,
    profile: str,
    free_port,
):
    missing = cyborg_missing()
    if missing:
        raise RuntimeError(missing)
    admin = sa.make_url(admin_url)
    name = f"cyborg_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    url = admin.set(database=name, drivername="mysql+pymysql").render_as_string(hide_password=False)
    nova = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Nova)
    threading.Thread(target=nova.serve_forever, daemon=True).start()
    api = conductor = None
    try:
        port = free_port()
        paste = os.path.join(workdir, "api-paste.ini")
        with open(paste, "w") as f:
            f.write(PASTE)
        conf = os.path.join(workdir, "cyborg.conf")
        with open(conf, "w") as f:
            f.write(
                f"[DEFAULT]\ntransport_url = {RABBIT_URL}\nhost = {hostname}\n"
                f"state_path = {workdir}\ndebug = false\n"
                f"[api]\nhost_ip = 127.0.0.1\nport = {port}\napi_workers = {workers}\n"
                f"api_paste_config = {paste}\n"
                f"[database]\nconnection = {url}\n"
                f"[nova]\nauth_type = none\n"
                f"endpoint_override = http://127.0.0.1:{nova.server_address[1]}/v2.1\n"
                f"[placement]\nauth_type = none\n"
                f"endpoint_override = http://127.0.0.1:{nova.server_address[1]}/placement\n"
                f"[oslo_concurrency]\nlock_path = {workdir}\n"
                "[oslo_messaging_notifications]\ndriver = noop\n"
            )
        done = subprocess.run(
            [os.path.join(VENV, "bin", "cyborg-dbsync"), "--config-file", conf, "upgrade"],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise RuntimeError("cyborg-dbsync upgrade failed:\n" + done.stderr[-3000:])
        rp_uuids = _seed(url, hostname, deployables, handles)
        logs = {}
        procs = {}
        # cyborg-api's own server (oslo.service's eventlet WSGI server) refuses to run
        # on the threading backend Cyborg 17 uses: it is deployed as a WSGI application
        # (cyborg.wsgi.api) instead, here under gunicorn (gthread, ``threads`` threads
        # per worker, as Exosuit's API runs), imported from this virtualenv.
        with open(os.path.join(workdir, "cyborg_wsgi.py"), "w") as f:
            f.write(
                f"import sys\nsys.argv = ['cyborg-api', '--config-file', {conf!r}]\n"
                "from cyborg.api import wsgi_app\n"
                "application = wsgi_app.init_application()\n"
            )
        site = os.path.dirname(os.path.dirname(gunicorn.__file__))
        gunicorn_argv = [
            "gunicorn", "-w", str(workers), "-k", "gthread", "--threads", str(threads),
            "-b", f"127.0.0.1:{port}", "--chdir", workdir, "--keep-alive", "75",
            "cyborg_wsgi:application",
        ]  # fmt: skip
        launch = (
            f"import sys; sys.path.append({site!r}); sys.argv = {gunicorn_argv!r}; "
            "from gunicorn.app.wsgiapp import run; run()"
        )
        commands = {
            "conductor": [os.path.join(VENV, "bin", "cyborg-conductor"), "--config-file", conf],
            "api": [os.path.join(VENV, "bin", "python"), "-c", launch],
        }
        for service, argv in commands.items():
            logs[service] = os.path.join(workdir, f"cyborg-{service}.log")
            with open(logs[service], "w") as log:
                procs[service] = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
        conductor, api = procs["conductor"], procs["api"]
        _wait_http(f"http://127.0.0.1:{port}/v2", api, logs["api"])
        body = json.dumps(
            [
                {
                    "name": profile,
                    "groups": [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}],
                }
            ]
        ).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v2/device_profiles",
            data=body,
            method="POST",
            headers={**HEADERS, "Content-Type": "application/json"},
        )
        # The conductor may still be connecting to the bus: retried for a while.
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(request, timeout=60).read()
                break
            except OSError as error:
                if time.monotonic() > deadline or conductor.poll() is not None:
                    with open(logs["conductor"]) as f:
                        tail = f.read()[-3000:]
                    raise RuntimeError(f"POST /v2/device_profiles: {error}\n{tail}") from None
                time.sleep(1)
        yield CyborgTarget(
            ("127.0.0.1", port), api, conductor, rp_uuids, url, dict(HEADERS), workdir
        )
    finally:
        _stop(api)
        _stop(conductor)
        nova.shutdown()
        with engine.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        engine.dispose()
