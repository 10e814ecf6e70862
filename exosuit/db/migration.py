"""Schema migrations (Alembic): ``exosuit-manage db upgrade`` and friends."""

from __future__ import annotations

import os

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from exosuit.db.api import Database

__all__ = ["current_revision", "head_revision", "upgrade"]

_SCRIPT_LOCATION = os.path.join(os.path.dirname(__file__), "migrations")


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", _SCRIPT_LOCATION)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(db: Database, revision: str = "head") -> None:
    """Create or upgrade the schema to ``revision``.

    On SQLite the write lock is held for the whole upgrade, so concurrent
    processes starting on a new database do not race.
    """
    with db.engine.begin() as connection:
        if db.dialect == "sqlite":
            connection.exec_driver_sql("SELECT 1")
        command.upgrade(_config(connection), revision)


def current_revision(db: Database) -> str | None:
    with db.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    """The newest revision of the migration scripts (None only without any script)."""
    return ScriptDirectory.from_config(_config()).get_current_head()
