"""What a database operation costs at least, and what the server counted: issue 25.

Two tools for the benchmarks (bench/api.py, bench/bootstorm.py):

``commit_floor(url, n=..., concurrency=1)``
    The floor of a write: on the database ``url`` names (a SQLAlchemy URL: a SQLite
    file, PostgreSQL, MariaDB or Galera), a scratch table is made, ``n`` transactions
    that each insert one row and commit are timed, and the table is dropped. Each
    transaction is what Exosuit's writer sends, through the same driver with nothing
    in between (no SQLAlchemy, no pool): psycopg2 sends ``BEGIN``, the ``INSERT`` and
    ``COMMIT`` (3 round trips); PyMySQL the ``INSERT`` and ``COMMIT`` (its connection
    is not in autocommit mode, so no ``BEGIN`` is sent: 2); SQLite runs ``BEGIN
    IMMEDIATE``, the ``INSERT`` and ``COMMIT`` in WAL mode with ``synchronous=FULL``,
    as exosuit/db/api.py sets it. Durability is the server's default (PostgreSQL
    ``synchronous_commit = on``, InnoDB ``innodb_flush_log_at_trx_commit = 1``): a
    commit returns once its log is on disk. With ``concurrency`` > 1, that many
    threads, one connection each, insert at once (the server may then flush several
    commits with one write: group commit); ``n`` is the total. Returns the median and
    95th percentile latency in ms and the commits per second.

``ServerCounters(url)``
    Snapshots of what the database server counted, and their differences:

    * MariaDB: ``SHOW GLOBAL STATUS``: ``Questions`` (statements clients sent: one
      round trip each), ``Com_commit``, ``Com_rollback``, ``Com_begin`` and
      ``Com_select``/``insert``/``update``/``delete``. Global: the whole server,
      every client of every database counted (other work on the machine included).
    * PostgreSQL: ``pg_stat_database`` of the database ``url`` names:
      ``xact_commit`` (every transaction committed, read-only ones and autocommit
      SELECTs included, not only the durable writes, and one for each new
      connection: its backend's start-up transaction), ``xact_rollback`` and rows
      inserted/updated/deleted. Limited to that database, so other databases' clients
      are not counted. Statements only where ``pg_stat_statements`` is loaded (its
      calls in that database); otherwise None: not counted server-side. Backends
      report their counts lazily (PostgreSQL 15: at most once a second while busy,
      10 s after they go idle, or when they disconnect): ``settle()`` waits for it.
    * SQLite: no server; every figure is None (count in-process instead).

    The snapshots are read on a connection of their own, in autocommit mode (on
    PostgreSQL, to the server's ``postgres`` database, so that the reads are not
    counted in the measured one); what one reading adds to the counters (one
    ``Questions`` on MariaDB) is measured at start and subtracted.

``python bench/costs.py --db {sqlite,postgresql,mariadb} [--n N] [--concurrency C]``
prints the floor on a fresh database.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

import sqlalchemy as sa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

__all__ = ["RoundTripProxy", "ServerCounters", "StatementCounter", "commit_floor", "per_op"]


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def _backend(url: sa.URL) -> str:
    name = url.get_backend_name()
    return "mariadb" if name in ("mysql", "mariadb") else name


def _dbapi_connect(engine: sa.Engine) -> Any:
    """A driver connection of our own (detached from the pool, closed by the caller)."""
    fairy = engine.raw_connection()
    fairy.detach()
    return fairy


def _sqlite_setup(dbapi: Any) -> None:
    dbapi.isolation_level = None  # BEGIN is sent by us, as exosuit/db/api.py does
    cursor = dbapi.cursor()
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


def _insert_loop(engine: sa.Engine, table: str, count: int, start: threading.Barrier | None):
    """``count`` transactions of one INSERT and a COMMIT on a connection of its own;
    returns their latencies in seconds."""
    sqlite = engine.dialect.name == "sqlite"
    conn = _dbapi_connect(engine)
    latencies = []
    try:
        if sqlite:
            _sqlite_setup(conn.dbapi_connection)
        cursor = conn.cursor()
        # The table name is ours (a UUID's hex digits), never a caller's text.
        insert = f"INSERT INTO {table} (v) VALUES ('exosuit commit floor')"  # noqa: S608
        if start is not None:
            start.wait()
        clock = time.perf_counter
        for _ in range(count):
            t0 = clock()
            if sqlite:
                cursor.execute("BEGIN IMMEDIATE")
            cursor.execute(insert)
            conn.commit()
            latencies.append(clock() - t0)
        cursor.close()
    finally:
        conn.close()
    return latencies


def commit_floor(url: str, n: int = 200, concurrency: int = 1, warmup: int = 10) -> dict:
    """Median and 95th percentile latency (ms) of ``n`` INSERT + COMMIT transactions on
    ``url``'s database, and the commits per second, with ``concurrency`` connections
    at once (see the module's docstring). A scratch table is made and dropped."""
    if n < 1 or concurrency < 1:
        raise ValueError("n and concurrency must be at least 1")
    parsed = sa.make_url(url)
    engine = sa.create_engine(parsed, poolclass=sa.pool.NullPool)
    table = f"costs_floor_{uuid.uuid4().hex[:12]}"
    meta = sa.MetaData()
    sa.Table(
        table,
        meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("v", sa.String(64), nullable=False),
        mysql_engine="InnoDB",
    )
    meta.create_all(engine)
    try:
        _insert_loop(engine, table, warmup, None)
        per_thread = [n // concurrency + (i < n % concurrency) for i in range(concurrency)]
        results: list[list[float]] = [[] for _ in per_thread]
        errors: list[BaseException] = []
        barrier = threading.Barrier(concurrency + 1)

        def run(i: int) -> None:
            try:
                results[i] = _insert_loop(engine, table, per_thread[i], barrier)
            except BaseException as error:  # reported below
                errors.append(error)
                barrier.abort()

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(concurrency)]
        for thread in threads:
            thread.start()
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        wall0 = time.perf_counter()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - wall0
        if errors:
            raise errors[0]
    finally:
        meta.drop_all(engine)
        engine.dispose()
    latencies = [x for r in results for x in r]
    return {
        "backend": _backend(parsed),
        "n": len(latencies),
        "concurrency": concurrency,
        "p50_ms": round(_percentile(latencies, 0.50) * 1000, 3),
        "p95_ms": round(_percentile(latencies, 0.95) * 1000, 3),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 3),
        "commits_per_s": round(len(latencies) / wall, 1),
    }


