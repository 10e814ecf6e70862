"""Fault campaign: Exosuit's invariants while its processes, database and Placement fail.

    .venv/bin/python bench/chaos.py --backend both --duration 300 --kills 12 --seed 1

Results and the commands behind them: doc/reliability.md ("Fault campaign").

For each backend (``postgresql``, ``mariadb``, ``galera``; ``both``: the first two,
``all``: the three, one after the other) it starts, in a temporary folder:

* the database: on PostgreSQL a private cluster (``initdb`` + ``pg_ctl`` on a free
  port; as root both run as the ``postgres`` user through ``runuser``, since initdb
  refuses root); on MariaDB a fresh database on the local server (127.0.0.1:3306)
  that the services reach through a TCP proxy of this script (the server is shared
  with others and cannot be stopped); on Galera a private 3-node cluster
  (bench/galera.py), each API and conductor on one node (api-1 and conductor-2 on node
  1, api-2 on node 2, conductor-1 on node 3), their reads waiting for the cluster's
  last commit (``wsrep_sync_wait``, doc/deploy-galera.md);
* a real OpenStack Placement (tests/placement/placement_server.py, its own SQLite);
* two ``exosuit-api`` and two ``exosuit-conductor`` processes on that database
  (standalone Placement sync), each kept running by a supervisor that restarts it
  1-5 s after it dies (as systemd's ``Restart=always`` would);
* two real ``exosuit-agent`` processes (simulated driver: programmable fake FPGAs and
  GPUs), each reporting to one of the APIs, and simulated hosts whose inventory
  snapshots (PUT /agent/v1/hosts/{host}/inventory) change now and then: a GPU
  removed and back, an FPGA unhealthy and back;
* a Nova-shaped load: concurrent cycles that schedule through Placement (``GET
  /allocation_candidates``, ``PUT /allocations/{instance}``), then call Exosuit as
  Nova does (``GET /v2/device_profiles?name=``, ``POST /v2/accelerator_requests``,
  one ``PATCH`` binding to (host, provider, instance), ``GET
  ?instance=&bind_state=resolved`` until resolved), keep the instance a while, and
  ``DELETE ?instance=`` and the allocation. A failed or unknown bind deletes its
  ARQs (``DELETE ?arqs=``) and allocation, as Nova does. Some profiles ask for an
  FPGA function (``accel:function_id``): those binds wait for the real agents to
  program the device. A fifth of the cycles make a standalone claim (2.8) of a GPU
  instead, for a consumer of their own (a lost answer is sent again for the same
  consumer), hold it a while and release it. Every acknowledged write is recorded: an
  ARQ created (201), bound (202 then resolved ``Bound``), deleted (204); a claim made
  (201), released (204).

Faults, at seeded random times within ``--duration``: ``--kills`` kill -9 of an API or
conductor (its whole process group: server and workers), restarted by the supervisor;
one database outage of ``--db-outage`` seconds (PostgreSQL: ``pg_ctl stop -m
immediate``, every server process killed as in a crash, then started again with crash
recovery; MariaDB: the proxy resets every connection and refuses new ones; Galera:
node 1 (api-1's and conductor-2's) killed -9, started again after the outage from its
recovered position, so that it rejoins by IST; then an API and a conductor are killed,
in that order); one
Placement outage of ``--placement-outage`` seconds (stopped, then started on the same
port).

Afterwards: the faults and the load stop, every process is up again, the simulated
hosts send a last report, the job queue drains (bounded by ``--settle-timeout``), one
Placement reconcile runs (a verifying sync of every host, what ``placement_reconcile``
queues) and these invariants are checked on the database and Placement directly (the
checks are bench/invariants.py's, which tests/bench/test_chaos.py also holds against bad states):

1. no attach handle held by two ARQs; every handle in use is held by exactly one ARQ
   and every held handle is in use;
2. no ARQ in a transitional state (``BindStarted``, ``Deleting``) past ``bind_timeout``;
3. Placement equal to the database, as the sync defines it: each deployable's provider
   (name, parent, resource class, total, reserved, traits, no other class) and no
   other provider; the allocations on them equal to the ``Bound`` ARQs (instance,
   provider);
4. every acknowledged write present: ARQs bound are ``Bound`` to what was asked,
   created ones exist, deleted ones are gone; claims made are held, released ones hold
   nothing, none is stuck; each simulated host's last report is the host's inventory,
   each real agent's devices are there (on Galera: on every node, and the three nodes'
   tables equal, ``CHECKSUM TABLE``);
5. no process exited but those killed (and the starts refused while the database was
   down), and no request answered 500.

It prints a summary (operations, faults, errors seen by the clients by type,
invariants) and exits 1 if an invariant is violated.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import httpx  # noqa: E402
import sqlalchemy as sa  # noqa: E402

from bench import invariants  # noqa: E402
from bench._common import (  # noqa: E402
    ADMIN_URLS,
    BIN,
    PlacementProcess,
    PrivatePostgres,
    free_port,
)
from bench.galera import GaleraCluster  # noqa: E402
from bench.invariants import Arq  # noqa: E402
from exosuit.agent.snapshot import build_snapshot  # noqa: E402
from exosuit.db import models  # noqa: E402
from exosuit.db import placement as placement_db  # noqa: E402
from exosuit.db.api import Database  # noqa: E402
from exosuit.db.metrics import read_counters  # noqa: E402
from exosuit.drivers.base import AttachHandle, Deployable, Device, pci_cpid  # noqa: E402
from exosuit.placement.sync import compute_provider_uuid  # noqa: E402

PLACEMENT_VERSION = "placement 1.39"
V28 = {"OpenStack-API-Version": "accelerator 2.8"}
# The share of the load's cycles that make a standalone claim instead of a Nova instance.
CLAIM_SHARE = 0.2
# How many times the Placement check waits for the syncs queued after the reconcile.
SETTLE_ROUNDS = 5
SIM_TRAIT = "CUSTOM_CHAOS_SIM"
FUNCTIONS = ("c4a05000-0000-4000-8000-00000000000a", "c4a05000-0000-4000-8000-00000000000b")
# Profiles: name -> (device profile groups, Placement query, share of the cycles).
PROFILES = {
    "chaos-fpga": (
        [{"resources:FPGA": "1", f"trait:{SIM_TRAIT}": "required"}],
        f"resources=FPGA:1&required={SIM_TRAIT}",
        0.5,
    ),
    "chaos-gpu": ([{"resources:PGPU": "1"}], "resources=PGPU:1", 0.3),
    **{
        f"chaos-program-{i}": (
            [
                {
                    "resources:FPGA": "1",
                    "trait:CUSTOM_FAKE_DEVICE": "required",
                    f"trait:{SIM_TRAIT}": "forbidden",
                    "accel:function_id": function,
                }
            ],
            f"resources=FPGA:1&required=CUSTOM_FAKE_DEVICE,!{SIM_TRAIT}",
            0.1,
        )
        for i, function in enumerate(FUNCTIONS)
    },
}


def log(campaign: Campaign | None, message: str) -> None:
    stamp = f"t+{time.monotonic() - campaign.t0:6.1f}s " if campaign and campaign.t0 else ""
    print(f"[chaos] {stamp}{message}", file=sys.stderr, flush=True)


def sync_wait(url: str) -> str:
    """A Galera URL whose reads wait for the cluster's last commit (doc/deploy-galera.md)."""
    return f"{url}?init_command={urllib.parse.quote('SET SESSION wsrep_sync_wait = 1')}"


