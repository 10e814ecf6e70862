"""Schema migrations (Alembic): ``exosuit-manage db upgrade`` and friends."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from exosuit.db.api import Database

__all__ = ["current_revision", "head_revision", "start_problem", "upgrade"]

LOG = logging.getLogger(__name__)

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


def start_problem(
    db: Database, *, wait: float = 0.0, sleep: Callable[[float], None] = time.sleep
) -> str | None:
    """Why a service cannot start on ``db``, in one sentence for its operator (None: it
    can): the database cannot be reached (after waiting up to ``wait`` seconds for it,
    said once in the log), or its schema is not at the newest revision."""
    deadline = time.monotonic() + wait
    delay, waited = 1.0, False
    while True:
        try:
            current = current_revision(db)
            break
        except sa.exc.DBAPIError as error:
            where = db.engine.url.render_as_string(hide_password=True)
            cause = str(getattr(error, "orig", None) or error).strip().splitlines()
            problem = (
                f"cannot reach the database {where}: {cause[0] if cause else type(error).__name__}"
            )
            if time.monotonic() + delay > deadline:
                return problem
            if not waited:
                LOG.warning(
                    "%s; waiting up to %.0f s for it ([database] startup_wait)", problem, wait
                )
                waited = True
            sleep(delay)
            delay = min(2 * delay, 10.0)
    if waited:
        LOG.info("the database answers")
    head = head_revision()
    if current != head:
        return (
            f"the database schema is at {current or 'nothing'}, not {head}; run "
            "`exosuit-manage db upgrade` (with the same --config-file) first."
        )
    return None