# --- the server's own counters ------------------------------------------------------------

_MARIADB_STATUS = {
    "Questions": "statements",
    "Com_commit": "commits",
    "Com_rollback": "rollbacks",
    "Com_begin": "begins",
    "Com_select": "selects",
    "Com_insert": "inserts",
    "Com_update": "updates",
    "Com_delete": "deletes",
}
_MARIADB_QUERY = "SHOW GLOBAL STATUS WHERE Variable_name IN ({})".format(
    ", ".join(f"'{name}'" for name in _MARIADB_STATUS)
)
# PostgreSQL 15's PGSTAT_IDLE_INTERVAL (10 s), and a margin.
PG_IDLE_REPORT = 10.5
_PG_QUERY = (
    "SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted "
    "FROM pg_stat_database WHERE datname = %s"
)
_PG_STATEMENTS = (
    "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
    "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s)"
)


class ServerCounters:
    """What the database server counted (see the module's docstring): ``snapshot()``
    before and after, ``delta(before, after)`` the difference, the readings' own
    cost subtracted. ``scope`` says what the figures cover."""

    def __init__(self, url: str) -> None:
        parsed = sa.make_url(url)
        self.backend = _backend(parsed)
        self.database = parsed.database
        self.statements_counted = False
        self._conn: Any = None
        self._engine: sa.Engine | None = None
        self._own: dict[str, int] = {}
        if self.backend == "sqlite":
            self.scope = "no server: nothing counted server-side"
            return
        if self.backend == "postgresql":
            # Read from another database: the readings are not counted in this one.
            target = parsed.set(database="postgres")
            self.scope = (
                f"pg_stat_database of {self.database} (its clients only); xact_commit "
                "counts every transaction, read-only ones too"
            )
        else:
            target = parsed
            self.scope = "SHOW GLOBAL STATUS: every client of the whole server"
        self._engine = sa.create_engine(
            target, poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT"
        )
        self._conn = _dbapi_connect(self._engine)
        self._engine.dialect.set_isolation_level(self._conn.dbapi_connection, "AUTOCOMMIT")
        if self.backend == "postgresql":
            self.statements_counted = self._pg_statements() is not None
            if not self.statements_counted:
                self.scope += "; statements not counted server-side (no pg_stat_statements)"
        else:
            self.statements_counted = True
        self._own = self._calibrate()

    def _read(self, sql: str, *params: Any) -> list[tuple]:
        cursor = self._conn.cursor()
        try:
            cursor.execute(sql, params or None)
            return list(cursor.fetchall())
        finally:
            cursor.close()

    def _pg_statements(self) -> int | None:
        (libraries,) = self._read("SHOW shared_preload_libraries")[0]
        if "pg_stat_statements" not in libraries:
            return None
        try:
            return int(self._read(_PG_STATEMENTS, self.database)[0][0])
        except Exception:  # noqa: BLE001 - the extension is not created in this database
            return None

    def _raw(self) -> dict[str, int]:
        if self.backend == "postgresql":
            rows = self._read(_PG_QUERY, self.database)
            if not rows:
                raise RuntimeError(f"pg_stat_database has no row for {self.database}")
            commit, rollback, inserted, updated, deleted = (int(v) for v in rows[0])
            raw = {
                "commits": commit,
                "rollbacks": rollback,
                "rows_inserted": inserted,
                "rows_updated": updated,
                "rows_deleted": deleted,
            }
            if self.statements_counted:
                raw["statements"] = self._pg_statements() or 0
            return raw
        values = {str(name): int(value) for name, value in self._read(_MARIADB_QUERY)}
        return {key: values.get(name, 0) for name, key in _MARIADB_STATUS.items()}

    def _calibrate(self, tries: int = 5) -> dict[str, int]:
        """What one reading adds to the counters: the smallest difference between two
        readings in a row (other clients can only add to it)."""
        own: dict[str, int] = {}
        for _ in range(tries):
            a, b = self._raw(), self._raw()
            for key in a:
                step = b[key] - a[key]
                own[key] = step if key not in own else min(own[key], step)
        return own

    def snapshot(self) -> dict[str, int] | None:
        """The counters now (None on SQLite)."""
        if self._conn is None:
            return None
        return self._raw()

    def delta(self, before: dict | None, after: dict | None) -> dict[str, int | None]:
        """``after`` − ``before`` less one reading's own cost; keys ``statements``,
        ``commits``, ``rollbacks`` (None where not counted) and the backend's others."""
        keys = ("statements", "commits", "rollbacks")
        if before is None or after is None:
            return dict.fromkeys(keys)
        out: dict[str, int | None] = {
            key: after[key] - before[key] - self._own.get(key, 0) for key in after
        }
        for key in keys:
            out.setdefault(key, None)
        return out

    def settle(
        self, idle_since: float | None = None, delay: float = PG_IDLE_REPORT
    ) -> dict[str, int] | None:
        """A snapshot that counts everything done before ``idle_since`` (a
        ``time.monotonic()`` value; default now), the database's clients idle since.
        PostgreSQL 15 backends report their counts lazily: at most once a second while
        busy, ``PG_IDLE_REPORT`` seconds after they go idle, or as they disconnect); so
        this waits ``delay`` seconds from then, and until two readings half a second
        apart agree. Elsewhere: a snapshot now."""
        if self.backend != "postgresql":
            return self.snapshot()
        start = time.monotonic() if idle_since is None else idle_since
        time.sleep(max(0.0, start + delay - time.monotonic()))
        last = self._raw()
        while True:
            time.sleep(0.5)
            now = self._raw()
            if now == last:
                return now
            last = now

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __enter__(self) -> ServerCounters:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# --- counted in-process: statements and commits, and round trips on the wire -----------