# --- processes ------------------------------------------------------------------------------


class Supervised:
    """A service process in its own process group, restarted by the campaign's supervisor
    after it exits (a crash, a kill -9, a start refused while the database is down)."""

    def __init__(self, name: str, kind: str, argv: list[str], logfile: str) -> None:
        self.name, self.kind, self.argv, self.logfile = name, kind, argv, logfile
        self.process: subprocess.Popen | None = None
        self.started_at = 0.0
        self.down_until = 0.0  # the supervisor starts it again from then on
        self.kills = self.starts = self.failed_starts = self.unexpected_exits = 0
        self.exits: list[str] = []

    def start(self) -> None:
        with open(self.logfile, "a") as out:
            out.write(f"\n--- chaos: starting {self.name} ---\n")
            out.flush()
            self.process = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started_at = time.monotonic()
        self.starts += 1

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> None:
        """SIGKILL to the whole group (an API's server and its workers)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None
        self.kills += 1

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def reap(self) -> str | None:
        """If it exited by itself: why (and it is counted); else None."""
        if self.process is None or self.process.poll() is None:
            return None
        code = self.process.returncode
        lived = time.monotonic() - self.started_at
        self.process = None
        with open(self.logfile, "rb") as f:
            f.seek(max(0, os.path.getsize(self.logfile) - 1000))
            tail = f.read().decode(errors="replace")
        errors = [line for line in tail.splitlines() if "Error" in line] or [""]
        if lived < 20 and "OperationalError" in tail:
            # exosuit-api and -conductor refuse to start while the database is down.
            self.failed_starts += 1
            return f"{self.name} exited with {code} {lived:.1f} s after its start (database down)"
        self.unexpected_exits += 1
        self.exits.append(f"{self.name}: exit {code} after {lived:.0f} s: {errors[-1][:200]}")
        return f"{self.name} EXITED with {code} after {lived:.0f} s (not killed by the campaign)"


class DbProxy:
    """A TCP proxy (this script in ``_proxy`` mode, its own process) in front of the shared
    MariaDB server: SIGUSR1 resets every connection and closes the port (an outage),
    SIGUSR2 opens it again."""

    def __init__(self, target_port: int, logfile: str) -> None:
        self.port = free_port()
        with open(logfile, "a") as out:
            self.process = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "_proxy", str(self.port)]
                + ["127.0.0.1", str(target_port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the database proxy did not start") from None
                time.sleep(0.05)

    def cut(self) -> None:
        self.process.send_signal(signal.SIGUSR1)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGUSR2)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def proxy_main(listen_port: int, target_host: str, target_port: int) -> int:
    """The proxy of ``DbProxy``."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        state: dict = {"server": None}
        done = asyncio.Event()

        async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                upstream_reader, upstream = await asyncio.open_connection(target_host, target_port)
            except OSError:
                writer.transport.abort()
                return
            pair = (writer, upstream)
            pairs.add(pair)
            try:
                await asyncio.gather(pump(reader, upstream), pump(upstream_reader, writer))
            finally:
                pairs.discard(pair)

        async def listen() -> None:
            state["server"] = await asyncio.start_server(
                handle, "127.0.0.1", listen_port, reuse_address=True
            )

        def cut() -> None:
            if state["server"] is not None:
                state["server"].close()
                state["server"] = None
            for a, b in list(pairs):
                a.transport.abort()
                b.transport.abort()
            print("proxy: cut", flush=True)

        def resume() -> None:
            if state["server"] is None:
                loop.create_task(listen())
            print("proxy: resumed", flush=True)

        await listen()
        loop.add_signal_handler(signal.SIGUSR1, cut)
        loop.add_signal_handler(signal.SIGUSR2, resume)
        loop.add_signal_handler(signal.SIGTERM, done.set)
        await done.wait()

    asyncio.run(main())
    return 0


# --- inventories ----------------------------------------------------------------------------


def _sim_fpga(host: str, bus: int, *, healthy: bool = True) -> Device:
    address = f"0000:{bus:02x}:00.0"
    extra = () if healthy else (("health", "degraded"),)
    return Device(
        type="FPGA",
        vendor="0xABCD",
        model="Chaos FPGA",
        driver_name="fake",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=0,
        deployables=(
            Deployable(
                name=f"{host}_fpga_{bus:02x}",
                num_accelerators=4,
                resource_class="FPGA",
                traits=("CUSTOM_FAKE_DEVICE", SIM_TRAIT),
                driver_name="fake",
                extra_attributes=extra,
                attach_handles=tuple(
                    AttachHandle(
                        "PCI",
                        {"domain": "0000", "bus": f"{bus:02x}", "device": "00", "function": str(i)},
                    )
                    for i in range(4)
                ),
            ),
        ),
    )


def _sim_gpu(host: str, bus: int) -> Device:
    address = f"0000:{bus:02x}:00.0"
    return Device(
        type="GPU",
        vendor="10de",
        model="A100",
        driver_name="nvidia_gpu",
        controlpath_id=pci_cpid(address),
        pci_address=address,
        numa_node=0,
        deployables=(
            Deployable(
                name=f"{host}_gpu_{bus:02x}",
                num_accelerators=1,
                resource_class="PGPU",
                traits=("CUSTOM_NVIDIA_20B0",),
                driver_name="nvidia_gpu",
                attach_handles=(AttachHandle("PCI", pci_cpid(address)),),
            ),
        ),
    )


class _Static:
    name = "static"

    def __init__(self, devices: list[Device]) -> None:
        self.devices = devices

    def discover(self) -> list[Device]:
        return self.devices


def sim_variants(host: str) -> list[dict]:
    """A simulated host's inventory snapshots: everything; a GPU gone; an FPGA unhealthy."""
    fpgas = [_sim_fpga(host, 0x21), _sim_fpga(host, 0x22)]
    gpus = [_sim_gpu(host, 0x41), _sim_gpu(host, 0x42)]
    variants = [
        fpgas + gpus,
        fpgas + gpus[:1],
        [fpgas[0], _sim_fpga(host, 0x22, healthy=False)] + gpus,
    ]
    return [build_snapshot(host, [_Static(devices)]) for devices in variants]


# --- the clients ----------------------------------------------------------------------------


@dataclasses.dataclass
class Reply:
    status: int | None  # None: no answer (the error says why)
    body: object = None
    error: str | None = None
    headers: dict = dataclasses.field(default_factory=dict)


