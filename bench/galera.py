"""A private 3-node MariaDB Galera cluster on loopback, for the tests and the benches.

Debian's ``mariadb-server`` with ``galera-4``: three ``mariadbd`` processes of their own
(``--defaults-file``, never the machine's ``/etc/mysql``), each with its own loopback
ports for SQL, group communication (gcomm), IST and SST, and its own data folder
initialised by ``mariadb-install-db`` under ``workdir``. The first node bootstraps the
cluster (``--wsrep-new-cluster``); the others join it by state transfer
(``wsrep_sst_method = rsync``). A node killed (``kill``: SIGKILL) and started again
rejoins by IST from the others' gcache. Nothing here touches the machine's MariaDB on
3306. When this process is root, the servers run as root too (``--user=root``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

import sqlalchemy as sa

__all__ = ["GaleraCluster", "GaleraNode", "galera_missing"]

PROVIDER = "/usr/lib/galera/libgalera_smm.so"
CLUSTER_NAME = "exosuit_galera"
START_MARK = "--- exosuit: starting"  # written to a node's log before each start


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _program(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None
    )


def galera_missing() -> str | None:
    """Why no cluster can start here (a program or the provider absent), or None."""
    for name in ("mariadbd", "mariadb-install-db", "rsync"):
        if _program(name) is None:
            return f"{name} not found (Debian packages mariadb-server, galera-4, rsync)"
    if not os.path.exists(PROVIDER):
        return f"{PROVIDER} not found (Debian package galera-4)"
    return None


class GaleraNode:
    """One ``mariadbd`` of the cluster: its folder, ports and process."""

    def __init__(self, cluster: GaleraCluster, index: int) -> None:
        self.cluster = cluster
        self.index = index
        self.name = f"node{index + 1}"
        self.dir = os.path.join(cluster.dir, self.name)
        self.datadir = os.path.join(self.dir, "data")
        self.socket = os.path.join(self.dir, "mysqld.sock")
        self.log = os.path.join(self.dir, "error.log")
        self.config = os.path.join(self.dir, "my.cnf")
        self.port = _free_port()
        self.gcomm_port = _free_port()
        self.ist_port = _free_port()
        self.sst_port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> str:
        """``mysql+pymysql://root@127.0.0.1:PORT/`` (root, no password, TCP)."""
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/"

    def url(self, database: str) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{database}"

    def write_config(self) -> None:
        peers = ",".join(f"127.0.0.1:{n.gcomm_port}" for n in self.cluster.nodes)
        provider_options = ";".join(
            [
                f"base_port={self.gcomm_port}",
                f"gmcast.listen_addr=tcp://127.0.0.1:{self.gcomm_port}",
                f"ist.recv_addr=127.0.0.1:{self.ist_port}",
                "gcache.size=64M",
                # A killed node is noticed within seconds, not the WAN defaults.
                "evs.suspect_timeout=PT5S",
                "evs.inactive_timeout=PT10S",
                "evs.install_timeout=PT10S",
                "pc.wait_prim_timeout=PT60S",
            ]
        )
        user = "user = root\n" if os.geteuid() == 0 else ""
        with open(self.config, "w") as f:
            f.write(
                "[mysqld]\n"
                f"{user}"
                f"datadir = {self.datadir}\n"
                f"socket = {self.socket}\n"
                f"pid-file = {self.dir}/mysqld.pid\n"
                f"log-error = {self.log}\n"
                f"port = {self.port}\n"
                "bind-address = 127.0.0.1\n"
                "skip-name-resolve\n"
                "max_connections = 600\n"
                "binlog_format = ROW\n"
                "default_storage_engine = InnoDB\n"
                "innodb_autoinc_lock_mode = 2\n"
                "innodb_buffer_pool_size = 64M\n"
                "innodb_log_file_size = 48M\n"
                # Durability comes from the other nodes (as Galera deployments run it).
                "innodb_flush_log_at_trx_commit = 2\n"
                "innodb_lock_wait_timeout = 20\n"
                "character-set-server = utf8mb4\n"
                "collation-server = utf8mb4_general_ci\n"
                "wsrep_on = ON\n"
                f"wsrep_provider = {PROVIDER}\n"
                f"wsrep_cluster_name = {CLUSTER_NAME}\n"
                f"wsrep_cluster_address = gcomm://{peers}\n"
                f"wsrep_node_name = {self.name}\n"
                f"wsrep_node_address = 127.0.0.1:{self.gcomm_port}\n"
                f"wsrep_node_incoming_address = 127.0.0.1:{self.port}\n"
                f'wsrep_provider_options = "{provider_options}"\n'
                f"wsrep_sst_method = {self.cluster.sst_method}\n"
                f"wsrep_sst_receive_address = 127.0.0.1:{self.sst_port}\n"
                "wsrep_slave_threads = 2\n"
                "[client]\n"
                f"socket = {self.socket}\n"
                f"port = {self.port}\n"
            )

    def install(self) -> None:
        os.makedirs(self.datadir, exist_ok=True)
        argv = [
            _program("mariadb-install-db") or "mariadb-install-db",
            f"--defaults-file={self.config}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
        ]
        if os.geteuid() == 0:
            argv.append("--user=root")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode:
            raise RuntimeError(f"mariadb-install-db failed: {done.stdout}{done.stderr}")

    def recover_position(self) -> str | None:
        """After a crash (``grastate.dat`` says seqno -1): the last committed position,
        read from InnoDB by ``mariadbd --wsrep-recover`` as Debian's ``galera_recovery``
        does before a systemd start, so that the node asks for an IST of what it missed
        rather than a whole copy. None when there is nothing to recover."""
        try:
            with open(os.path.join(self.datadir, "grastate.dat")) as f:
                state = f.read()
        except OSError:
            return None
        if "seqno:   -1" not in state and "seqno: -1" not in state:
            return None
        done = subprocess.run(
            [
                _program("mariadbd") or "mariadbd",
                f"--defaults-file={self.config}",
                "--wsrep-recover",
                "--disable-log-error",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=self.cluster.env,
        )
        for line in (done.stdout + done.stderr).splitlines():
            if "WSREP: Recovered position:" in line:
                return line.split("Recovered position:")[1].strip()
        return None

    def start(self, *, bootstrap: bool = False) -> None:
        """Start ``mariadbd`` (in a process group of its own; it does not wait), from the
        position recovered after a crash if there was one."""
        argv = [_program("mariadbd") or "mariadbd", f"--defaults-file={self.config}"]
        if bootstrap:
            argv.append("--wsrep-new-cluster")
        position = None if bootstrap else self.recover_position()
        if position:
            argv.append(f"--wsrep-start-position={position}")
        with open(self.log, "ab") as log:
            log.write(f"{START_MARK} {self.name}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.cluster.env,
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """kill -9 the server (and the SST helpers of its group), as a crash would."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=60)
        self.process = None

    def stop(self) -> None:
        """A clean shutdown (SIGTERM), then SIGKILL if it takes too long."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None

    def status(self) -> dict[str, str]:
        """wsrep status variables (``wsrep_local_state_comment``, ``wsrep_cluster_size``,
        ``wsrep_ready`` …) over TCP; empty when the server does not answer."""
        engine = sa.create_engine(self.admin_url, connect_args={"connect_timeout": 2})
        try:
            with engine.connect() as conn:
                rows = conn.exec_driver_sql("SHOW STATUS LIKE 'wsrep_%%'").all()
            return {str(name): str(value) for name, value in rows}
        except sa.exc.DBAPIError:
            return {}
        finally:
            engine.dispose()

    def synced(self, size: int | None = None) -> bool:
        status = self.status()
        if status.get("wsrep_local_state_comment") != "Synced":
            return False
        if status.get("wsrep_ready") != "ON":
            return False
        return size is None or status.get("wsrep_cluster_size") == str(size)

    def wait_synced(self, timeout: float = 180, size: int | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"galera {self.name} exited: {self.tail()}")
            if self.synced(size):
                return
            time.sleep(0.3)
        raise RuntimeError(f"galera {self.name} not Synced after {timeout} s: {self.tail()}")

    def last_transfer(self) -> str:
        """How the node's last start got the cluster's state: ``IST`` (the writes it missed,
        from a donor's gcache), ``SST`` (a whole copy) or ``none``."""
        with open(self.log, errors="replace") as f:
            last = f.read().split(START_MARK)[-1]
        # The rsync script runs for either; it says which it did.
        if "IST completed on joiner" in last:
            return "IST"
        if "SST completed on joiner" in last:
            return "SST"
        return "IST" if "IST received" in last else "none"

    def tail(self, lines: int = 25) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


class GaleraCluster:
    """Three nodes in ``workdir/galera``: ``start()`` bootstraps node 1 and joins the
    others; ``create_database(name)`` gives one URL per node; ``stop()`` ends them."""

    def __init__(self, workdir: str, size: int = 3) -> None:
        self.dir = os.path.join(workdir, "galera")
        os.makedirs(self.dir, exist_ok=True)
        self.nodes = [GaleraNode(self, i) for i in range(size)]
        self.env: dict[str, str] | None = None  # the servers' environment (None: ours)
        self.sst_method = "rsync"

    def start(self, timeout: float = 240) -> None:
        for node in self.nodes:
            os.makedirs(node.dir, exist_ok=True)
        if os.geteuid() == 0:
            self._root_rsync()
        for node in self.nodes:
            node.write_config()
        first, *others = self.nodes
        first.install()
        first.start(bootstrap=True)
        first.wait_synced(timeout)
        for node in others:
            # The joiner's data comes from node 1 by SST (rsync): an empty folder will do.
            os.makedirs(node.datadir, exist_ok=True)
            node.start()
            node.wait_synced(timeout)  # one SST at a time: the donor serves one
        for node in self.nodes:
            node.wait_synced(timeout, size=len(self.nodes))

    def _root_rsync(self) -> None:
        """NOTE: the joiner's SST script starts ``rsync --daemon``, which as root switches
        to ``nobody`` and then cannot write the joiner's data folder (the servers run as
        root here), and ``mariadbd`` puts its own ``/usr/bin`` first on the script's PATH,
        so no ``rsync`` of ours is found before the system's. Under root the nodes' SST
        method is therefore ``exosuit_rsync``: a script in ``galera/bin`` (first on the
        servers' PATH) that runs Debian's ``wsrep_sst_rsync`` unchanged with a PATH whose
        first ``rsync`` keeps the daemon root (``--dparam=uid=root``)."""
        bindir = os.path.join(self.dir, "bin")
        os.makedirs(bindir, exist_ok=True)
        real = _program("rsync") or "/usr/bin/rsync"
        sst = _program("wsrep_sst_rsync") or "/usr/bin/wsrep_sst_rsync"
        scripts = {
            "rsync": (
                "#!/bin/sh\n"
                'case " $* " in *" --daemon "*)\n'
                f'    exec {real} --dparam=uid=root --dparam=gid=root "$@" ;;\n'
                "esac\n"
                f'exec {real} "$@"\n'
            ),
            "wsrep_sst_exosuit_rsync": (f'#!/bin/sh\nPATH="{bindir}:$PATH" exec {sst} "$@"\n'),
        }
        for name, text in scripts.items():
            path = os.path.join(bindir, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        self.sst_method = "exosuit_rsync"
        self.env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def wait_synced(self, timeout: float = 180) -> None:
        """Every node up, ``Synced``, in a cluster of all of them."""
        for node in self.nodes:
            node.wait_synced(timeout, size=len(self.nodes))

    @property
    def urls_admin(self) -> list[str]:
        return [node.admin_url for node in self.nodes]

    def create_database(self, name: str) -> list[str]:
        """``CREATE DATABASE`` (replicated to every node); one URL per node."""
        engine = sa.create_engine(self.nodes[0].admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
        finally:
            engine.dispose()
        return [node.url(name) for node in self.nodes]

    def drop_database(self, name: str) -> None:
        for node in self.nodes:
            if not node.alive():
                continue
            engine = sa.create_engine(node.admin_url, isolation_level="AUTOCOMMIT")
            try:
                with engine.connect() as conn:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
                return
            except sa.exc.DBAPIError:
                continue
            finally:
                engine.dispose()