class StatementCounter:
    """Statements, write commits and rollbacks an exosuit ``Database`` sends, counted by
    SQLAlchemy's events on its engines while attached (``with`` or ``attach()`` /
    ``detach()``); ``counts()`` gives the totals so far.

    * ``statements``: every statement a cursor executes, but ``BEGIN``, ``COMMIT``
      and ``ROLLBACK`` (SQLite's ``BEGIN IMMEDIATE`` is counted in ``begins``); plus
      the reads ``readers`` (exosuit.db.changes.CounterReader) send on their
      connection of their own, which the events do not see (their ``direct_reads``);
    * ``commits`` / ``rollbacks``: those of write transactions (``Database.writer``):
      the durable commits the commit floor is about (SQLite's read transactions
      also commit; they write nothing and are not counted);
    * ``transactions``: write transactions begun.
    """

    KEYS = ("statements", "commits", "rollbacks", "transactions")

    def __init__(self, database: Any, readers: tuple[Any, ...] = ()) -> None:
        self.engines = list({id(e): e for e in (database.engine, database._read_engine)}.values())
        self.readers = readers
        self._counts = dict.fromkeys(self.KEYS, 0)
        self._direct0 = 0
        self._lock = threading.Lock()
        self._attached = False

    def _add(self, key: str) -> None:
        with self._lock:
            self._counts[key] += 1

    @staticmethod
    def _writer(conn: Any) -> bool:
        return bool(conn.get_execution_options().get("exosuit_writer"))

    def _on_execute(self, conn, cursor, statement, parameters, context, executemany) -> None:
        head = statement.lstrip()[:9].upper()
        if head.startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            return
        self._add("statements")

    def _on_commit(self, conn: Any) -> None:
        if self._writer(conn):
            self._add("commits")

    def _on_rollback(self, conn: Any) -> None:
        if self._writer(conn):
            self._add("rollbacks")

    def _on_begin(self, conn: Any) -> None:
        if self._writer(conn):
            self._add("transactions")

    def _events(self):
        return (
            ("before_cursor_execute", self._on_execute),
            ("commit", self._on_commit),
            ("rollback", self._on_rollback),
            ("begin", self._on_begin),
        )

    def attach(self) -> StatementCounter:
        for engine in self.engines:
            for name, fn in self._events():
                sa.event.listen(engine, name, fn)
        self._direct0 = sum(r.direct_reads for r in self.readers)
        self._attached = True
        return self

    def detach(self) -> None:
        if not self._attached:
            return
        for engine in self.engines:
            for name, fn in self._events():
                sa.event.remove(engine, name, fn)
        self._attached = False

    def counts(self) -> dict[str, int]:
        with self._lock:
            out = dict(self._counts)
        out["statements"] += sum(r.direct_reads for r in self.readers) - self._direct0
        return out

    __enter__ = attach

    def __exit__(self, *exc_info: object) -> None:
        self.detach()


