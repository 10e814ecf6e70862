"""[database]: where the database is and how a process uses it (exosuit/db/api.py)."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

__all__ = ["DatabaseSettings", "GROUP", "OPTIONS", "options"]

GROUP = "database"

OPTIONS: list[cfg.Opt] = [
    cfg.StrOpt(
        "connection",
        default="sqlite:///$state_path/exosuit.sqlite",
        secret=True,
        help="SQLAlchemy URL of the database: sqlite:///path, "
        "postgresql+psycopg2://user@host/db or mysql+pymysql://user@host/db.",
    ),
    cfg.IntOpt("max_pool_size", default=10, min=1, help="Connections kept per process."),
    cfg.IntOpt("max_overflow", default=20, min=0, help="Extra connections under load."),
    cfg.IntOpt(
        "sqlite_busy_timeout",
        default=30,
        min=1,
        help="Seconds a SQLite writer waits for the database lock.",
    ),
    cfg.IntOpt(
        "max_retries",
        default=10,
        min=0,
        help="Times a transaction is retried after a deadlock or serialization failure "
        "(on Galera also a certification conflict, and a node not yet synced: "
        "doc/deploy-galera.md), waiting 10 ms, doubling, at most 0.5 s between two.",
    ),
    cfg.IntOpt(
        "startup_wait",
        default=120,
        min=0,
        help="Seconds exosuit-api and exosuit-conductor wait at start for a database that "
        "cannot be reached (a restart during a database failover), said once in the log, "
        "before they give up with the reason.",
    ),
]


def options() -> list[cfg.Opt]:
    """Every option of the group."""
    return list(OPTIONS)


@dataclasses.dataclass(frozen=True)
class DatabaseSettings:
    """The ``[database]`` options."""

    connection: str
    max_pool_size: int
    max_overflow: int
    sqlite_busy_timeout: int
    max_retries: int
    startup_wait: int

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> DatabaseSettings:
        """The group's values in ``conf`` (a configuration that registered it)."""
        group = conf.database
        return cls(
            connection=str(group.connection),
            max_pool_size=int(group.max_pool_size),
            max_overflow=int(group.max_overflow),
            sqlite_busy_timeout=int(group.sqlite_busy_timeout),
            max_retries=int(group.max_retries),
            startup_wait=int(group.startup_wait),
        )