class Clients:
    """HTTP to the APIs (a random one per request, as behind a load balancer) and to
    Placement; every answer or error is counted by operation."""

    def __init__(self, api_urls: list[str], placement_url: str, rng: random.Random) -> None:
        self.api_urls, self.placement_url, self.rng = api_urls, placement_url, rng
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(30.0, connect=5.0),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )
        self.counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    async def close(self) -> None:
        await self.http.aclose()

    async def _send(self, op: str, method: str, url: str, **kw) -> Reply:
        try:
            response = await self.http.request(method, url, **kw)
        except httpx.HTTPError as error:
            self.counts[op][type(error).__name__] += 1
            return Reply(None, error=type(error).__name__)
        self.counts[op][str(response.status_code)] += 1
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = response.text
        return Reply(response.status_code, body, headers=dict(response.headers))

    async def api(self, op: str, method: str, path: str, *, url: str | None = None, **kw) -> Reply:
        return await self._send(op, method, (url or self.rng.choice(self.api_urls)) + path, **kw)

    async def placement(self, op: str, method: str, path: str, **kw) -> Reply:
        headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": PLACEMENT_VERSION}
        return await self._send(op, method, self.placement_url + path, headers=headers, **kw)


# --- the campaign ---------------------------------------------------------------------------


class Campaign:
    def __init__(self, args, backend: str, workdir: str) -> None:
        self.args, self.backend, self.workdir = args, backend, workdir
        self.rng = random.Random(f"{args.seed}:{backend}")
        self.t0 = 0.0
        self.processes: list[Supervised] = []
        self.apis: list[Supervised] = []
        self.conductors: list[Supervised] = []
        self.agents: list[Supervised] = []
        self.api_urls: list[str] = []
        self.pg: PrivatePostgres | None = None
        self.proxy: DbProxy | None = None
        self.galera: GaleraCluster | None = None
        self.node_urls: list[str] = []  # Galera: the database on each node
        self.rejoins: list[dict] = []
        self.placement: PlacementProcess | None = None
        self.db_url = ""  # what the services use
        self.check_url = ""  # what the checks use (not through the proxy)
        self.drop_database = None
        self.ledger: dict[str, Arq] = {}
        self.ops: collections.Counter = collections.Counter()
        self.faults: list[str] = []
        self.violations_seen: list[str] = []
        self.deallocations: set[str] = set()
        self.claims: dict[str, str] = {}  # claim uuid -> made | released | unknown
        self.sim_hosts = [f"chaos-sim-{i}" for i in range(args.sim_hosts)]
        self.agent_hosts = [f"chaos-agent-{i + 1}" for i in range(args.agents)]
        self.sim_acked: dict[str, dict] = {}
        self.compute_hosts = {
            compute_provider_uuid(h): h for h in self.sim_hosts + self.agent_hosts
        }
        self.stop_load: asyncio.Event | None = None  # made in run(), inside its loop
        self.outages: list[asyncio.Task] = []
        self.shutting_down = False
        self.db_down = False
        self.hard_deadline = 0.0

    # -- set-up ------------------------------------------------------------------------------

    def database(self) -> None:
        name = f"exosuit_chaos_{uuid.uuid4().hex[:8]}"
        if self.backend == "galera":
            # Three nodes of a private cluster; each service on one of them, reads after a
            # write on another node see it (wsrep_sync_wait, doc/deploy-galera.md).
            self.galera = GaleraCluster(self.workdir)
            self.galera.start()
            self.node_urls = [sync_wait(u) for u in self.galera.create_database(name)]
            self.db_url = self.check_url = self.node_urls[0]
            return
        if self.backend == "postgresql":
            self.pg = PrivatePostgres(self.workdir)
            self.pg.init()
            self.pg.start()
            self.db_url = self.check_url = self.pg.create_database(name)
            return
        admin = sa.make_url(ADMIN_URLS["mariadb"])
        engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")

        def drop() -> None:
            with engine.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
            engine.dispose()

        self.drop_database = drop
        self.check_url = admin.set(database=name).render_as_string(hide_password=False)
        self.proxy = DbProxy(admin.port or 3306, os.path.join(self.workdir, "proxy.log"))
        self.db_url = (
            admin.set(database=name, host="127.0.0.1", port=self.proxy.port)
        ).render_as_string(hide_password=False)

    def write_config(self, db_url: str = "", name: str = "exosuit.conf") -> str:
        a = self.args
        db_url = db_url or self.db_url
        path = os.path.join(self.workdir, name)
        with open(path, "w") as f:
            f.write(
                f"[DEFAULT]\nstate_path = {self.workdir}/state\nhost = chaos-control\n"
                f"bind_timeout = {a.bind_timeout}\n"
                "[api]\nauth_strategy = noauth\nhost_ip = 127.0.0.1\nworkers = 1\nthreads = 8\n"
                # The campaign binds what its simulated hosts report: new devices ready,
                # as before activation existed (doc/devices.md).
                "[inventory]\nnew_device_activation = ready\n"
                f"[database]\nconnection = {db_url}\nmax_pool_size = 10\n"
                "[conductor]\nworkers = 2\npoll_interval = 0.5\n"
                f"lease_seconds = {a.lease_seconds}\nbackoff_base = 1\nbackoff_max = 10\n"
                "reconcile_interval = 0\nprogram_sweep_interval = 10\n"
                "[placement]\nmanage_compute_providers = true\nauth_type = admin_token\n"
                f"endpoint = {self.placement.url}\ntoken = admin\n"
                f"endpoint_override = {self.placement.url}\n"
                "retry_interval = 2\nmax_retry_interval = 10\n"
                # New devices are offered at once (doc/devices.md: activation).
                "[inventory]\nnew_device_activation = ready\n"
            )
        return path

    def start_services(self) -> None:
        config = self.write_config()
        upgrade = subprocess.run(
            [os.path.join(BIN, "exosuit-manage"), "db", "upgrade", "--config-file", config],
            capture_output=True,
            text=True,
        )
        if upgrade.returncode:
            raise RuntimeError("exosuit-manage db upgrade failed:\n" + upgrade.stderr[-3000:])
        logs = os.path.join(self.workdir, "logs")
        os.makedirs(logs, exist_ok=True)
        configs = {"api-1": config, "api-2": config, "conductor-1": config, "conductor-2": config}
        if self.node_urls:
            # Galera: each API and each conductor on a node of its own choosing (api-1 on
            # node 1, api-2 on 2, conductor-1 on 3, conductor-2 on 1).
            for process, node in (
                ("api-1", 0),
                ("api-2", 1),
                ("conductor-1", 2),
                ("conductor-2", 0),
            ):
                configs[process] = self.write_config(self.node_urls[node], f"{process}.conf")
                self.ops[f"{process} on Galera node {node + 1}"] = 1
        for i in range(2):
            port = free_port()
            self.api_urls.append(f"http://127.0.0.1:{port}")
            self.apis.append(
                Supervised(
                    f"api-{i + 1}",
                    "api",
                    [
                        os.path.join(BIN, "exosuit-api"),
                        "--config-file",
                        configs[f"api-{i + 1}"],
                        "--port",
                        str(port),
                    ],
                    os.path.join(logs, f"api-{i + 1}.log"),
                )
            )
            self.conductors.append(
                Supervised(
                    f"conductor-{i + 1}",
                    "conductor",
                    [
                        os.path.join(BIN, "exosuit-conductor"),
                        "--config-file",
                        configs[f"conductor-{i + 1}"],
                    ],
                    os.path.join(logs, f"conductor-{i + 1}.log"),
                )
            )
        for i, host in enumerate(self.agent_hosts):
            state = os.path.join(self.workdir, host)
            os.makedirs(state)
            agent_conf = os.path.join(state, "agent.conf")
            with open(agent_conf, "w") as f:
                f.write(
                    f"[DEFAULT]\nhost = {host}\nstate_path = {state}\n"
                    f"[agent]\napi_url = {self.api_urls[i % 2]}\nenabled_drivers = simulated\n"
                    "report_interval = 10\nreport_jitter = 1\nmax_backoff = 10\n"
                    "uevents = false\ndesired_state_interval = 1\ntimeout = 30\n"
                    "[simulated]\ndevices = fake_fpga:2,nvidia_gpu:2\n"
                )
            self.agents.append(
                Supervised(
                    host,
                    "agent",
                    [os.path.join(BIN, "exosuit-agent"), "run", "--config-file", agent_conf],
                    os.path.join(logs, f"{host}.log"),
                )
            )
        self.processes = self.apis + self.conductors + self.agents
        for process in self.apis + self.conductors:
            process.start()
        for url, process in zip(self.api_urls, self.apis, strict=True):
            self._wait_http(url + "/healthz", process)
        for agent in self.agents:
            agent.start()

    def _wait_http(self, url: str, process: Supervised, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not process.alive():
                raise RuntimeError(f"{process.name} exited; see {process.logfile}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{process.name} did not answer {url}")

    def seed(self) -> None:
        """Profiles, the two images the programming profiles name, the simulated hosts'
        first reports; then wait for every host's providers in Placement."""
        api = self.api_urls[0]
        with httpx.Client(timeout=60) as http:
            for name, (groups, _, _) in PROFILES.items():
                r = http.post(f"{api}/v2/device_profiles", json=[{"name": name, "groups": groups}])
                r.raise_for_status()
            v26 = {"OpenStack-API-Version": "accelerator 2.6"}
            for i, function in enumerate(FUNCTIONS):
                data = f"#chaos image {i}\n".encode() + os.urandom(4096)
                r = http.post(
                    f"{api}/v2/images",
                    headers=v26,
                    json={
                        "name": f"chaos-function-{i}",
                        "format": "simulated",
                        "function_id": function,
                        "visibility": "public",
                        "sha256": hashlib.sha256(data).hexdigest(),
                    },
                )
                r.raise_for_status()
                r = http.put(
                    f"{api}/v2/images/{r.json()['uuid']}/file",
                    headers={**v26, "Content-Type": "application/octet-stream"},
                    content=data,
                )
                r.raise_for_status()
            for host in self.sim_hosts:
                body = sim_variants(host)[0]
                r = http.put(f"{api}/agent/v1/hosts/{host}/inventory", json=body)
                r.raise_for_status()
                self.sim_acked[host] = body
            deadline = time.monotonic() + 180
            placement = {"X-Auth-Token": "admin", "OpenStack-API-Version": PLACEMENT_VERSION}
            waiting = set(self.compute_hosts)
            while waiting:
                for compute in list(waiting):
                    r = http.get(
                        f"{self.placement.url}/resource_providers?in_tree={compute}",
                        headers=placement,
                    )
                    if r.status_code == 200 and len(r.json()["resource_providers"]) >= 5:
                        waiting.discard(compute)
                for process in self.conductors:
                    if not process.alive():
                        raise RuntimeError(f"{process.name} exited; see {process.logfile}")
                if time.monotonic() > deadline:
                    hosts = sorted(self.compute_hosts[c] for c in waiting)
                    raise RuntimeError(f"no providers in Placement for {hosts} after 180 s")
                time.sleep(0.5)

    # -- the faults --------------------------------------------------------------------------

    def schedule(self) -> list[tuple[float, str, object]]:
        """(seconds from the start, what, target) for every fault, from the seed."""
        d, rng = self.args.duration, self.rng
        events: list[tuple[float, str, object]] = []
        outage = self.args.db_outage
        db_window = None
        if outage > 0 and self.galera is not None:
            start = rng.uniform(0.1 * d, 0.2 * d)
            db_window = (start, start + outage)
            events.append((start, "db_outage", outage))
        elif outage > 0:
            start = rng.uniform(0.15 * d, max(0.15 * d, 0.85 * d - outage))
            db_window = (start, start + outage)
            events.append((start, "db_outage", outage))
        p_outage = self.args.placement_outage
        if p_outage > 0:
            for _ in range(50):
                start = rng.uniform(0.1 * d, max(0.1 * d, 0.9 * d - p_outage))
                if (
                    db_window is None
                    or start > db_window[1] + 5
                    or start + p_outage < db_window[0] - 5
                ):
                    break
            events.append((start, "placement_outage", p_outage))
        targets = self.apis + self.conductors + (self.agents if self.args.kill_agents else [])
        kills = self.args.kills
        if self.galera is not None and db_window is not None and kills >= 2:
            # Galera: a node first, then an API, then a conductor (the others at random).
            after = db_window[1] + 0.25 * (d - db_window[1])
            events.append((after, "kill", rng.choice(self.apis)))
            events.append((after + 0.4 * (d - after), "kill", rng.choice(self.conductors)))
            kills -= 2
        for _ in range(kills):
            events.append((rng.uniform(0.05 * d, 0.95 * d), "kill", rng.choice(targets)))
        return sorted(events, key=lambda e: e[0])

    async def supervise(self) -> None:
        """Restart what died, 1-5 s later (2 s after a refused start)."""
        while not self.shutting_down:
            now = time.monotonic()
            for process in self.processes:
                why = process.reap()
                if why is not None:
                    log(self, why)
                    process.down_until = now + 2
                if process.process is None and now >= process.down_until:
                    process.start()
            await asyncio.sleep(0.5)

    async def inject(self) -> None:
        kinds = {"api", "conductor"} | ({"agent"} if self.args.kill_agents else set())
        for at, what, target in self.schedule():
            await asyncio.sleep(max(0.0, self.t0 + at - time.monotonic()))
            if what == "kill":
                assert isinstance(target, Supervised)
                if not target.alive():  # being restarted: another one that runs
                    alive = [p for p in self.processes if p.alive() and p.kind in kinds]
                    if not alive:
                        self.faults.append("kill -9 skipped: every API and conductor down")
                        continue
                    target = self.rng.choice(alive)
                target.kill9()
                target.down_until = time.monotonic() + self.rng.uniform(1, 5)
                log(self, f"kill -9 {target.name}")
                self.faults.append(f"kill -9 {target.name}")
            elif what == "db_outage":
                self.outages.append(asyncio.create_task(self.db_outage(float(target))))  # type: ignore[arg-type]
            elif what == "placement_outage":
                self.outages.append(asyncio.create_task(self.placement_outage(float(target))))  # type: ignore[arg-type]

    async def db_outage(self, seconds: float) -> None:
        if self.galera is not None:
            await self.node_outage(seconds)
            return
        began = time.monotonic()
        if self.pg is not None:
            await asyncio.to_thread(self.pg.stop, "immediate")
            how = "PostgreSQL stopped (pg_ctl stop -m immediate)"
        else:
            assert self.proxy is not None
            self.proxy.cut()
            how = "MariaDB cut off (every connection reset, port closed)"
        self.db_down = True
        log(self, f"database outage: {how} for {seconds:g} s")
        await asyncio.sleep(max(0.0, began + seconds - time.monotonic()))
        if self.pg is not None:
            await asyncio.to_thread(self.pg.start)
        else:
            self.proxy.resume()
        self.db_down = False
        took = time.monotonic() - began
        log(self, f"database back after {took:.1f} s")
        self.faults.append(f"database outage {took:.1f} s: {how}")

    async def node_outage(self, seconds: float) -> None:
        """kill -9 of Galera node 1 (api-1's and conductor-2's: an API and a conductor lose
        their database), started again ``seconds`` later; it rejoins (IST from a donor's
        gcache) and the time until it is Synced is recorded."""
        assert self.galera is not None
        node = self.galera.nodes[0]
        began = time.monotonic()
        await asyncio.to_thread(node.kill)
        log(self, f"Galera {node.name} killed (kill -9) for {seconds:g} s")
        await asyncio.sleep(max(0.0, began + seconds - time.monotonic()))
        started = time.monotonic()
        await asyncio.to_thread(node.start)
        await asyncio.to_thread(node.wait_synced, 300, len(self.galera.nodes))
        synced = time.monotonic()
        transfer = node.last_transfer()
        self.rejoins.append(
            {
                "node": node.name,
                "down_s": round(started - began, 1),
                "rejoin_s": round(synced - started, 1),
                "transfer": transfer,
            }
        )
        log(
            self, f"Galera {node.name} Synced {synced - started:.1f} s after its start ({transfer})"
        )
        self.faults.append(
            f"database outage: Galera {node.name} kill -9, down {started - began:.1f} s, "
            f"Synced again {synced - started:.1f} s after its start (by {transfer})"
        )

    async def placement_outage(self, seconds: float) -> None:
        began = time.monotonic()
        await asyncio.to_thread(self.placement.stop)
        log(self, f"Placement stopped for {seconds:g} s")
        await asyncio.sleep(max(0.0, began + seconds - time.monotonic()))
        await asyncio.to_thread(self.placement.start)
        took = time.monotonic() - began
        log(self, f"Placement back after {took:.1f} s")
        self.faults.append(f"Placement outage {took:.1f} s (stopped, started on the same port)")

    # -- the load ----------------------------------------------------------------------------

    async def until_acknowledged(
        self, op: str, method: str, path: str, ok: tuple[int, ...]
    ) -> bool:
        """Send again (any API, backing off) until one of ``ok`` comes back; False when the
        campaign's hard deadline passed first."""
        delay = 0.5
        while time.monotonic() < self.hard_deadline:
            reply = await self.clients.api(op, method, path)
            if reply.status in ok:
                return True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5)
        return False

    async def delete_arqs(self, arqs: list[Arq]) -> None:
        """Nova after a failed bind: DELETE ?arqs= until acknowledged (204, or 404: gone)."""
        path = "/v2/accelerator_requests?arqs=" + ",".join(a.uuid for a in arqs)
        done = await self.until_acknowledged("DELETE ?arqs=", "DELETE", path, (204, 404))
        for arq in arqs:
            arq.state = "deleted" if done else "unknown"
        self.ops["arqs deleted after a failed bind" if done else "delete never acknowledged"] += (
            len(arqs)
        )

    async def deallocator(self) -> None:
        """Nova's allocations of instances that are gone: DELETE until 204 or 404."""
        while not (self.shutting_down and not self.deallocations):
            for consumer in list(self.deallocations):
                reply = await self.clients.placement(
                    "DELETE /allocations", "DELETE", f"/allocations/{consumer}"
                )
                if reply.status in (204, 404):
                    self.deallocations.discard(consumer)
            if time.monotonic() > self.hard_deadline:
                return
            await asyncio.sleep(0.5)

    async def nova(self, worker: int) -> None:
        rng = random.Random(f"{self.args.seed}:{self.backend}:nova:{worker}")
        names = list(PROFILES)
        weights = [PROFILES[n][2] for n in names]
        while not self.stop_load.is_set():
            profile = rng.choices(names, weights)[0]
            try:
                if rng.random() < CLAIM_SHARE:
                    await self.claim_cycle(rng)
                else:
                    await self.cycle(rng, profile)
            except Exception as error:  # a bug of the campaign itself: say so, go on
                log(self, f"nova worker {worker}: {type(error).__name__}: {error}")
                self.ops["campaign errors"] += 1
                await asyncio.sleep(1)

    async def claim_cycle(self, rng: random.Random) -> None:
        """A standalone claim (2.8) of one GPU for a consumer of its own, as a container
        runtime makes one: POST until answered (the same consumer again after a lost
        answer: one claim per consumer, so a retry never makes a second), held a while,
        then DELETE until 204."""
        body = {"device_profile_name": "chaos-gpu", "consumer": f"chaos:{uuid.uuid4()}"}
        claim = None
        delay = 0.5
        while claim is None and time.monotonic() < self.hard_deadline:
            reply = await self.clients.api(
                "POST /v2/claims", "POST", "/v2/claims", json=body, headers=V28
            )
            if reply.status == 201:
                claim = reply.body["uuid"]
            elif reply.status == 409:
                self.ops["claims refused (409)"] += 1
                await asyncio.sleep(1)
                return
            else:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5)
        if claim is None:
            return
        self.claims[claim] = "made"
        self.ops["claims made (201)"] += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop_load.wait(), rng.uniform(*self.args.lifetime))
        if self.stop_load.is_set():
            self.ops["claims left held at the end"] += 1
            return
        path = f"/v2/claims/{claim}"
        while time.monotonic() < self.hard_deadline:
            reply = await self.clients.api("DELETE /v2/claims/{uuid}", "DELETE", path, headers=V28)
            if reply.status == 204:
                self.claims[claim] = "released"
                self.ops["claims released (204)"] += 1
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5)
        self.claims[claim] = "unknown"

    async def cycle(self, rng: random.Random, profile: str) -> None:
        c = self.clients
        _, query, _ = PROFILES[profile]
        # Scheduling: Placement's candidates, then the claim, as nova-scheduler does.
        reply = await c.placement(
            "GET /allocation_candidates", "GET", f"/allocation_candidates?{query}&limit=20"
        )
        if reply.status != 200 or not reply.body["allocation_requests"]:
            self.ops["no valid host"] += 1
            await asyncio.sleep(1)
            return
        choice = rng.choice(reply.body["allocation_requests"])
        ((rp_uuid, allocation),) = choice["allocations"].items()
        root = reply.body["provider_summaries"][rp_uuid]["root_provider_uuid"]
        hostname = self.compute_hosts[root]
        instance = str(uuid.uuid4())
        reply = await c.placement(
            "PUT /allocations",
            "PUT",
            f"/allocations/{instance}",
            json={
                "allocations": {rp_uuid: {"resources": allocation["resources"]}},
                "project_id": "chaos",
                "user_id": "nova",
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            },
        )
        if reply.status != 204:
            if reply.status is None or reply.status >= 500:
                self.deallocations.add(instance)  # it may have been made
            self.ops["claim refused or failed"] += 1
            await asyncio.sleep(0.2)
            return
        self.ops["instances scheduled"] += 1
        await c.api("GET /v2/device_profiles?name=", "GET", f"/v2/device_profiles?name={profile}")
        reply = await c.api(
            "POST /v2/accelerator_requests",
            "POST",
            "/v2/accelerator_requests",
            json={"device_profile_name": profile},
        )
        if reply.status != 201:
            self.deallocations.add(instance)
            await asyncio.sleep(0.5)
            return
        arqs = [Arq(a["uuid"], instance, profile) for a in reply.body["arqs"]]
        for arq in arqs:
            self.ledger[arq.uuid] = arq
        self.ops["ARQs created (201)"] += len(arqs)
        ops = [
            {"op": "add", "path": "/hostname", "value": hostname},
            {"op": "add", "path": "/device_rp_uuid", "value": rp_uuid},
            {"op": "add", "path": "/instance_uuid", "value": instance},
        ]
        reply = await c.api(
            "PATCH bind", "PATCH", "/v2/accelerator_requests", json={a.uuid: ops for a in arqs}
        )
        if reply.status != 202:
            # 409: the bind failed; anything else: Nova does not know, and gives up too.
            self.ops["binds failed (409)" if reply.status == 409 else "binds unknown"] += 1
            await self.delete_arqs(arqs)
            self.deallocations.add(instance)
            return
        self.ops["binds accepted (202)"] += 1
        resolved = await self.wait_resolved(instance)
        if resolved is None or any(a["state"] != "Bound" for a in resolved):
            if resolved is not None and not profile.startswith("chaos-program"):
                # A bind without host work is Bound when the 202 is sent.
                states = {a["uuid"]: a["state"] for a in resolved}
                self.violations_seen.append(
                    f"instance {instance}: bind acknowledged (202) but resolved as {states}"
                )
            self.ops["binds resolved BindFailed" if resolved else "resolution never seen"] += 1
            await self.delete_arqs(arqs)
            self.deallocations.add(instance)
            return
        by_uuid = {a["uuid"]: a for a in resolved}
        for arq in arqs:
            seen = by_uuid.get(arq.uuid, {})
            if (seen["hostname"], seen["device_rp_uuid"], seen["instance_uuid"]) != (
                hostname,
                rp_uuid,
                instance,
            ) or not seen.get("attach_handle_info"):
                self.violations_seen.append(f"ARQ {arq.uuid} resolved Bound but as {seen}")
            arq.state, arq.hostname, arq.rp_uuid = "bound", hostname, rp_uuid
        self.ops["instances bound"] += 1
        lifetime = rng.uniform(*self.args.lifetime)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop_load.wait(), lifetime)
        if self.stop_load.is_set():
            self.ops["instances left running at the end"] += 1
            return
        done = await self.until_acknowledged(
            "DELETE ?instance=", "DELETE", f"/v2/accelerator_requests?instance={instance}", (204,)
        )
        for arq in arqs:
            arq.state = "deleted" if done else "unknown"
        self.ops["instances deleted (204)" if done else "delete never acknowledged"] += 1
        self.deallocations.add(instance)

    async def wait_resolved(self, instance: str) -> list[dict] | None:
        """nova-compute: GET ?instance=&bind_state=resolved until it stops answering 423."""
        deadline = time.monotonic() + self.args.bind_timeout + self.args.lease_seconds + 120
        while time.monotonic() < min(deadline, self.hard_deadline):
            reply = await self.clients.api(
                "GET ?instance=&bind_state=resolved",
                "GET",
                f"/v2/accelerator_requests?instance={instance}&bind_state=resolved",
            )
            if reply.status == 200:
                return reply.body["arqs"]
            await asyncio.sleep(0.5 if reply.status == 423 else 1)
        return None

    async def sim_host(self, host: str) -> None:
        """A simulated agent: reports every 5-10 s, switching snapshots now and then."""
        rng = random.Random(f"{self.args.seed}:{self.backend}:{host}")
        variants = sim_variants(host)
        current = variants[0]
        while not self.stop_load.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_load.wait(), rng.uniform(5, 10))
            if self.stop_load.is_set():
                return
            if rng.random() < 0.3:
                current = rng.choice(variants)
            await self.report(host, current)

    async def report(self, host: str, body: dict) -> bool:
        delay = 1.0
        while time.monotonic() < self.hard_deadline:
            reply = await self.clients.api(
                "PUT inventory", "PUT", f"/agent/v1/hosts/{host}/inventory", json=body
            )
            if reply.status == 200:
                self.sim_acked[host] = body
                self.ops["inventory reports acknowledged"] += 1
                return True
            if self.stop_load.is_set() and self.shutting_down:
                return False
            wait = float(reply.headers.get("retry-after", delay)) if reply.status else delay
            await asyncio.sleep(wait)
            delay = min(delay * 2, 10)
        return False

    async def run(self) -> None:
        self.clients = Clients(self.api_urls, self.placement.url, self.rng)
        self.stop_load = asyncio.Event()
        self.t0 = time.monotonic()
        self.hard_deadline = self.t0 + self.args.duration + self.args.settle_timeout
        supervisor = asyncio.create_task(self.supervise())
        deallocator = asyncio.create_task(self.deallocator())
        load = [asyncio.create_task(self.nova(i)) for i in range(self.args.clients)]
        load += [asyncio.create_task(self.sim_host(h)) for h in self.sim_hosts]
        injector = asyncio.create_task(self.inject())
        log(self, f"load and faults for {self.args.duration:g} s")
        await asyncio.sleep(self.args.duration)
        await injector  # an outage running at the end finishes first
        await asyncio.gather(*self.outages)
        log(self, "faults over; stopping the load")
        self.stop_load.set()
        await asyncio.gather(*load)
        # Everything up again, and each simulated host's last word.
        await self.all_up()
        final = await asyncio.gather(*(self.report(h, sim_variants(h)[0]) for h in self.sim_hosts))
        if not all(final):
            self.violations_seen.append("a simulated host's last report was never acknowledged")
        self.shutting_down = True
        await deallocator
        await supervisor
        await self.clients.close()
        self.ops["allocations never deleted"] += len(self.deallocations)

    async def all_up(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            down = [p.name for p in self.processes if not p.alive()]
            if not down and not self.db_down and self.placement.process is not None:
                ready = 0
                for url in self.api_urls:
                    with contextlib.suppress(httpx.HTTPError):
                        ready += httpx.get(url + "/healthz", timeout=5).status_code == 200
                if ready == len(self.api_urls):
                    return
            await asyncio.sleep(0.5)
        raise RuntimeError("the services did not all come back within 120 s")

    # -- settle, reconcile, check ------------------------------------------------------------

    def busy_jobs(self, db: Database, kinds: tuple[str, ...] | None = None) -> list[tuple]:
        jobs = models.jobs
        query = sa.select(jobs.c.id, jobs.c.kind, jobs.c.state, jobs.c.run_after).where(
            jobs.c.state.in_(("pending", "running")), jobs.c.id > 0
        )
        if kinds:
            query = query.where(jobs.c.kind.in_(kinds))
        return db.read(lambda conn: conn.execute(query).all())

    def wait_jobs(self, db: Database, what: str, kinds: tuple[str, ...] | None = None) -> float:
        began = time.monotonic()
        deadline = began + self.args.settle_timeout
        while busy := self.busy_jobs(db, kinds):
            if time.monotonic() > deadline:
                left = collections.Counter(f"{k} {s}" for _, k, s, _ in busy)
                raise RuntimeError(
                    f"{what}: jobs still busy after {self.args.settle_timeout:g} s: {dict(left)}"
                )
            time.sleep(0.5)
        return time.monotonic() - began

    @staticmethod
    def repairs(db: Database) -> dict[str, int]:
        """The drift repairs counted so far, by kind."""
        return {
            dict(labels)["kind"]: int(value)
            for (name, labels), value in db.read(read_counters).items()
            if name == "exosuit_placement_repairs"
        }

    def reconcile(self, db: Database) -> int:
        """One drift repair: what ``placement_reconcile`` queues (a verifying sync of every
        host); then wait for those syncs."""
        hosts = db.read(placement_db.hostnames)

        def enqueue(conn) -> None:
            for host in hosts:
                placement_db.enqueue_sync(conn, host, verify=True)

        db.write(enqueue)
        return len(hosts)

    def check(self, db: Database) -> dict[str, list[str]]:
        results = {
            "no attach handle held by two ARQs": invariants.check_double_holders(db),
            "attach handles in use exactly when held": invariants.check_handles(db),
            "no ARQ stuck past bind_timeout": invariants.check_stuck(db, self.args.bind_timeout),
        }
        with httpx.Client(
            base_url=self.placement.url,
            headers={"X-Auth-Token": "admin", "OpenStack-API-Version": PLACEMENT_VERSION},
            timeout=60,
        ) as placement:
            providers, allocations = invariants.check_placement(db, placement)
            # The agents still run: one may have changed its host after the reconcile (a
            # program of the load finishing late), in a transaction that also queued the
            # sync of that change, which may not have run yet. Equal once its syncs ran is
            # what the sync promises; a difference that stays through SETTLE_ROUNDS drained
            # queues is a real one.
            for _ in range(SETTLE_ROUNDS):
                if not (providers or allocations):
                    break
                self.wait_jobs(db, "a sync after the reconcile", (placement_db.SYNC,))
                providers, allocations = invariants.check_placement(db, placement)
        results["Placement equal to the database after one reconcile"] = providers
        results["Placement allocations equal to the Bound ARQs"] = allocations
        results["every acknowledged write present"] = (
            invariants.check_ledger(db, self.ledger) + self.violations_seen
        )
        self.ops["ARQs in the database not created by an acknowledged POST"] = (
            invariants.unacknowledged_arqs(db, self.ledger)
        )
        results["every acknowledged claim present, none stuck"] = invariants.check_claims(
            db, self.claims
        )
        results["every acknowledged inventory present"] = invariants.check_inventory(
            db, self.sim_hosts + self.agent_hosts, self.sim_acked
        )
        if self.galera is not None:
            # The same on every node, and the three nodes holding the same rows.
            missing: list[str] = []
            for i, url in enumerate(self.node_urls[1:], start=2):
                node_db = Database(url, pool_size=1)
                try:
                    missing += [
                        f"node{i}: {v}" for v in invariants.check_ledger(node_db, self.ledger)
                    ]
                finally:
                    node_db.dispose()
            results["every acknowledged write present"] += missing
            results["the three Galera nodes hold the same rows"] = self.compare_nodes()
        results["no process exited unless killed"] = [
            exit for process in self.processes for exit in process.exits
        ]
        results["no 500 from the APIs"] = [
            f"{op}: {n} x 500" for op, c in sorted(self.clients.counts.items()) if (n := c["500"])
        ]
        return results

    def galera_conflicts(self) -> dict[str, int]:
        """Galera: the transactions each node aborted as certification conflicts (its own
        that lost: ``wsrep_local_cert_failures``; its own aborted by a write of another
        node applied under their locks: ``wsrep_local_bf_aborts``), summed over the nodes
        (since each started: a restarted node counts from its restart)."""
        if self.galera is None:
            return {}
        totals = collections.Counter()
        for node in self.galera.nodes:
            status = node.status()
            for name in ("wsrep_local_cert_failures", "wsrep_local_bf_aborts"):
                totals[name] += int(status.get(name, 0))
        return dict(totals)

    def compare_nodes(self) -> list[str]:
        """``CHECKSUM TABLE`` of every table on each node (after a sync wait): equal. The
        agents still report (a host's report time changes): a difference is looked at
        again, up to 10 times a second apart, and reported only if it stays."""
        for _ in range(10):
            different = self._compare_nodes_once()
            if not different:
                break
            time.sleep(1)
        return different

    def _compare_nodes_once(self) -> list[str]:
        sums: list[dict[str, int]] = []
        tables = [t.name for t in models.Base.metadata.sorted_tables]
        for url in self.node_urls:
            engine = sa.create_engine(url)
            try:
                with engine.connect() as conn:
                    conn.exec_driver_sql("SELECT 1")  # waits for the cluster's last commit
                    rows = conn.exec_driver_sql(f"CHECKSUM TABLE {', '.join(tables)}").all()
                sums.append({str(name).split(".")[-1]: int(value or 0) for name, value in rows})
            finally:
                engine.dispose()
        return [
            f"{table}: node1 {sums[0][table]} != node{i + 1} {other[table]}"
            for i, other in enumerate(sums[1:], start=1)
            for table in tables
            if other[table] != sums[0][table]
        ]

    # -- the whole run -----------------------------------------------------------------------

    def teardown(self) -> None:
        self.shutting_down = True
        for process in reversed(self.processes):
            with contextlib.suppress(Exception):
                process.stop()
        if self.placement is not None:
            self.placement.stop()
        if self.proxy is not None:
            self.proxy.stop()
        if self.drop_database is not None:
            with contextlib.suppress(Exception):
                self.drop_database()
        if self.pg is not None and self.pg.running():
            with contextlib.suppress(Exception):
                self.pg.stop("fast")
        if self.galera is not None:
            with contextlib.suppress(Exception):
                self.galera.stop()

    def execute(self) -> dict:
        began = time.monotonic()
        try:
            log(
                None,
                f"{self.backend}: starting the database, Placement, 2 APIs, 2 conductors, "
                f"{len(self.agent_hosts)} agents in {self.workdir}",
            )
            self.database()
            self.placement = PlacementProcess(self.workdir)
            self.placement.start()
            self.start_services()
            self.seed()
            asyncio.run(self.run())
            db = Database(self.check_url, pool_size=2)
            try:
                settle = self.wait_jobs(db, "settling")
                log(self, f"job queue drained in {settle:.1f} s; one reconcile")
                before = self.repairs(db)
                hosts = self.reconcile(db)
                reconcile = self.wait_jobs(db, "reconcile", (placement_db.SYNC,))
                log(self, f"reconcile of {hosts} hosts done in {reconcile:.1f} s; checking")
                after = self.repairs(db)
                repairs = {
                    k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)
                }
                invariants = self.check(db)
                conflicts = self.galera_conflicts()
                programs = models.programs
                bind_programs = dict(
                    db.read(
                        lambda conn: conn.execute(
                            sa.select(programs.c.state, sa.func.count())
                            .where(programs.c.arq_uuid.is_not(None))
                            .group_by(programs.c.state)
                        ).all()
                    )
                )
                failed_jobs = collections.Counter(
                    kind
                    for (kind,) in db.read(
                        lambda conn: conn.execute(
                            sa.select(models.jobs.c.kind).where(models.jobs.c.state == "failed")
                        ).all()
                    )
                )
            finally:
                db.dispose()
        finally:
            self.teardown()
        return {
            "backend": self.backend,
            "seed": self.args.seed,
            "duration_s": self.args.duration,
            "wall_s": round(time.monotonic() - began, 1),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "settle_s": round(settle, 1),
            "reconcile_s": round(reconcile, 1),
            "operations": dict(sorted(self.ops.items())),
            "faults": self.faults,
            "galera_rejoins": self.rejoins,
            "galera_conflicts": conflicts,
            "processes": {
                p.name: {
                    "kills": p.kills,
                    "starts": p.starts,
                    "refused_starts": p.failed_starts,
                    "unexpected_exits": p.unexpected_exits,
                }
                for p in self.processes
            },
            "client_answers": {
                op: dict(sorted(c.items())) for op, c in sorted(self.clients.counts.items())
            },
            "failed_jobs": dict(failed_jobs),
            # Programs the binds queued for the real agents, by how they ended.
            "bind_programs": bind_programs,
            # What the final reconcile found different from what the syncs had written.
            "reconcile_repairs": repairs,
            "invariants": {
                name: {"ok": not v, "violations": v[:20], "count": len(v)}
                for name, v in invariants.items()
            },
        }