class RoundTripProxy:
    """A TCP proxy on a free loopback port in front of a database server, counting the
    round trips its clients make: each time a client sends after the server spoke (or
    first), one more. Whatever the driver (psycopg2's implicit ``BEGIN``, PyMySQL's
    ``COMMIT``, a pool's ping or reset), what crosses the wire is counted, and only
    that; a request split over several packets, or several messages sent at once
    (pipelined), is one. ``url(db_url)`` is ``db_url`` through the proxy; ``count``
    the round trips so far (connecting counts too: read it before and after)."""

    def __init__(self, host: str, port: int) -> None:
        import socket

        self.upstream = (host, port)
        self.count = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[Any] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="round-trips").start()

    @classmethod
    def for_url(cls, db_url: str) -> RoundTripProxy:
        url = sa.make_url(db_url)
        default = 5432 if url.get_backend_name() == "postgresql" else 3306
        return cls(url.host or "127.0.0.1", url.port or default)

    def url(self, db_url: str) -> str:
        url = sa.make_url(db_url).set(host="127.0.0.1", port=self.port)
        return url.render_as_string(hide_password=False)

    def _accept(self) -> None:
        import socket

        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, server]
            turn = {"last": "server"}
            for source, sink, side in ((client, server, "client"), (server, client, "server")):
                threading.Thread(
                    target=self._pump, args=(source, sink, side, turn), daemon=True
                ).start()

    def _pump(self, source: Any, sink: Any, side: str, turn: dict[str, str]) -> None:
        import socket

        try:
            while True:
                data = source.recv(262144)
                if not data:
                    break
                if side == "client" and turn["last"] != "client":
                    with self._lock:
                        self.count += 1
                # Set before forwarding: the other side answers only after it has it.
                turn["last"] = side
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


def per_op(counts: dict[str, int | None], ops: int) -> dict[str, float | None]:
    """Each count divided by ``ops`` (two decimals); None stays None."""
    return {
        key: None if value is None or not ops else round(value / ops, 2)
        for key, value in counts.items()
    }


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, ROOT)
    from bench._common import fresh_database

    parser = argparse.ArgumentParser(prog="bench/costs.py", description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgresql", "mariadb"), default="sqlite")
    parser.add_argument("--n", type=int, default=500, help="Transactions (500).")
    parser.add_argument("--concurrency", default="1,8", help="Comma-separated (1,8).")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="exosuit-costs-") as workdir:
        with fresh_database(args.db, workdir) as url:
            for clients in (int(c) for c in args.concurrency.split(",") if c):
                floor = commit_floor(url, n=args.n, concurrency=clients)
                print(
                    f"{args.db} commit floor x{clients}: p50 {floor['p50_ms']:.3f} ms, "
                    f"p95 {floor['p95_ms']:.3f} ms, {floor['commits_per_s']:.0f} commits/s"
                )
    print(f"load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
