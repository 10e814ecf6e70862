"""The database handle: engine set-up per dialect, reader/writer transactions, retries.

SQLite (the embedded default) runs in WAL mode; writers take the write lock at
``BEGIN IMMEDIATE`` so that two writers never deadlock on a lock upgrade and a
compare-and-set is serialized. PostgreSQL and MariaDB run at READ COMMITTED;
compare-and-set statements (``UPDATE … WHERE state = …``) re-check their
condition on the row they lock, and deadlocks or serialization failures are
retried by ``Database.write``.

A MariaDB Galera cluster is MariaDB to this module (doc/deploy-galera.md): a write
that conflicts with one committed first on another node fails certification, at its
COMMIT or at its next statement, as a deadlock (1213), and a node that is not (yet)
part of the cluster's primary component answers 1047 (``WSREP has not yet prepared
node for application use``) until it is: both are retried like a deadlock. Neither
committed anything, so running the transaction again is safe.

What is never run again is a transaction whose connection broke during its COMMIT:
the server may have committed it (a create would then be made twice, a
compare-and-set would find its own change and refuse), so ``Database.write`` raises
``DatabaseUnavailable`` and leaves the answer to the caller, as a lost answer would.
A connection broken before the COMMIT was sent rolls the transaction back on the
server, and that one is run again.

Round trips are what a request costs on a networked database, so none is spent
that buys nothing (see ``_setup_pool``): a pooled connection is pinged only after
it sat idle, is not rolled back on its return after a clean commit, and readers
on PostgreSQL/MariaDB run their SELECTs in autocommit mode, without BEGIN/COMMIT:
at READ COMMITTED every statement reads its own snapshot anyway, in a
transaction or not, so this changes no result.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import Connection, Engine, RootTransaction
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection, PoolResetState

from exosuit import exceptions
from exosuit.backoff import backoff_delay
from exosuit.db import audit, changes

LOG = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")

# A pooled connection unused for longer than this is pinged before it is handed out.
PING_AFTER_IDLE = 10.0

# A transaction retried after a deadlock or a lost connection waits exosuit.backoff's
# delay: from 10 ms, doubling, at most half a second (with jitter, so that the
# transactions that collided do not collide again).
RETRY_BASE = 0.01
RETRY_MAX = 0.5

__all__ = ["Database", "notifications_configured", "ping"]

# MySQL/MariaDB: 1213 deadlock (a Galera certification failure too), 1205 lock wait
# timeout, 1047 a Galera node not in the primary component or not yet synced ("WSREP has
# not yet prepared node for application use"). PostgreSQL: 40001, 40P01.
_MYSQL_RETRY = {1213, 1205, 1047}
_PG_RETRY = {"40001", "40P01"}


def _is_retryable(error: exc.DBAPIError) -> bool:
    orig = error.orig
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int) and args[0] in _MYSQL_RETRY:
        return True
    if getattr(orig, "pgcode", None) in _PG_RETRY:
        return True
    return "database is locked" in str(orig)


def _is_disconnect(error: exc.DBAPIError) -> bool:
    return bool(error.connection_invalidated)


class Database:
    """One engine and its transactions. Create one per process (or per app in tests)."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        max_overflow: int = 20,
        sqlite_busy_timeout: int = 30,
        max_retries: int = 10,
        ping_after_idle: float = PING_AFTER_IDLE,
        notifications: bool = False,
    ) -> None:
        self.url = sa.make_url(url)
        # Audit records are marked for the message bus, and their publish job queued
        # (exosuit/db/audit.py): [oslo_messaging_notifications] driver is set.
        self.notifications = notifications
        self.dialect = self.url.get_backend_name()
        self.max_retries = max_retries
        kwargs: dict[str, Any] = {"pool_reset_on_return": None}  # see _setup_pool
        if self.dialect == "sqlite":
            database = self.url.database
            if database and database != ":memory:":
                os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
            kwargs["connect_args"] = {
                "check_same_thread": False,
                "timeout": sqlite_busy_timeout,
            }
            kwargs["pool_size"] = pool_size
            kwargs["max_overflow"] = max_overflow
            kwargs["poolclass"] = sa.pool.QueuePool
        else:
            kwargs["pool_size"] = pool_size
            kwargs["max_overflow"] = max_overflow
            kwargs["pool_recycle"] = 3600
            kwargs["isolation_level"] = "READ COMMITTED"
            if self.dialect in ("mysql", "mariadb"):
                kwargs["connect_args"] = {"charset": "utf8mb4"}
        self.engine: Engine = sa.create_engine(self.url, **kwargs)
        _setup_pool(self.engine, ping_after_idle=ping_after_idle)
        if self.dialect == "sqlite":
            _setup_sqlite(self.engine, sqlite_busy_timeout)
            self._read_engine = self.engine
        else:
            # Readers: autocommit connections, in a pool of their own so that
            # neither pool switches a connection's mode back and forth.
            self._read_engine = sa.create_engine(
                self.url,
                **{**kwargs, "isolation_level": "AUTOCOMMIT", "skip_autocommit_rollback": True},
            )
            _setup_pool(self._read_engine, ping_after_idle=ping_after_idle, autocommit=True)

    @classmethod
    def from_conf(cls, conf: Any) -> Database:
        """The database of ``[database]``."""
        group = conf.database
        return cls(
            group.connection,
            pool_size=group.max_pool_size,
            max_overflow=group.max_overflow,
            sqlite_busy_timeout=group.sqlite_busy_timeout,
            max_retries=group.max_retries,
            notifications=notifications_configured(conf),
        )

    @property
    def supports_skip_locked(self) -> bool:
        return self.dialect in ("postgresql", "mysql", "mariadb")

    @contextlib.contextmanager
    def reader(self) -> Iterator[Connection]:
        """A read-only transaction (SQLite); autocommit SELECTs elsewhere (see above)."""
        if self._read_engine is not self.engine:
            with self._read_engine.connect() as conn:
                yield conn
            return
        with self.engine.connect() as conn:
            with conn.begin():
                yield conn
            conn.info[_CLEAN] = True

    @contextlib.contextmanager
    def writer(self) -> Iterator[Connection]:
        """A read-write transaction, committed on success. Not retried: see ``write``.

        The change counters its write functions marked (exosuit/db/changes.py) are
        bumped as it commits."""
        options = {"exosuit_writer": True, audit.NOTIFY_OPTION: self.notifications}
        with self.engine.connect().execution_options(**options) as conn:
            changes.forget(conn)
            audit.forget(conn)
            with conn.begin() as transaction:
                yield conn
                changes.count(conn)  # in the transaction, as it commits
                audit.flush(conn)
                _commit(transaction)
            conn.info[_CLEAN] = True

    def read(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``fn(conn, *args, **kwargs)`` in a read transaction."""
        return self._run(self.reader, fn, args, kwargs)

    def write(
        self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``fn(conn, *args, **kwargs)`` in a write transaction, retried on deadlock.

        ``fn`` must be safe to run again: it sees a fresh transaction each time.
        """
        return self._run(self.writer, fn, args, kwargs)

    def _run(
        self,
        transaction: Callable[[], contextlib.AbstractContextManager[Connection]],
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> T:
        for attempt in range(self.max_retries + 1):
            try:
                with transaction() as conn:
                    return fn(conn, *args, **kwargs)
            except exc.DBAPIError as error:
                self._handle(error, attempt)
            except exc.TimeoutError as error:  # no pooled connection came free in time
                raise exceptions.DatabaseUnavailable(reason=str(error)) from error
        raise AssertionError("unreachable")

    def _handle(self, error: exc.DBAPIError, attempt: int) -> None:
        if isinstance(error, exc.IntegrityError):
            raise error
        if (_is_retryable(error) or _is_disconnect(error)) and attempt < self.max_retries:
            delay = backoff_delay(attempt + 1, RETRY_BASE, RETRY_MAX)
            LOG.debug("retrying transaction after %s (attempt %d)", error.orig, attempt + 1)
            time.sleep(delay)
            return
        if isinstance(error, exc.OperationalError):
            raise exceptions.DatabaseUnavailable(reason=str(error.orig)) from error
        raise error

    def dispose(self) -> None:
        self.engine.dispose()
        if self._read_engine is not self.engine:
            self._read_engine.dispose()


def _commit(transaction: RootTransaction) -> None:
    """COMMIT; a connection lost meanwhile leaves the outcome unknown: not retried."""
    try:
        transaction.commit()
    except exc.DBAPIError as error:
        if not _is_disconnect(error):
            raise  # the server answered: nothing was committed (a deadlock is retried)
        raise exceptions.DatabaseUnavailable(
            reason=f"the connection was lost during COMMIT, which may have committed; "
            f"the transaction is not run again: {error.orig}"
        ) from error


def notifications_configured(conf: Any) -> bool:
    """Whether ``[oslo_messaging_notifications] driver`` names a driver (not ``noop``):
    the group is oslo.messaging's, registered by exosuit/conf/ when a configuration
    file or an override sets it."""
    if "oslo_messaging_notifications" not in conf:
        return False
    return bool(set(conf.oslo_messaging_notifications.driver or ()) - {"noop", ""})


def ping(conn: Connection) -> None:
    """One round trip: the database answers (``/healthz``)."""
    conn.exec_driver_sql("SELECT 1").scalar()


_CLEAN = "exosuit_clean"  # set in Connection.info after a commit; cleared on return
_LAST_USED = "exosuit_last_used"


def _setup_pool(engine: Engine, *, ping_after_idle: float, autocommit: bool = False) -> None:
    """Ping connections that sat idle; roll back on return only what needs it.

    NOTE: SQLAlchemy's pool_pre_ping pings at every checkout, and its reset on
    return rolls back even after a commit: two round trips per transaction.
    Under load a connection is never idle for long, so it is pinged only after
    ``ping_after_idle`` seconds (a server restart in between costs the first
    statement, which ``read``/``write`` retry on a fresh connection); and the
    rollback on return is skipped when ``reader``/``writer`` just committed (or
    when the connection is in autocommit mode, where no transaction is left open).
    """

    @event.listens_for(engine, "checkin")
    def _on_checkin(
        _dbapi_connection: DBAPIConnection | None, record: ConnectionPoolEntry | None
    ) -> None:
        if record is not None:
            record.info[_LAST_USED] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(
        dbapi_connection: DBAPIConnection,
        record: ConnectionPoolEntry,
        _proxy: PoolProxiedConnection,
    ) -> None:
        last_used = record.info.get(_LAST_USED)
        if last_used is None or time.monotonic() - last_used < ping_after_idle:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:  # the pool replaces the connection and tries again
            raise exc.DisconnectionError(f"idle connection failed its ping: {error}") from error

    @event.listens_for(engine, "reset")
    def _on_reset(
        dbapi_connection: DBAPIConnection,
        record: ConnectionPoolEntry | None,
        reset_state: PoolResetState,
    ) -> None:
        clean = record is not None and record.info.pop(_CLEAN, False)
        if clean or autocommit or reset_state.transaction_was_reset:
            return
        dbapi_connection.rollback()


def _setup_sqlite(engine: Engine, busy_timeout: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite's own
        # transaction handling would defer it and break BEGIN IMMEDIATE).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get("exosuit_writer"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")