def print_summary(result: dict) -> None:
    print(
        f"\n== Fault campaign on {result['backend']} (seed {result['seed']}, "
        f"{result['duration_s']:g} s of load and faults, {result['wall_s']:g} s in all; "
        f"settled in {result['settle_s']:g} s, reconcile {result['reconcile_s']:g} s)"
    )
    print("faults:")
    for fault in result["faults"]:
        print(f"  {fault}")
    print("processes (kills / starts / starts refused / exits not caused by the campaign):")
    for name, p in result["processes"].items():
        print(
            f"  {name:<14} {p['kills']:>3} {p['starts']:>4} {p['refused_starts']:>4} "
            f"{p['unexpected_exits']:>4}"
        )
    print("operations:")
    for name, n in result["operations"].items():
        print(f"  {name:<58} {n:>7}")
    print("answers seen by the clients (status or error type):")
    for op, counts in result["client_answers"].items():
        print(f"  {op:<40} " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
    if result.get("galera_conflicts"):
        print(f"Galera certification conflicts (retried): {result['galera_conflicts']}")
    print(f"programs queued by binds, by state: {result['bind_programs'] or 'none'}")
    print(f"jobs failed for good: {result['failed_jobs'] or 'none'}")
    print(f"drift repaired by the final reconcile: {result['reconcile_repairs'] or 'none'}")
    print("invariants:")
    for name, inv in result["invariants"].items():
        print(
            f"  [{'ok' if inv['ok'] else 'VIOLATED'}] {name}"
            + ("" if inv["ok"] else f" ({inv['count']})")
        )
        for v in inv["violations"]:
            print(f"      {v}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="bench/chaos.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--backend",
        choices=("postgresql", "mariadb", "galera", "both", "all"),
        default="both",
        help="both: PostgreSQL then MariaDB; all: and then a private 3-node Galera cluster.",
    )
    parser.add_argument(
        "--duration", type=float, default=300, help="Seconds of load and faults (default 300)."
    )
    parser.add_argument(
        "--seed", type=int, default=1, help="Seed of the fault schedule and the load (default 1)."
    )
    parser.add_argument(
        "--kills", type=int, default=12, help="kill -9 of an API or a conductor (default 12)."
    )
    parser.add_argument(
        "--db-outage",
        type=float,
        default=60,
        help="Seconds the database is down, once; 0: none (default 60).",
    )
    parser.add_argument(
        "--placement-outage",
        type=float,
        default=20,
        help="Seconds Placement is stopped, once; 0: never (default 20).",
    )
    parser.add_argument(
        "--clients", type=int, default=8, help="Concurrent Nova-shaped cycles (default 8)."
    )
    parser.add_argument(
        "--sim-hosts",
        type=int,
        default=4,
        help="Simulated hosts reporting inventories (default 4).",
    )
    parser.add_argument(
        "--agents", type=int, default=2, help="Real exosuit-agent processes (default 2)."
    )
    parser.add_argument(
        "--lifetime",
        type=float,
        nargs=2,
        default=(1.0, 10.0),
        metavar=("MIN", "MAX"),
        help="Seconds an instance lives (default 1 10).",
    )
    parser.add_argument(
        "--bind-timeout", type=int, default=60, help="[DEFAULT] bind_timeout (default 60)."
    )
    parser.add_argument(
        "--lease-seconds", type=int, default=30, help="[conductor] lease_seconds (default 30)."
    )
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=300,
        help="Longest wait for the jobs to drain, and for the reconcile (default 300).",
    )
    parser.add_argument(
        "--kill-agents",
        action="store_true",
        help="The kills also pick the real agents (default: APIs and conductors only).",
    )
    parser.add_argument("--json", metavar="PATH", help="Also write the results as JSON to PATH.")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary folder (logs).")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_proxy"]:
        return proxy_main(int(argv[1]), argv[2], int(argv[3]))
    args = parse_args(argv)
    backends = {"both": ["postgresql", "mariadb"], "all": ["postgresql", "mariadb", "galera"]}.get(
        args.backend, [args.backend]
    )
    results = []
    for backend in backends:
        workdir = tempfile.mkdtemp(prefix=f"exosuit-chaos-{backend}-")
        os.chmod(workdir, 0o755)  # the private PostgreSQL's user must reach its folder
        try:
            result = Campaign(args, backend, workdir).execute()
        finally:
            if args.keep:
                log(None, f"kept {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
        print_summary(result)
        results.append(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all(inv["ok"] for r in results for inv in r["invariants"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
